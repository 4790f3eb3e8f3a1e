"""Opening a Parquet dataset: its partitions, feature schema, metadata and fingerprint.

A dataset is a Parquet file, a directory of them (searched recursively, so
hive-style ``key=value/`` subdirectories work) or a glob, at any fsspec URL.
Each file is a partition -- or, when its row groups hold more than
:data:`SPLIT_BYTES`, several: runs of its consecutive row groups, so that a
large file streams like many small ones; partitions are ordered by path (string order, which
is also the order of ``part-00000.parquet, part-00001.parquet, ...``) and, within a file, by row. In a
directory, files whose name ends in ``.parquet``, ``.parq`` or ``.pq`` are data;
paths with a component starting with ``_`` or ``.`` are ignored (``_SUCCESS``,
``_nsdist.json``, ``.crc`` files, staging directories). A directory holding
``_nsdist.incomplete`` and no ``_nsdist.json`` is an ingest into an object store
that has not finished (or died) and is refused (see
:func:`nsdist.data.fs.staging_directory`).

Opening reads only the Parquet footers. A file with no rows is skipped with a
``UserWarning``. A :class:`Dataset` holds paths and the schema, never data, so
it is cheap to send to Dask workers, which call :meth:`Dataset.read_partition`.
"""
from __future__ import annotations

import codecs
import contextlib
import dataclasses
import os
import posixpath
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from nsdist._names import NameRange, names_to_json
from nsdist._sparse import issparse
from nsdist.data import metadata as meta
from nsdist.data.columns import FeatureSchema, candidate_columns
from nsdist.data.labels import LabelRule, LabelValues
from nsdist.data.dense import checked_columns
from nsdist.solvers.blocks import gather_block, take_rows
from nsdist.data.fs import INCOMPLETE, DataNotFoundError, StorageAccessError, access, display, incomplete, resolve
from nsdist.solvers.scaling import Scaling

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["PartitionInfo", "Dataset", "SPLIT_BYTES", "FilePart", "file_parts"]

#: A file whose row groups hold more than this many bytes, uncompressed (by its footer), is read as several
#: partitions: runs of consecutive row groups, each of at most this many bytes or else of one row group
#: (``docs/engine.md`` §Dataset format).  A partition is what one task reads whole and one worker holds: a
#: single 1.2 GB file of 16 row groups read whole trained 3.4x slower than split, at 7x the memory per worker.
#: Files that ``nsdist ingest`` writes (64 MiB of features) stay whole.
SPLIT_BYTES = 128 * 2**20

_SUFFIXES = (".parquet", ".parq", ".pq")
# Counts in the schema metadata describe the whole dataset as ingested: trusted only
# when the sidecar confirms that exactly those files are present.
_WHOLE_DATASET_COUNTS = ("positives", "dropped_rows")


@dataclass(frozen=True)
class PartitionInfo:
    """One Parquet file of a dataset.

    Attributes
    ----------
    path : str
        Path inside the dataset's filesystem.
    index : int
        Position in file order.
    num_rows : int
    row_offset : int
        Global position of the partition's first row (rows of earlier partitions).
    size : int
        File size in bytes.
    fingerprint : str
        SHA-256 of (path relative to the dataset root, size, row count).
    label_range : (min, max) or None
        The label column's smallest and largest value from the footer's row-group
        statistics (None when a row group has none): lets a job see both classes
        without reading a row (:meth:`Dataset.has_both_classes`).  Not part of the
        fingerprint.
    nnz : int or None
        The sparse layout's stored entries, from the footer (the ``indices`` column's
        value count): what its rows take in memory, before any row is read.  None
        for the other layouts.  Not part of the fingerprint.
    row_groups : (start, stop) or None
        The file's row groups ``start .. stop - 1`` when the file is read as several
        partitions (:data:`SPLIT_BYTES`); None when the partition is the whole file.
    file_row : int
        The file's row that is the partition's row 0 (0 for a whole file).
    """

    path: str
    index: int
    num_rows: int
    row_offset: int
    size: int
    fingerprint: str
    label_range: tuple | None = None
    nnz: int | None = None
    row_groups: tuple[int, int] | None = None
    file_row: int = 0


