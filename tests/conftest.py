"""Shared fixtures: the real data sets, the bundled demo data, a small Dask cluster.

The real data sets live in ``shared/data`` beside the repository (CI clones the
repository next to a copy of ``shared/``); tests that need them are skipped if
it is missing.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import fsspec
import pytest

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REPO_DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``shared/data``: one folder per data set (letter, mammography, a9a, w8a, ijcnn1, kddcup99, ...)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def repo_data() -> Path:
    """The data bundled in the repository (``data/``)."""
    return REPO_DATA


@pytest.fixture(scope="session")
def dask_client():
    """A small in-process Dask cluster (1 worker, 2 threads) shared by the session.

    Not set as the default client: pass it explicitly (``client=dask_client``).
    """
    from distributed import Client, LocalCluster

    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture
def memory_url():
    """A fresh ``memory://`` folder URL, deleted after the test."""
    root = f"/nsdist-test-{uuid.uuid4().hex}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


# ------------------------------------------------------------------ real Dask processes
class TLSFiles(NamedTuple):
    """PEM files of a TLS-secured cluster: the CA certificate and one certificate + key for everyone."""

    ca: str
    cert: str
    key: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the time of the call)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DaskProcesses:
    """A ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, as an operator starts them.

    Each is a real OS process (its stderr goes to ``workdir``), so a test can
    SIGKILL it.  Without a nanny a worker is the ``dask worker`` process itself;
    with one the nanny restarts a killed worker process.  A context manager:
    the processes end on exit.
    """

    address: str
    workdir: Path
    nanny: bool
    tls: TLSFiles | None
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)

    @classmethod
    def start(cls, n_workers: int, workdir: Path, *, nanny: bool = False, tls: TLSFiles | None = None,
              timeout: float = 60) -> "DaskProcesses":
        """Start a scheduler and ``n_workers`` single-threaded workers; return once all have joined."""
        port = free_port()
        protocol = "tls" if tls else "tcp"
        scheduler = _spawn(["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                            "--protocol", protocol, *_tls_args(tls)], workdir, "scheduler")
        cluster = cls(f"{protocol}://127.0.0.1:{port}", workdir, nanny, tls, scheduler)
        try:
            for _ in range(n_workers):
                cluster.add_worker()
            with cluster.client(timeout=timeout) as client:
                client.wait_for_workers(n_workers, timeout=timeout)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def add_worker(self) -> subprocess.Popen:
        """Start one more ``dask worker`` process (one thread)."""
        name = f"w{len(self.workers)}"
        proc = _spawn(["worker", self.address, "--nthreads", "1", "--nworkers", "1", "--host", "127.0.0.1",
                       "--no-dashboard", "--name", name, "--local-directory", str(self.workdir),
                       "--nanny" if self.nanny else "--no-nanny", *_tls_args(self.tls)], self.workdir, name)
        self.workers.append(proc)
        return proc

    def security(self) -> Security | None:
        """The :class:`distributed.security.Security` of a client holding the cluster's certificate."""
        from distributed.security import Security

        if self.tls is None:
            return None
        return Security(tls_ca_file=self.tls.ca, tls_client_cert=self.tls.cert, tls_client_key=self.tls.key,
                        require_encryption=True)

    def client(self, **kwargs) -> Client:
        """A new :class:`distributed.Client` of this cluster (not set as the default)."""
        from distributed import Client

        return Client(self.address, security=self.security(), set_as_default=False, **kwargs)

    def close(self) -> None:
        """End every process still running: the workers, then the scheduler (SIGKILL after 10 s)."""
        for group in (self.workers, [self.scheduler]):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def __enter__(self) -> "DaskProcesses":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _spawn(args: list[str], workdir: Path, name: str) -> subprocess.Popen:
    """Run ``dask ARGS`` in ``workdir``, its stderr in ``workdir/<name>.log``."""
    with open(workdir / f"{name}.log", "ab") as log:
        return subprocess.Popen([str(Path(sys.executable).with_name("dask")), *args], cwd=workdir,
                                env={**os.environ, "PYTHONPATH": str(REPO_DATA.parent)},
                                stdout=subprocess.DEVNULL, stderr=log)


def _tls_args(tls: TLSFiles | None) -> list[str]:
    return [] if tls is None else ["--tls-ca-file", tls.ca, "--tls-cert", tls.cert, "--tls-key", tls.key]


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    """Start real Dask processes: ``dask_processes(n_workers, nanny=False, tls=None) -> DaskProcesses``.

    Use the result as a context manager to end it with the test; whatever is
    still running ends with the module.
    """
    started: list[DaskProcesses] = []

    def start(n_workers: int = 2, *, nanny: bool = False, tls: TLSFiles | None = None) -> DaskProcesses:
        cluster = DaskProcesses.start(n_workers, tmp_path_factory.mktemp("dask"), nanny=nanny, tls=tls)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.close()


# ------------------------------------------------------------ the reliability report
def pytest_addoption(parser) -> None:
    parser.addoption("--reliability-report", metavar="PATH", default=None,
                     help="write what each fault / bad-input scenario did, and its outcome, as JSON "
                          "(read by bench/reliability.py)")


def pytest_configure(config) -> None:
    path = config.getoption("--reliability-report", default=None)
    if path:
        config.pluginmanager.register(_ReliabilityReport(path), "nsdist-reliability-report")


@pytest.fixture
def reliability(record_property):
    """``reliability(kind, scenario, **details)``: record a scenario for the reliability report.

    ``kind`` is ``"fault"``, ``"bad input"`` or ``"safety"``; ``details`` are
    plain JSON values (faults injected, exit code, message ...).  The test's
    outcome is recorded beside them.
    """
    def record(kind: str, scenario: str, **details) -> None:
        record_property("reliability", {"kind": kind, "scenario": scenario, **details})

    return record


class _ReliabilityReport:
    """Collects each test's outcome and ``reliability`` records; writes them as JSON at the end."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.tests: dict[str, dict] = {}
        self.t0 = time.time()

    def pytest_runtest_logreport(self, report) -> None:
        entry = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed",
                                                      "seconds": 0.0, "records": []})
        entry["seconds"] += report.duration
        if report.failed:
            entry["outcome"] = "failed"
            entry["error"] = report.longrepr.reprcrash.message if hasattr(report.longrepr, "reprcrash") \
                else str(report.longrepr).splitlines()[-1]
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
        if report.when == "teardown":
            entry["records"] = [value for name, value in report.user_properties if name == "reliability"]

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"exitstatus": int(exitstatus), "seconds": time.time() - self.t0,
                                         "tests": list(self.tests.values())}, indent=1, default=str))
