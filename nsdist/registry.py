"""The model registry of scheduled retraining: numbered versions, a ``CURRENT`` pointer, a lock.

A registry is a directory (local path or fsspec URL)::

    CURRENT              {"version": "v0002", ...}: the promoted version,
                         replaced atomically (a file, not a symlink: object
                         stores have none)
    LOCK                 present while a retrain run works on the registry
    v0001/model/         the version's model (:meth:`nsdist.model.LinearModel.save`)
    v0001/manifest.json  the dataset partitions seen up to this version
    v0001/run.log        what the run did
    v0001/metrics.json   the run's record (decision, measures, partitions);
                         written last: its presence commits the version
    v0002/ ...

Every retrain run that trains a candidate adds a version, promoted or
refused (``metrics.json`` says which), so the registry is an append-only log
and ``CURRENT`` names the model to serve.  A version directory without
``metrics.json`` is a run that died half way; it is ignored and its number is
not reused.  The newest committed version carries the registry's state
(:meth:`Registry.latest`).

The lock (:class:`RegistryLock`) makes runs mutually exclusive.  On local
disks (and NFS) it is a file created with ``O_CREAT | O_EXCL``; on object
stores, which have no exclusive create, it is advisory (see the class).
"""
from __future__ import annotations

import datetime as _dt
import getpass
import json
import logging
import os
import posixpath
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psutil
from fsspec.implementations.local import LocalFileSystem

from .data.fs import display, resolve
from .model import LinearModel, atomic_write_bytes
from .report import RunDir, to_json

__all__ = ["Registry", "RegistryLock", "LockHeld"]

log = logging.getLogger("nsdist.retrain")

_VERSION = re.compile(r"^v(\d{4,})$")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Registry:
    """A model registry directory (see the module docstring).

    Parameters
    ----------
    url : str
        Local path or fsspec URL of the registry directory (created on first write).
    storage_options : dict, optional
        fsspec options (credentials ...).
    """

    url: str
    storage_options: dict | None = None
    fs: Any = field(init=False, repr=False)
    root: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        self.fs, self.root = resolve(self.url, self.storage_options)

    def version_dir(self, version: str) -> RunDir:
        """The files of ``version`` (``model``, ``metrics.json`` ...)."""
        return RunDir(f"{self.url}/{version}")

    def _numbers(self) -> dict[int, str]:
        if not self.fs.isdir(self.root):
            return {}
        names = (posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.root, detail=False))
        return {int(m.group(1)): m.group(0) for m in map(_VERSION.match, names) if m}

    def versions(self) -> list[str]:
        """Committed versions (those with ``metrics.json``), oldest first."""
        return [name for _, name in sorted(self._numbers().items())
                if self.fs.isfile(self._path(name, "metrics.json"))]

    def next_version(self) -> str:
        """The name of the next version: one past every version directory, committed or not."""
        return f"v{max(self._numbers(), default=0) + 1:04d}"

    def latest(self) -> str | None:
        """The newest committed version (it holds the registry's state), or None."""
        versions = self.versions()
        return versions[-1] if versions else None

    def current(self) -> str | None:
        """The version ``CURRENT`` points to, or None before the first promotion."""
        path = self._path("CURRENT")
        return self._read_json(path)["version"] if self.fs.isfile(path) else None

    def record(self, version: str) -> dict:
        """``metrics.json`` of ``version``."""
        return self._read_json(self._path(version, "metrics.json"))

    def manifest(self, version: str) -> dict:
        """``manifest.json`` of ``version``."""
        return self._read_json(self._path(version, "manifest.json"))

    def load_model(self, version: str) -> LinearModel:
        """The model of ``version``."""
        return LinearModel.load(self.version_dir(version).model, self.storage_options)

    def commit(self, version: str, model: LinearModel, manifest: dict, record: dict) -> None:
        """Write ``version``: the model, then ``manifest.json``, then ``metrics.json`` (the commit)."""
        run = self.version_dir(version)
        model.save(run.model, self.storage_options)
        atomic_write_bytes(run.path("manifest.json"), to_json(manifest), self.storage_options)
        atomic_write_bytes(run.path("metrics.json"), to_json(record), self.storage_options)

    def promote(self, version: str, record: dict) -> None:
        """Point ``CURRENT`` at ``version`` (atomic replace)."""
        pointer = {"version": version, "promoted": _now(), "model": f"{version}/model",
                   "metrics": record.get("candidate")}
        atomic_write_bytes(f"{self.url}/CURRENT", to_json(pointer), self.storage_options)

    def lock(self, stale_after: float | None) -> "RegistryLock":
        """The registry's lock (a context manager); see :class:`RegistryLock`."""
        return RegistryLock(self.fs, self._path("LOCK"), stale_after)

    def _path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def _read_json(self, path: str) -> dict:
        try:
            obj = json.loads(self.fs.cat_file(path))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{display(self.fs, path)} is truncated or not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{display(self.fs, path)} does not hold a JSON object")
        return obj