@dataclass(frozen=True, eq=False)
class Dataset:
    """An opened Parquet dataset (see the module docstring). Build it with :meth:`open`.

    Attributes
    ----------
    url : str
        As given to :meth:`open`.
    fs : fsspec.AbstractFileSystem
    partitions : tuple of PartitionInfo
        Non-empty files in path order.
    schema : FeatureSchema
        Layout, label column and feature names, fixed by the first file.
    metadata : dict
        The nsdist metadata written by ingest (see :func:`nsdist.data.ingestion.ingest`),
        if any, updated with values derived from the files: ``layout``,
        ``label_column``, ``feature_names``, ``n_features``, ``num_rows``,
        ``num_partitions`` and ``fingerprint``. The class counts (``positives``,
        ``dropped_rows``) and the per-partition listing are included only when
        the directory's ``_nsdist.json`` lists exactly the files present.
    fingerprint : str
        SHA-256 over the feature schema and every partition's fingerprint: it
        changes when a file is added, removed, renamed or rewritten with another
        size or row count, and not when the dataset is copied elsewhere.
    """

    url: str
    fs: AbstractFileSystem = field(repr=False)
    partitions: tuple[PartitionInfo, ...] = field(repr=False)
    schema: FeatureSchema = field(repr=False)
    metadata: dict = field(repr=False)
    fingerprint: str

    @classmethod
    def open(cls, url: str | os.PathLike, *, label_column: str = "label",
             feature_columns: str | Sequence[str] | None = None,
             storage_options: Mapping[str, Any] | None = None, positive: LabelValues = None,
             drop: Sequence[str] = ()) -> Dataset:
        """Open a dataset from a file, directory or glob at a local path or fsspec URL.

        Parameters
        ----------
        url : str or path
        label_column : str
            Holds labels in ``{-1, +1}``, ``{0, 1}`` or bool; or any values (class
            names such as ``"fraud"`` / ``"ok"``, codes) with ``positive``.
        feature_columns : str, sequence of str, or None
            See :meth:`FeatureSchema.infer`.
        storage_options : mapping, optional
            Passed to fsspec (credentials, endpoints, ...).
        positive : str, number, sequence of them, or None
            The label value(s) of the positive class, read as it is stored
            (``positive="fraud"``, ``positive=[7, 8]``): every other label is
            negative (docs/measures.md §Labels).
        drop : sequence of str
            Columns that are neither features nor the label (an id, a timestamp):
            left out of every other column (``feature_columns=None``).

        Raises
        ------
        ValueError
            If nothing is found (:class:`~nsdist.data.fs.DataNotFoundError`, naming
            the URL), a file is not readable Parquet, a file's schema differs from
            the first one, the feature layout cannot be worked out (naming the
            file and column), or a footer's statistics count a missing (null) value
            in a feature column or the label: then the first such partition is
            read, and its read's error names the row and column (a null is found
            when the dataset is opened, not when a job reaches its file).
        """
        fs, path = resolve(url, storage_options)
        root, files = _discover(fs, path, str(url))
        footers = _read_footers(fs, [p for p, _ in files])
        first = display(fs, files[0][0])
        stored = _schema_metadata(footers[0][1], first)
        schema = FeatureSchema.infer(footers[0][1], label_column=label_column,
                                     feature_columns=feature_columns, metadata=stored, where=first,
                                     positive=positive, label_names=_label_range(footers[0][2], label_column,
                                                                                 (str,)) or (), drop=drop)
        partitions: list[PartitionInfo] = []
        offset, with_nulls = 0, None
        for (p, size), (num_rows, file_schema, file_meta) in zip(files, footers):
            schema.check(file_schema, display(fs, p))
            if num_rows == 0:
                warnings.warn(f"{display(fs, p)}: Parquet file has no rows; skipped", UserWarning,
                              stacklevel=2)
                continue
            relative = posixpath.relpath(p, root) if root else posixpath.basename(p)
            for groups, file_row, rows in _runs(file_meta):
                span = groups or (0, file_meta.num_row_groups)
                key = [relative, size, num_rows] + ([] if groups is None else [list(groups)])
                partitions.append(PartitionInfo(
                    p, len(partitions), rows, offset, size, meta.sha256_json(key),
                    None if schema.positive else _label_range(file_meta, schema.label, groups=span),
                    _value_count(file_meta, "indices", span) if schema.layout == "sparse" else None,
                    groups, file_row))
                if with_nulls is None and _holds_nulls(file_meta, schema.read_columns, span):
                    with_nulls = len(partitions) - 1
                offset += rows
        if not partitions:
            raise ValueError(f"{url}: every Parquet file is empty ({len(files)} files)")
        fingerprint = meta.sha256_json({"schema": schema.describe(),
                                        "partitions": [p.fingerprint for p in partitions]})
        sidecar = _sidecar(fs, root, partitions) if root == path else None
        stored = sidecar or {k: v for k, v in stored.items() if k not in _WHOLE_DATASET_COUNTS}
        if schema.positive is not None:       # its counts are of the labels as ingest read them
            stored = {k: v for k, v in stored.items() if k not in _WHOLE_DATASET_COUNTS}
        derived = {"layout": schema.layout, "label_column": schema.label,
                   **({} if schema.positive is None else {"label_positive": list(schema.positive)}),
                   "feature_names": names_to_json(schema.names), "n_features": schema.n_features,
                   "num_rows": offset, "num_partitions": len(partitions), "fingerprint": fingerprint,
                   "feature_dtype": _native_dtype(footers[0][1], schema)}
        ds = cls(str(url), fs, tuple(partitions), schema, {**stored, **derived}, fingerprint)
        if with_nulls is not None:        # found now, not hours into a job: the error its read raises, row named
            ds.read_partition(with_nulls)
        return ds

    @staticmethod
    def positive_values(positive: LabelValues) -> tuple[str, ...] | None:
        """``positive=`` as the schema holds it (:attr:`FeatureSchema.positive`)."""
        return LabelRule.create(positive).positive

    @property
    def n_features(self) -> int:
        """Number of features ``d``."""
        return self.schema.n_features

    @property
    def native_dtype(self) -> str:
        """``"float32"`` when every feature is stored in 32 bits or fewer, else ``"float64"``.

        Training buffers follow it by default: float32 files train in float32
        (half the bytes, no conversion); the model itself is always float64.
        """
        return self.metadata.get("feature_dtype", "float64")

    @property
    def feature_names(self) -> list[str] | NameRange:
        """Feature names, in column order of the matrices :meth:`read_partition` returns.

        A list, or for generated names (``x0 .. x{d-1}``; svmlight's ``x1 .. xd``) a
        :class:`~nsdist._names.NameRange`: a compact sequence of str; pass it on
        as it is (``list()`` of 2^24 names takes seconds and gigabytes).
        """
        names = self.schema.names
        return names if isinstance(names, NameRange) else list(names)

    @property
    def is_sparse(self) -> bool:
        """Whether partitions load as ``scipy.sparse.csr_matrix`` (the ``"sparse"`` layout)."""
        return self.schema.layout == "sparse"

    @property
    def label_column(self) -> str:
        """Name of the label column."""
        return self.schema.label

    @property
    def num_rows(self) -> int:
        """Total number of rows."""
        return sum(p.num_rows for p in self.partitions)

    def rows_bytes(self, dtype=np.float64) -> int:
        """What every row takes in memory as read in ``dtype``, from the footers alone: ``rows x features``
        floats, or for the sparse layout its non-zeros (values and int32 indices) and a row pointer each."""
        return sum(self.partition_bytes(i, dtype) for i in range(len(self.partitions)))

    def partition_bytes(self, i: int, dtype=np.float64) -> int:
        """What the rows of partition ``i`` take in memory as read in ``dtype`` (as :meth:`rows_bytes`)."""
        p, itemsize = self.partitions[i], np.dtype(dtype).itemsize
        if self.schema.layout == "sparse":
            return p.nnz * (itemsize + 4) + p.num_rows * 8
        return p.num_rows * self.n_features * itemsize

    def has_both_classes(self) -> bool | None:
        """Whether the footers' label statistics show a row of each class (None: they cannot tell).

        True when some partition's smallest label is a negative one (``-1``, ``0``
        or False) and some partition's largest is ``1`` / True: with valid labels
        (which every read checks) both classes are present.  Reads nothing.
        """
        ranges = [p.label_range for p in self.partitions]
        if any(r is None for r in ranges):
            return None
        neg = any(r[0] < 1 for r in ranges)
        pos = any(r[1] >= 1 for r in ranges)
        return True if neg and pos else None

    def file_parts(self) -> list[FilePart]:
        """The partitions as :class:`FilePart`: what each reads of which file."""
        return [FilePart(p.path, p.row_groups, p.file_row, p.num_rows) for p in self.partitions]

    def partition_name(self, i: int) -> str:
        """How partition ``i`` is named in messages: ``"<file> (partition i)"``; for a part of a file
        (:data:`SPLIT_BYTES`) ``"<file> (partition i: row groups a-b, whose row 0 is the file's row r)"``."""
        info = self.partitions[i]
        if info.row_groups is None:
            return f"{display(self.fs, info.path)} (partition {i})"
        a, b = info.row_groups
        groups = f"row group {a}" if b == a + 1 else f"row groups {a}-{b - 1}"
        return f"{display(self.fs, info.path)} (partition {i}: {groups}, whose row 0 is the file's row {info.file_row})"

    def select(self, indices: Sequence[int], name: str) -> Dataset:
        """The dataset restricted to the partitions ``indices`` (in that order).

        Partitions are re-indexed and their row offsets recomputed; the
        fingerprint is that of the selection, and ``url`` gets ``#name`` so
        messages tell the selection from the whole (a train/holdout split, the
        new partitions of a retraining run).
        """
        parts, offset = [], 0
        for j, i in enumerate(indices):
            p = self.partitions[i]
            parts.append(dataclasses.replace(p, index=j, row_offset=offset))
            offset += p.num_rows
        if not parts:
            raise ValueError(f"{self.url}: selecting no partitions for {name!r}")
        fingerprint = meta.sha256_json({"schema": self.schema.describe(),
                                        "partitions": [p.fingerprint for p in parts]})
        return dataclasses.replace(self, url=f"{self.url}#{name}", partitions=tuple(parts),
                                   fingerprint=fingerprint,
                                   metadata={**self.metadata, "num_rows": offset, "num_partitions": len(parts),
                                             "fingerprint": fingerprint})

    def read_partition(self, i: int, *, dtype=np.float64,
                       sparse: bool | None = None) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
        """Read partition ``i`` as ``(X, y)``.

        Parameters
        ----------
        i : int
        dtype : float32 or float64
        sparse : bool, optional
            ``None`` (default): the layout's own form (:attr:`is_sparse`);
            ``True``: always a CSR matrix; ``False``: always a dense ndarray.

        Returns
        -------
        X : ndarray, shape (num_rows, n_features), C order, ``dtype``; or, for the
            sparse layout, a ``scipy.sparse.csr_matrix`` of that shape and dtype
            (int32 indices, sorted within rows). Both support ``X @ W``,
            ``X.T @ D``, ``X[rows]``, ``X.shape`` and ``X.dtype``.
        y : ndarray of int8 in {-1, +1}

        Raises
        ------
        ValueError
            Naming the file, the partition and (0-based) row within it, and the
            feature: null/NaN/inf features, invalid labels; or naming the file: a
            schema differing from the first partition, an unreadable/corrupt file,
            a row count changed since :meth:`open`.
        """
        if self.schema.layout == "columns" and not sparse:
            values, y = self.read_columns(i, dtype=dtype)
            return np.ascontiguousarray(gather_block(values, dtype)), y
        table, where = self._read(i, self.schema.read_columns)
        return self.schema.features(table, dtype, where, sparse=sparse), self.schema.labels(table, where)

    def read_columns(self, i: int, *, dtype=np.float64,
                     features: Sequence[int] | None = None) -> tuple[list[np.ndarray], np.ndarray]:
        """Partition ``i`` of the ``"columns"`` layout as its feature columns and its labels, unassembled.

        ``values[j]`` is the ``j``-th of ``features`` (default: every feature, in
        order) for every row, a 1-D ndarray of ``dtype`` (a read-only view of
        Arrow's buffer when the file stores it so, else a cast copy); ``y`` as
        :meth:`read_partition`'s.  Only those columns and the label are read.
        With every feature: the same checks of every row and the same errors, in
        the same order, as :meth:`read_partition`, without making the ``(n, d)``
        matrix (:mod:`nsdist.data.dense`); with some, the same checks of those.

        Raises
        ------
        ValueError
            For another layout, and as :meth:`read_partition`.
        """
        if self.schema.layout != "columns":
            raise ValueError(f"{self.url}: read_columns reads the 'columns' layout, not {self.schema.layout!r}")
        chosen = range(self.n_features) if features is None else features
        columns = [self.schema.columns[j][0] for j in chosen]
        table, where = self._read(i, columns + [self.schema.label])
        values = checked_columns(table, columns, [self.schema.names[j] for j in chosen], dtype,
                                 where)                   # the features' errors first, as read_partition
        return values, self.schema.labels(table, where)

    def read_block(self, i: int, *, dtype=np.float64, order: Callable[[np.ndarray], np.ndarray] | None = None,
                   scaling: Scaling | None = None) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
        """Partition ``i`` as a training block: its rows ``order(y)``, in that order, scaled.

        What the partition chain loads (``docs/engine.md`` §Partition chain): the same
        values as ``X, y = read_partition(i, dtype=dtype)``, ``rows = order(y)``,
        ``X, y = X[rows], y[rows]`` and then ``scaling.apply(X)``, to the bit, and
        with the same checks of every row (kept or not) and the same errors.  A
        dense block is Fortran-ordered, the layout the epoch kernel steps on
        (:func:`~nsdist.solvers.kernel.aligned`); for the ``"columns"`` layout it is
        made in one gathering copy instead of four passes (:mod:`nsdist.data.dense`).
        """
        if self.schema.layout != "columns":
            table, where = self._read(i, self.schema.read_columns)
            X = self.schema.features(table, dtype, where)
            y = self.schema.labels(table, where)
            rows = None if order is None else order(y)
            if rows is not None:
                y = y[rows]
            if not issparse(X):
                return take_rows(X, rows, **({} if scaling is None else scaling.shift_scale())), y
            if rows is not None:
                X = X[rows]
            return (X if scaling is None else scaling.apply(X)), y
        values, y = self.read_columns(i, dtype=dtype)
        rows = None
        if order is not None:
            rows = order(y)
            y = y[rows]
        return gather_block(values, dtype, rows=rows, **({} if scaling is None else scaling.shift_scale())), y

    def read_labels(self, i: int) -> np.ndarray:
        """Only the labels of partition ``i`` (``int8`` in {-1, +1})."""
        table, where = self._read(i, [self.schema.label])
        return self.schema.labels(table, where)

    def read_label_values(self, i: int) -> np.ndarray:
        """The label column of partition ``i`` as stored -- class names, codes -- unchecked: the values
        ``positive=`` is matched against, for rows handed to a call that labels them itself
        (``nsdist.train(monitor=...)``)."""
        table, _ = self._read(i, [self.schema.label])
        return table.column(self.schema.label).to_numpy(zero_copy_only=False)

    def read_table(self, i: int, columns: Sequence[str]) -> pa.Table:
        """Columns of partition ``i`` as stored, unchecked but for the file's schema and row count (ingest's
        categorical columns)."""
        return self._read(i, list(columns))[0]

    def _read(self, i: int, columns: list[str]) -> tuple[pa.Table, str]:
        info, where = self.partitions[i], self.partition_name(i)
        try:
            with _parquet_file(self.fs, info.path) as parquet:
                self.schema.check(parquet.schema_arrow, where)
                missing = [c for c in columns if c not in parquet.schema_arrow.names]
                if missing:
                    raise ValueError(f"{where}: no column {missing[0]!r} (its columns: "
                                     f"{', '.join(parquet.schema_arrow.names)})")
                table = (parquet.read(columns=columns) if info.row_groups is None
                         else parquet.read_row_groups(range(*info.row_groups), columns=columns))
        except StorageAccessError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{where}: cannot read the Parquet file ({exc})") from exc
        if table.num_rows != info.num_rows:
            raise ValueError(f"{where}: has {table.num_rows} rows but had {info.num_rows} when the "
                             "dataset was opened; open it again")
        return table, where


