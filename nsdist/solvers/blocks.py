"""Dense row blocks in the epoch kernel's layout: Fortran order, gathered in one copy.

Every dense block :func:`~nsdist.solvers.kernel.run_epochs` steps on is
Fortran-ordered (each feature's values contiguous; :func:`~nsdist.solvers.kernel.aligned`
says why).  :func:`gather_block` builds such a block from 1-D columns -- the
Dask engine's read of a partition (:mod:`nsdist.data.dense`), optionally
keeping the rows of the stream order and standardising on the way -- and
:func:`take_rows` from a matrix already in memory (the in-memory solvers'
``X[rows]``; a fit that gathers every pass does so into one :class:`PassBuffer`),
so both drivers hand the kernel the same layout and get the same model to the bit.
:func:`take_columns` and :func:`put_columns` move the live candidates' columns of
a weight matrix out of it and back in row-major order.
"""
from __future__ import annotations

import numpy as np

__all__ = ["gather_block", "take_rows", "column_range", "take_columns", "put_columns", "PassBuffer", "TAKE_BYTES",
           "LONG_ROW", "COLUMN_ROWS"]

#: :func:`take_rows` gathers a C-ordered matrix this many bytes of rows at a time (at least 256 rows): a chunk
#: stays in cache while it is written out column by column (1M x 100 float32 rows in stream order: about the
#: time of the C-ordered ``X[rows]``; column by column from a C-ordered matrix: 5x that)
TAKE_BYTES = 1 << 18
#: :func:`take_rows` shifts and scales rows of at least this many bytes (512 float64 columns) in its buffer:
#: about where that began to gain (float64 and float32 rows of 64 to 1617 columns, 2026-11-28)
LONG_ROW = 1 << 12
#: :func:`take_columns` and :func:`put_columns` copy this many rows at a time
COLUMN_ROWS = 1 << 12


def gather_block(values: list[np.ndarray], dtype, *, rows: np.ndarray | None = None,
                 shift: np.ndarray | None = None, scale: np.ndarray | None = None,
                 out: np.ndarray | None = None) -> np.ndarray:
    """The ``(m, d)`` Fortran-ordered block of the columns ``values`` (steps 2 and 3 of :mod:`nsdist.data.dense`).

    ``rows``: the rows kept, in this order (default: all); ``(x - shift) / scale``
    in ``dtype`` (``shift`` None: only divided; both None: as read).  The block
    is the transpose of a C-ordered ``(d, m)`` array: ``X[a:b]`` of it is a view
    that BLAS multiplies as it is.  ``out``: a Fortran-ordered ``(m, d)`` array
    of ``dtype`` to write the block into (:class:`PassBuffer`), returned.
    """
    dtype = np.dtype(dtype)
    n = values[0].shape[0] if values else 0
    if rows is not None:
        rows = np.asarray(rows, dtype=np.intp)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"rows outside [0, {n})")
    m = n if rows is None else rows.shape[0]
    shift = None if shift is None else np.asarray(shift).astype(dtype, copy=False)
    scale = None if scale is None else np.asarray(scale).astype(dtype, copy=False)
    block = np.empty((len(values), m), dtype=dtype) if out is None else _checked_out(out, (m, len(values)), dtype).T
    for j, v in enumerate(values):
        row = block[j]
        if rows is None:
            row[:] = v
        else:
            np.take(v, rows, out=row, mode="clip")      # checked above; "clip" skips a second check
        if shift is not None:               # while the column is in cache: the same two IEEE operations,
            row -= shift[j]                 # element by element, as on the whole block
        if scale is not None:
            row /= scale[j]
    return block.T


