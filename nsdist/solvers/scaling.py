"""Feature scaling as a preconditioner: :class:`Scaling`, and its moments from rows in memory.

Data stays raw: rows are scaled as they are loaded, and a model trained on
scaled rows is folded back exactly into a model on the raw features::

    w . (x - mean) / scale + b  =  (w / scale) . x  +  (b - (w / scale) . mean)

Dense rows are centred and scaled; sparse rows (CSR) are **scaled only, never
centred** -- centring would turn every zero into ``-mean / scale`` and densify
them (scikit-learn's ``StandardScaler(with_mean=False)``), and ``mean`` is then
all zeros::

    w . (x / scale) + b  =  (w / scale) . x  +  b

and only **shrunk** (:func:`shrinking_scaling`): a sparse column is divided by
its root mean square ``sqrt(E[x^2])`` where that exceeds 1, and left as stored
elsewhere.  An indicator of frequency ``p`` has ``sqrt(p) <= 1``, a column of
L2-normalised text at most 1: those keep their values (dividing a rare term by
its small deviation inflates it, and the step size ``c / E||x||^2`` with it),
while a raw amount or count beside one-hot columns no longer sets
``E||x||^2`` for every feature.

A feature that is constant (or never present) has ``scale = 1``.  Any scaling
is a valid preconditioner -- the fold is exact -- so the moments may come from
a sample of the rows (the validation rows, or a sample of whole partitions;
``docs/engine.md``) as well as from all of them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._sparse import issparse
from .kernel import stack_rows

__all__ = ["Scaling", "scaling_from_rows", "scaling_from_moments", "shrinking_scaling", "merge_moments",
           "row_moments", "moments_of", "chunked_moments"]


@dataclass(frozen=True)
class Scaling:
    """Per-feature ``mean`` and ``scale`` (the standard deviation; 1 for a constant feature).

    ``centered=False`` (scale-only, for sparse data): ``mean`` is all zeros and
    :meth:`apply` only divides.
    """

    mean: np.ndarray
    scale: np.ndarray
    centered: bool = True

    def apply(self, X):
        """``(X - mean) / scale`` (or ``X / scale`` when not centred) in ``X``'s dtype, in place.

        ``X``: a dense ndarray, or a scipy CSR/CSC matrix (its stored values are
        divided; its sparsity pattern is kept). Returns ``X``.

        Raises
        ------
        ValueError
            For a sparse ``X`` with a centring scaling (it would densify).
        """
        if issparse(X):
            if self.centered and np.any(self.mean):
                raise ValueError("cannot centre a sparse matrix (it would densify); use a scale-only "
                                 "Scaling (feature_scaling(..., center=False))")
            X = X if X.format in ("csr", "csc") else X.tocsr()
            inverse = (1.0 / self.scale).astype(X.dtype, copy=False)
            if X.format == "csr":
                X.data *= inverse[X.indices]
            else:
                X.data *= np.repeat(inverse, np.diff(X.indptr))
            return X
        if self.centered:
            X -= self.mean.astype(X.dtype, copy=False)
        X /= self.scale.astype(X.dtype, copy=False)
        return X

    def shift_scale(self) -> dict[str, np.ndarray | None]:
        """:meth:`apply` as the keywords of :func:`~nsdist.solvers.blocks.take_rows` and
        :func:`~nsdist.solvers.blocks.gather_block`, which scale while they gather (the same numbers)."""
        return {"shift": self.mean if self.centered else None, "scale": self.scale}

    def fold(self, w: np.ndarray, b: float) -> tuple[np.ndarray, float]:
        """The raw-feature model equal to ``(w, b)`` on scaled features.

        ``w`` of shape ``(d,)``, or ``(d, M)`` with ``b`` of shape ``(M,)`` for a
        population of models.
        """
        w = np.asarray(w)
        scale = self.scale if w.ndim == 1 else self.scale[:, None]
        coef = w / scale
        if w.ndim == 1:
            return coef, float(b - coef @ self.mean)
        return coef, np.asarray(b, dtype=np.float64) - self.mean @ coef

    def unfold(self, coef: np.ndarray, intercept: float) -> tuple[np.ndarray, float]:
        """The model on scaled features equal to the raw-feature ``(coef, intercept)`` (:meth:`fold`'s
        inverse): where a warm start begins."""
        return coef * self.scale, intercept + float(coef @ self.mean)

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "scale": self.scale.tolist(), "centered": self.centered}


def scaling_from_rows(X, *, center: bool | None = None) -> Scaling:
    """The :class:`Scaling` of in-memory rows (a sample, or a whole training set).

    ``center`` defaults to not ``sparse``.  Any scaling is a valid
    preconditioner -- the trained model is folded back exactly.
    """
    center = not issparse(X) if center is None else center
    return scaling_from_moments(*moments_of(X), center=center)


def scaling_from_moments(n: int, mean: np.ndarray, m2: np.ndarray, *, center: bool) -> Scaling:
    """The :class:`Scaling` of ``n`` rows with column means ``mean`` and squared deviations ``m2``.

    A column whose standard deviation is 0, or below ``1e-10 |mean|`` (a
    constant column whose moments carry rounding), keeps ``scale = 1``:
    dividing by a rounding error would blow its values up.
    """
    std = np.sqrt(m2 / max(n, 1))
    constant = (std == 0) | (std <= 1e-10 * np.abs(mean))
    scale = np.where(constant, 1.0, std)
    return Scaling(mean=mean if center else np.zeros_like(mean), scale=scale, centered=center)


def shrinking_scaling(n: int, mean: np.ndarray, m2: np.ndarray) -> Scaling | None:
    """Sparse rows' scaling (module doc): each column whose root mean square ``sqrt(mean^2 + m2 / n)`` exceeds
    1 is divided by it, never centred; None when no column exceeds 1 (the rows train as stored)."""
    rms = np.sqrt(mean ** 2 + m2 / max(n, 1))
    if not (rms > 1.0).any():
        return None
    return Scaling(mean=np.zeros_like(mean), scale=np.where(rms > 1.0, rms, 1.0), centered=False)


def merge_moments(parts: list[tuple[int, np.ndarray, np.ndarray]]) -> tuple[int, np.ndarray, np.ndarray]:
    """The moments of the union of row blocks, combined in order (Chan, Golub & LeVeque's update)."""
    n, mean, m2 = parts[0]
    for n_b, mean_b, m2_b in parts[1:]:
        total = n + n_b
        if n_b == 0:
            continue
        delta = mean_b - mean
        mean = mean + delta * (n_b / total)
        m2 = m2 + m2_b + delta ** 2 * (n * n_b / total)
        n = total
    return n, mean, m2


def row_moments(X) -> tuple[int, np.ndarray, np.ndarray]:
    """Row count, mean and sum of squared deviations of every column of ``X`` (dense or sparse)."""
    n = X.shape[0]
    if issparse(X):
        X = X.tocsr()                           # CSR: ``indices`` are the columns
        d = X.shape[1]
        col = X.indices
        mean = np.bincount(col, weights=X.data, minlength=d) / max(n, 1)
        stored = np.bincount(col, minlength=d)
        # stored entries about the mean, plus the implicit zeros, each (0 - mean)^2
        # (float64 even when nothing is stored: numpy's bincount of no values is int64, weights or not)
        m2 = np.bincount(col, weights=(X.data - mean[col]) ** 2, minlength=d).astype(np.float64)
        m2 += (n - stored) * mean ** 2
        return n, mean, m2
    mean = X.mean(axis=0)
    return n, mean, ((X - mean) ** 2).sum(axis=0)


def moments_of(X, chunk: int = 4096, rows: np.ndarray | None = None) -> tuple[int, np.ndarray, np.ndarray]:
    """``row_moments(X.astype(np.float64))``, to the bit, without a float64 copy of ``X``.

    ``X`` may be a list of blocks: the moments of their concatenation (not made).
    ``rows``: the moments of ``X[rows]`` (one block; not made either).
    C-ordered dense blocks of ``d >= 2`` columns go through :func:`chunked_moments`
    (a fresh worker pays for every page it touches: on 250k x 100 float32 rows the
    copies cost 1.2 s there, this 0.05 s); sparse, 1-column or non-C-ordered input
    goes to ``row_moments`` itself.
    """
    blocks = list(X) if isinstance(X, (list, tuple)) else [X]
    if rows is not None and len(blocks) != 1:
        raise ValueError("rows select from one block")
    n = sum(b.shape[0] for b in blocks) if rows is None else rows.shape[0]
    if any(hasattr(b, "tocsr") or b.ndim != 2 or b.shape[1] < 2 or not b.flags.c_contiguous for b in blocks) \
            or n == 0:
        whole = stack_rows(blocks, order="C") if rows is None else blocks[0][rows]
        return row_moments(whole.astype(np.float64))

    def rows_of(B: np.ndarray):
        def fill(a: int, out: np.ndarray) -> None:
            out[:] = B[a:a + out.shape[0]] if rows is None else B[rows[a:a + out.shape[0]]]
        return (B.shape[0] if rows is None else n), fill

    return chunked_moments([rows_of(B) for B in blocks], n, blocks[0].shape[1], chunk)


def chunked_moments(pieces: list, n: int, d: int, chunk: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``(n, mean, m2)`` of the ``n`` rows that ``pieces`` give, one after the other, in float64.

    ``pieces``: ``(rows, fill)`` pairs; ``fill(a, out)`` writes the piece's rows
    ``a .. a + len(out)`` into ``out`` (C-ordered ``(m, d)`` float64).  The two
    column sums (of ``x`` and of ``(x - mean)^2``) are taken ``chunk`` rows at a
    time into one small buffer whose first row carries the running sum, so the
    additions happen in the order of numpy's reduction over axis 0 of the whole
    C-ordered float64 array (row after row: with ``d >= 2`` columns the
    reduction's inner loop runs along the columns) -- ``row_moments``'s numbers.
    """
    buf = np.empty((min(chunk, n) + 1, d), dtype=np.float64)

    def column_sums(transform) -> np.ndarray:
        total = None
        for size, fill in pieces:       # the pieces one after the other: the rows of their concatenation
            for a in range(0, size, chunk):
                m = min(chunk, size - a)
                rows = buf[:m] if total is None else buf[1:m + 1]
                fill(a, rows)
                transform(rows)
                if total is None:
                    total = np.add.reduce(rows, axis=0)
                else:
                    buf[0] = total
                    total = np.add.reduce(buf[:m + 1], axis=0)
        return total

    mean = column_sums(lambda rows: None) / n

    def deviation(rows: np.ndarray) -> None:
        rows -= mean
        np.square(rows, out=rows)

    return n, mean, column_sums(deviation)