def feature_candidates(url: str | os.PathLike, *, label_column: str = "label",
                       storage_options: Mapping[str, Any] | None = None) -> tuple[pa.Schema, list[str]]:
    """The first data file's Arrow schema, and its columns that may be features
    (:func:`~nsdist.data.columns.candidate_columns`)."""
    fs, path = resolve(url, storage_options)
    schema = _read_footer(fs, _discover(fs, path, str(url))[1][0][0])[1]
    return schema, candidate_columns(schema, label_column)


def _native_dtype(arrow: pa.Schema, schema: FeatureSchema) -> str:
    """The float width that holds every feature column of ``arrow`` exactly (see ``Dataset.native_dtype``)."""
    narrow = (pa.float16(), pa.float32(), pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.bool_())
    names = [name for name, _ in schema.columns if schema.layout != "sparse" or name == "values"]
    for name in names:
        t = arrow.field(name).type
        while pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
            t = t.value_type
        if t not in narrow:
            return "float64"
    return "float32"


class FilePart(NamedTuple):
    """What one task reads of a Parquet file: the whole file (``row_groups`` None) or a run of its row groups
    ``range(*row_groups)``, whose first row is the file's row ``file_row``, holding ``num_rows`` rows (a
    partition of :meth:`Dataset.open`'s, without its checks); ``columns``: the file's column names (``()``:
    not read)."""

    path: str
    row_groups: tuple[int, int] | None
    file_row: int
    num_rows: int
    columns: tuple[str, ...] = ()


