"""Filesystem helpers: resolving URLs with their storage options, atomic writes and publishing.

Every path the product touches goes through :func:`resolve` (or the helpers
built on it), so local paths, ``file://``, ``memory://``, ``s3://`` and any
other fsspec URL behave the same, and every read and write gets the fsspec
``storage_options`` that apply to its URL.  See ``docs/object-storage.md``.

Options
    :func:`merge_options` combines the layers (job-wide options, then a
    section's own); :func:`forwarded_options` adds, for ``s3://`` URLs, the
    credentials the *driver* found in its environment or AWS profile, so the
    filesystem object that Dask pickles into each task carries them and the
    workers need nothing in their own environment.  fsspec's own configuration
    (``FSSPEC_<PROTOCOL>_<KEY>`` variables, ``~/.config/fsspec/``) is applied
    by fsspec when the driver creates the filesystem, and travels the same way.
Secrets
    :func:`redact` replaces the values of secret-looking keys (keys, secrets,
    tokens, passwords ...) with ``"<redacted>"`` wherever options are echoed;
    :func:`scrub` removes every secret value the process has seen from a text
    before it is written (run logs, job files, metrics).
Atomicity
    :func:`atomic_write_bytes`: a local file is written to a temporary sibling
    and renamed; an object is one ``PUT``.  :func:`staging_directory` publishes
    a directory: by one rename on local disks, and on object stores (which
    cannot rename a directory) by writing the parts in place behind an
    ``_nsdist.incomplete`` marker and the manifest last -- or, replacing a
    published one, beside it and then copied in.  :func:`create_exclusive`
    is the primitive of the registry's lock.
Errors
    :func:`access` turns a missing-credentials or access-denied error into a
    :class:`StorageAccessError` that says who (the driver, or which Dask
    worker) could not read or write which URL, and what it lacked.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.spec import AbstractFileSystem

__all__ = ["DataNotFoundError", "StorageAccessError", "resolve", "display", "staging_directory", "check_absent",
           "atomic_write_bytes", "atomic_writer", "read_bytes", "exists", "create_exclusive", "merge_options",
           "forwarded_options", "redact", "redact_job", "scrub", "register_secrets", "access", "INCOMPLETE", "REDACTED",
           "is_object_store", "remove_tree", "is_there"]

log = logging.getLogger("nsdist")

#: marker object of a dataset being published in place on an object store (see :func:`staging_directory`)
INCOMPLETE = "_nsdist.incomplete"

#: what a secret's value is replaced by wherever options are echoed
REDACTED = "<redacted>"

# keys whose values are secrets: key, secret, token, password, credentials, SAS/connection strings ...
_SECRET_KEY = re.compile(r"key|secret|token|passw|credential|signature|sas|connection_string|auth|cookie|"
                         r"private|session", re.IGNORECASE)
# ... except these, which name no secret
_NOT_SECRET = frozenset({"key_prefix", "ssekms_key_id_header"})


class DataNotFoundError(FileNotFoundError, ValueError):
    """Nothing to read at a URL.

    It is a ``FileNotFoundError`` and also a ``ValueError`` (the data layer
    reports every kind of bad input as ``ValueError``).
    """


class StorageAccessError(PermissionError):
    """The driver or a Dask worker could not read or write a URL: no credentials, or not allowed.

    The message names who (``the driver`` or ``Dask worker NAME (ADDRESS)``),
    the URL, and what was lacking.
    """


# ------------------------------------------------------------------ options
def merge_options(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options of several layers, later ones winning; nested mappings (``client_kwargs``) merge too.

    Values equal to :data:`REDACTED` (read back from an echoed job file) are
    dropped, so that another layer (``--storage-options``, the environment)
    can supply the secret.
    """
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if value == REDACTED:
                continue
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = merge_options(out[key], value)
            elif isinstance(value, Mapping):
                out[key] = merge_options(value)
            elif isinstance(value, list):
                out[key] = list(value)
            else:
                out[key] = value            # (a session object is passed on as it is)
    return out


