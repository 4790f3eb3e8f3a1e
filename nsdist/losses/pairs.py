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

__all__ = ["PAIR_SUMS", "PAIR_SUMS_MANY", "truncated_power_pairs", "logistic_pairs", "sigmoid_pairs",
           "truncated_power_pairs_many", "sigmoid_pairs_many"]

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
    order_p, order_q = p.argsort(), q.argsort()
    shift = p[order_p[p.size // 2]]
    a = p[order_p] - shift
    b = q[order_q] + (1.0 - shift)
    f = b.searchsorted(a, side="right")     # f_i = #{j : b_j <= a_i}
    d = a.searchsorted(b, side="left")      # d_j = #{i : a_i < b_j}
    c = (b.size - f).astype(np.float64)
    g, h = (d, c) if k == 1 else (d * b - prefix_sums(a)[d], suffix_sums(b)[f] - c * a)
    dp, dq = np.empty_like(a), np.empty_like(b)
    dp[order_p] = -k * h
    dq[order_q] = k * g
    return float((b * g).sum() - (a * h).sum()), dp, dq


def truncated_power_pairs_many(P: np.ndarray, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`truncated_power_pairs` for every row of ``P`` (M, n+) and ``Q`` (M, m) at once.

    The same operations on each row (sorts and running sums along the rows,
    row sums), so row ``r`` is bit for bit ``truncated_power_pairs(P[r], Q[r], k)``;
    only the two binary searches loop over the rows.
    """
    P, Q = np.ascontiguousarray(P, dtype=np.float64), np.ascontiguousarray(Q, dtype=np.float64)
    M, n_pos, m = P.shape[0], P.shape[1], Q.shape[1]
    r = np.arange(M)[:, None]
    order_p, order_q = P.argsort(axis=1), Q.argsort(axis=1)
    Ps = P[r, order_p]
    shift = Ps[:, n_pos // 2, None]
    A = Ps - shift
    B = Q[r, order_q] + (1.0 - shift)
    F = np.empty((M, n_pos), dtype=np.intp)
    D = np.empty((M, m), dtype=np.intp)
    for i in range(M):
        F[i] = B[i].searchsorted(A[i], side="right")   # f_i = #{j : b_j <= a_i}
        D[i] = A[i].searchsorted(B[i], side="left")    # d_j = #{i : a_i < b_j}
    C = (m - F).astype(np.float64)
    if k == 1:
        G, H = D, C
    else:
        zero = np.zeros((M, 1))
        prefix_a = np.concatenate([zero, A.cumsum(axis=1)], axis=1)
        suffix_b = np.concatenate([zero, B[:, ::-1].cumsum(axis=1)], axis=1)[:, ::-1]
        G = D * B - prefix_a[r, D]
        H = suffix_b[r, F] - C * A
    DP, DQ = np.empty_like(A), np.empty_like(B)
    DP[r, order_p] = -k * H
    DQ[r, order_q] = k * G
    return (B * G).sum(axis=1) - (A * H).sum(axis=1), DP, DQ


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
    value = q.size * float((u * u).sum()) + 2.0 * su * sv + p.size * float((v * v).sum())
    dp = -2.0 * sp * (1.0 - sp) * (q.size * u + sv)
    dq = 2.0 * sq * (1.0 - sq) * (su + p.size * v)
    return value, dp, dq


def sigmoid_pairs_many(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sigmoid_pairs` for every row of ``P`` (M, n+) and ``Q`` (M, m), bit for bit per row."""
    P, Q = np.ascontiguousarray(P, dtype=np.float64), np.ascontiguousarray(Q, dtype=np.float64)
    sp = 0.5 * (1.0 + np.tanh(0.5 * P))
    sq = 0.5 * (1.0 + np.tanh(0.5 * Q))
    u, v = 1.0 - sp, sq
    su, sv = u.sum(axis=1), v.sum(axis=1)
    value = Q.shape[1] * (u * u).sum(axis=1) + 2.0 * su * sv + P.shape[1] * (v * v).sum(axis=1)
    dp = -2.0 * sp * (1.0 - sp) * (Q.shape[1] * u + sv[:, None])
    dq = 2.0 * sq * (1.0 - sq) * (su[:, None] + P.shape[1] * v)
    return value, dp, dq


def _logistic_pairs_many(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`logistic_pairs` for every row; one array op when each row's pairs fit one block.

    Row ``r`` is bit for bit ``logistic_pairs(P[r], Q[r])``: the pair block of a
    row is reduced exactly as the single call reduces it (a test holds them equal).
    """
    P, Q = np.ascontiguousarray(P, dtype=np.float64), np.ascontiguousarray(Q, dtype=np.float64)
    if Q.shape[1] and P.shape[1] <= max(1, _BLOCK // Q.shape[1]) and P.shape[0] * P.shape[1] * Q.shape[1] <= 4 * _BLOCK:
        c = P[:, :, None] - Q[:, None, :]           # the single call's operations, in place: the
        t = np.abs(c)                                # (M, n+, m) temporaries are not allocated anew
        np.exp(np.negative(t, out=t), out=t)
        tmp = np.maximum(np.negative(c), 0.0)
        value = tmp.sum(axis=(1, 2))
        value += np.log1p(t, out=tmp).sum(axis=(1, 2))
        sig = np.divide(1.0, np.add(t, 1.0, out=t), out=t)
        sig = np.subtract(0.5, np.copysign(np.subtract(sig, 0.5, out=sig), c, out=sig), out=sig)
        return value, -sig.sum(axis=2), np.zeros_like(Q) + sig.sum(axis=1)
    out = [logistic_pairs(np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64))
           for p, q in zip(P, Q)]
    return (np.array([o[0] for o in out]), np.array([o[1] for o in out]).reshape(P.shape),
            np.array([o[2] for o in out]).reshape(Q.shape))


#: surrogate name -> pair-sum function ``(p, q) -> (value, dp, dq)``
PAIR_SUMS = {
    "hinge": partial(truncated_power_pairs, k=1),
    "logistic": logistic_pairs,
    "squared_hinge": partial(truncated_power_pairs, k=2),
    "sigmoid": sigmoid_pairs,
}

#: surrogate name -> the pair sums of ``M`` models at once ``(P (M, n+), Q (M, m)) -> (values, DP, DQ)``
PAIR_SUMS_MANY = {
    "hinge": partial(truncated_power_pairs_many, k=1),
    "logistic": _logistic_pairs_many,
    "squared_hinge": partial(truncated_power_pairs_many, k=2),
    "sigmoid": sigmoid_pairs_many,
}