def file_parts(url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None
               ) -> tuple[AbstractFileSystem, str, list[FilePart]]:
    """``(fs, root, parts)``: the Parquet data files at ``url`` (a file, a directory or a glob) as
    :meth:`Dataset.open` finds them -- files ending ``.parquet`` / ``.parq`` / ``.pq`` whose path below
    ``root`` has no part starting with ``_`` or ``.``, sorted -- split as it splits them (:func:`_runs`), from
    their footers alone: no column is checked (``root`` is ``""`` for a single file).  Empty files are left
    out.  Raises :class:`~nsdist.data.fs.DataNotFoundError` if there are no files, ``ValueError`` if every
    one is empty (as :meth:`Dataset.open`)."""
    fs, path = resolve(url, storage_options)
    root, files = _discover(fs, path, str(url))
    footers = _read_footers(fs, [p for p, _ in files])
    parts = [FilePart(p, groups, first, rows, tuple(schema.names))
             for (p, _), (_, schema, metadata) in zip(files, footers) for groups, first, rows in _runs(metadata)]
    if not parts:
        raise ValueError(f"{url}: every Parquet file is empty ({len(files)} files)")
    return fs, root, parts


def _is_data_file(path: str, root: str) -> bool:
    parts = posixpath.relpath(path, root).split("/")
    return path.lower().endswith(_SUFFIXES) and not any(p.startswith(("_", ".")) for p in parts)


