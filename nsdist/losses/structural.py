r"""Structural-SVM surrogates of Prec@k, PRBEP and F1 (Joachims 2005; seed eq. ``ssvm_loss``).

.. math::

    \ell(w) = \max_{\bar y \in \bar{\mathcal Y}} \Big[ \Delta(y, \bar y)
        + \frac{1}{n} \sum_i (\bar y_i - y_i)\, s_i \Big], \qquad s_i = w^\top x_i,

with ``Delta = 1 - P``.  A labelling ``ybar`` enters ``Delta`` only through
``a = TP`` (positives labelled +1) and ``b = FP`` (negatives labelled +1); the
score term is ``(2/n) [sum of the negatives labelled +1 - sum of the positives
labelled -1]``, largest when the ``a`` top-scored positives and the ``b``
top-scored negatives are labelled +1.  With ``CP[a]`` (``CN[b]``) the sum of the
``a`` (``b``) largest positive (negative) scores and ``SP`` the sum of all
positive scores, the maximisation is over two counts only:

.. math::

    \ell(w) = \max_{(a, b)} \; \Delta(a, b) + \tfrac{2}{n} (CP[a] + CN[b] - SP),

and the subgradient (Danskin) is ``dl/ds = (ybar* - y) / n``: ``-2/n`` on the
positives outside the top ``a*``, ``+2/n`` on the top ``b*`` negatives, 0 elsewhere.
"""
from __future__ import annotations

from abc import abstractmethod
from numbers import Integral, Real

import numpy as np

from .._validation import resolve_k
from ._ranking import prefix_sums, split_classes, top_indices, top_values_desc
from .base import Loss

__all__ = ["PrecisionAtKLoss", "PRBEPLoss", "F1Loss", "check_k"]


def check_k(k) -> int | float:
    """``k`` must be an int >= 1 (a count) or a float in (0, 1] (a fraction of ``n``)."""
    if not isinstance(k, bool):
        if isinstance(k, Integral) and k >= 1:
            return int(k)
        if isinstance(k, Real) and not isinstance(k, Integral) and 0.0 < float(k) <= 1.0:
            return float(k)
    raise ValueError(f"k must be an int >= 1 or a float in (0, 1], got {k!r}")


def _labelling_dscore(s: np.ndarray, pos: np.ndarray, neg: np.ndarray, a: int, b: int) -> np.ndarray:
    """``(ybar - y) / n`` for ``ybar`` = +1 on the top ``a`` positives and top ``b`` negatives."""
    n = s.shape[0]
    dscore = np.zeros(n)
    dscore[pos] = -2.0 / n
    dscore[pos[top_indices(s[pos], a)]] = 0.0
    dscore[neg[top_indices(s[neg], b)]] = 2.0 / n
    return dscore


def _max_fixed_count(sp: np.ndarray, sn: np.ndarray, K: int) -> tuple[float, int]:
    """``max_a 1 - a/K + (2/n)(CP[a] + CN[K - a] - SP)`` over feasible ``a``; returns (value, a*).

    O(n + K log K): only the top ``K`` of each class are sorted.
    """
    n = sp.size + sn.size
    a = np.arange(max(0, K - sn.size), min(K, sp.size) + 1)
    cp = prefix_sums(top_values_desc(sp, a[-1]))
    cn = prefix_sums(top_values_desc(sn, K - a[0]))
    objective = 1.0 - a / K + (2.0 / n) * (cp[a] + cn[K - a] - sp.sum())
    best = int(objective.argmax())
    return float(objective[best]), int(a[best])


#: (a, b) pairs up to which b*(a) is counted on the whole delta table rather than searched
_DENSE_SEARCH = 1 << 15


def _rising_bound(QS: np.ndarray, n_pos: int, n: int) -> int:
    r"""A ``B`` with ``b*(a) <= B`` for every ``a`` (and every row of ``QS``): only ``b < B`` can rise.

    On ``0 <= a <= n+ <= c`` the term ``2a / ((a + c)(a + c + 1))``, ``c = b + n+``,
    grows with ``a``, so ``delta(a, b) <= u(b) = 2 n+ / ((2 n+ + b)(2 n+ + b + 1)) + (2/n) qs[b]``.
    Doubling the first term leaves a margin far above rounding: where the doubled
    ``u(b)`` is not positive, ``delta(a, b) < 0`` for every ``a``, exact or computed.
    ``B`` is one past the last ``b`` where it is positive.  On a trained model
    few negatives come close to the positives, and ``B`` is a fraction of ``n-``.
    """
    t = 2.0 * n_pos + np.arange(QS.shape[-1])
    rising = 4.0 * n_pos / (t * (t + 1)) + (2.0 / n) * QS > 0
    last = (rising if rising.ndim == 1 else rising.any(axis=0)).nonzero()[0]
    return int(last[-1]) + 1 if last.size else 0


