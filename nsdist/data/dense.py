"""The fast read of the ``"columns"`` layout: checked columns to a Fortran-ordered block in one copy.

A partition of one numeric column per feature is what users have (Parquet
written by pandas, Spark, pyarrow).  :func:`checked_columns` and
:func:`~nsdist.solvers.blocks.gather_block` turn its Arrow table into the ``(m, d)`` matrix the
solvers take, in Fortran order (each feature's ``m`` values contiguous: the
layout of every dense block the epoch kernel steps on,
:func:`nsdist.solvers.kernel.aligned`), optionally keeping only the rows
``rows`` in that order (the chain's stream order) and shifting and scaling
every feature (the standardisation), with as few full passes over the bytes
as the layout allows:

1. every column is checked where it lies: nulls from Arrow's null counts,
   non-finite values by a ``min`` / ``max`` reduction of the (zero-copy)
   column (NaN propagates, ``inf`` is its own extreme) -- the exact cell is
   looked for only when a check fails;
2. each column is gathered (``np.take`` of ``rows``) into row ``j`` of a
   ``(d, m)`` buffer in the target dtype -- reads from a column that fits in
   cache, contiguous writes -- and shifted and scaled there while it is in
   cache;
3. the buffer's transpose is the Fortran-ordered ``(m, d)`` block: no second
   copy.  (A C-ordered block, :meth:`~nsdist.data.Dataset.read_partition`'s,
   costs one transposing copy more.)

The arithmetic is the same element by element as reading, gathering and
then ``(X - mean) / scale`` on the whole block (the same casts, then one
subtraction and one division in the block's dtype), so a model trained on
either is the same to the bit.  Errors are the ones
:meth:`~nsdist.data.columns.FeatureSchema.features` raises, for the same
first offending cell (nulls first, by column; then the first non-finite
value in row-major order).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["checked_columns", "numpy_of", "column_numpy", "missing_feature"]


def numpy_of(arr: pa.Array) -> np.ndarray:
    """``arr.to_numpy(zero_copy_only=False)``, read from the buffer for a null-free integer or float array.

    The same values (a read-only view, as Arrow's own zero-copy conversion), without
    Arrow's ``to_numpy``, which imports pandas: a quarter of a second in a fresh
    worker's first read, on the chain's path.
    """
    t = arr.type
    if arr.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        dtype = np.dtype(t.to_pandas_dtype())
        buf = arr.buffers()[1]
        if len(arr) == 0 or buf is None:
            return np.empty(0, dtype=dtype)
        out = np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
        out.flags.writeable = False
        return out
    return arr.to_numpy(zero_copy_only=False)


def column_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """``column.to_numpy()`` of a chunked column through :func:`numpy_of` (zero-copy for one chunk)."""
    chunks = column.chunks
    if len(chunks) == 1:
        return numpy_of(chunks[0])
    if not chunks:
        return column.to_numpy()
    return np.concatenate([numpy_of(c) for c in chunks])


def _as_numpy(column: pa.ChunkedArray, target: pa.DataType) -> np.ndarray:
    """One column as a 1-D ndarray of ``target`` (zero-copy when it is stored so in one chunk)."""
    chunks = column.chunks
    if len(chunks) == 1:
        chunk = chunks[0]
        if chunk.type != target:
            chunk = chunk.cast(target, safe=False)
        return numpy_of(chunk)
    if not chunks:
        return np.empty(0, dtype=target.to_pandas_dtype())
    return np.concatenate([numpy_of(c if c.type == target else c.cast(target, safe=False)) for c in chunks])


def _check_nulls(table: pa.Table, names: Sequence[str], where: str, first_row: int = 0) -> None:
    """Raise the first null of the feature columns (by column, then row), naming row (``first_row`` the
    table's first) and feature."""
    for name in names:
        column = table.column(name)
        if column.null_count:
            offset = 0
            for chunk in column.chunks:
                if chunk.null_count:
                    row = offset + int(np.argmax(chunk.is_null().to_numpy(zero_copy_only=False)))
                    raise missing_feature(where, first_row + row, name)
                offset += len(chunk)


def missing_feature(where: str, row: int, name: str) -> ValueError:
    """The error of a null feature: where it is, and what to do (nsdist does not impute)."""
    return ValueError(f"{where}: row {row}: feature {name!r} is missing (null); nsdist does not impute missing "
                      f"values: fill them where the data is made (pandas: df[{name!r}].fillna(...)), or leave the "
                      "column out (feature_columns)")


def _first_non_finite(values: list[np.ndarray], bad_columns: list[int], names: Sequence[str], where: str,
                      first_row: int = 0):
    """The ``ValueError`` of the first non-finite cell in row-major order among ``bad_columns`` (rows counted
    from ``first_row``)."""
    best = None
    for j in bad_columns:
        row = int(np.argmax(~np.isfinite(values[j])))
        if best is None or row < best[0]:       # columns ascend: a tie keeps the leftmost
            best = (row, j)
    row, j = best
    return ValueError(f"{where}: row {first_row + row}: feature {names[j]!r} = {values[j][row]} is not finite")


def checked_columns(table: pa.Table, columns: Sequence[str], names: Sequence[str], dtype,
                    where: str, first_row: int = 0) -> list[np.ndarray]:
    """The feature columns as 1-D ndarrays of ``dtype``, every row checked (step 1 of the module docstring);
    ``first_row``: the number of the table's first row in messages (a batch of a larger file).

    Raises
    ------
    ValueError
        ``"<where>: row r: feature 'name' is missing (null)"`` or ``... = v is not finite``.
    """
    target = pa.from_numpy_dtype(np.dtype(dtype))
    _check_nulls(table, columns, where, first_row)
    values = [_as_numpy(table.column(name), target) for name in columns]
    bad = [j for j, v in enumerate(values) if v.size and not (np.isfinite(v.min()) and np.isfinite(v.max()))]
    if bad:
        raise _first_non_finite(values, bad, names, where, first_row)
    return values