def _discover(fs: AbstractFileSystem, path: str, url: str) -> tuple[str, list[tuple[str, int]]]:
    """``(root, [(path, size), ...])`` of the data files at ``path``, sorted by path.

    ``root`` is the directory paths are made relative to (``""`` for a single file,
    which is taken whatever its name).
    """
    root, infos = path, None
    try:
        with access(fs, path, "list"):
            magic = [path.index(c) for c in "*?[" if c in path]
            if magic:
                root, infos = path[:min(magic)].rsplit("/", 1)[0], {}
                for p, info in fs.glob(path, detail=True).items():
                    infos.update(fs.find(p, detail=True) if info["type"] == "directory" else {p: info})
            elif fs.isdir(path):
                infos = fs.find(path, detail=True)
                if incomplete(fs, path):
                    raise DataNotFoundError(
                        f"{url!r} is incomplete: an ingest into it has not finished, or died ({INCOMPLETE} "
                        "is there, _nsdist.json is not); wait for it, or ingest again with --overwrite")
            elif fs.isfile(path):
                return "", [(path, int(fs.info(path).get("size") or 0))]
    except (StorageAccessError, DataNotFoundError):
        raise
    except OSError as exc:
        raise ValueError(f"cannot list {url!r}: {exc}") from exc
    if infos is None:
        raise DataNotFoundError(f"no such file or directory: {url!r}")
    files = sorted((p, int(info.get("size") or 0)) for p, info in infos.items()
                   if info.get("type", "file") == "file" and _is_data_file(p, root))
    if not files:
        raise DataNotFoundError(f"no Parquet files ({', '.join('*' + s for s in _SUFFIXES)}) "
                                f"found at {url!r}")
    return root, files


