"""On-the-fly standardisation of the features.

The defaults of the solvers are chosen on standardised features
(``bench/defaults.py``).  Data on disk stays raw: one distributed pass
computes each feature's mean and standard deviation (per-partition moments,
combined in file order with Chan et al.'s pairwise update, so the result does
not depend on the cluster), every loaded block is scaled, and the trained
``(w, b)`` is folded back into a model on the raw features.

Dense datasets are centred and scaled, ``(x - mean) / scale``::

    w . (x - mean) / scale + b  =  (w / scale) . x  +  (b - (w / scale) . mean)

Sparse datasets (the ``"sparse"`` layout, partitions loaded as CSR) are
**scaled only, never centred**: centring would turn every zero into
``-mean / scale`` and densify the rows.  This is scikit-learn's
``StandardScaler(with_mean=False)``: each feature is divided by its standard
deviation (computed about its mean, zeros included), so a block stays a CSR
matrix with the same non-zeros, and ``mean`` is recorded as all zeros::

    w . (x / scale) + b  =  (w / scale) . x  +  b

A feature that is constant (or never present) has ``scale = 1``.  Pass
``center=`` to :func:`feature_scaling` to choose otherwise (``center=True`` on
sparse data is refused).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from distributed import Client

from ..data import Dataset

__all__ = ["Scaling", "feature_scaling", "scaling_from_rows", "row_moments"]


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
        if sp.issparse(X):
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

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "scale": self.scale.tolist(), "centered": self.centered}


def _moments(dataset: Dataset, partition: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Row count, mean and sum of squared deviations of every feature in one partition."""
    X, _ = dataset.read_partition(partition, dtype=np.float64)
    return row_moments(X)


def scaling_from_rows(X, *, center: bool | None = None) -> Scaling:
    """The :class:`Scaling` of in-memory rows (a sample, or a whole training set).

    ``center`` defaults to not ``sparse``, as :func:`feature_scaling`.  Any
    scaling is a valid preconditioner -- the trained model is folded back
    exactly -- so moments taken on a sample of the rows serve as well as the
    whole dataset's.
    """
    center = not sp.issparse(X) if center is None else center
    n, mean, m2 = row_moments(X.astype(np.float64))
    std = np.sqrt(m2 / max(n, 1))
    scale = np.where(std > 0, std, 1.0)
    return Scaling(mean=mean if center else np.zeros_like(mean), scale=scale, centered=center)


def row_moments(X) -> tuple[int, np.ndarray, np.ndarray]:
    """Row count, mean and sum of squared deviations of every column of ``X`` (dense or sparse)."""
    n = X.shape[0]
    if sp.issparse(X):
        X = X.tocsr()                           # CSR: ``indices`` are the columns
        d = X.shape[1]
        col = X.indices
        mean = np.bincount(col, weights=X.data, minlength=d) / max(n, 1)
        stored = np.bincount(col, minlength=d)
        # stored entries about the mean, plus the implicit zeros, each (0 - mean)^2
        m2 = np.bincount(col, weights=(X.data - mean[col]) ** 2, minlength=d)
        m2 += (n - stored) * mean ** 2
        return n, mean, m2
    mean = X.mean(axis=0)
    return n, mean, ((X - mean) ** 2).sum(axis=0)


def feature_scaling(client: Client, dataset: Dataset, *, center: bool | None = None) -> Scaling:
    """Standard deviation (and mean) of every feature over the whole dataset (one pass).

    Parameters
    ----------
    client : distributed.Client
    dataset : Dataset
    center : bool, optional
        Centre the features. Default: yes for dense layouts, no (scale-only,
        ``StandardScaler(with_mean=False)``) for the sparse layout.

    Raises
    ------
    ValueError
        ``center=True`` on a sparse dataset.
    """
    if center is None:
        center = not dataset.is_sparse
    if center and dataset.is_sparse:
        raise ValueError(f"dataset {dataset.url!r} is sparse: centring would densify it; "
                         "standardisation of sparse data scales only (center=False)")
    parts = client.gather(client.map(_moments, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), pure=False))
    n, mean, m2 = parts[0]
    for n_b, mean_b, m2_b in parts[1:]:
        delta = mean_b - mean
        total = n + n_b
        mean = mean + delta * (n_b / total)
        m2 = m2 + m2_b + delta ** 2 * (n * n_b / total)
        n = total
    std = np.sqrt(m2 / n)
    scale = np.where(std > 0, std, 1.0)
    if not center:
        return Scaling(mean=np.zeros_like(mean), scale=scale, centered=False)
    return Scaling(mean=mean, scale=scale)
