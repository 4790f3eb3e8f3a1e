"""2PMB's first pass: a distributed reservoir sample of the rare class (docs/engine.md §Reservoir).

Every row ``i`` (global position in file order) has the key
``reservoir_keys(seed, i)``.  Each partition returns, for both classes, its
:class:`~nsdist.solvers.sgd.Reservoir` (its ``s`` rows with the largest keys,
and its class count); the driver merges them in file order, picks the rare
class (fewer rows; a tie picks the positives, as :func:`~nsdist.solvers.sgd.rare_label`)
and keeps its sample.  The top keys of a union are the top keys of the
per-part tops, so this is exactly the uniform sample without replacement that
the in-memory solver draws from the same rows.

A run with a holdout draws the per-partition samples in the pass that gathers
the validation rows (:func:`~nsdist.engine.holdout.gather_validation`), before
the scaling is known: they hold raw rows, and :func:`scaled_reservoir` scales the
merged sample's rows afterwards -- the scaling is elementwise, so these are the
values that scaling every row and then sampling gives.  A run without a holdout
draws them in a pass of its own (:func:`sample_reservoir`).
"""
from __future__ import annotations

from dataclasses import replace
from functools import reduce
from typing import Callable

import numpy as np
from distributed import Client

from .._sparse import issparse, writeable
from ..data import Dataset
from ..solvers.blocks import gather_block
from ..solvers.order import reservoir_keys, top_k_indices
from ..solvers.plan import Holdout
from ..solvers.sgd import Reservoir
from .cluster import fetch
from .scaling import Scaling

__all__ = ["Reservoir", "sample_reservoir", "partition_reservoirs", "rare_reservoir", "scaled_reservoir",
           "read_rows_of"]

#: copies some rows of a partition out, given their positions (:func:`read_rows_of`)
RowTaker = Callable[[np.ndarray], object]


def partition_reservoirs(y: np.ndarray, ids: np.ndarray, train: np.ndarray, size: int, random_state: int,
                         rows: RowTaker) -> dict[int, Reservoir]:
    """Both classes' reservoirs of one partition's training rows.

    ``y`` and ``ids`` (global positions) of every row of the partition;
    ``train``: the positions of its training rows, increasing; ``rows(positions)``
    returns those rows (dense or CSR, a copy).  Only the rows that can enter a
    sample are taken -- each class's ``size`` largest keys -- in the partition's
    order, so offering them gives the sample that offering every training row
    gives; each class's count is that of all its training rows.
    """
    picks, counts = [], {}
    for label in (1, -1):
        mine = train[y[train] == label]
        counts[label] = mine.size
        picks.append(mine[top_k_indices(reservoir_keys(random_state, ids[mine]), size)])
    chosen = np.sort(np.concatenate(picks))
    X = rows(chosen)
    return {label: replace(Reservoir.empty(label, size, X.shape[1], X.dtype, issparse(X))
                           .offer(X, y[chosen], ids[chosen], random_state), n_rare=counts[label])
            for label in (1, -1)}


def rare_reservoir(dataset: Dataset, parts: list[dict[int, Reservoir]], scaling: Scaling | None = None) -> Reservoir:
    """The rare class's sample from the partitions' reservoirs (in file order); its rows scaled by ``scaling``.

    Raises
    ------
    ValueError
        If the dataset's training rows lack a class.
    """
    merged = {label: reduce(Reservoir.merge, [p[label] for p in parts]) for label in (1, -1)}
    if merged[1].n_rare == 0 or merged[-1].n_rare == 0:
        missing = "positive" if merged[1].n_rare == 0 else "negative"
        raise ValueError(f"dataset {dataset.url!r} has no {missing} rows; 2PMB needs both classes")
    return scaled_reservoir(merged[1] if merged[1].n_rare <= merged[-1].n_rare else merged[-1], scaling)


def scaled_reservoir(reservoir: Reservoir, scaling: Scaling | None) -> Reservoir:
    """``reservoir`` with its rows scaled: in place where they may be written (a merged sample's rows are the
    merge's own copy; one partition's, fetched from a worker, may be a read-only buffer: then a copy)."""
    return reservoir if scaling is None else replace(reservoir, X=scaling.apply(writeable(reservoir.X)))


def read_rows_of(dataset: Dataset, partition: int, dtype: str) -> tuple[np.ndarray, RowTaker, object]:
    """One partition's labels, a function that copies some of its rows out (C-ordered dense rows, or CSR),
    and what was read: a partition of one column per feature stays its columns (1-D arrays, as
    :meth:`~nsdist.data.Dataset.read_columns` gives them; the whole matrix is never assembled), any other is
    its matrix (:meth:`~nsdist.data.Dataset.read_partition`).  The rows copied are the same values either way."""
    if dataset.schema.layout == "columns":
        values, y = dataset.read_columns(partition, dtype=dtype)

        def take(rows: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(gather_block(values, dtype, rows=rows))
        return y, take, values
    X, y = dataset.read_partition(partition, dtype=dtype)
    return y, X.__getitem__, X


def _partition_candidates(dataset: Dataset, partition: int, size: int, random_state: int, dtype: str,
                          holdout: Holdout | None = None) -> dict[int, Reservoir]:
    """Both classes' reservoirs of one partition's training rows, raw (runs on a worker)."""
    y, take, _ = read_rows_of(dataset, partition, dtype)
    ids = dataset.partitions[partition].row_offset + np.arange(y.shape[0])
    train = np.arange(y.shape[0]) if holdout is None else np.flatnonzero(~holdout.mask(y, ids))
    return partition_reservoirs(y, ids, train, size, random_state, take)


def sample_reservoir(client: Client, dataset: Dataset, size: int, random_state: int,
                     dtype: str = "float64", scaling: Scaling | None = None,
                     holdout: Holdout | None = None) -> Reservoir:
    """Draw the rare-class reservoir over the training rows of ``dataset`` on ``client`` (a pass of its own)."""
    parts = fetch(client, client.map(_partition_candidates, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), size=size, random_state=random_state,
                                     dtype=dtype, holdout=holdout, pure=False))
    return rare_reservoir(dataset, parts, scaling)
