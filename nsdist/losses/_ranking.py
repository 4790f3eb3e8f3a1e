"""Ranking helpers shared by the surrogate losses: class split, top-``t``, running sums.

Top-``t`` selection is a linear-time partial selection (``np.partition``), so a
loss sorts only the items its maximisation actually ranks.  Ties are resolved
arbitrarily: every loss here takes a maximum over labellings or subsets, and
tied items give the same objective whichever of them is chosen.

The losses run once per epoch buffer of a few hundred rows, where numpy's
per-call cost, not the arithmetic, dominates: the array methods
(``v.argsort()``, ``v.searchsorted(x)``, ``S.take(rows, axis=0)``) are used
rather than the module functions that wrap them, which cost a microsecond
more a call, and 2-D fancy indexing ``S[rows]`` (several microseconds).
They run the same code on the same values, so the results are unchanged.
"""
from __future__ import annotations

import numpy as np

__all__ = ["split_classes", "top_indices", "top_values_desc", "prefix_sums", "suffix_sums"]


def split_classes(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the positives (``y = +1``) and of the negatives (``y = -1``)."""
    is_pos = np.asarray(y) > 0
    return is_pos.nonzero()[0], (~is_pos).nonzero()[0]


def top_indices(v: np.ndarray, t: int) -> np.ndarray:
    """Positions of ``t`` largest entries of ``v``, in no particular order (O(len(v)))."""
    if t >= v.size:
        return np.arange(v.size)
    if t <= 0:
        return np.empty(0, dtype=np.intp)
    return v.argpartition(v.size - t)[v.size - t:]


def top_values_desc(v: np.ndarray, t: int) -> np.ndarray:
    """The ``t`` largest entries of ``v`` in decreasing order (O(len(v) + t log t))."""
    if t <= 0:
        return v[:0]
    top = v.copy()
    if t < v.size:
        top.partition(v.size - t)
        top = top[v.size - t:]
    top.sort()
    return top[::-1]


def prefix_sums(v: np.ndarray) -> np.ndarray:
    """``P[r] = v[0] + ... + v[r-1]`` for ``r = 0 .. len(v)`` (``P[0] = 0``)."""
    return np.concatenate(([0.0], v.cumsum()))


def suffix_sums(v: np.ndarray) -> np.ndarray:
    """``S[r] = v[r] + ... + v[-1]`` for ``r = 0 .. len(v)`` (``S[len(v)] = 0``)."""
    return prefix_sums(v[::-1])[::-1]
