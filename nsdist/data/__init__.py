"""Data layer: Parquet datasets, text readers and ingest (docs/engine.md §Dataset format).

May import numpy, scipy, pyarrow, fsspec, dask, distributed, ``nsdist._validation``,
``nsdist._names``, ``nsdist._lazy``, ``nsdist._connect`` (the one way to reach Dask, shared with the
engine) and the layers below it (the solvers' row blocks and scaling) only -- not the engine or API.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from nsdist._lazy import lazy_exports
from nsdist.data.dataset import Dataset, PartitionInfo
from nsdist.data.fs import DataNotFoundError

__all__ = ["Dataset", "PartitionInfo", "DataNotFoundError", "ingest", "read_csv", "read_svmlight"]

if TYPE_CHECKING:
    from nsdist.data.ingestion import ingest
    from nsdist.data.readers import read_csv, read_svmlight

# loaded on first use: a Dask worker reading partitions imports nsdist.data without the ingest and the text
# readers (and their imports), which a fresh worker paid for before every job's first load.  No submodule may be
# named like an export: importing it would rebind the package's attribute to the module (hence ``ingestion``)
__getattr__ = lazy_exports(globals(), {"ingest": "nsdist.data.ingestion", "read_csv": "nsdist.data.readers",
                                       "read_svmlight": "nsdist.data.readers"})
