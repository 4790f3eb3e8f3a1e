"""Non-decomposable performance measures (docs/measures.md).

Every measure takes labels ``y`` (``{-1,+1}``, ``{0,1}`` or bool; ``+1`` is the
positive class) and real scores ``s`` of the same length, and returns a Python
``float`` in ``[0, 1]``, higher is better.  Ties in the scores are never broken
by position: a value is its expectation over a uniformly random order of the
tied items (docs/measures.md §Ties).

=====================  ===========================  ================================
measure                needs                        definition (docs/measures.md)
=====================  ===========================  ================================
:func:`auc`            a positive and a negative    Wilcoxon-Mann-Whitney, ties 1/2
:func:`partial_auc`    a positive and a negative    AUC against the top
                                                    ``ceil(beta n-)`` negatives
:func:`precision_at_k` nothing                      precision of the top ``K`` scores
:func:`prbep`          a positive                   ``precision_at_k(y, s, n+)``
:func:`f1_score`       a positive                   F1 of the labelling ``s > t``
=====================  ===========================  ================================

Building blocks for a streamed (out-of-core) evaluation
-------------------------------------------------------
The measures are computed from small pieces that an engine can apply to data
it sees one partition at a time, and that give the same numbers as the
in-memory functions on the same rows:

* :func:`pair_credit` -- the AUC credit of a negative against all positives,
  and :func:`pair_credit2`, the same doubled (an exact integer);
* :func:`top_cut` and :func:`expected_top_sum` -- the top-``m`` selection
  with ties at the cut-off taken in expectation (the one copy of that logic);
* :func:`n_top_negatives` -- ``m`` of partial AUC;
* :func:`pauc_from_counts` -- partial AUC from integer counts around the
  cut-off (the one copy of the straddling-tie rule);
* :func:`pauc_from_sorted`, :func:`precision_from_sorted`,
  :func:`f1_from_counts` -- each measure from its sufficient statistics.

``pauc_from_sorted`` needs *all* positive scores, but of the negatives only
those scoring at least the ``m``-th highest negative score; likewise
``precision_from_sorted`` needs only the items scoring at least the ``K``-th
highest score.  A partition that keeps its items scoring at least *its own*
``m``-th highest score (ties included) keeps every such item, so the union of
the partitions' candidates is enough.
"""
from __future__ import annotations

from numbers import Real

import numpy as np

from ._validation import as_pm1_labels, ceil9, check_beta, check_scores, resolve_k

__all__ = ["auc", "partial_auc", "precision_at_k", "prbep", "f1_score"]


# --------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------


def pair_credit(sorted_pos_scores: np.ndarray, s: np.ndarray) -> np.ndarray:
    """AUC credit of each score in ``s`` against the positives.

    ``credit(s_j) = #{i pos : s_i > s_j} + 1/2 #{i pos : s_i == s_j}``, the
    inner sum of the AUC (docs/measures.md §AUC) for one negative ``j``.

    Parameters
    ----------
    sorted_pos_scores : ndarray of shape (n_pos,)
        Scores of all positives, sorted ascending.
    s : ndarray of shape (n,)
        Scores to credit (usually negatives).

    Returns
    -------
    ndarray of shape (n,), float64
        Half-integers in ``[0, n_pos]``.

    Examples
    --------
    >>> pair_credit(np.array([0.2, 0.5, 0.5, 0.9]), np.array([0.5, 1.0, 0.0]))
    array([2., 0., 4.])
    """
    n_pos = sorted_pos_scores.shape[0]
    n_at_most = np.searchsorted(sorted_pos_scores, s, side="right")
    n_below = np.searchsorted(sorted_pos_scores, s, side="left")
    return (n_pos - n_at_most) + 0.5 * (n_at_most - n_below)


