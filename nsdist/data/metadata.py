"""The nsdist metadata stored with a dataset: key names, JSON encoding, hashing.

An ingested dataset carries the same JSON object twice: in every Parquet file's
schema metadata under the key ``b"nsdist"`` (so a single file is self-describing)
and, with a per-partition listing added, in the sidecar file ``_nsdist.json`` at
the dataset root. See :func:`nsdist.data.ingestion.ingest` for the fields.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["META_KEY", "SIDECAR", "FORMAT", "FORMAT_VERSION", "dumps", "loads", "sha256_json",
           "library_version"]

META_KEY = b"nsdist"
SIDECAR = "_nsdist.json"
FORMAT = "nsdist-dataset"
FORMAT_VERSION = 1


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """Canonical JSON (sorted keys): equal objects give equal bytes."""
    separators = (",", ": ") if indent else (",", ":")
    return json.dumps(obj, sort_keys=True, indent=indent, separators=separators, allow_nan=False)


def loads(text: str | bytes, where: str) -> dict:
    """Parse a metadata JSON object.

    Raises
    ------
    ValueError
        If ``text`` is not a JSON object (naming ``where``).
    """
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: nsdist metadata is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: nsdist metadata must be a JSON object")
    return obj


def sha256_json(obj: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``obj``."""
    return hashlib.sha256(dumps(obj).encode()).hexdigest()


def library_version() -> str:
    """The installed nsdist version (imported lazily: ``nsdist/__init__`` may import this package)."""
    from nsdist import __version__

    return __version__