def _best_false_positives(a: np.ndarray, qs: np.ndarray, n_pos: int, n: int) -> np.ndarray:
    r"""``b*(a) = argmax_b [-F1(a, b) + (2/n) CN[b]]`` for every ``a`` at once.

    For fixed ``a`` the objective is concave in ``b``: ``F1 = 2a / (a + b + n+)``
    is convex in ``b`` and ``CN`` sums the decreasing ``qs``.  Its increments

    .. math::

        \delta(a, b) = \frac{2a}{(a + b + n_+)(a + b + 1 + n_+)} + \frac{2}{n} qs[b]

    therefore decrease in ``b`` (in floating point too: every operation is
    monotone), and ``b*(a) = #{b : delta(a, b) > 0}`` is found by a binary search
    (by powers of two) run for all ``a`` together: O(n+ log n-), over the
    ``b`` below :func:`_rising_bound` only.
    """
    q2 = (2.0 / n) * qs[:_rising_bound(qs, n_pos, n)]      # the second term of delta, for every b
    twice_a, t0 = 2.0 * a, a + n_pos
    if a.size * q2.size <= _DENSE_SEARCH:       # small buffers: count the rising b's directly (the same
        t = t0[:, None] + np.arange(q2.size)    # delta values, so the same b* as the search)
        delta = twice_a[:, None] / (t * (t + 1)) + q2
        return (delta > 0).sum(axis=1).astype(a.dtype)
    b = np.zeros_like(a)
    step = 1 << (q2.size.bit_length() - 1)
    while step:
        probe = b + (step - 1)  # all of b .. probe rise iff delta(a, probe) > 0
        t = t0 + probe
        delta = twice_a / (t * (t + 1))
        delta += q2.take(probe, mode="clip")
        b += step * ((probe < q2.size) & (delta > 0))
        step >>= 1
    return b


def _max_f1(sp: np.ndarray, sn: np.ndarray) -> tuple[float, int, int]:
    """``max_{a,b} 1 - 2a/(a + b + n+) + (2/n)(CP[a] + CN[b] - SP)``; returns (value, a*, b*).

    O(n log n), against O(n+ n-) for the enumeration of Joachims' Algorithm 2.
    """
    n = sp.size + sn.size
    qs = np.sort(sn)[::-1]
    a = np.arange(sp.size + 1)
    b = _best_false_positives(a, qs, sp.size, n)
    cp = prefix_sums(np.sort(sp)[::-1])
    cn = prefix_sums(qs[: b.max()])
    objective = 1.0 - 2.0 * a / (a + b + sp.size) + (2.0 / n) * (cp[a] + cn[b] - sp.sum())
    best = int(objective.argmax())
    return float(objective[best]), int(a[best]), int(b[best])


def _best_false_positives_many(a: np.ndarray, QS: np.ndarray, n_pos: int, n: int) -> np.ndarray:
    """:func:`_best_false_positives` for every row of ``QS`` (M, n-) at once, bit for bit."""
    Q2 = (2.0 / n) * QS[:, :_rising_bound(QS, n_pos, n)]     # the second term of delta, for every b
    M, n_neg = Q2.shape
    r = np.arange(M)[:, None]
    twice_a, t0 = 2.0 * a, a + n_pos
    if M * a.size * n_neg <= _DENSE_SEARCH:
        t = t0[:, None] + np.arange(n_neg)
        delta = (twice_a[:, None] / (t * (t + 1)))[None] + Q2[:, None, :]
        return (delta > 0).sum(axis=2).astype(a.dtype)
    b = np.zeros((M, a.size), dtype=a.dtype)
    step = 1 << (n_neg.bit_length() - 1)
    # a probe with step s is at most 2 * step - s - 1: Q2 padded with -inf to 2 * step columns, a probe
    # past the end reads delta = -inf (no rise), as the single search's bound check decides
    padded = np.full((M, 2 * step), -np.inf)
    padded[:, :n_neg] = Q2
    flat, row_start = padded.ravel(), r * (2 * step)   # padded[r, j] read as flat[r * 2 step + j]
    while step:
        probe = b + (step - 1)
        t = t0 + probe
        delta = twice_a / (t * (t + 1))
        delta += flat.take(row_start + probe)
        b += step * (delta > 0)
        step >>= 1
    return b


def _top_of_rows(V: np.ndarray, t: int) -> np.ndarray:
    """Per row of ``V`` (M, c), its ``t`` largest entries in no particular order (all of them if ``t >= c``).

    A linear-time partition, so that :func:`_desc_prefix_sums` sorts only them:
    its first ``t + 1`` sums are those of the whole row.
    """
    c = V.shape[1]
    return V if t >= c else np.partition(V, c - t, axis=1)[:, c - t:]


def _desc_prefix_sums(V: np.ndarray) -> np.ndarray:
    """Per row: ``prefix_sums`` of the row sorted decreasingly, shape (M, len + 1)."""
    return np.concatenate([np.zeros((V.shape[0], 1)), np.sort(V, axis=1)[:, ::-1].cumsum(axis=1)], axis=1)


