"""The stream plan's holdout over a Parquet dataset: class counts, cuts and validation rows.

Two passes over the label column only (cheap: one byte a row) and one over the
validation rows' features:

1. each partition's class counts -- a dataset lacking a class fails here,
   before any training;
2. each partition's ``v_c`` smallest :func:`~nsdist.solvers.order.holdout_keys`
   per class; merged, they fix the cuts of :class:`~nsdist.solvers.plan.Holdout`
   -- exactly the holdout :meth:`Holdout.draw` computes on the same rows in memory;
3. the validation rows themselves, gathered on the driver in file order,
   with the column moments of every row (the standardisation's).

A run without a holdout (``eta`` and ``n_passes`` set, or validation rows
given) reads a *sample* instead: whole partitions, drawn by seed, up to
``max_rows`` rows, in file order (:func:`sample_partitions`).  It gives the
standardisation moments and the place of a ranking model's cut without a pass
over the whole dataset; on a dataset of at most ``max_rows`` rows it is the
whole dataset, and both are exact.
"""
from __future__ import annotations

import numpy as np
from distributed import Client

from ..data import Dataset
from ..solvers.order import holdout_keys
from ..solvers.plan import Holdout, holdout_sizes, smallest_keys
from ..solvers.scaling import merge_moments, row_moments

__all__ = ["class_counts", "plan_holdout", "gather_validation", "sample_partitions", "read_sample"]


def _counts(dataset: Dataset, partition: int) -> tuple[int, int]:
    y = dataset.read_labels(partition)
    n_pos = int(np.count_nonzero(y > 0))
    return n_pos, y.shape[0] - n_pos


def class_counts(client: Client, dataset: Dataset) -> tuple[int, int]:
    """``(n+, n-)`` from the label column; a ``ValueError`` naming the dataset if a class is absent."""
    parts = client.gather(client.map(_counts, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), pure=False))
    n_pos, n_neg = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if n_pos == 0 or n_neg == 0:
        found = "negative" if n_pos == 0 else "positive"
        raise ValueError(f"dataset {dataset.url!r} has only {found} rows ({n_pos + n_neg} rows, "
                         f"{'no positive' if n_pos == 0 else 'no negative'} row); training needs both classes")
    return n_pos, n_neg


def _smallest(dataset: Dataset, partition: int, random_state: int, v_pos: int, v_neg: int):
    y = dataset.read_labels(partition)
    ids = dataset.partitions[partition].row_offset + np.arange(y.shape[0])
    keys = holdout_keys(random_state, ids)
    return smallest_keys(keys[y > 0], v_pos), smallest_keys(keys[y < 0], v_neg)


def plan_holdout(client: Client, dataset: Dataset, counts: tuple[int, int], *, random_state: int,
                 fraction: float, max_rows: int) -> Holdout:
    """The holdout of ``dataset`` (the same rows as :meth:`Holdout.draw` on its rows in file order)."""
    v_pos, v_neg = holdout_sizes(counts[0], counts[1], fraction, max_rows)
    parts = client.gather(client.map(_smallest, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), random_state=random_state,
                                     v_pos=v_pos, v_neg=v_neg, pure=False))
    pos = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.uint64)
    neg = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.uint64)
    return Holdout.from_keys(random_state, pos, neg, v_pos, v_neg)


def _validation_rows(dataset: Dataset, partition: int, holdout: Holdout, dtype: str):
    X, y = dataset.read_partition(partition, dtype=dtype)
    ids = dataset.partitions[partition].row_offset + np.arange(y.shape[0])
    rows = np.flatnonzero(holdout.mask(y, ids))
    return X[rows], y[rows], row_moments(X.astype(np.float64))


def gather_validation(client: Client, dataset: Dataset, holdout: Holdout, *, dtype: str):
    """The validation rows (raw features), in file order, on the driver, and the moments of every row.

    The pass reads every partition anyway (the validation rows are spread
    over all of them), so it also returns the column moments ``(n, mean, m2)``
    of all rows, merged in file order: standardisation costs no pass of its own.
    """
    parts = client.gather(client.map(_validation_rows, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), holdout=holdout, dtype=dtype, pure=False))
    X, y = _stack(parts)
    return (X, y), merge_moments([p[2] for p in parts])


def _stack(parts: list) -> tuple:
    """``(X, y)`` blocks concatenated in order (CSR blocks stay CSR)."""
    Xs = [p[0] for p in parts]
    if any(hasattr(x, "tocsr") for x in Xs):
        import scipy.sparse as sp
        X = sp.vstack(Xs, format="csr")
    else:
        X = np.concatenate(Xs)
    return X, np.concatenate([p[1] for p in parts])


def sample_partitions(dataset: Dataset, random_state: int, max_rows: int) -> list[int]:
    """Partitions drawn by seed until they hold ``max_rows`` rows (all of them if fewer), in file order."""
    order = np.random.default_rng([random_state, 0x5A3D1E]).permutation(len(dataset.partitions))
    chosen, rows = [], 0
    for j in order:
        if rows >= max_rows:
            break
        chosen.append(int(j))
        rows += dataset.partitions[j].num_rows
    return sorted(chosen)


def _read(dataset: Dataset, partition: int, dtype: str):
    return dataset.read_partition(partition, dtype=dtype)


def read_sample(client: Client, dataset: Dataset, partitions: list[int], *, dtype: str):
    """The raw rows of ``partitions`` on the driver, concatenated in the given order."""
    return _stack(client.gather(client.map(_read, [dataset] * len(partitions), partitions, dtype=dtype,
                                           pure=False)))
