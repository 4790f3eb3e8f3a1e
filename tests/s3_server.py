"""A real S3-compatible server for the tests: ``moto_server`` (moto[server]) on 127.0.0.1.

:func:`start_s3` runs it as a subprocess on a free port, waits until it
answers, and creates a bucket.  Credentials are given to nsdist only through
storage options: the environment of the tests (and of every process they
start) holds no ``AWS_*`` credentials, no shared credentials file, and
``AWS_EC2_METADATA_DISABLED=true`` so that botocore never probes the network
for a role.  Any key and secret work with moto; each server gets random ones,
so that a test can look for them in every file a run wrote.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

#: environment variables removed from the tests' environment (and so from every process they start)
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI")


def clean_environment(tmp: Path) -> dict[str, str | None]:
    """The changes that make an environment credential-free (``None``: remove the variable)."""
    return {**{name: None for name in AWS_VARIABLES}, "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
            "AWS_CONFIG_FILE": str(tmp / "no-aws-config"), "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class S3Server:
    """A running ``moto_server`` with one bucket."""

    endpoint: str
    bucket: str
    key: str
    secret: str
    process: subprocess.Popen

    @property
    def options(self) -> dict:
        """The storage options that reach this server (the only way the tests give credentials)."""
        return {"key": self.key, "secret": self.secret,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}

    def url(self, path: str) -> str:
        """``s3://<bucket>/<path>``."""
        return f"s3://{self.bucket}/{path.lstrip('/')}"

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **self.options)

    def write_options(self, path: Path) -> Path:
        """The options as a JSON file (for ``--storage-options @FILE``)."""
        path.write_text(json.dumps(self.options))
        return path

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3(workdir: Path, timeout: float = 60) -> S3Server:
    """Start ``moto_server`` on a free port of 127.0.0.1 and create a bucket; its log is ``workdir/moto.log``."""
    port = _free_port()
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
    with open(workdir / "moto.log", "ab") as log:
        proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)], cwd=workdir,
                                stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except urllib.error.HTTPError:       # it answers
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start; see {workdir / 'moto.log'}") from None
            time.sleep(0.1)
    server = S3Server(endpoint, f"nsd-{uuid.uuid4().hex[:8]}", f"AKIA{uuid.uuid4().hex[:16].upper()}",
                      f"nsdist-test-secret-{uuid.uuid4().hex}", proc)
    server.filesystem().call_s3("create_bucket", Bucket=server.bucket)
    return server


def environment_without(env: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """``env`` with ``changes`` applied."""
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def apply(changes: dict[str, str | None]) -> dict[str, str | None]:
    """Apply ``changes`` to ``os.environ``; return what restores it."""
    undo = {name: os.environ.get(name) for name in changes}
    for name, value in changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return undo
