"""Seeded stream order and reservoir keys, shared by the in-memory solvers and the engine.

The stream is a sequence of *blocks* (Parquet partitions; the in-memory solvers
see the training set as the single block 0).  Pass ``p`` visits the blocks in
:func:`block_order` and the rows of block ``j`` in :func:`row_order`, both
functions of ``(random_state, p, j)`` only, so the order does not depend on which
machine or process computes it.

2PMB's reservoir (docs/engine.md §Reservoir) is an exact uniform sample without replacement
by random keys: row ``i`` (its global position in file order) gets the key
:func:`reservoir_keys` ``(seed, i)``, and the sample is the ``s`` rows of the
rare class with the largest keys.  Each partition can keep its own top ``s``;
the top ``s`` of the union is the same sample the in-memory solver draws.
"""
from __future__ import annotations

import numpy as np

__all__ = ["block_order", "row_order", "reservoir_keys", "holdout_keys", "top_k_indices"]


def block_order(random_state: int, pass_index: int, n_blocks: int, shuffle: bool = True) -> np.ndarray:
    """Order in which pass ``pass_index`` visits the blocks (file order if not ``shuffle``)."""
    if not shuffle or n_blocks <= 1:      # one block: its only order (no generator per pass)
        return np.arange(n_blocks)
    return np.random.default_rng([random_state, pass_index, 0x0B10C]).permutation(n_blocks)


def row_order(random_state: int, pass_index: int, block_id: int, n_rows: int, shuffle: bool = True) -> np.ndarray:
    """Order of the rows of block ``block_id`` in pass ``pass_index``."""
    if not shuffle:
        return np.arange(n_rows)
    return np.random.default_rng([random_state, pass_index, block_id, 0x0207]).permutation(n_rows)


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(random_state: int, row_ids: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of ``(seed, salt, id)``: a bijection of the ids for a fixed seed and salt."""
    ids = np.asarray(row_ids, dtype=np.uint64)
    with np.errstate(over="ignore"):
        offset = np.uint64(random_state & 0xFFFFFFFFFFFFFFFF) * _M2 + np.uint64(salt) * _M1 + _GOLDEN
        z = ids * _GOLDEN + offset
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def reservoir_keys(random_state: int, row_ids: np.ndarray) -> np.ndarray:
    """Uniform keys in [0, 1) for the given global row ids (splitmix64 of seed and id).

    A pure function of ``(random_state, row_id)``: any process computes the same
    key for the same row.
    """
    return (_splitmix64(random_state, row_ids, 0) >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def holdout_keys(random_state: int, row_ids: np.ndarray) -> np.ndarray:
    """uint64 keys that decide the validation rows (:mod:`nsdist.solvers.plan`).

    Independent of :func:`reservoir_keys` (another salt) and distinct for
    distinct ids (splitmix64 is a bijection), so "the ``v`` smallest keys of a
    class" never ties.
    """
    return _splitmix64(random_state, row_ids, 0x5A11D)


def top_k_indices(keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest keys, sorted by decreasing key (ties: lower index first)."""
    if k >= keys.shape[0]:
        idx = np.arange(keys.shape[0])
    else:
        idx = np.argpartition(-keys, k - 1)[:k]
    return idx[np.lexsort((idx, -keys[idx]))]
