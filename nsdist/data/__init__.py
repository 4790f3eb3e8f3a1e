"""Data layer: Parquet datasets, text readers and ingest (docs/engine.md §Dataset format).

May import numpy, scipy, pyarrow, fsspec, dask, distributed, ``nsdist._validation``,
``nsdist._names`` and ``nsdist._connect`` (the one way to reach Dask, shared with the engine)
only (not the solvers, engine or API).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from nsdist.data.dataset import Dataset, PartitionInfo
from nsdist.data.fs import DataNotFoundError

__all__ = ["Dataset", "PartitionInfo", "DataNotFoundError", "ingest", "read_csv", "read_svmlight"]

#: exported name -> its module, loaded on first use (PEP 562): a Dask worker reading partitions imports
#: nsdist.data without the ingest and the text readers (and their imports), which a fresh worker paid for in
#: every job's first load
_LAZY = {"ingest": "nsdist.data.ingest", "read_csv": "nsdist.data.readers", "read_svmlight": "nsdist.data.readers"}

if TYPE_CHECKING:
    from nsdist.data.ingest import ingest
    from nsdist.data.readers import read_csv, read_svmlight


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nsdist.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
