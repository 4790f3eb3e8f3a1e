"""On-the-fly standardisation of the features.

:func:`feature_scaling` gives the moments of a whole dataset in one
distributed pass (:class:`~nsdist.solvers.scaling.Scaling` and the in-memory
moments live in :mod:`nsdist.solvers.scaling`).  Data on disk stays raw: the pass
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

import numpy as np
from distributed import Client

from ..data import Dataset
from ..solvers.scaling import Scaling, merge_moments, row_moments, scaling_from_moments, scaling_from_rows

__all__ = ["Scaling", "feature_scaling", "scaling_from_rows", "scaling_from_moments", "merge_moments",
           "row_moments"]


def _moments(dataset: Dataset, partition: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Row count, mean and sum of squared deviations of every feature in one partition."""
    X, _ = dataset.read_partition(partition, dtype=np.float64)
    return row_moments(X)


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
    return scaling_from_moments(*merge_moments(parts), center=center)