def is_secret_key(key: Any) -> bool:
    """Whether an option named ``key`` holds a secret (its value is redacted when echoed)."""
    return isinstance(key, str) and key not in _NOT_SECRET and bool(_SECRET_KEY.search(key))


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (options, a job dict) with the value of every secret-looking key replaced by ``<redacted>``.

    Recurses into mappings and lists; ``None`` and booleans are kept (``anon: true`` is no secret).
    """
    if isinstance(obj, Mapping):
        return {k: (REDACTED if is_secret_key(k) and v is not None and not isinstance(v, bool) else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def redact_job(obj: Any) -> Any:
    """A copy of a job (or any nested dict) with every ``storage_options`` mapping :func:`redact`-ed."""
    if isinstance(obj, Mapping):
        return {k: redact(v) if k == "storage_options" and isinstance(v, Mapping) else redact_job(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_job(v) for v in obj]
    return obj


_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


def register_secrets(options: Mapping[str, Any] | None) -> None:
    """Remember the secret values in ``options`` so that :func:`scrub` removes them from any text."""
    found: list[str] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                if is_secret_key(k) and isinstance(v, str) and len(v) >= 4 and v != REDACTED:
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(options)
    if found:
        with _SECRETS_LOCK:
            _SECRETS.update(found)


def scrub(text: str) -> str:
    """``text`` with every registered secret value replaced by ``<redacted>``."""
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _protocol(url: str) -> str:
    return (fsspec.core.split_protocol(url)[0] or "file").lower()


_S3_CREDENTIAL_KEYS = ("key", "secret", "token", "anon", "profile", "session", "username", "password")


def forwarded_options(url: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` plus what the driver knows that the workers may not, for ``s3://`` URLs.

    When the options give no credentials (``key``/``secret``, ``anon``, a
    ``session``), the driver's own are added: those of ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, or of the AWS profile
    (``profile`` option, else ``AWS_PROFILE``) in the shared credentials and
    config files.  Credentials of an instance or container role are *not*
    copied: the workers of such a deployment have their own.  Likewise
    ``AWS_ENDPOINT_URL[_S3]`` and ``AWS_REGION`` become ``client_kwargs``.
    Other protocols are returned unchanged (their fsspec configuration is
    applied by fsspec on the driver and travels with the filesystem).
    """
    out = merge_options(options)
    if _protocol(url) not in ("s3", "s3a"):
        return out
    client_kwargs = dict(out.get("client_kwargs") or {})
    if not any(k in out for k in _S3_CREDENTIAL_KEYS) and "aws_access_key_id" not in client_kwargs:
        creds = _driver_aws_credentials(os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE"))
        if creds is not None:
            out.update(creds)
    elif "profile" in out and not any(k in out for k in ("key", "secret", "anon", "session")):
        creds = _driver_aws_credentials(out["profile"])
        if creds is not None:
            out.pop("profile")
            out.update(creds)
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in out and "endpoint_url" not in client_kwargs:
        client_kwargs["endpoint_url"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and "region_name" not in client_kwargs:
        client_kwargs["region_name"] = region
    if client_kwargs:
        out["client_kwargs"] = client_kwargs
    register_secrets(out)
    return out


def _driver_aws_credentials(profile: str | None) -> dict[str, str] | None:
    env_key, env_secret, env_token = (os.environ.get(name) for name in
                                      ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"))
    if env_key and env_secret and not profile:
        return {"key": env_key, "secret": env_secret, **({"token": env_token} if env_token else {})}
    key = (profile, os.environ.get("AWS_SHARED_CREDENTIALS_FILE"), os.environ.get("AWS_CONFIG_FILE"))
    if key not in _PROFILE_CREDENTIALS:
        found = _profile_credentials(profile)
        if found is None or not found[1]:
            return None if found is None else found[0]   # temporary (assumed role ...): looked up each time
        _PROFILE_CREDENTIALS[key] = found[0]
    return _PROFILE_CREDENTIALS[key]


#: static credentials of AWS profiles, by (profile, credentials file, config file)
_PROFILE_CREDENTIALS: dict[tuple, dict[str, str]] = {}


def _profile_credentials(profile: str | None) -> tuple[dict[str, str], bool] | None:
    """Frozen credentials of an AWS profile (never of an instance or container role), and whether they are static."""
    try:
        import botocore.session
    except ImportError:
        return None
    try:
        session = botocore.session.Session(profile=profile)
        resolver = session.get_component("credential_provider")
        for name in ("container-role", "iam-role", "sso", "assume-role-with-web-identity"):
            with contextlib.suppress(Exception):
                resolver.remove(name)
        creds = resolver.load_credentials()
    except Exception as exc:  # a broken profile: let the filesystem report it
        log.debug("no driver AWS credentials to forward: %s", exc)
        return None
    if creds is None:
        return None
    frozen = creds.get_frozen_credentials()
    if not (frozen.access_key and frozen.secret_key):
        return None
    return ({"key": frozen.access_key, "secret": frozen.secret_key,
             **({"token": frozen.token} if frozen.token else {})},
            getattr(creds, "method", "") in ("env", "shared-credentials-file", "config-file"))


# ------------------------------------------------------------------ resolving
def resolve(url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None
            ) -> tuple[AbstractFileSystem, str]:
    """Return the filesystem and the path inside it for a local path or fsspec URL.

    The options are :func:`forwarded_options` of ``storage_options``: the
    filesystem (which Dask pickles, options included, into the tasks that
    use it) carries everything a worker needs.  fsspec reuses filesystem
    instances, and object-store filesystems cache listings: the cache of
    ``path`` is dropped, so that what other processes wrote since is seen
    (a registry read again under its lock, partitions that arrived).

    Raises
    ------
    ValueError
        If ``url`` is not a string or path, or fsspec cannot handle its protocol
        (the message names the URL).
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        kind = type(url).__module__.split(".")[0] + "." + type(url).__name__
        if hasattr(url, "columns") or hasattr(url, "shape"):     # a data frame or an array, not where data lies
            raise ValueError(f"expected a path or URL string of a Parquet dataset, got a {kind}: write it as Parquet "
                             "first (df.to_parquet(path); a Dask DataFrame: ddf.to_parquet(directory)), or fit "
                             "rows in memory with NonDecomposableClassifier().fit(X, y)")
        raise ValueError(f"expected a path or URL string, got {url!r}")
    options = forwarded_options(url, storage_options)
    register_secrets(options)
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except (ValueError, ImportError, TypeError) as exc:
        raise ValueError(f"cannot open {url!r}: {scrub(str(exc))}") from exc
    register_secrets(getattr(fs, "storage_options", None))   # with fsspec's configuration applied
    path = path.rstrip("/") or path
    with contextlib.suppress(Exception):   # fsspec reuses instances: another process may have written since
        fs.invalidate_cache(path)
    return fs, path


def display(fs: AbstractFileSystem, path: str) -> str:
    """How a path is named in messages: plain for local files, a full URL otherwise."""
    return path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)


def is_object_store(fs: AbstractFileSystem) -> bool:
    """Whether ``fs`` cannot rename a directory atomically (anything but local disks and ``memory://``)."""
    return not isinstance(fs, (LocalFileSystem, MemoryFileSystem))


# ------------------------------------------------------------------ reading and writing
def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether anything is at ``url``."""
    fs, path = resolve(url, storage_options)
    with access(fs, path, "read"):
        return is_there(fs, path)


def read_bytes(url: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The content of the file at ``url`` (``FileNotFoundError`` naming it if there is none)."""
    fs, path = resolve(url, storage_options)
    with access(fs, path, "read"):
        try:
            return fs.cat_file(path)
        except FileNotFoundError:
            raise FileNotFoundError(2, "No such file or directory", display(fs, path)) from None


def atomic_write_bytes(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write ``data`` to ``url`` so that readers see the old or the new content, never a part.

    Local files: as :func:`atomic_writer`.  Object stores (``s3://`` ...): a single
    ``PUT``, which they publish atomically.
    """
    fs, path = resolve(url, storage_options)
    if isinstance(fs, LocalFileSystem):
        with atomic_writer(url, storage_options) as fh:
            fh.write(data)
        return
    with access(fs, path, "write"):
        _parent_for(fs, path)
        fs.pipe_file(path, data)


@contextlib.contextmanager
def atomic_writer(url: str, storage_options: Mapping[str, Any] | None = None) -> Iterator[BinaryIO]:
    """A binary file whose content replaces ``url``'s when the block ends without an error, all at once.

    Written as it comes (what is written is not held in memory) to a temporary sibling
    ``<name>.tmp-<token>``, then published: locally ``fsync`` and ``os.replace``; on an
    object store a server-side copy onto ``url`` (which readers see whole or not at all)
    and the sibling deleted.  On an error the sibling is deleted and ``url`` is as it was.
    """
    fs, path = resolve(url, storage_options)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    local = isinstance(fs, LocalFileSystem)
    try:
        with access(fs, path, "write"):
            if local:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            else:
                _parent_for(fs, path)
            with (open(tmp, "wb") if local else fs.open(tmp, "wb")) as fh:
                yield fh
                if local:
                    fh.flush()
                    os.fsync(fh.fileno())
            if local:
                os.replace(tmp, path)
            else:
                fs.mv(tmp, path)
    finally:
        if local and os.path.exists(tmp):
            os.unlink(tmp)
        elif not local and is_there(fs, tmp):
            fs.rm(tmp)


def _parent_for(fs: AbstractFileSystem, path: str) -> None:
    """Make ``path``'s directory on a file system that has directories (an object store has none)."""
    parent = posixpath.dirname(path)
    if parent and parent != path and not is_object_store(fs):
        fs.makedirs(parent, exist_ok=True)


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool | None:
    """Create the file ``path`` holding ``data`` only if nothing is there: True if created, False if not.

    Atomic where the store can do it: ``O_CREAT | O_EXCL`` on local disks,
    a conditional ``PUT`` (``If-None-Match: *``) on S3 and S3-compatible
    stores, an exclusive open in ``memory://``.  Elsewhere fsspec checks,
    then writes, which is not atomic: the result is then ``None`` if the
    file was written (the caller must verify by reading back).
    """
    if isinstance(fs, LocalFileSystem):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:       # interrupted (Ctrl-C, SIGTERM) or failed while writing: not left empty
            os.unlink(path)
            raise
        return True
    atomic = isinstance(fs, MemoryFileSystem) or "s3" in _protocols(fs)
    with access(fs, path, "write"):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        except TypeError:            # an old implementation without mode=
            if is_there(fs, path):
                return False
            fs.pipe_file(path, data)
            return None
    return True if atomic else None


def _protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


# ------------------------------------------------------------------ publishing a directory
@contextlib.contextmanager
def staging_directory(fs: AbstractFileSystem, dst: str, *, overwrite: bool) -> Iterator[str]:
    """Yield the directory to write a dataset into; publish it as ``dst`` when the body succeeds.

    Local disks and ``memory://``: a fresh hidden directory beside ``dst``,
    renamed to ``dst`` on success (an existing ``dst`` is first moved aside
    and deleted only after the rename succeeded); the rename is atomic.

    Object stores, which rename by copying every object: a new ``dst`` is
    written in place, behind an ``_nsdist.incomplete`` marker written first;
    the body writes the parts and, last, the manifest (``_nsdist.json``),
    which commits the dataset; then the marker is removed.  A reader that
    finds the marker and no manifest refuses the directory as incomplete.
    An existing, complete ``dst`` being replaced is kept whole while the body
    runs: the body writes into a hidden prefix beside it, and only once the
    body succeeded is ``dst`` swapped (:func:`_swap_in`: the marker, the old
    manifest removed, the new objects copied in on the server, the old ones
    left over removed, the new manifest copied last, the marker removed).

    If the body raises, what it wrote is deleted and ``dst`` is left as it
    was, on local disks and object stores alike.

    Raises
    ------
    FileExistsError
        If ``dst`` exists and ``overwrite`` is false.
    """
    _warn_leftovers(fs, dst)
    if is_object_store(fs):
        with _publish_in_place(fs, dst, overwrite=overwrite) as where:
            yield where
        return
    parent, name = posixpath.split(dst)
    check_absent(fs, dst, overwrite=overwrite)
    token = uuid.uuid4().hex[:12]
    staging = posixpath.join(parent, f".{name}.tmp-{token}")
    try:
        fs.makedirs(staging, exist_ok=True)
        yield staging
        check_absent(fs, dst, overwrite=overwrite)
        backup = posixpath.join(parent, f".{name}.old-{token}") if is_there(fs, dst, links=True) else None
        if backup is not None:
            fs.mv(dst, backup, recursive=True)
        try:
            fs.mv(staging, dst, recursive=True)
        except BaseException:
            if backup is not None:
                fs.mv(backup, dst, recursive=True)
            raise
        if backup is not None:
            fs.rm(backup, recursive=True)
    finally:
        remove_tree(fs, staging)        # (nothing there once it became dst)


def is_there(fs: AbstractFileSystem, path: str, *, links: bool = False) -> bool:
    """``fs.exists(path)``, except that an interrupt landing meanwhile is raised, not taken for "not there".

    fsspec's own ``exists`` (the local file system's, ``memory://``'s, any that does not override it)
    calls ``info`` under a bare ``except``: a Ctrl-C or SIGTERM (:mod:`nsdist._signals`) raised there is
    swallowed and the command runs on, as if the path were missing -- a model "not found", a staging
    directory moved *into* the previous output instead of replacing it.  Here any ``Exception`` still means
    "not there", as in fsspec; an interrupt is raised.  On a local disk ``os.path.exists`` (what
    ``fs.exists`` answers), or with ``links`` ``os.path.lexists`` (a dangling link is there too: a name
    taken).  A file system with its own ``exists`` (``s3://``: it catches ``FileNotFoundError`` only) is
    asked as it is.
    """
    if isinstance(fs, LocalFileSystem):
        return os.path.lexists(path) if links else os.path.exists(path)
    if type(fs).exists is not AbstractFileSystem.exists:
        return fs.exists(path)
    try:
        fs.info(path)
    except Exception:
        return False
    return True


#: how many times :func:`remove_tree` starts the removal again when an interrupt cuts it short, or a file
#: appears in a directory being removed; and the pause before starting again in the second case, seconds
REMOVE_ATTEMPTS = 5
REMOVE_PAUSE = 0.2


def remove_tree(fs: AbstractFileSystem, path: str) -> None:
    """Remove ``path`` and everything under it, if it is there: the cleanup of a failed or stopped command.

    The removal is started again (at most :data:`REMOVE_ATTEMPTS` times) when

    * an interrupt (Ctrl-C, SIGTERM: :mod:`nsdist._signals`) cuts it short: the interrupt is raised once
      the removal is done;
    * a file appears in a directory while it is removed (``ENOTEMPTY``): a task the command started, on a
      worker thread or another machine, may still be writing its part when the command stops -- a Dask
      task that already runs is not stopped by its cancellation.  Once a directory is gone, such a task
      cannot write there any more (its file's directory is missing).

    Whether ``path`` is there is not asked of ``fs.exists``: fsspec's local one takes every exception, an
    interrupt too, for "not there".
    """
    interrupt: KeyboardInterrupt | None = None
    for attempt in range(1, REMOVE_ATTEMPTS + 1):
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        except KeyboardInterrupt as exc:
            interrupt = exc
            continue
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY or attempt == REMOVE_ATTEMPTS:
                raise
            time.sleep(REMOVE_PAUSE)
            continue
        break
    if interrupt is not None:
        raise interrupt


def _warn_leftovers(fs: AbstractFileSystem, dst: str) -> None:
    """Warn of what killed runs left beside ``dst``: a staging directory or prefix (``.NAME.tmp-TOKEN``),
    which nothing reads, and a moved-aside previous output (``.NAME.old-TOKEN``, local disks), which holds
    the data when ``dst`` is gone.  A run that fails or is stopped (SIGTERM, Ctrl-C) removes its own; only
    a killed process (SIGKILL, a lost machine) leaves one.  They are named, not removed: another run may be
    writing one now.  Best effort: a listing that fails says nothing."""
    import warnings

    parent, name = posixpath.split(dst.rstrip("/"))
    try:
        fs.invalidate_cache(parent)
        found = sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(parent or ".", detail=False))
    except Exception:
        return
    staged = [f for f in found if f.startswith(f".{name}.tmp-")]
    aside = [f for f in found if f.startswith(f".{name}.old-")]
    if staged:
        warnings.warn(f"{display(fs, dst)}: left beside it by a killed run, which could not clean up: "
                      f"{', '.join(staged)}; nothing reads it: remove it, unless another run is writing there now",
                      UserWarning, stacklevel=4)
    if aside:
        missing = "" if is_there(fs, dst) else f"; {display(fs, dst)} is missing: move it back"
        warnings.warn(f"{display(fs, dst)}: the previous output, moved aside by a run killed while replacing it: "
                      f"{', '.join(aside)}{missing}", UserWarning, stacklevel=4)


@contextlib.contextmanager
def _publish_in_place(fs: AbstractFileSystem, dst: str, *, overwrite: bool) -> Iterator[str]:
    from nsdist.data.metadata import SIDECAR

    marker = posixpath.join(dst, INCOMPLETE)
    with access(fs, dst, "write"):
        check_absent(fs, dst, overwrite=overwrite)
        whole = fs.isfile(posixpath.join(dst, SIDECAR))     # a published output: kept until the new one is
        if not whole:
            _withdraw(fs, dst, marker)      # nothing, or what an unfinished run left: replaced in place
    if whole:
        with _staged_beside(fs, dst) as staging:
            yield staging
        return
    try:
        yield dst
    except BaseException:
        with contextlib.suppress(Exception):
            written = [p for p in fs.find(dst) if p != marker]
            if written:
                fs.rm(written)
        with contextlib.suppress(Exception):
            fs.rm_file(marker)
        raise
    with access(fs, dst, "write"):
        fs.rm_file(marker)
    fs.invalidate_cache(dst)


def _put_marker(fs: AbstractFileSystem, marker: str) -> None:
    """Write the ``_nsdist.incomplete`` object ``marker`` (a token and the time: whose run, since when)."""
    fs.pipe_file(marker, f'{{"token": "{uuid.uuid4().hex}", "created": {time.time():.3f}}}'.encode())


def _withdraw(fs: AbstractFileSystem, dst: str, marker: str) -> None:
    """Put up ``dst``'s marker, then remove what ``dst`` holds: its manifest first, so that no reader trusts
    the rest."""
    from nsdist.data.metadata import SIDECAR

    _put_marker(fs, marker)
    fs.invalidate_cache(dst)
    old = [p for p in fs.find(dst) if p != marker]
    manifest = posixpath.join(dst, SIDECAR)
    if manifest in old:
        fs.rm_file(manifest)
    if [p for p in old if p != manifest]:
        fs.rm([p for p in old if p != manifest])


@contextlib.contextmanager
def _staged_beside(fs: AbstractFileSystem, dst: str) -> Iterator[str]:
    """Yield a hidden prefix beside the object-store directory ``dst`` to write into; on success swap it in
    (:func:`_swap_in`) and remove it; on failure remove it, ``dst`` untouched."""
    parent, name = posixpath.split(dst)
    staging = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        yield staging
    except BaseException:
        with contextlib.suppress(Exception):
            fs.invalidate_cache(staging)
            remove_tree(fs, staging)
        raise
    with access(fs, dst, "write"):
        try:
            _swap_in(fs, staging, dst)
        except Exception as exc:     # the new output is whole under the staging prefix: say where
            exc.add_note(f"the new output is complete under {display(fs, staging)}; {display(fs, dst)} "
                         f"is marked incomplete ({INCOMPLETE})")
            raise
        fs.rm(staging, recursive=True)


def _swap_in(fs: AbstractFileSystem, staging: str, dst: str) -> None:
    """Replace the object-store directory ``dst`` by ``staging``'s objects, its manifest last: the marker up
    and the old manifest removed (:func:`_withdraw`'s order: readers refuse ``dst`` until the end), each new
    object copied on the server (``fs.copy``: no bytes through this process), the old objects the new output
    does not replace removed, the new manifest copied, the marker removed."""
    from nsdist.data.metadata import SIDECAR

    marker = posixpath.join(dst, INCOMPLETE)
    fs.invalidate_cache(staging)          # the workers wrote there: this process's listing cache knows nothing
    fs.invalidate_cache(dst)
    new = sorted(posixpath.relpath(p, staging) for p in fs.find(staging))
    old = [posixpath.relpath(p, dst) for p in fs.find(dst)]
    _put_marker(fs, marker)
    if SIDECAR in old:
        fs.rm_file(posixpath.join(dst, SIDECAR))
    parts = [n for n in new if n != SIDECAR]
    if parts:
        fs.copy([posixpath.join(staging, n) for n in parts], [posixpath.join(dst, n) for n in parts])
    stale = sorted(set(old) - set(new) - {SIDECAR, INCOMPLETE})
    if stale:
        fs.rm([posixpath.join(dst, n) for n in stale])
    if SIDECAR in new:
        fs.copy(posixpath.join(staging, SIDECAR), posixpath.join(dst, SIDECAR))
    fs.rm_file(marker)
    fs.invalidate_cache(dst)


def check_absent(fs: AbstractFileSystem, dst: str, *, overwrite: bool) -> None:
    """Raise ``FileExistsError`` if ``dst`` exists and may not be replaced."""
    if not overwrite and is_there(fs, dst, links=True):
        raise FileExistsError(f"{display(fs, dst)} already exists; pass overwrite=True to replace it")


def incomplete(fs: AbstractFileSystem, root: str) -> bool:
    """Whether the directory ``root`` is a dataset whose in-place publication has not finished (or died)."""
    from nsdist.data.metadata import SIDECAR

    return fs.isfile(posixpath.join(root, INCOMPLETE)) and not fs.isfile(posixpath.join(root, SIDECAR))


# ------------------------------------------------------------------ errors
@contextlib.contextmanager
def access(fs: AbstractFileSystem, path: str, action: str = "read") -> Iterator[None]:
    """Re-raise a credentials or permission error inside the block as a :class:`StorageAccessError`.

    Its message says who failed (the driver or which Dask worker), to
    ``action`` which URL, and what it lacked; other errors pass unchanged.
    """
    if isinstance(fs, LocalFileSystem):    # a local PermissionError says all there is to say
        yield
        return
    try:
        yield
    except StorageAccessError:
        raise
    except Exception as exc:
        lacked = _lacked(exc)
        if lacked is None:
            raise
        where = display(fs, path)
        raise StorageAccessError(scrub(f"{_who()} cannot {action} {where}: {lacked}")) from exc


def _who() -> str:
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return "the driver"
    name = str(worker.name)
    return f"Dask worker {worker.address}" if name == worker.address else f"Dask worker {name} ({worker.address})"


_DENIED_CODES = {
    "InvalidAccessKeyId": "its access key is not known to the store (the credentials are wrong)",
    "SignatureDoesNotMatch": "the secret does not match the access key (the credentials are wrong)",
    "ExpiredToken": "its session token has expired",
    "InvalidToken": "its session token is not valid",
    "AccessDenied": "permission: the store denied access to these credentials",
    "AllAccessDisabled": "permission: all access to this object is disabled",
}

_HINT = ("; give credentials in storage_options (dataset.storage_options, output.storage_options, the job's "
         "storage_options or --storage-options): nsdist sends them with every task, so the workers need "
         "nothing in their environment")


def _lacked(exc: BaseException) -> str | None:
    """What a credentials/permission error says was lacking, or None for another error."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        name = type(cur).__name__
        if name in ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError",
                    "CredentialRetrievalError", "UnauthorizedSSOTokenError", "DefaultCredentialsError"):
            return f"no credentials ({name}: {cur})" + _HINT
        code = getattr(cur, "response", {}).get("Error", {}).get("Code") if hasattr(cur, "response") else None
        if code in _DENIED_CODES:
            return f"{_DENIED_CODES[code]} ({code})" + _HINT
        if name == "EndpointConnectionError":
            return f"a reachable endpoint ({cur}); set client_kwargs.endpoint_url in storage_options"
        if isinstance(cur, PermissionError) and not isinstance(cur, StorageAccessError):
            return f"permission ({' '.join(str(cur).split())})" + _HINT
        cur = cur.__cause__ or cur.__context__
    return None