def pair_credit2(sorted_pos_scores: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Twice :func:`pair_credit`, as exact integers.

    ``2 #{i pos : s_i > s_j} + #{i pos : s_i == s_j}`` for each ``s_j``: sums
    of these stay exact (no rounding) however many items are added, in any
    order, so a streamed evaluation adds up the same integers as the
    in-memory one.

    Examples
    --------
    >>> pair_credit2(np.array([0.2, 0.5, 0.5, 0.9]), np.array([0.5, 1.0, 0.0]))
    array([4, 0, 8])
    """
    n_pos = sorted_pos_scores.shape[0]
    n_at_most = np.searchsorted(sorted_pos_scores, s, side="right").astype(np.int64)
    n_below = np.searchsorted(sorted_pos_scores, s, side="left").astype(np.int64)
    return 2 * n_pos - n_at_most - n_below


def top_cut(scores_desc: np.ndarray, m: int) -> tuple[int, int]:
    """Where the ``m`` highest scores are cut off.

    With ``v = scores_desc[m - 1]`` the ``m``-th highest score, the top ``m``
    hold the ``g`` items scoring above ``v`` and ``m - g`` of the ``q`` items
    scoring exactly ``v``.  Sorted descending, those are the items
    ``[:g]`` and ``[g:g + q]``.

    Parameters
    ----------
    scores_desc : ndarray of shape (n,)
        Scores sorted descending; only the items scoring at least ``v`` are
        needed (see the module notes on streamed evaluation).
    m : int
        Number of items selected, ``1 <= m <= n``.

    Returns
    -------
    g, q : int
        ``#{s > v}`` and ``#{s == v}``; ``g < m <= g + q``.

    Examples
    --------
    >>> top_cut(np.array([9, 7, 7, 7, 3]), 2)
    (1, 3)
    """
    scores_asc = scores_desc[::-1]
    v = scores_desc[m - 1]
    n_at_most = int(np.searchsorted(scores_asc, v, side="right"))
    n_below = int(np.searchsorted(scores_asc, v, side="left"))
    return scores_desc.shape[0] - n_at_most, n_at_most - n_below


def expected_top_sum(above: float, tied: float, g: int, q: int, m: int) -> float:
    """Expected sum of a value over the ``m`` highest-scored items, ties in random order.

    Under a uniformly random order of the ``q`` items tied at the cut value,
    each of them is among the top ``m`` with probability ``(m - g) / q``
    (docs/measures.md §Ties), so ::

        E[sum_{j in top m} value_j] = above + (m - g) * tied / q

    Parameters
    ----------
    above : float
        Sum of the value over the ``g`` items scoring above the cut value.
    tied : float
        Sum of the value over the ``q`` items scoring exactly the cut value.
    g, q : int
        As returned by :func:`top_cut`.
    m : int
        Number of items selected.

    Returns
    -------
    float

    Examples
    --------
    One positive above the cut; two of four tied items are taken, and one
    of the four is positive:

    >>> expected_top_sum(above=1, tied=1, g=1, q=4, m=3)
    1.5
    """
    return float(above + (m - g) * tied / q)


def n_top_negatives(beta: float, n_neg: int) -> int:
    """``m = ceil(beta * n-)`` of partial AUC, after rounding to 9 decimals (docs/measures.md §Rounding).

    At least 1, so that a tiny ``beta > 0`` still selects one negative.

    Examples
    --------
    >>> n_top_negatives(0.1, 30)
    3
    """
    return max(1, ceil9(beta * n_neg))


def pauc_from_counts(credit2_above: int, n_above: int, n_tied: int, pos_above: int, pos_tied: int,
                     n_pos: int, m: int) -> float:
    """Partial AUC from integer counts around the cut-off score ``t`` (docs/measures.md §Partial AUC).

    ``t`` is the ``m``-th highest negative score; ``a = n_above`` negatives
    score above ``t`` and ``g = n_tied`` exactly ``t``, so ``J`` (the ``m``
    highest-ranked negatives) holds the ``a`` and the first ``r = m - a`` of
    the ``g`` in a uniformly random order of the items tied at ``t``
    (``1 <= r <= g``).  Of the ``p = pos_tied`` positives also scoring ``t``,
    each falls uniformly into one of the ``g + 1`` gaps between the tied
    negatives, so the ``i``-th tied negative has ``p i / (g + 1)`` of them
    above it in expectation::

        E[sum_{i pos} sum_{j in J} [i ranked above j]]
            = credit2_above / 2 + r * pos_above + p r (r + 1) / (2 (g + 1))

    where ``credit2_above`` is the sum of :func:`pair_credit2` over the ``a``
    negatives above ``t`` (their tied pairs count 1/2: those negatives are
    in ``J`` whatever the order) and ``pos_above`` counts the positives
    scoring above ``t``.  With ``r = g`` the last term is ``p g / 2``, the
    1/2 rule.  The value is that sum over ``n+ m``, computed as one ratio of
    Python integers, hence correctly rounded: equal inputs give the same
    float whichever way the counts were gathered.

    Examples
    --------
    Constant scores, 1 positive and 5 negatives, ``m = 2``:
    ``(m + 1) / (2 (n- + 1)) = 3 / 12``:

    >>> pauc_from_counts(0, n_above=0, n_tied=5, pos_above=0, pos_tied=1, n_pos=1, m=2)
    0.25
    """
    a, g, p, P = int(n_above), int(n_tied), int(pos_tied), int(pos_above)
    r = int(m) - a
    if not 0 < r <= g:
        raise ValueError(f"the cut-off must fall among the tied negatives: m = {m}, {a} above, {g} tied")
    num = (g + 1) * (int(credit2_above) + 2 * r * P) + p * r * (r + 1)
    return num / (2 * (g + 1) * int(n_pos) * int(m))


def pauc_from_sorted(sorted_pos_scores: np.ndarray, neg_scores_desc: np.ndarray, m: int) -> float:
    """Partial AUC against the ``m`` highest-ranked negatives (docs/measures.md §Partial AUC).

    The expectation over a uniformly random order of the tied items of
    ``(1 / (n+ m)) sum_{i pos} sum_{j in J} [i ranked above j]``; see
    :func:`pauc_from_counts` for the rule where the cut-off falls inside a
    group of tied items.

    Parameters
    ----------
    sorted_pos_scores : ndarray of shape (n_pos,)
        All positive scores, sorted ascending, ``n_pos >= 1``.
    neg_scores_desc : ndarray
        Negative scores sorted descending: at least every negative scoring
        at least the ``m``-th highest negative score.
    m : int
        ``1 <= m``; :func:`n_top_negatives` of the total number of negatives.

    Returns
    -------
    float
    """
    n_above, n_tied = top_cut(neg_scores_desc, m)
    t = neg_scores_desc[m - 1]
    n_pos = sorted_pos_scores.shape[0]
    pos_at_most = int(np.searchsorted(sorted_pos_scores, t, side="right"))
    pos_below = int(np.searchsorted(sorted_pos_scores, t, side="left"))
    credit2_above = int(pair_credit2(sorted_pos_scores, neg_scores_desc[:n_above]).sum())
    return pauc_from_counts(credit2_above, n_above, n_tied, n_pos - pos_at_most, pos_at_most - pos_below,
                            n_pos, m)


def precision_from_sorted(scores_desc: np.ndarray, is_pos_desc: np.ndarray, k_top: int) -> float:
    """Precision of the ``k_top`` highest scores, ties at the cut-off in expectation.

    ``E[TP] = #{pos above v} + (K - g) * #{pos at v} / q`` (see :func:`top_cut`).

    Parameters
    ----------
    scores_desc : ndarray
        Scores sorted descending: at least every item scoring at least the
        ``k_top``-th highest score.
    is_pos_desc : ndarray of bool, same shape
        Whether each of those items is positive.
    k_top : int
        ``K >= 1``, e.g. from :func:`nsdist._validation.resolve_k` on the total ``n``.

    Returns
    -------
    float
    """
    g, q = top_cut(scores_desc, k_top)
    pos_above = np.count_nonzero(is_pos_desc[:g])
    pos_tied = np.count_nonzero(is_pos_desc[g : g + q])
    return expected_top_sum(pos_above, pos_tied, g, q, k_top) / k_top


def f1_from_counts(tp: int, fp: int, fn: int) -> float:
    """``F1 = 2TP / (2TP + FP + FN)``, and 0 when ``TP = 0`` (docs/measures.md §F1).

    Examples
    --------
    >>> f1_from_counts(tp=2, fp=1, fn=1)
    0.6666666666666666
    >>> f1_from_counts(tp=0, fp=3, fn=2)
    0.0
    """
    return 2.0 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0


# --------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------


def _labels_and_scores(y, s) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``{-1,+1}`` labels and finite scores of the same length (docs/measures.md §Labels)."""
    y = as_pm1_labels(y, name="y")
    return y, check_scores(s, y.shape[0], name="s")


def _class_counts(y: np.ndarray, measure: str, *, need_pos: bool, need_neg: bool) -> tuple[int, int]:
    """``(n+, n-)``, raising if ``measure`` needs a class that ``y`` lacks."""
    n_pos = int(np.count_nonzero(y == 1))
    n_neg = y.shape[0] - n_pos
    if need_pos and n_pos == 0:
        raise ValueError(f"{measure} needs at least one positive label, but y has no positive "
                         f"(all {n_neg} labels are negative)")
    if need_neg and n_neg == 0:
        raise ValueError(f"{measure} needs at least one negative label, but y has no negative "
                         f"(all {n_pos} labels are positive)")
    return n_pos, n_neg


# --------------------------------------------------------------------------
# measures
# --------------------------------------------------------------------------


def _at_least_top(s: np.ndarray, m: int) -> np.ndarray:
    """Positions of the entries of ``s`` scoring at least its ``m``-th highest score (ties at the cut included).

    What :func:`pauc_from_sorted` and :func:`precision_from_sorted` need of
    the items (see the module notes): a linear-time partition finds the
    ``m``-th highest score, so that only these entries are sorted.
    """
    if m >= s.shape[0]:
        return np.arange(s.shape[0])
    return np.flatnonzero(s >= np.partition(s, s.shape[0] - m)[s.shape[0] - m])


def _pauc(y, s, beta, measure: str) -> float:
    """Shared path of :func:`auc` (``beta = 1``, so ``m = n-``) and :func:`partial_auc`."""
    y, s = _labels_and_scores(y, s)
    _, n_neg = _class_counts(y, measure, need_pos=True, need_neg=True)
    m = n_top_negatives(check_beta(beta), n_neg)
    is_pos = y == 1
    neg = s[~is_pos]
    return pauc_from_sorted(np.sort(s[is_pos]), np.sort(neg[_at_least_top(neg, m)])[::-1], m)


def auc(y, s) -> float:
    """Area under the ROC curve: the Wilcoxon-Mann-Whitney statistic (docs/measures.md §AUC).

    ``AUC = (1/(n+ n-)) sum_{i pos} sum_{j neg} ([s_i > s_j] + 1/2 [s_i == s_j])``,
    computed in O(n log n).  Equal to ``partial_auc(y, s, beta=1.0)``.

    Parameters
    ----------
    y : array-like of shape (n,)
        Labels in ``{-1,+1}``, ``{0,1}`` or bool; needs at least one positive
        and at least one negative.
    s : array-like of shape (n,)
        Finite real scores, higher meaning more positive.

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Invalid labels or scores, or ``y`` has no positive or no negative.

    Examples
    --------
    >>> auc([1, 0, 1, 0, 0], [0.9, 0.8, 0.3, 0.3, 0.1])
    0.75
    """
    return _pauc(y, s, 1.0, "auc")


def partial_auc(y, s, beta: float = 0.1) -> float:
    """Partial AUC over the top ``beta`` fraction of negatives (docs/measures.md §Partial AUC).

    With ``m = ceil(beta * n-)`` (after rounding the product to 9 decimals) and
    ``J`` the ``m`` highest-ranked negatives::

        pAUC = (1/(n+ m)) sum_{i pos} sum_{j in J} [i ranked above j]

    in expectation over a uniformly random order of the tied items (docs/measures.md §Ties).
    Let ``t`` be the ``m``-th highest negative score.  Pairs whose negative
    scores above ``t`` count 1 if the positive scores higher and 1/2 if it
    ties.  If ``g`` negatives and ``p`` positives score exactly ``t`` and
    ``r`` of those negatives are in ``J``, their pairs with those positives
    earn ``p r (r + 1) / (2 (g + 1))`` in all (``p g / 2`` when ``r = g``), so
    constant scores give ``(m + 1) / (2 (n- + 1))``, about ``beta / 2``.
    Exact, in O(n log n); ``partial_auc(y, s, 1.0) == auc(y, s)``.

    Parameters
    ----------
    y : array-like of shape (n,)
        Labels in ``{-1,+1}``, ``{0,1}`` or bool; needs at least one positive
        and at least one negative.
    s : array-like of shape (n,)
        Finite real scores.
    beta : float, default 0.1
        Fraction of negatives, in ``(0, 1]``.

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Invalid labels or scores, ``beta`` outside ``(0, 1]``, or ``y`` has no
        positive or no negative.

    Examples
    --------
    ``m = ceil(0.5 * 3) = 2`` negatives, scored 0.8 and 0.3:

    >>> partial_auc([1, 0, 1, 0, 0], [0.9, 0.8, 0.3, 0.3, 0.1], beta=0.5)
    0.625

    Here ``m = 2`` but three negatives tie with the single positive at the
    top: in a random order of the four, the first two negatives have on
    average ``1/4`` and ``2/4`` of a positive above them, ``(3/4) / 2``:

    >>> partial_auc([1, 0, 0, 0, 0, 0], [5, 5, 5, 5, 1, 0], beta=0.4)
    0.375
    """
    return _pauc(y, s, beta, "partial_auc")


def _precision(y: np.ndarray, s: np.ndarray, k_top: int) -> float:
    """Precision of the top ``k_top`` of validated ``(y, s)``."""
    top = _at_least_top(s, k_top)
    order = top[np.argsort(s[top])[::-1]]
    return precision_from_sorted(s[order], y[order] == 1, k_top)


def precision_at_k(y, s, k) -> float:
    """Precision of the ``K`` highest scores (docs/measures.md §Precision at k).

    ``K = k`` for an int ``k >= 1``; ``K = ceil(k * n)`` (after rounding to 9
    decimals) for a float ``k`` in ``(0, 1]``.  If items tie at the cut-off
    (``g`` above the cut value ``v``, ``q`` exactly at ``v``, of which ``p_t``
    positive), the value is the expectation over a random order of the ties::

        Prec@K = (#{pos above v} + (K - g) p_t / q) / K

    Parameters
    ----------
    y : array-like of shape (n,)
        Labels in ``{-1,+1}``, ``{0,1}`` or bool; any class mix (no positive
        gives 0).
    s : array-like of shape (n,)
        Finite real scores.
    k : int or float
        Number (int, ``1 <= k <= n``) or fraction (float in ``(0, 1]``) of
        items; bool is refused.

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Invalid labels or scores, or ``k`` out of range.

    Examples
    --------
    >>> precision_at_k([1, 0, 1, 0], [4, 3, 2, 1], k=2)
    0.5

    Two of the three tied items (one positive) are taken, in expectation 2/3
    of a positive:

    >>> precision_at_k([0, 1, 0, 0, 1], [9, 5, 5, 5, 0], k=3)
    0.2222222222222222
    """
    y, s = _labels_and_scores(y, s)
    return _precision(y, s, resolve_k(k, y.shape[0]))


def prbep(y, s) -> float:
    """Precision-recall break-even point: ``precision_at_k(y, s, n+)`` (docs/measures.md §PRBEP).

    At ``K = n+`` precision equals recall.

    Parameters
    ----------
    y : array-like of shape (n,)
        Labels in ``{-1,+1}``, ``{0,1}`` or bool; needs at least one positive.
    s : array-like of shape (n,)
        Finite real scores.

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Invalid labels or scores, or ``y`` has no positive.

    Examples
    --------
    >>> prbep([1, 0, 1, 0], [4, 3, 2, 1])
    0.5
    """
    y, s = _labels_and_scores(y, s)
    n_pos, _ = _class_counts(y, "prbep", need_pos=True, need_neg=False)
    return _precision(y, s, n_pos)


def f1_score(y, s, threshold: float = 0.0) -> float:
    """F-measure of the labelling ``s > threshold`` (docs/measures.md §F1).

    ``F1 = 2TP / (2TP + FP + FN)``, and 0 when ``TP = 0``.

    Parameters
    ----------
    y : array-like of shape (n,)
        Labels in ``{-1,+1}``, ``{0,1}`` or bool; needs at least one positive.
    s : array-like of shape (n,)
        Finite real scores.
    threshold : float, default 0.0
        Finite; items scoring strictly above it are labelled positive.

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    ValueError
        Invalid labels, scores or threshold, or ``y`` has no positive.

    Examples
    --------
    TP = 2, FP = 1, FN = 1:

    >>> f1_score([1, 1, 0, 1, 0], [0.5, 2.0, 0.1, -1.0, 0.0])
    0.6666666666666666
    """
    y, s = _labels_and_scores(y, s)
    n_pos, _ = _class_counts(y, "f1_score", need_pos=True, need_neg=False)
    if isinstance(threshold, bool) or not isinstance(threshold, Real) or not np.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    predicted = s > threshold
    tp = int(np.count_nonzero(predicted & (y == 1)))
    fp = int(np.count_nonzero(predicted)) - tp
    return f1_from_counts(tp, fp, n_pos - tp)
