"""Which rows of each input chunk go to which output partition.

The ingest shuffle is a uniformly random permutation of all rows, done out of
core: chunk ``c`` sends ``counts[c, b]`` of its rows (chosen at random) to
partition ``b``, and each partition shuffles what it receives. Drawing each
chunk's row of ``counts`` from the multivariate hypergeometric distribution
over the partitions' remaining capacities makes the assignment exactly that
of a uniform permutation cut into partitions of the requested sizes.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_SHUFFLE_ROWS", "partition_sizes", "assign_rows", "rng"]

MAX_SHUFFLE_ROWS = 10**9 - 1  # numpy's multivariate hypergeometric sampler needs fewer than 1e9 items


def rng(random_state: int, *key: int) -> np.random.Generator:
    """An independent generator for stream ``key`` of seed ``random_state``."""
    return np.random.default_rng(np.random.SeedSequence(random_state, spawn_key=key))


def partition_sizes(n_rows: int, rows_per_partition: int) -> list[int]:
    """``rows_per_partition`` rows per partition, the remainder in a last, smaller one."""
    full, rest = divmod(n_rows, rows_per_partition)
    return [rows_per_partition] * full + ([rest] if rest else [])


def assign_rows(chunk_rows: Sequence[int], sizes: Sequence[int], *, shuffle: bool,
                random_state: int = 0) -> np.ndarray:
    """``counts[c, b]``: how many rows of chunk ``c`` go to partition ``b``.

    Rows sum to ``chunk_rows``, columns to ``sizes``. Without ``shuffle`` the
    chunks fill the partitions in order; with it, the counts are those of a
    uniformly random permutation (deterministic for ``random_state``).

    Raises
    ------
    ValueError
        If the totals differ, or a shuffle of ``MAX_SHUFFLE_ROWS`` rows or more
        is asked for.
    """
    chunk_rows, sizes = np.asarray(chunk_rows, np.int64), np.asarray(sizes, np.int64)
    n = int(chunk_rows.sum())
    if n != int(sizes.sum()):
        raise ValueError(f"chunks hold {n} rows but the partitions {int(sizes.sum())}")
    if not shuffle:
        chunk_bounds = np.concatenate([[0], np.cumsum(chunk_rows)])
        part_bounds = np.concatenate([[0], np.cumsum(sizes)])
        overlap = (np.minimum(chunk_bounds[1:, None], part_bounds[None, 1:])
                   - np.maximum(chunk_bounds[:-1, None], part_bounds[None, :-1]))
        return np.clip(overlap, 0, None)
    if n > MAX_SHUFFLE_ROWS:
        raise ValueError(f"shuffling {n} rows is not supported (at most {MAX_SHUFFLE_ROWS}); "
                         "ingest with shuffle=False")
    generator = rng(random_state, 0)
    remaining = sizes.copy()
    counts = np.zeros((len(chunk_rows), len(sizes)), dtype=np.int64)
    for c, k in enumerate(chunk_rows):
        counts[c] = generator.multivariate_hypergeometric(remaining, int(k))
        remaining -= counts[c]
    return counts
