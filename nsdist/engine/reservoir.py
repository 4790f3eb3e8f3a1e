"""2PMB's first pass: a distributed reservoir sample of the rare class (docs/engine.md §Reservoir).

Every row ``i`` (global position in file order) has the key
``reservoir_keys(seed, i)``.  Each partition returns, for both classes, its
:class:`~nsdist.solvers.sgd.Reservoir` (its ``s`` rows with the largest keys,
and its class count); the driver merges them in file order, picks the rare
class (fewer rows; a tie picks the positives, as :func:`~nsdist.solvers.sgd.rare_label`)
and keeps its sample.  The top keys of a union are the top keys of the
per-part tops, so this is exactly the uniform sample without replacement that
the in-memory solver draws from the same rows.
"""
from __future__ import annotations

from functools import reduce

import numpy as np
from distributed import Client

from ..data import Dataset
from ..solvers.plan import Holdout
from ..solvers.sgd import Reservoir
from .scaling import Scaling

__all__ = ["Reservoir", "sample_reservoir", "partition_candidates"]


def partition_candidates(dataset: Dataset, partition: int, size: int, random_state: int, dtype: str,
                         scaling: Scaling | None = None, holdout: Holdout | None = None) -> dict[int, Reservoir]:
    """Both classes' reservoirs of one partition's training rows (runs on a worker)."""
    X, y = dataset.read_partition(partition, dtype=dtype)
    ids = dataset.partitions[partition].row_offset + np.arange(y.shape[0])
    if holdout is not None:
        train = np.flatnonzero(~holdout.mask(y, ids))
        X, y, ids = X[train], y[train], ids[train]
    if scaling is not None:
        X = scaling.apply(X)
    sparse = hasattr(X, "tocsr")
    return {label: Reservoir.empty(label, size, X.shape[1], X.dtype, sparse).offer(X, y, ids, random_state)
            for label in (1, -1)}


def sample_reservoir(client: Client, dataset: Dataset, size: int, random_state: int,
                     dtype: str = "float64", scaling: Scaling | None = None,
                     holdout: Holdout | None = None) -> Reservoir:
    """Draw the rare-class reservoir over the training rows of ``dataset`` on ``client``."""
    parts = client.gather(client.map(partition_candidates, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), size=size, random_state=random_state,
                                     dtype=dtype, scaling=scaling, holdout=holdout, pure=False))
    merged = {label: reduce(Reservoir.merge, [p[label] for p in parts]) for label in (1, -1)}
    if merged[1].n_rare == 0 or merged[-1].n_rare == 0:
        missing = "positive" if merged[1].n_rare == 0 else "negative"
        raise ValueError(f"dataset {dataset.url!r} has no {missing} rows; 2PMB needs both classes")
    return merged[1] if merged[1].n_rare <= merged[-1].n_rare else merged[-1]
