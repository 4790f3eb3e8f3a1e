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
:func:`row_group_rows`), not by ``rows * d``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

__all__ = ["LAYOUTS", "check_layout", "choose_layout", "arrow_schema", "record_batch",
           "partition_rows", "row_group_rows", "ROW_GROUP_NNZ"]

LAYOUTS = ("auto", "dense", "sparse")
ROW_GROUP_NNZ = 2**20          # non-zeros per Parquet row group of the sparse layout
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
        X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
        if not X.has_sorted_indices:
            X = X.sorted_indices()
        if X.nnz >= 2**31:
            raise ValueError(f"a chunk of {X.nnz} non-zeros is too large for one batch; lower chunk_rows")
        index_type = schema.field("indices").type.value_type
        offsets = pa.array(X.indptr.astype(np.int32))
        indices = pa.ListArray.from_arrays(offsets, pa.array(X.indices, type=index_type))
        values = pa.ListArray.from_arrays(offsets, pa.array(X.data.astype(float_type.value_type.to_pandas_dtype(), copy=False)))
        return pa.RecordBatch.from_arrays([indices, values, pa.array(y, pa.int8())], schema=schema)
    if sp.issparse(X):
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


def row_group_rows(layout: str, n_rows: int, nnz: int) -> int | None:
    """Parquet ``row_group_size`` for a partition: about :data:`ROW_GROUP_NNZ` non-zeros per
    group for the sparse layout; ``None`` (pyarrow's default) for the dense one."""
    if layout != "sparse" or n_rows == 0:
        return None
    return int(max(1, min(n_rows, ROW_GROUP_NNZ * n_rows // max(nnz, 1))))