@contextlib.contextmanager
def _parquet_file(fs: AbstractFileSystem, path: str) -> Iterator[pq.ParquetFile]:
    """``path`` open as a ``pq.ParquetFile``: a local file through Arrow's own memory-mapped reader
    (no Python file object between the decoder threads and the bytes: about 1.5-2x faster than
    through fsspec), any other through its fsspec file system."""
    if isinstance(fs, LocalFileSystem):
        with pq.ParquetFile(path, memory_map=True) as parquet:
            yield parquet
    else:
        with access(fs, path, "read"), fs.open(path, "rb") as f:
            yield pq.ParquetFile(f)


def _row_group_runs(metadata: pq.FileMetaData) -> list[tuple[int, int]] | None:
    """The runs ``(start, stop)`` of consecutive row groups a file is read as (None: the whole file, one partition).

    A file of more than :data:`SPLIT_BYTES` (the row groups' uncompressed bytes, by the footer) in
    more than one row group: each run takes row groups while they add up to at most
    :data:`SPLIT_BYTES` (a larger group is a run of its own); a run without rows is left out.
    """
    sizes = [metadata.row_group(r).total_byte_size for r in range(metadata.num_row_groups)]
    if len(sizes) < 2 or sum(sizes) <= SPLIT_BYTES:
        return None
    runs, start, held = [], 0, 0
    for r, size in enumerate(sizes):
        if r > start and held + size > SPLIT_BYTES:
            runs.append((start, r))
            start, held = r, 0
        held += size
    runs.append((start, len(sizes)))
    return [run for run in runs if sum(metadata.row_group(r).num_rows for r in range(*run))] or None


