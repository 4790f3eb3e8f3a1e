"""2PMB's first pass: a distributed reservoir sample of the rare class (SPEC §4, §5).

Every row ``i`` (global position in file order) has the key
``reservoir_keys(seed, i)``.  Each partition returns, for both classes, its
``s`` rows with the largest keys and its class counts; the driver picks the
rare class (fewer rows; a tie picks the positives) and keeps the ``s`` largest
keys of the union.  The top keys of a union are the top keys of the per-part
tops, so this is exactly the uniform sample without replacement that the
in-memory solver draws from the same rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from distributed import Client

from ..data import Dataset
from ..solvers.order import reservoir_keys, top_k_indices
from .scaling import Scaling

__all__ = ["Reservoir", "sample_reservoir", "partition_candidates"]


@dataclass
class Reservoir:
    """The rare-class sample joined to every epoch buffer of 2PMB's second pass."""

    X: np.ndarray
    y: np.ndarray
    label: int      # the rare class, +1 or -1
    n_rare: int     # rows of the rare class in the whole dataset

    def to_dict(self) -> dict:
        return {"X": self.X.tolist(), "y": self.y.tolist(), "label": self.label, "n_rare": self.n_rare}

    @classmethod
    def from_dict(cls, d: dict, dtype: str = "float64") -> "Reservoir":
        return cls(np.asarray(d["X"], dtype=dtype), np.asarray(d["y"], dtype=np.int8),
                   int(d["label"]), int(d["n_rare"]))


def partition_candidates(dataset: Dataset, partition: int, size: int, random_state: int,
                         dtype: str, scaling: Scaling | None = None) -> dict[int, tuple[int, np.ndarray, np.ndarray]]:
    """Per class: (row count, top-``size`` keys, their rows) of one partition (runs on a worker)."""
    X, y = dataset.read_partition(partition, dtype=dtype)
    if scaling is not None:
        X = scaling.apply(X)
    info = dataset.partitions[partition]
    keys = reservoir_keys(random_state, info.row_offset + np.arange(y.shape[0]))
    out = {}
    for label in (1, -1):
        rows = np.flatnonzero(y == label)
        top = rows[top_k_indices(keys[rows], size)]
        out[label] = (rows.shape[0], keys[top], X[top])
    return out


def sample_reservoir(client: Client, dataset: Dataset, size: int, random_state: int,
                     dtype: str = "float64", scaling: Scaling | None = None) -> Reservoir:
    """Draw the reservoir over all partitions of ``dataset`` on ``client``."""
    parts = range(len(dataset.partitions))
    ordered = client.gather(client.map(partition_candidates, [dataset] * len(parts), parts, size=size,
                                       random_state=random_state, dtype=dtype, scaling=scaling, pure=False))
    # in file order: ties in keys go to the earlier row
    counts = {lab: sum(r[lab][0] for r in ordered) for lab in (1, -1)}
    if counts[1] == 0 or counts[-1] == 0:
        missing = "positive" if counts[1] == 0 else "negative"
        raise ValueError(f"dataset {dataset.url!r} has no {missing} rows; 2PMB needs both classes")
    rare = 1 if counts[1] <= counts[-1] else -1
    keys = np.concatenate([r[rare][1] for r in ordered])
    X = np.concatenate([r[rare][2] for r in ordered])
    top = top_k_indices(keys, size)
    return Reservoir(X=np.ascontiguousarray(X[top]), y=np.full(top.shape[0], rare, dtype=np.int8),
                     label=rare, n_rare=counts[rare])
