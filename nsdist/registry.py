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

The lock (:class:`RegistryLock`) makes runs mutually exclusive.  It is a
file created exclusively: ``O_CREAT | O_EXCL`` on local disks (and NFS), a
conditional ``PUT`` (``If-None-Match: *``) on S3 and S3-compatible stores;
see the class for what it guarantees elsewhere.

Every file is read and written with the registry's ``storage_options``.
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

from .data.fs import access, atomic_write_bytes, create_exclusive, display, resolve
from .model import LinearModel
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
        return RunDir(f"{self.url}/{version}", self.storage_options)

    def _numbers(self) -> dict[int, str]:
        self.fs.invalidate_cache()     # listings cached by fsspec miss what other runs wrote since
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
        self.fs.invalidate_cache()
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

    def _read_json_text(self, path: str) -> bytes:
        with access(self.fs, path, "read"):
            return self.fs.cat_file(path)

    def _path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def _read_json(self, path: str) -> dict:
        try:
            obj = json.loads(self._read_json_text(path))
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
    """An exclusive lock file holding its owner (user, host, pid, time, a random token).

    What it guarantees: acquiring creates ``LOCK`` only if nothing is there,
    and of several runs that try at once exactly one succeeds, where the store
    can create a file exclusively:

    * local disks and NFS v3+: ``open(O_CREAT | O_EXCL)``;
    * S3 and S3-compatible stores (``s3://``): a conditional ``PUT`` with
      ``If-None-Match: *``, which the store accepts for one writer and refuses
      (``412 Precondition Failed``) for every other.  After creating the lock
      the run repeats the conditional ``PUT``, which must be refused: a store
      that accepts it ignores preconditions, and the run says so in a warning
      and falls back to write-then-verify (below);
    * ``memory://``: an exclusive open.

    On other stores (and S3-compatible servers without conditional writes)
    the lock is written if absent, then read back after ``settle`` seconds;
    the run whose token it reads holds it.  That catches most races, not all:
    run one retrain at a time through the scheduler as well (cron ``flock``,
    Airflow ``max_active_runs=1``, a Prefect concurrency limit, a CronJob's
    ``concurrencyPolicy: Forbid``).

    A lock is *stale*, and is broken, when it is older than ``stale_after``
    seconds, or when it was taken on this host by a process that no longer
    runs (its pid is gone, or belongs to a process started after the lock).
    Breaking is itself guarded by a ``LOCK.break`` file created the same
    exclusive way, and the lock is removed only if it is still the stale one
    that was judged, so two runs that find the same stale lock cannot both
    take over.  Releasing removes the lock only if it still holds this run's
    token.
    """

    fs: Any
    path: str
    stale_after: float | None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    settle: float = 0.5

    @property
    def local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def __enter__(self) -> "RegistryLock":
        try:
            self.acquire()
        except BaseException:      # interrupted (Ctrl-C, SIGTERM) once the lock was written, before the ``with``
            self.release()         # began: nothing else would remove it (another run's lock is left alone)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, breaking a stale one; raise :class:`LockHeld` if another run has it."""
        info = {"token": self.token, "user": getpass.getuser(), "host": socket.gethostname(),
                "pid": os.getpid(), "created": _now(), "created_ts": time.time()}
        for _ in range(2):
            if self._create(self.path, json.dumps(info).encode()):
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
            self._remove(self.path)

    def _create(self, path: str, data: bytes) -> bool:
        """Create ``path`` exclusively (see the class); True if this run now holds it."""
        created = create_exclusive(self.fs, path, data)
        if created is False:
            return False
        if created and not self.local:
            # a store that ignores If-None-Match accepts this second create (rewriting our own bytes)
            if create_exclusive(self.fs, path, data) is not False:
                log.warning("%s ignores conditional writes (If-None-Match): the registry's lock falls back "
                            "to write-then-verify, which catches most but not all races; run one retrain at a "
                            "time through the scheduler", display(self.fs, path))
                created = None
        if created is None:              # write-then-verify: the last writer's token survives
            time.sleep(self.settle)
            holder = self._read(path)
            return holder is not None and holder.get("token") == self.token
        return True

    def _remove(self, path: str) -> None:
        if self.local:
            os.unlink(path)
            return
        with access(self.fs, path, "write"):
            self.fs.rm_file(path)

    def _read(self, path: str | None = None) -> dict | None:
        path = path or self.path
        try:
            with access(self.fs, path, "read"):
                return json.loads(self.fs.cat_file(path))
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
        if holder.get("host") == socket.gethostname() and "pid" in holder:
            pid = int(holder["pid"])
            try:
                if psutil.Process(pid).create_time() > float(created) + 1:
                    return f"its pid {pid} now belongs to another process"
            except psutil.NoSuchProcess:
                return f"its process {pid} is gone"
        return None

    def _break(self, holder: dict, why: str) -> None:
        where = display(self.fs, self.path)
        guard = self.path + ".break"
        if not self._create(guard, json.dumps({"token": self.token, "created": _now()}).encode()):
            raise LockHeld(where, holder, f" (another run is breaking this stale lock; if none is, "
                                          f"remove {display(self.fs, guard)} too)") from None
        try:
            if self._read() == holder:  # still the stale lock we judged, not a fresh one
                self._remove(self.path)
                log.warning("broke the stale lock %s: %s", where, why)
        finally:
            self._remove(guard)