def _runs(metadata: pq.FileMetaData) -> list[tuple[tuple[int, int] | None, int, int]]:
    """``(row groups, first row, rows)`` of each partition of a file (:func:`_row_group_runs`; row groups None:
    the whole file), those with rows."""
    runs = _row_group_runs(metadata)
    out, first = [], 0
    for groups in runs or [None]:
        rows = metadata.num_rows if groups is None else sum(metadata.row_group(r).num_rows for r in range(*groups))
        if rows:
            out.append((groups, first, rows))
        first += rows
    return out


def _value_count(metadata: pq.FileMetaData, column: str, groups: tuple[int, int]) -> int:
    """The values a (list) column stores in the row groups ``range(*groups)``, from the footer: a sparse
    partition's non-zeros."""
    k = next(k for k in range(metadata.num_columns) if metadata.schema.column(k).path.split(".")[0] == column)
    return int(sum(metadata.row_group(r).column(k).num_values for r in range(*groups)))


def _holds_nulls(metadata: pq.FileMetaData, columns: Sequence[str], groups: tuple[int, int]) -> bool:
    """Whether the footer's statistics count a missing (null) value of ``columns`` in the row groups
    ``range(*groups)``.  Only columns of one value a row are counted: a list column's count (the sparse
    layout's) adds up its empty lists, which are rows without non-zeros, not nulls.  A column chunk without
    a null count counts none.  Either way the read still checks every row (docs/engine.md §Dataset format)."""
    wanted = set(columns)
    for k in range(metadata.num_columns):
        column = metadata.schema.column(k)
        if column.path not in wanted or column.max_repetition_level:
            continue
        for r in range(*groups):
            st = metadata.row_group(r).column(k).statistics
            if st is not None and st.has_null_count and st.null_count:
                return True
    return False


