"""Data layer: Parquet datasets, text readers and ingest (docs/engine.md §Dataset format).

May import numpy, scipy, pyarrow, fsspec, dask, distributed, ``nsdist._validation``,
``nsdist._names`` and ``nsdist._connect`` (the one way to reach Dask, shared with the engine)
only (not the solvers, engine or API).
"""
from nsdist.data.dataset import Dataset, PartitionInfo
from nsdist.data.fs import DataNotFoundError
from nsdist.data.ingest import ingest
from nsdist.data.readers import read_csv, read_svmlight

__all__ = ["Dataset", "PartitionInfo", "DataNotFoundError", "ingest", "read_csv", "read_svmlight"]