class LockHeld(RuntimeError):
    """Another run holds the registry's lock; :attr:`holder` is its lock record."""

    def __init__(self, where: str, holder: dict, why: str = "") -> None:
        self.holder = holder
        who = (f"{holder.get('user')}@{holder.get('host')} (pid {holder.get('pid')}) since {holder.get('created')}"
               if holder else "another run")
        super().__init__(f"the registry is locked by {who}{why}: another retrain run is working on it. "
                         f"If you are sure none is, remove {where}")


@dataclass
class RegistryLock:
    """An exclusive lock file holding its owner (user, host, pid, time).

    Acquiring creates the file with ``O_CREAT | O_EXCL`` on local filesystems
    (atomic, also on NFS v3+), so of two runs exactly one gets it.  A lock is
    *stale*, and is broken, when it is older than ``stale_after`` seconds, or
    when it was taken on this host by a process that no longer runs (its pid is
    gone, or belongs to a process started after the lock).  Breaking is itself
    guarded by an exclusive ``LOCK.break`` file, so two runs that find the same
    stale lock cannot both take over.

    Object stores have no exclusive create: there the lock is written if absent
    and read back, which catches most but not all races.  Run one retrain at a
    time through the scheduler (cron ``flock``, Airflow ``max_active_runs=1``,
    a Prefect concurrency limit, a CronJob's ``concurrencyPolicy: Forbid``).
    """

    fs: Any
    path: str
    stale_after: float | None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def __enter__(self) -> "RegistryLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, breaking a stale one; raise :class:`LockHeld` if another run has it."""
        info = {"token": self.token, "user": getpass.getuser(), "host": socket.gethostname(),
                "pid": os.getpid(), "created": _now(), "created_ts": time.time()}
        for _ in range(2):
            if self._create(json.dumps(info).encode()):
                return
            holder = self._read()
            if holder is None:           # released between our try and our read
                continue
            why = self._stale(holder)
            if why is None:
                raise LockHeld(display(self.fs, self.path), holder)
            self._break(holder, why)
        raise LockHeld(display(self.fs, self.path), self._read() or {})

    def release(self) -> None:
        """Remove the lock if it is still ours (a run that outlived ``stale_after`` may have lost it)."""
        holder = self._read()
        if holder is not None and holder.get("token") == self.token:
            self.fs.rm_file(self.path)

    def _create(self, data: bytes) -> bool:
        if self.local:
            self.fs.makedirs(posixpath.dirname(self.path), exist_ok=True)
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            return True
        if self.fs.exists(self.path):
            return False
        self.fs.pipe_file(self.path, data)
        holder = self._read()
        return holder is not None and holder.get("token") == self.token

    def _read(self) -> dict | None:
        try:
            return json.loads(self.fs.cat_file(self.path))
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):
            return {}                    # a torn or foreign file: judged by age below

    def _stale(self, holder: dict) -> str | None:
        """Why ``holder`` is stale, or None if it may still be working."""
        created = holder.get("created_ts")
        if created is None:
            created = self.fs.modified(self.path).timestamp()
        age = time.time() - float(created)
        if self.stale_after is not None and age > self.stale_after:
            return f"it is {age / 3600:.1f} h old (stale after {self.stale_after / 3600:g} h)"
        if self.local and holder.get("host") == socket.gethostname() and "pid" in holder:
            pid = int(holder["pid"])
            try:
                if psutil.Process(pid).create_time() > float(created) + 1:
                    return f"its pid {pid} now belongs to another process"
            except psutil.NoSuchProcess:
                return f"its process {pid} is gone"
        return None

    def _break(self, holder: dict, why: str) -> None:
        where = display(self.fs, self.path)
        if not self.local:
            self.fs.rm_file(self.path)
            log.warning("broke the stale lock %s: %s", where, why)
            return
        guard = self.path + ".break"
        try:
            fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            raise LockHeld(where, holder, f" (another run is breaking this stale lock; if none is, "
                                          f"remove {guard} too)") from None
        try:
            if self._read() == holder:  # still the stale lock we judged, not a fresh one
                os.unlink(self.path)
                log.warning("broke the stale lock %s: %s", where, why)
        finally:
            os.close(fd)
            os.unlink(guard)