def _label_range(metadata: pq.FileMetaData, label: str, kinds: tuple = (bool, int, float), *,
                 groups: tuple[int, int] | None = None) -> tuple | None:
    """``(min, max)`` of the label column over the statistics of the row groups ``range(*groups)`` (default:
    every one), values of the types ``kinds`` (None if any lacks them)."""
    try:
        k = next(k for k in range(metadata.num_columns) if metadata.schema.column(k).path == label)
        lo = hi = None
        for r in range(*(groups or (0, metadata.num_row_groups))):
            st = metadata.row_group(r).column(k).statistics
            if st is None or not st.has_min_max:
                return None
            a, b = st.min, st.max
            if not all(isinstance(v, kinds) for v in (a, b)):
                return None
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        return None if lo is None else (lo, hi)
    except (StopIteration, pa.ArrowException, TypeError, ValueError):
        return None


#: footers of an object store's files read at once by :meth:`Dataset.open` (a request each: 500 files on S3
#: at 10-50 ms a request took 5-25 s one after another)
FOOTER_THREADS = 16


def _read_footers(fs: AbstractFileSystem, paths: list[str]) -> list[tuple[int, pa.Schema, pq.FileMetaData]]:
    """:func:`_read_footer` of every path, in order: a local file system's one after another, any other's
    :data:`FOOTER_THREADS` at a time (the error of the first bad file in path order is the one raised)."""
    if isinstance(fs, LocalFileSystem) or len(paths) < 2:
        return [_read_footer(fs, p) for p in paths]
    with ThreadPoolExecutor(min(FOOTER_THREADS, len(paths)), thread_name_prefix="nsdist-footer") as pool:
        return list(pool.map(lambda p: _read_footer(fs, p), paths))


def _read_footer(fs: AbstractFileSystem, path: str) -> tuple[int, pa.Schema, pq.FileMetaData]:
    """Row count, Arrow schema and the Parquet metadata of a footer."""
    try:
        with access(fs, path, "read"), fs.open(path, "rb") as f:
            parquet = pq.ParquetFile(f)
            return parquet.metadata.num_rows, parquet.schema_arrow, parquet.metadata
    except StorageAccessError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{display(fs, path)}: not a readable Parquet file ({exc}){_text_hint(fs, path)}") from exc


#: the first bytes of the compressed files ingest reads (gzip, bzip2, xz, zstd)
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")


def _text_hint(fs: AbstractFileSystem, path: str) -> str:
    """What to do with a file that is not Parquet but looks like the text (or compressed text) ingest reads."""
    try:
        with fs.open(path, "rb") as f:
            head = f.read(4096)
        text = head.startswith(_COMPRESSED) or (
            bool(head) and b"\0" not in head
            and bool(codecs.getincrementaldecoder("utf-8")().decode(head, final=False)))   # raises on binary
    except (OSError, UnicodeDecodeError):
        return ""
    return ("; it looks like a text file (CSV, svmlight): make a Parquet dataset of it first with "
            "nsdist.ingest(src, dst, ...) or `nsdist ingest`") if text else ""


def _schema_metadata(schema: pa.Schema, where: str) -> dict:
    """The ``nsdist`` JSON stored in a file's schema metadata, or ``{}``."""
    raw = (schema.metadata or {}).get(meta.META_KEY)
    return {} if raw is None else meta.loads(raw, where)


def _sidecar(fs: AbstractFileSystem, root: str, partitions: list[PartitionInfo]) -> dict | None:
    """The sidecar metadata if present and listing exactly these files (else ``None``; a warning
    if it lists other files)."""
    path = posixpath.join(root, meta.SIDECAR)
    if not fs.isfile(path):
        return None
    with fs.open(path, "rb") as f:
        stored = meta.loads(f.read(), display(fs, path))
    listed = [(p.get("path"), p.get("num_rows")) for p in stored.get("partitions", [])]
    rows: dict[str, int] = {}                   # per file: a file read as several partitions is listed once
    for p in partitions:
        relative = posixpath.relpath(p.path, root)
        rows[relative] = rows.get(relative, 0) + p.num_rows
    found = list(rows.items())
    if listed != found:
        warnings.warn(f"{display(fs, path)} does not match the Parquet files present; ignored",
                      UserWarning, stacklevel=3)
        return None
    return stored