def _labelling_dscore_many(S: np.ndarray, pos: np.ndarray, neg: np.ndarray, a: np.ndarray, b: np.ndarray
                           ) -> np.ndarray:
    """:func:`_labelling_dscore` of every column (the top sets column by column, as the single call)."""
    dscore = np.empty(S.shape)
    for j in range(S.shape[1]):
        dscore[:, j] = _labelling_dscore(S[:, j], pos, neg, int(a[j]), int(b[j]))
    return dscore


class _FixedCountLoss(Loss):
    """Structural surrogate over labellings with exactly ``K`` positives, ``Delta = 1 - TP/K``."""

    @abstractmethod
    def _count(self, n: int, n_pos: int) -> int:
        """``K`` for a buffer of ``n`` points with ``n_pos`` positives."""

    def value_and_dscore(self, s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        s = np.asarray(s, dtype=np.float64)
        pos, neg = split_classes(y)
        K = self._count(s.shape[0], pos.size)
        if pos.size == 0 or neg.size == 0:
            return 0.0, np.zeros(s.shape[0])
        value, a = _max_fixed_count(s[pos], s[neg], K)
        return value, _labelling_dscore(s, pos, neg, a, K - a)

    def value_and_dscore_many(self, S: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`value_and_dscore` of every column of ``S`` (n, M), the maximisation vectorised."""
        S = np.asarray(S, dtype=np.float64)
        n, M = S.shape
        pos, neg = split_classes(y)
        K = self._count(n, pos.size)
        if pos.size == 0 or neg.size == 0:
            return np.zeros(M), np.zeros((n, M))
        SP, SN = np.ascontiguousarray(S.take(pos, axis=0).T), np.ascontiguousarray(S.take(neg, axis=0).T)
        a = np.arange(max(0, K - neg.size), min(K, pos.size) + 1)
        CP, CN = _desc_prefix_sums(SP), _desc_prefix_sums(_top_of_rows(SN, K - int(a[0])))
        objective = 1.0 - a / K + (2.0 / n) * (CP[:, a] + CN[:, K - a] - SP.sum(axis=1)[:, None])
        best = objective.argmax(axis=1)
        r = np.arange(M)
        values, a_best = objective[r, best], a[best]
        return values, _labelling_dscore_many(S, pos, neg, a_best, K - a_best)


class PrecisionAtKLoss(_FixedCountLoss):
    """Surrogate of ``1 - Prec@k`` (seed eq. ``prec``): ``K`` labels +1, ``Delta = 1 - TP/K``.

    Parameters
    ----------
    k : int >= 1 or float in (0, 1]
        ``K = k`` or ``K = ceil9(k * n)`` per buffer of ``n`` points (docs/measures.md §Rounding);
        a buffer with fewer than ``K`` points is a ``ValueError``.
    """

    name = "prec@k"

    def __init__(self, k: int | float) -> None:
        self.k = check_k(k)

    def params(self) -> dict:
        return {"k": self.k}

    def _count(self, n: int, n_pos: int) -> int:
        return resolve_k(self.k, n)


class PRBEPLoss(_FixedCountLoss):
    """Surrogate of ``1 - PRBEP``: :class:`PrecisionAtKLoss` with ``K = n+``."""

    name = "prbep"

    def _count(self, n: int, n_pos: int) -> int:
        return n_pos


class F1Loss(Loss):
    """Surrogate of ``1 - F1`` over all labellings, ``F1 = 2a / (a + b + n+)`` (0 when ``a = 0``).

    The maximiser is exact, in O(n log n) (see :func:`_best_false_positives`).
    """

    name = "f1"
    shift_invariant = False

    def value_and_dscore(self, s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        s = np.asarray(s, dtype=np.float64)
        pos, neg = split_classes(y)
        if pos.size == 0 or neg.size == 0:
            return 0.0, np.zeros(s.shape[0])
        value, a, b = _max_f1(s[pos], s[neg])
        return value, _labelling_dscore(s, pos, neg, a, b)

    def value_and_dscore_many(self, S: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`value_and_dscore` of every column of ``S`` (n, M), the maximisation vectorised."""
        S = np.asarray(S, dtype=np.float64)
        n, M = S.shape
        pos, neg = split_classes(y)
        if pos.size == 0 or neg.size == 0:
            return np.zeros(M), np.zeros((n, M))
        SP, SN = np.ascontiguousarray(S.take(pos, axis=0).T), np.ascontiguousarray(S.take(neg, axis=0).T)
        r = np.arange(M)[:, None]
        QS = np.sort(SN, axis=1)[:, ::-1]
        a = np.arange(pos.size + 1)
        B = _best_false_positives_many(a, QS, pos.size, n)
        CP = _desc_prefix_sums(SP)
        CN = np.concatenate([np.zeros((M, 1)), QS.cumsum(axis=1)], axis=1)
        objective = 1.0 - 2.0 * a / (a + B + pos.size) + (2.0 / n) * (CP + CN[r, B] - SP.sum(axis=1)[:, None])
        best = objective.argmax(axis=1)
        values = objective[r[:, 0], best]
        return values, _labelling_dscore_many(S, pos, neg, a[best], B[r[:, 0], best])
