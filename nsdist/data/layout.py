"""How ingest lays features out on disk: one column per feature, or CSR-style lists.

``"columns"`` (dense)
    one float column per feature, named as the source names them, plus
    ``label`` (int8).
``"sparse"``
    two list columns per row: ``indices`` (``list<int32>``, 0-based, strictly
    increasing within the row; ``list<int64>`` only if ``d >= 2^31``) and
    ``values`` (``list<float64>`` or ``list<float32>``, same length), plus
    ``label`` (int8).  The dimension is ``n_features`` in the ``nsdist`` schema
    metadata (``layout: "sparse"``); feature names are
    ``metadata["feature_names"]``: svmlight's ``x1 .. xd`` as the compact range
    ``{"prefix": "x", "start": 1, "n": d}``, CSV names as a list.

``layout="auto"`` picks the sparse layout when its in-memory size (about
``nnz * (4 + itemsize) + 8 n`` bytes) is at most half the dense one
(``n * d * itemsize``): LIBSVM's w8a (300 features, 4% non-zero) and a9a (123,
11%) go sparse; nearly dense data (IJCNN1: 13 of 22 features set, where dense
arithmetic is faster than CSR) and dense CSV files stay dense; a CSV with
one-hot categorical columns of many levels goes sparse.  Partitions and row groups of the sparse
layout are sized by their non-zeros (:func:`partition_rows`,
:func:`parquet_options`), not by ``rows * d``.

Files are written with zstd (:func:`parquet_options`).  A list column of the
sparse layout is dictionary-encoded only when its distinct values fit one
dictionary page (:data:`DICTIONARY_PAGE_BYTES`, pyarrow's limit).  Binary
values and a few hundred feature indices (LIBSVM's w8a, a9a) then decode from a
tiny dictionary; a column with more distinct values would make pyarrow write
dictionary pages and then fall back to plain ones, the worst of both: on a
generated 2^20-feature text partition (62,500 rows, 6.25 M non-zeros, 625 k
distinct indices) that made the file larger (43.1 against 39.4 MB) and its read
slower (128 against 95 ms, one thread).  A dense column keeps Parquet's
dictionary, which one-hot and integer-valued features compress into almost
nothing, when its first :data:`DENSE_SAMPLE` values repeat (at most half of them
distinct); measured features of many values are written plain: a partition of
80,000 rows x 100 float64 columns of float32 values (a Gaussian sample) was
written in 0.48 s instead of 1.65 s, 35.1 MB instead of 53.4 MB, and read back
in 212 instead of 246 ms on one thread.

Reading (:func:`sparse_matrix`): the list columns of a table become a
``scipy.sparse.csr_matrix`` with the row pointers built from the lists' offsets
and the data and indices taken from Arrow's buffers (no copy for a table of one
chunk whose types are the matrix's; one gathering copy otherwise), every row
checked with whole-array operations (docs/engine.md §Dataset format).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nsdist._sparse import issparse, scipy_sparse

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["LAYOUTS", "check_layout", "choose_layout", "arrow_schema", "record_batch",
           "partition_rows", "parquet_options", "ROW_GROUP_NNZ", "DICTIONARY_PAGE_BYTES", "DENSE_SAMPLE",
           "sparse_matrix"]

LAYOUTS = ("auto", "dense", "sparse")
ROW_GROUP_NNZ = 2**20          # non-zeros per Parquet row group of the sparse layout
#: a list column is dictionary-encoded when its distinct values fit one dictionary page of this size
#: (pyarrow's ``dictionary_pagesize_limit``; beyond it the writer falls back to plain pages)
DICTIONARY_PAGE_BYTES = 1 << 20
#: a dense column is dictionary-encoded when at most half of its first this many values are distinct
DENSE_SAMPLE = 4096
_LABEL = "label"


def check_layout(layout: str) -> str:
    """``"auto"``, ``"dense"`` (also ``"columns"``) or ``"sparse"``."""
    if layout == "columns":
        return "dense"
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def _bytes(n_rows: int, nnz: int, n_features: int, itemsize: int) -> tuple[int, int]:
    """In-memory bytes of the features: ``(dense, sparse)``."""
    index = 4 if n_features < 2**31 else 8
    return n_rows * n_features * itemsize, nnz * (index + itemsize) + 8 * n_rows


def choose_layout(layout: str, n_rows: int, nnz: int, n_features: int, itemsize: int) -> str:
    """The layout written: ``"columns"`` or ``"sparse"`` (``"auto"``: sparse if at most half the bytes)."""
    layout = check_layout(layout)
    if layout == "auto":
        dense, sparse = _bytes(n_rows, nnz, n_features, itemsize)
        return "sparse" if 2 * sparse <= dense else "columns"
    return "columns" if layout == "dense" else "sparse"


def arrow_schema(layout: str, feature_names: Sequence[str], dtype: np.dtype) -> pa.Schema:
    """The Arrow schema of a partition (without the metadata)."""
    float_type = pa.from_numpy_dtype(np.dtype(dtype))
    label = pa.field(_LABEL, pa.int8(), nullable=False)
    if layout == "sparse":
        index_type = pa.int32() if len(feature_names) < 2**31 else pa.int64()
        return pa.schema([pa.field("indices", pa.list_(index_type), nullable=False),
                          pa.field("values", pa.list_(float_type), nullable=False), label])
    if _LABEL in feature_names:
        raise ValueError(f"a feature is named {_LABEL!r}, the name of the output label column; "
                         "rename it in the input")
    return pa.schema([pa.field(name, float_type, nullable=False) for name in feature_names] + [label])


def record_batch(X, y: np.ndarray, schema: pa.Schema) -> pa.RecordBatch:
    """``(X, y)`` as a batch of ``schema`` (from :func:`arrow_schema`); ``X`` dense or sparse."""
    float_type = schema.field(schema.names[-2]).type
    if schema.names[0] == "indices" and schema.names[1] == "values":
        X = scipy_sparse().csr_matrix(X) if not issparse(X) else X.tocsr()
        if not X.has_sorted_indices:
            X = X.sorted_indices()
        if X.nnz >= 2**31:
            raise ValueError(f"a chunk of {X.nnz} non-zeros is too large for one batch; lower chunk_rows")
        index_type = schema.field("indices").type.value_type
        offsets = pa.array(X.indptr.astype(np.int32))
        indices = pa.ListArray.from_arrays(offsets, pa.array(X.indices, type=index_type))
        values = pa.ListArray.from_arrays(offsets, pa.array(X.data.astype(float_type.value_type.to_pandas_dtype(), copy=False)))
        return pa.RecordBatch.from_arrays([indices, values, pa.array(y, pa.int8())], schema=schema)
    if issparse(X):
        X = X.toarray(order="F")
    X = np.asarray(X, dtype=float_type.to_pandas_dtype())
    return pa.RecordBatch.from_arrays([pa.array(X[:, j]) for j in range(X.shape[1])]
                                      + [pa.array(y, pa.int8())], schema=schema)


def partition_rows(layout: str, n_features: int, nnz_per_row: float, itemsize: int,
                   target_bytes: int, row_range: tuple[int, int]) -> int:
    """Rows per partition so that a partition holds about ``target_bytes`` of features in memory."""
    if layout == "sparse":
        index = 4 if n_features < 2**31 else 8
        per_row = nnz_per_row * (index + itemsize) + 8 + 1
    else:
        per_row = itemsize * (n_features + 1)
    low, high = row_range
    return int(np.clip(target_bytes // max(per_row, 1), low, high))


def parquet_options(table: pa.Table, layout: str) -> dict:
    """``pyarrow.parquet.write_table`` options of a partition (module doc): zstd; a dictionary for the label
    and, for the dense layout, each column whose first :data:`DENSE_SAMPLE` values repeat; for the sparse
    layout, row groups of about :data:`ROW_GROUP_NNZ` non-zeros and a dictionary for each list column whose
    distinct values fit :data:`DICTIONARY_PAGE_BYTES`."""
    import pyarrow.compute as pc      # not at import: a fresh worker reading sparse rows never needs it (35 ms)

    if layout != "sparse":
        return {"compression": "zstd", "use_dictionary": [
            c for c in table.column_names if c == _LABEL
            or 2 * pc.count_distinct(table.column(c).slice(0, DENSE_SAMPLE)).as_py() <= DENSE_SAMPLE]}

    flat = {c: pc.list_flatten(table.column(c)) for c in ("indices", "values")}
    n_rows, nnz = table.num_rows, len(flat["indices"])
    rows = int(max(1, min(n_rows, ROW_GROUP_NNZ * n_rows // max(nnz, 1)))) if n_rows else None
    return {"compression": "zstd", "row_group_size": rows,
            "use_dictionary": [_LABEL] + [f"{c}.list.element" for c, values in flat.items()     # the leaf columns
                                          if _fits_dictionary(values)]}


def _fits_dictionary(values: pa.ChunkedArray) -> bool:
    """A list column's values (flattened) fit one dictionary page.  The first ``2 * limit`` values decide
    when they already hold more than ``limit`` distinct ones (hashing millions of distinct floats takes
    seconds); otherwise all are counted."""
    import pyarrow.compute as pc

    limit = DICTIONARY_PAGE_BYTES // values.type.byte_width
    if pc.count_distinct(values.slice(0, 2 * limit)).as_py() > limit:
        return False
    return pc.count_distinct(values).as_py() <= limit


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _numpy(arr: pa.Array) -> np.ndarray:
    """A primitive Arrow array without nulls as a numpy array: a writable view of its buffer when
    Arrow allows it (freshly decoded Parquet pages), else a copy."""
    dtype = np.dtype(arr.type.to_pandas_dtype())
    buf = arr.buffers()[1]
    if buf is not None and buf.is_mutable and pa.types.is_primitive(arr.type) and not pa.types.is_boolean(arr.type):
        return np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    return np.array(arr.to_numpy(zero_copy_only=False), dtype=dtype)


def _list_parts(column: pa.ChunkedArray, name: str, where: str, n: int):
    """``(indptr, flats)`` of one list column: int64 row pointers from 0 (length ``n + 1``) and the
    flat child values of each chunk (Arrow arrays, sliced to the chunk's rows)."""
    indptr = np.empty(n + 1, dtype=np.int64)
    indptr[0] = 0
    flats, row = [], 0
    for chunk in column.chunks:
        m = len(chunk)
        if m == 0:
            continue
        if chunk.null_count:
            raise ValueError(f"{where}: row {row + _first(chunk.is_null().to_numpy(zero_copy_only=False))}: "
                             f"{name!r} is missing (null)")
        offsets = _numpy(chunk.offsets).astype(np.int64, copy=False)
        start = int(offsets[0])
        np.add(offsets[1:], indptr[row] - start, out=indptr[row + 1:row + m + 1])
        flats.append(chunk.values.slice(start, int(offsets[-1]) - start))
        row += m
    return indptr, flats


def sparse_matrix(table: pa.Table, n_features: int, dtype=np.float64, where: str = "",
                  names: Sequence[str] | None = None) -> sp.csr_matrix:
    """The ``(n, n_features)`` CSR matrix of a table's ``indices``/``values`` list columns, every row checked.

    ``indptr`` comes from the list offsets, ``data`` and ``indices`` from the
    child arrays (views of Arrow's buffers for a one-chunk table whose types are
    the matrix's: ``dtype`` values, int32 indices while ``max(d, nnz) < 2^31``).
    The checks: both lists present and of equal length in every row, no missing
    entry, every index in ``[0, d)`` and strictly increasing within its row (no
    duplicates), every value finite.  When all is well the non-zeros are read
    twice: each index compared with the one before it (the rows' first entries
    exempt), then the values' sum of squares (BLAS's dot); the range is read off
    the rows' first and last indices.  Indices of another integer type are
    range-checked before the cast (which could wrap them) and copied.

    Raises
    ------
    ValueError
        ``"<where>: row r: ..."`` naming the first offending row (0-based) and
        what is wrong with it; a non-finite value also names its feature
        (``names[j]``, or ``x{j}``).  An index outside ``[0, d)`` is reported
        before unsorted or duplicate indices anywhere in the table.
    """
    dtype = np.dtype(dtype)
    d, n = int(n_features), table.num_rows
    indptr, flat_idx = _list_parts(table.column("indices"), "indices", where, n)
    val_indptr, flat_val = _list_parts(table.column("values"), "values", where, n)
    if not np.array_equal(indptr, val_indptr):
        lengths, val_lengths = np.diff(indptr), np.diff(val_indptr)
        row = _first(lengths != val_lengths)
        raise ValueError(f"{where}: row {row}: 'indices' has {lengths[row]} entries but 'values' "
                         f"{val_lengths[row]}; they must have the same length")
    nnz = int(indptr[-1])

    def row_of(t: int) -> int:
        return int(np.searchsorted(indptr, t, side="right") - 1)

    itype = np.int32 if max(d, nnz) < 2**31 else np.int64
    cols = _gather(flat_idx, "indices", itype, nnz, where, row_of, d)
    values = _gather(flat_val, "values", dtype, nnz, where, row_of, None)
    bad = _out_of_order(cols, indptr)
    if bad is not None or not _ends_in_range(cols, indptr, d):
        _check_range(cols, d, 0, where, row_of)        # ordered rows with in-range ends are in range
        t = _first(bad) + 1
        what = "duplicate feature index" if cols[t] == cols[t - 1] else "unsorted feature indices:"
        raise ValueError(f"{where}: row {row_of(t)}: {what} {cols[t]} after {cols[t - 1]}; "
                         "indices must be strictly increasing within a row")
    # one pass in the values' own width (BLAS's dot): the sum of squares of finite values is finite unless
    # it overflows (then the exact check decides)
    if nnz and not np.isfinite(np.dot(values, values)):
        finite = np.isfinite(values)
        if not finite.all():
            t = _first(~finite)
            j = int(cols[t])
            name = names[j] if names is not None else f"x{j}"
            raise ValueError(f"{where}: row {row_of(t)}: feature {name!r} = {values[t]} is not finite")
    X = scipy_sparse().csr_matrix((values, cols, indptr.astype(itype, copy=False)), shape=(n, d), copy=False)
    X.has_sorted_indices = X.has_canonical_format = True       # checked above: scipy need not scan again
    return X


def _out_of_order(cols: np.ndarray, indptr: np.ndarray) -> np.ndarray | None:
    """``None`` if every row's indices are strictly increasing; else the mask of the entries ``t + 1``
    not above entry ``t`` in the same row."""
    nnz = cols.shape[0]
    if nnz < 2:
        return None
    bad = cols[1:] <= cols[:-1]
    starts = indptr[1:-1]
    bad[starts[(starts > 0) & (starts < nnz)] - 1] = False      # a row's first entry may be anything
    return bad if bad.any() else None


def _ends_in_range(cols: np.ndarray, indptr: np.ndarray, d: int) -> bool:
    """Whether every non-empty row's first index is ``>= 0`` and its last ``< d``: all of a row's
    indices when they increase."""
    filled = np.flatnonzero(indptr[1:] > indptr[:-1])
    return filled.shape[0] == 0 or bool(cols[indptr[filled]].min() >= 0 and cols[indptr[filled + 1] - 1].max() < d)


def _check_range(a: np.ndarray, d: int, offset: int, where: str, row_of) -> None:
    """Raise for the first index of ``a`` (entries ``offset ..`` of the table) outside ``[0, d)``."""
    if a.size and (a.min() < 0 or a.max() >= d):
        t = _first((a < 0) | (a >= d))
        raise ValueError(f"{where}: row {row_of(offset + t)}: feature index {a[t]} is outside [0, {d})")


def _gather(flats: list, name: str, dtype: np.dtype, nnz: int, where: str, row_of, d: int | None) -> np.ndarray:
    """The chunks' flat child values as one array of ``dtype`` (a view when there is one chunk of that
    type); ``d``: indices, checked to lie in ``[0, d)`` before a cast to another type (which could wrap
    them; without a cast :func:`sparse_matrix` checks the range)."""
    parts, offset = [], 0
    for flat in flats:
        if flat.null_count:
            t = offset + _first(flat.is_null().to_numpy(zero_copy_only=False))
            raise ValueError(f"{where}: row {row_of(t)}: {name!r} holds a missing (null) entry")
        if pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type):
            a = _numpy(flat)
        else:                                   # decimals, booleans: Arrow's cast
            import pyarrow.compute as pc

            a = np.asarray(pc.cast(flat, pa.from_numpy_dtype(dtype), safe=False).to_numpy(zero_copy_only=False))
        if d is not None and a.dtype != dtype:
            _check_range(a, d, offset, where, row_of)
        parts.append(a)
        offset += a.size
    if len(parts) == 1 and parts[0].dtype == dtype and parts[0].flags.writeable:
        return parts[0]
    out = np.empty(nnz, dtype=dtype)
    offset = 0
    for a in parts:
        out[offset:offset + a.size] = a                 # numpy's cast (float32 -> float64 exact)
        offset += a.size
    return out
