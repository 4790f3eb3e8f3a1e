"""On-the-fly standardisation of the features (zero mean, unit variance).

The defaults of the solvers are chosen on standardised features
(``bench/defaults.py``).  Data on disk stays raw: one distributed pass
computes each feature's mean and standard deviation (per-partition moments,
combined in file order with Chan et al.'s pairwise update, so the result does
not depend on the cluster), every loaded block is scaled by
``(x - mean) / scale``, and the trained ``(w, b)`` is folded back into a model
on the raw features::

    w . (x - mean) / scale + b  =  (w / scale) . x  +  (b - (w / scale) . mean)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from distributed import Client

from ..data import Dataset

__all__ = ["Scaling", "feature_scaling"]


@dataclass(frozen=True)
class Scaling:
    """Per-feature ``mean`` and ``scale`` (the standard deviation; 1 for a constant feature)."""

    mean: np.ndarray
    scale: np.ndarray

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``(X - mean) / scale`` in ``X``'s dtype, in place."""
        X -= self.mean.astype(X.dtype, copy=False)
        X /= self.scale.astype(X.dtype, copy=False)
        return X

    def fold(self, w: np.ndarray, b: float) -> tuple[np.ndarray, float]:
        """The raw-feature model equal to ``(w, b)`` on scaled features."""
        coef = w / self.scale
        return coef, float(b - coef @ self.mean)

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "scale": self.scale.tolist()}


def _moments(dataset: Dataset, partition: int) -> tuple[int, np.ndarray, np.ndarray]:
    X, _ = dataset.read_partition(partition, dtype=np.float64)
    mean = X.mean(axis=0)
    return X.shape[0], mean, ((X - mean) ** 2).sum(axis=0)


def feature_scaling(client: Client, dataset: Dataset) -> Scaling:
    """Mean and standard deviation of every feature over the whole dataset (one pass)."""
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
    return Scaling(mean=mean, scale=np.where(std > 0, std, 1.0))
