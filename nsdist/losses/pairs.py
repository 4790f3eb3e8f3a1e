r"""Sums of a margin surrogate over all (positive, negative) pairs.

For positive scores ``p`` and negative scores ``q`` each function returns

.. math::

    L = \sum_i \sum_j \phi(p_i - q_j), \qquad
    \partial L / \partial p_i, \qquad \partial L / \partial q_j,

the pair sum inside the pAUC surrogate (seed, eq. ``pauc_cvx``) and its
gradient (a subgradient at the hinge's kink, where ``phi'(1) := 0``).

The hinge and the squared hinge are truncated powers
``phi(c) = (1 - c)_+^k`` (``k = 1, 2``): with both classes sorted, every pair
sum is a prefix or suffix moment, so no ``n+ x m`` pair matrix is formed.  The
logistic loss has no such structure and is summed over cache-sized blocks of
pairs.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ._ranking import prefix_sums, suffix_sums

__all__ = ["PAIR_SUMS", "truncated_power_pairs", "logistic_pairs", "sigmoid_pairs"]

#: pairs per block of the logistic sum (512 KiB of float64: stays in cache)
_BLOCK = 1 << 16


def truncated_power_pairs(p: np.ndarray, q: np.ndarray, k: int) -> tuple[float, np.ndarray, np.ndarray]:
    r"""Pair sum of ``phi(c) = max(0, 1 - c)^k`` in O((n+ + m) log(n+ + m)).

    A pair is active iff ``p_i < q_j + 1``.  Sort the positives,
    ``a_1 <= ... <= a_{n+}``, and the hinge points ``b_j = q_j + 1``,
    ``b_1 <= ... <= b_m``: positive ``i`` is active with the suffix
    ``b[f_i:]``, ``f_i = #{j : b_j <= a_i}``, and ``b_j`` with the prefix
    ``a[:d_j]``, ``d_j = #{i : a_i < b_j}``.  With the per-point sums

    .. math::

        G_j = \sum_{i < d_j} (b_j - a_i)^{k-1}, \qquad
        H_i = \sum_{j \ge f_i} (b_j - a_i)^{k-1}

    (counts for ``k = 1``; for ``k = 2``, ``G_j = d_j b_j - A[d_j]`` and
    ``H_i = B[f_i] - (m - f_i) a_i`` with prefix sums ``A`` of ``a`` and suffix
    sums ``B`` of ``b``), splitting ``(b_j - a_i)^k = (b_j - a_i)^{k-1} (b_j - a_i)`` gives

    .. math::

        L = \sum_j b_j G_j - \sum_i a_i H_i, \qquad
        \partial L / \partial q_j = k G_j, \qquad \partial L / \partial p_i = -k H_i.

    Scores are centred first (the loss depends on differences only), which
    keeps the two sums of ``L`` from cancelling.

    Parameters
    ----------
    p, q : ndarray of float64
        Scores of the positives and of the negatives.
    k : {1, 2}
        Power: 1 for the hinge, 2 for the squared hinge.

    Returns
    -------
    value : float
    dp : ndarray, shape (len(p),)
    dq : ndarray, shape (len(q),)
    """
    order_p, order_q = np.argsort(p), np.argsort(q)
    shift = p[order_p[p.size // 2]]
    a = p[order_p] - shift
    b = q[order_q] + (1.0 - shift)
    f = np.searchsorted(b, a, side="right")
    runs = np.diff(f, prepend=0, append=b.size)  # b[f_{i-1} : f_i] have d_j = i
    d = np.repeat(np.arange(a.size + 1.0), runs)
    c = (b.size - f).astype(np.float64)
    g, h = (d, c) if k == 1 else (d * b - np.repeat(prefix_sums(a), runs), suffix_sums(b)[f] - c * a)
    dp, dq = np.empty_like(a), np.empty_like(b)
    dp[order_p] = -k * h
    dq[order_q] = k * g
    return float((b * g).sum() - (a * h).sum()), dp, dq


def logistic_pairs(p: np.ndarray, q: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    r"""Pair sum of ``phi(c) = log(1 + exp(-c))``, blockwise over all pairs.

    Stable forms: ``phi(c) = max(-c, 0) + log1p(exp(-|c|))`` and
    ``-phi'(c) = sigma(-c)``, which is ``g = 1 / (1 + exp(-|c|))`` for ``c < 0``
    and ``1 - g`` otherwise.  Memory stays at a few blocks of :data:`_BLOCK`
    pairs whatever ``n+ x m`` is.

    Parameters
    ----------
    p, q : ndarray of float64
        Scores of the positives and of the negatives.

    Returns
    -------
    value : float
    dp : ndarray, shape (len(p),)
    dq : ndarray, shape (len(q),)
    """
    rows = max(1, _BLOCK // q.size)
    value = 0.0
    dp = np.empty_like(p)
    dq = np.zeros_like(q)
    for start in range(0, p.size, rows):
        c = p[start:start + rows, None] - q
        t = np.exp(-np.abs(c))
        value += float(np.maximum(-c, 0.0).sum() + np.log1p(t).sum())
        sig = 0.5 - np.copysign(1.0 / (1.0 + t) - 0.5, c)
        dp[start:start + rows] = -sig.sum(axis=1)
        dq += sig.sum(axis=0)
    return value, dp, dq


def sigmoid_pairs(p: np.ndarray, q: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    r"""Pair sum of the squared hinge on squashed scores, ``(1 - (sigma(p_i) - sigma(q_j)))^2``.

    A bounded surrogate: with ``sigma(t) = 1 / (1 + exp(-t))`` each pair costs
    at most 4, so a few badly ranked outliers cannot dominate the buffer (the
    one-way pAUC loss of Zhu et al., "When AUC meets DRO", 2022, with margin 1).
    **It is not convex in the scores** (nor in ``w``): the solvers' guarantees
    do not cover it; it is offered as one more candidate of the in-fit selection.

    With margin 1 every pair is active (``sigma`` differences lie in (-1, 1)),
    so with ``u_i = 1 - sigma(p_i)`` and ``v_j = sigma(q_j)`` the sum
    ``sum_ij (u_i + v_j)^2 = m sum u^2 + 2 sum u sum v + n+ sum v^2`` and its
    gradient take O(n+ + m):

    .. math::

        \partial L / \partial p_i = -2 \sigma'(p_i) (m u_i + \textstyle\sum v), \qquad
        \partial L / \partial q_j = 2 \sigma'(q_j) (\textstyle\sum u + n_+ v_j).
    """
    sp = 0.5 * (1.0 + np.tanh(0.5 * p))
    sq = 0.5 * (1.0 + np.tanh(0.5 * q))
    u, v = 1.0 - sp, sq
    su, sv = float(u.sum()), float(v.sum())
    value = q.size * float(u @ u) + 2.0 * su * sv + p.size * float(v @ v)
    dp = -2.0 * sp * (1.0 - sp) * (q.size * u + sv)
    dq = 2.0 * sq * (1.0 - sq) * (su + p.size * v)
    return value, dp, dq


#: surrogate name -> pair-sum function ``(p, q) -> (value, dp, dq)``
PAIR_SUMS = {
    "hinge": partial(truncated_power_pairs, k=1),
    "logistic": logistic_pairs,
    "squared_hinge": partial(truncated_power_pairs, k=2),
    "sigmoid": sigmoid_pairs,
}
