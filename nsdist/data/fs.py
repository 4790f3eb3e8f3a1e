"""Filesystem helpers: resolving URLs, naming files in messages, publishing atomically.

Every path the data layer touches goes through :func:`resolve`, so local paths,
``file://``, ``memory://``, ``s3://`` and any other fsspec URL behave the same.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

__all__ = ["DataNotFoundError", "resolve", "display", "staging_directory", "check_absent"]


class DataNotFoundError(FileNotFoundError, ValueError):
    """Nothing to read at a URL.

    It is a ``FileNotFoundError`` and also a ``ValueError`` (the data layer
    reports every kind of bad input as ``ValueError``).
    """


def resolve(url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None
            ) -> tuple[AbstractFileSystem, str]:
    """Return the filesystem and the path inside it for a local path or fsspec URL.

    Raises
    ------
    ValueError
        If ``url`` is not a string or path, or fsspec cannot handle its protocol
        (the message names the URL).
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise ValueError(f"expected a path or URL string, got {url!r}")
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except (ValueError, ImportError, TypeError) as exc:
        raise ValueError(f"cannot open {url!r}: {exc}") from exc
    return fs, path.rstrip("/") or path


def display(fs: AbstractFileSystem, path: str) -> str:
    """How a path is named in messages: plain for local files, a full URL otherwise."""
    return path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)


@contextlib.contextmanager
def staging_directory(fs: AbstractFileSystem, dst: str, *, overwrite: bool) -> Iterator[str]:
    """Yield a fresh hidden directory beside ``dst``; publish it as ``dst`` on success.

    On normal exit the directory is renamed to ``dst`` (an existing ``dst`` is
    first moved aside and deleted only after the rename succeeded). If the body
    raises, the staging directory is deleted and ``dst`` is left as it was.
    On a local filesystem the final rename is atomic; on object stores a
    "rename" is a copy followed by a delete.

    Raises
    ------
    FileExistsError
        If ``dst`` exists and ``overwrite`` is false.
    """
    parent, name = posixpath.split(dst)
    check_absent(fs, dst, overwrite=overwrite)
    token = uuid.uuid4().hex[:12]
    staging = posixpath.join(parent, f".{name}.tmp-{token}")
    fs.makedirs(staging, exist_ok=True)
    try:
        yield staging
        check_absent(fs, dst, overwrite=overwrite)
        backup = posixpath.join(parent, f".{name}.old-{token}") if fs.exists(dst) else None
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
        if fs.exists(staging):
            fs.rm(staging, recursive=True)


def check_absent(fs: AbstractFileSystem, dst: str, *, overwrite: bool) -> None:
    """Raise ``FileExistsError`` if ``dst`` exists and may not be replaced."""
    if not overwrite and fs.exists(dst):
        raise FileExistsError(f"{display(fs, dst)} already exists; pass overwrite=True to replace it")
