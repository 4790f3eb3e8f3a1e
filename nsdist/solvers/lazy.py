"""Lazy weight updates for CSR blocks: each epoch touches only the features of its buffer.

:func:`~nsdist.solvers.kernel.run_epochs` steps ``W`` (``d x M``, one column per
candidate) once per epoch buffer.  With dense rows (or a projection onto an L2
ball, which rescales every weight) the step is ``W <- W - step * X_e.T @ dS``
on the whole matrix and the averaged-iterate sum ``W_sum += W`` is too:
``O(d M)`` per epoch, whatever the buffer holds.  A buffer of ``s`` sparse rows
touches at most ``nnz(X_e)`` features (500 text rows of ~100 non-zeros: ~50 000
of 2^20), and every other weight stays as it is.  :class:`LazyWeights` does
``O(nnz(X_e) M)`` work per epoch:

* **Touched features without sorting.**  A scratch array ``slot`` of length
  ``d`` (allocated once per block, never cleared) maps a feature to its place in
  the epoch's touched list: ``slot[cols] = arange(nnz)``; the entries ``t`` with
  ``slot[cols[t]] == t`` are one per distinct feature (whichever write won),
  which gives the touched features ``T`` in ``O(nnz)``; then
  ``slot[T] = arange(|T|)`` and ``local = slot[cols]``.  No ``np.unique``.
* **Scores and gradient.**  ``S = X_e @ W`` reads only the weights at the
  buffer's entries (for float32 rows, a float32 copy of ``W`` kept up to date on
  the touched rows, as the dense update casts ``W`` each epoch).  The gradient
  takes only the rows with a non-zero ``dS`` (those
  :func:`~nsdist.losses.base.weight_gradient` uses; the rows with ``dS = 0`` it
  may include add zeros): their entries are gathered from the buffer's arrays
  and re-indexed to the ``|T|`` features they touch.  A CSR product sums each
  row, and each feature of the transposed product, in the stored order whatever
  the column numbering; ``np.add.at`` (one candidate) adds the entries in that
  order too; so the scores, the gradient and the iterate ``W`` are the dense
  update's **bit for bit**; an untouched weight has gradient 0 and the dense
  step leaves it as it is.  An epoch buffer is its slice of the block's row
  offsets over the block's own arrays (:func:`csr_rows`), and the scores run
  scipy's loop on it directly: no matrix is built per epoch (scipy's view took
  a sixth of a text buffer's epoch); a step of one candidate builds no matrix,
  one of several one small matrix, never scipy's row selection of the buffer.
* **The iterate sum, lazily.**  Over a block that starts at epoch ``e0`` with
  iterate ``W0`` and takes steps ``Delta_1 .. Delta_n`` (local epochs
  ``t = 1..n``), the iterates ``W_t = W0 + sum_{u<=t} Delta_u`` add up to
  ``sum_t W_t = n W_n + sum_t (1 - t) Delta_t``.  ``(1 - t) Delta_t`` is zero
  but on the touched rows, so each step adds it to ``W_sum[T]``, and at the
  block's end ``W_sum += n W_n``: one ``O(d M)`` pass per block, not per epoch,
  and no scratch array of ``W``'s size.  This equals the dense running sum to
  float rounding (a few ulps of ``W_sum``), not bit for bit.  It is a pure
  function of the block and the state handed in, so a run is bit-identical to
  itself and the engine to the estimator on the same blocks (the plan gives
  both the same blocks, ``docs/solvers.md`` §Determinism).

The kernel picks the lazy update for CSR blocks without a projection when a
buffer touches few of the ``d`` features (:func:`use_lazy`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..losses.base import used_rows
from .blocks import column_range, put_columns, take_columns

__all__ = ["LazyWeights", "CSRRows", "csr_rows", "use_lazy", "row_slice", "LAZY_FEATURES", "LAZY_FRACTION"]

#: below this many features the dense update is always used (its whole-matrix passes are cheap)
LAZY_FEATURES = 1 << 12
#: lazy when a buffer's non-zeros (the most an epoch touches) are at most this fraction of ``d`` (twice
#: that for a population).  Measured on text-like rows (Zipf frequencies): lazy over dense 1.3x at 0.5 d and
#: 1.2x at 0.95 d for one candidate (0.64x at 1.9 d), 2x at 1.9 d and 1.1x at 3.8 d for 20 candidates
LAZY_FRACTION = 1.0
#: rows of ``W`` scaled at a time when a block's iterate sum is completed (:meth:`LazyWeights.finish`)
FINISH_ROWS = 1 << 15


def use_lazy(X, n_candidates: int, buffer_size: int, radius: float | None) -> bool:
    """Whether :func:`~nsdist.solvers.kernel.run_epochs` updates ``W`` lazily for block ``X``.

    CSR rows, no projection (a projection rescales every weight), at least
    :data:`LAZY_FEATURES` features, and a buffer of the block's mean row density
    holding at most ``LAZY_FRACTION * d`` non-zeros (twice that for more than one
    candidate).  A pure function of the
    block's shape, non-zero count and ``buffer_size``.
    """
    if radius is not None or not hasattr(X, "tocsr") or n_candidates == 0:
        return False
    n, d = X.shape
    if d < LAZY_FEATURES or n == 0:
        return False
    per_buffer = X.nnz / n * min(buffer_size, n)
    return per_buffer <= LAZY_FRACTION * d * (1 if n_candidates == 1 else 2)


def row_slice(X, sl: slice):
    """``X[sl]`` for a step-1 slice of rows; for a CSR ``X`` a matrix sharing its data and indices (the
    dense update's buffers, and the lazy update's behind a 2PMB reservoir, which are stacked).

    scipy's ``X[a:b]`` and its constructor copy the rows' entries (an array
    under half of its base is copied, to free the base); an epoch buffer only
    reads them, so the view is made empty and given the slices of ``X``'s
    arrays: the same entries, bit for bit, for ``O(rows)`` instead of
    ``O(non-zeros)`` and no allocation of their size.
    """
    if getattr(X, "format", None) != "csr" or sl.step not in (None, 1):
        return X[sl]
    import scipy.sparse as sp

    a, b, _ = sl.indices(X.shape[0])
    b = max(a, b)
    lo, hi = int(X.indptr[a]), int(X.indptr[b])
    out = sp.csr_matrix((b - a, X.shape[1]), dtype=X.dtype)
    out.data, out.indices, out.indptr = X.data[lo:hi], X.indices[lo:hi], X.indptr[a:b + 1] - X.indptr[a]
    out.has_sorted_indices = X.has_sorted_indices
    return out


class CSRRows(NamedTuple):
    """Consecutive rows of a CSR block as the lazy update reads them: ``indptr`` (their ``n + 1`` offsets into
    ``indices`` and ``data``, which may be the whole block's arrays), ``indices``, ``data`` and ``shape``
    ``(n, d)``.  A buffer made this way costs two slices (:func:`csr_rows`); a scipy matrix's own arrays
    serve as well (offsets from 0)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype


def csr_rows(X, sl: slice) -> CSRRows:
    """Rows ``sl`` (a step-1 slice) of the CSR matrix ``X``: its ``indptr[a:b + 1]`` and its whole ``indices``
    and ``data``, nothing copied.  scipy builds a view (:func:`row_slice`) in about 80 microseconds, a
    sixth of a 500-row text buffer's epoch."""
    a, b, _ = sl.indices(X.shape[0])
    b = max(a, b)
    return CSRRows(X.indptr[a:b + 1], X.indices, X.data, (b - a, X.shape[1]))


class LazyWeights:
    """``W`` of the live candidates for CSR rows: each step touches only the buffer's features.

    The interface of the kernel's weights: :meth:`scores` (``X_e @ W``),
    :meth:`step` (``W -= X_e.T @ dS * step``, the sum of the iterates kept
    lazily) and :meth:`finish` (complete the block's iterate sum, write ``W`` and
    ``W_sum`` back into the state).  See the module docstring.
    """

    def __init__(self, st, cols: np.ndarray, radius: float | None) -> None:
        if radius is not None:
            raise ValueError("lazy updates cannot project (the projection rescales every weight)")
        self.st, self.cols, self.e0 = st, cols, st.epoch
        # the state is the kernel's own (row-major) copy: live columns side by side (every candidate alive, or
        # all but the full-batch ones, which come last) are updated where they are, through views; others are
        # copied out and back (two d x M copies each way: 1.2 s a block at d = 2^20 x 30, mostly fresh pages).
        # Row-major either way: a step reads and writes whole rows W[T] (a feature's M weights side by side)
        span = column_range(cols)
        self.in_place = span is not None
        self.W = st.W[:, span] if self.in_place else take_columns(st.W, cols)
        self.W_sum = st.W_sum[:, span] if self.in_place else take_columns(st.W_sum, cols)  # + sum (1 - t) Delta_t
        # one candidate: vectors (views), for numpy's one-dimensional indexing and scipy's matrix-vector loop
        self._w, self._w_sum = (self.W[:, 0], self.W_sum[:, 0]) if self.W.shape[1] == 1 else (self.W, self.W_sum)
        self.slot = np.empty(self.W.shape[0], dtype=np.int32)
        self._wc, self._wc_copy = None, False

    def _cast(self, dtype: np.dtype) -> np.ndarray:
        """``W`` in the rows' float width, C-ordered: ``W`` itself when it is both, else a copy kept up to
        date by :meth:`step` (scipy's ``X @ W`` takes a C-ordered ``W`` as it is but copies any other layout
        whole, ``O(d M)`` an epoch)."""
        if self._wc is None or self._wc.dtype != dtype:
            as_is = self._w.dtype == dtype and self._w.flags.c_contiguous
            self._wc, self._wc_copy = (self._w, False) if as_is else (np.array(self._w, dtype=dtype, order="C"), True)
        return self._wc

    rows = staticmethod(csr_rows)

    def scores(self, Xe: CSRRows) -> np.ndarray:
        """``X_e @ W``: the product the dense update computes (``W`` cast to the rows' width), reading
        only the weights at the buffer's entries -- by scipy's own loop (``csr_matvec``, or ``csr_matvecs``
        for several candidates: what ``X_e @ W`` runs, from scipy's private ``scipy.sparse._sparsetools``;
        tests/test_sparse_training.py holds the scores to ``X[a:b] @ W``), called on the buffer's offsets."""
        from scipy.sparse import _sparsetools     # (scipy only once rows are sparse)

        W = self._cast(Xe.dtype)
        n, d = Xe.shape
        S = np.zeros((n, W.shape[1]) if W.ndim == 2 else n, dtype=W.dtype)
        if W.ndim == 1:
            _sparsetools.csr_matvec(n, d, Xe.indptr, Xe.indices, Xe.data, W, S)
        else:
            _sparsetools.csr_matvecs(n, d, W.shape[1], Xe.indptr, Xe.indices, Xe.data, W.ravel(), S.ravel())
        S = np.asarray(S, dtype=np.float64)
        return S.reshape(-1, 1) if S.ndim == 1 else S

    def _touched(self, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(T, local)``: the distinct features of ``cols`` and each entry's place in ``T``, in ``O(len(cols))``."""
        slot = self.slot
        order = np.arange(cols.shape[0], dtype=np.int32)
        slot[cols] = order
        touched = cols[slot[cols] == order]               # one entry per distinct feature
        slot[touched] = order[:touched.shape[0]]
        return touched, slot[cols]

    def step(self, Xe, dS: np.ndarray, step: np.ndarray) -> None:
        """``W -= (X_e.T @ dS) * step`` on the features of the rows with a non-zero ``dS``; ``W_sum[T]``
        gets ``(1 - t) Delta_t``.

        The rows' entries are gathered from the buffer's arrays (their row pointers from
        ``dS``'s non-zero rows, no scipy row selection) and re-indexed to the ``|T|``
        features they touch.  The gradient is each feature's sum of its entries times
        their rows' ``dS``, added in row order in the rows' width, as scipy's ``X.T @ dS``
        adds them: for one candidate by ``np.add.at`` (one entry after the other, and
        no matrix built), for several by scipy's product on the ``rows x |T|`` matrix.
        """
        one = self._w.ndim == 1
        nz = used_rows(dS[:, 0] if one else dS)
        if nz.shape[0] == 0:
            return
        starts = Xe.indptr[nz]
        lengths = Xe.indptr[nz + 1] - starts
        ends = np.cumsum(lengths)
        entries = np.arange(ends[-1]) + np.repeat(starts - (ends - lengths), lengths)   # the rows' entries, in order
        touched, local = self._touched(Xe.indices[entries])
        if one:
            g = np.zeros(touched.shape[0], dtype=Xe.dtype)
            np.add.at(g, local, Xe.data[entries] * np.repeat(dS[nz, 0].astype(Xe.dtype), lengths))
            delta = g.astype(np.float64) * -step[0]
        else:
            import scipy.sparse as sp

            Xs = sp.csr_matrix((Xe.data[entries], local, np.concatenate(([0], ends))),
                               shape=(nz.shape[0], touched.shape[0]), copy=False)
            delta = np.asarray(Xs.T @ dS[nz].astype(Xe.dtype)).astype(np.float64) * -step
        w = self._w[touched] + delta
        self._w[touched] = w
        self._w_sum[touched] += (1 - (self.st.epoch - self.e0)) * delta
        if self._wc_copy:
            self._wc[touched] = w                         # cast to the rows' width as astype does

    def finish(self) -> None:
        """``W_sum += n W_n`` (``sum_t W_t = n W_n + sum_t (1 - t) Delta_t``) in slices of
        :data:`FINISH_ROWS` rows, without a temporary of ``W``'s size; ``W``, ``W_sum`` into the state."""
        n = self.st.epoch - self.e0
        if n:
            scaled = np.empty((min(FINISH_ROWS, self.W.shape[0]), self.W.shape[1]))
            for a in range(0, self.W.shape[0], FINISH_ROWS):
                part = np.multiply(self.W[a:a + FINISH_ROWS], float(n), out=scaled[:self.W.shape[0] - a])
                self.W_sum[a:a + FINISH_ROWS] += part
        if not self.in_place:
            put_columns(self.st.W, self.cols, self.W)
            put_columns(self.st.W_sum, self.cols, self.W_sum)