def take_rows(X: np.ndarray, rows: np.ndarray | None = None, *, shift: np.ndarray | None = None,
              scale: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """``X[rows]`` (default: every row) as a new Fortran-ordered ``(m, d)`` block, in one copy.

    A Fortran-ordered ``X`` is gathered column by column (:func:`gather_block`);
    any other is gathered :data:`TAKE_BYTES` of rows at a time into a small
    C-ordered buffer (rows read whole) that is written out column by column
    while it is in cache.  The values are ``X[rows]``'s, copied; with ``shift``
    and ``scale``, ``(x - shift) / scale`` in ``X``'s dtype (as :func:`gather_block`:
    the same two IEEE operations, element by element, as on the gathered block).
    Rows of at least :data:`LONG_ROW` bytes are shifted and scaled in the buffer,
    along its rows while they are in cache (hiva's 1617 float64 columns: 25% off
    the gather and scaling); shorter rows make short inner loops, and are
    scaled once gathered, a column at a time.  ``out``: a Fortran-ordered
    ``(m, d)`` array of ``X``'s dtype to gather into (:class:`PassBuffer`), returned.
    """
    X = np.asarray(X)
    n, d = X.shape
    shift = None if shift is None else np.asarray(shift).astype(X.dtype, copy=False)
    scale = None if scale is None else np.asarray(scale).astype(X.dtype, copy=False)
    if X.flags.f_contiguous:
        return gather_block([X[:, j] for j in range(d)], X.dtype, rows=rows, shift=shift, scale=scale, out=out)
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.intp)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise IndexError(f"rows outside [0, {n})")
    m = rows.shape[0]
    out = np.empty((m, d), dtype=X.dtype, order="F") if out is None else _checked_out(out, (m, d), X.dtype)
    chunk = max(256, TAKE_BYTES // max(1, d * X.dtype.itemsize))
    buf = np.empty((min(chunk, m), d), dtype=X.dtype)
    in_buffer = d * X.dtype.itemsize >= LONG_ROW
    for a in range(0, m, chunk):
        part = buf[:min(chunk, m - a)]
        np.take(X, rows[a:a + part.shape[0]], axis=0, out=part, mode="clip")   # checked above
        if in_buffer:
            _shift_scale(part, shift, scale)
        out[a:a + part.shape[0]] = part
    if not in_buffer:
        _shift_scale(out, shift, scale)
    return out


def _checked_out(out: np.ndarray, shape: tuple[int, int], dtype) -> np.ndarray:
    """``out``, if it is a Fortran-ordered array of ``shape`` and ``dtype`` (else ValueError)."""
    if out.shape != shape or out.dtype != np.dtype(dtype) or not out.flags.f_contiguous:
        raise ValueError(f"out must be a Fortran-ordered {shape} array of {np.dtype(dtype)}, "
                         f"got {out.shape} {out.dtype} (F-contiguous: {out.flags.f_contiguous})")
    return out


class PassBuffer:
    """One reusable block of memory for the rows an in-memory fit gathers every pass.

    An in-memory fit gathers its training rows anew every pass, in the pass's order
    (:func:`take_rows`).  A fresh block of tens of megabytes is mapped from the
    system, and its first writes fault every page in again: at 55,000 x 118 float64
    rows, 25 ms a gather against 15 ms into memory already touched.  :meth:`take` gathers
    into one flat array, grown when a block needs more, viewed as the ``(m, d)``
    Fortran-ordered block -- the same values, so the same model to the bit.

    A block it returns is valid until its next :meth:`take`: the fits that share one
    (the fold fits of one process) use each block before the next is gathered.
    """

    def __init__(self) -> None:
        self._flat: np.ndarray | None = None

    def __reduce__(self):
        return PassBuffer, ()          # its contents are scratch: a copy (pickled, sent) starts empty

    def take(self, X: np.ndarray, rows: np.ndarray, **scaling) -> np.ndarray:
        """:func:`take_rows` ``(X, rows, **scaling)`` into this buffer."""
        m, d = rows.shape[0], X.shape[1]
        dtype = np.asarray(X).dtype
        if self._flat is None or self._flat.dtype != dtype or self._flat.size < m * d:
            self._flat = None                          # freed before its successor is allocated
            self._flat = np.empty(m * d, dtype=dtype)
        return take_rows(X, rows, out=self._flat[:m * d].reshape((m, d), order="F"), **scaling)


def _shift_scale(A: np.ndarray, shift: np.ndarray | None, scale: np.ndarray | None) -> None:
    """``A = (A - shift) / scale`` in place, each a per-column vector or None (skipped)."""
    if shift is not None:
        A -= shift
    if scale is not None:
        A /= scale


def column_range(cols: np.ndarray) -> slice | None:
    """``slice(lo, hi)`` when ``cols`` is ``lo, lo + 1, ..., hi - 1`` (the columns side by side), else None."""
    if cols.shape[0] == 0:
        return None
    lo, n = int(cols[0]), cols.shape[0]
    return slice(lo, lo + n) if np.array_equal(cols, np.arange(lo, lo + n)) else None


def take_columns(A: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``A[:, cols]`` as a new C-ordered array: a slice's copy for columns side by side (:func:`column_range`;
    the live candidates usually are), else :data:`COLUMN_ROWS` rows at a time (numpy's ``A[:, cols]``
    strides over the whole of ``A`` once per column: 2 to 4x slower at ``d = 2^20``; the slice's copy is
    10x faster still: 44 against 470-590 ms for 30 of 31 columns at ``d = 2^20``)."""
    span = column_range(cols)
    if span is not None:
        return A[:, span].copy()
    out = np.empty((A.shape[0], cols.shape[0]), dtype=A.dtype)
    for a in range(0, A.shape[0], COLUMN_ROWS):
        np.take(A[a:a + COLUMN_ROWS], cols, axis=1, out=out[a:a + COLUMN_ROWS])
    return out


def put_columns(A: np.ndarray, cols: np.ndarray, B: np.ndarray) -> None:
    """``A[:, cols] = B`` (as :func:`take_columns`: through a slice for columns side by side)."""
    span = column_range(cols)
    if span is not None:
        A[:, span] = B
        return
    for a in range(0, A.shape[0], COLUMN_ROWS):
        A[a:a + COLUMN_ROWS, cols] = B[a:a + COLUMN_ROWS]
