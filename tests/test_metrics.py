"""Tests of ``nsdist.metrics`` against independent brute-force definitions (docs/measures.md).

The reference values here never use the module's sort/search code: AUC is the
O(n^2) double sum, and every tie at a cut-off is resolved by averaging over
*all* orders of the items (docs/measures.md §Ties: the value is the expectation over a
uniformly random order of the tied items).
"""
from __future__ import annotations

import doctest
import itertools
import math
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

import nsdist.metrics as metrics
from nsdist.metrics import auc, f1_score, partial_auc, prbep, precision_at_k

FAST = settings(max_examples=80, deadline=None, database=None)


# --------------------------------------------------------------------------
# brute-force references
# --------------------------------------------------------------------------


def spec_ceil(x: float) -> int:
    """docs/measures.md §Rounding: ceil after rounding to 9 decimals."""
    return math.ceil(round(x, 9))


@lru_cache(maxsize=None)
def all_orders(n: int) -> np.ndarray:
    """Every permutation of ``range(n)``, shape (n!, n): a tie-break priority per item."""
    return np.array(list(itertools.permutations(range(n))), dtype=np.int64).reshape(-1, n)


def top_sets_over_all_orders(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` highest of integer ``scores``, one row per order of the items.

    Items are ranked by (score, random priority); every priority order appears
    once, so a uniform average over the rows is the expectation of docs/measures.md §Ties.
    """
    n = scores.shape[0]
    key = scores[None, :] * n + all_orders(n)  # lexicographic (score, priority), all distinct
    return np.argsort(key, axis=1)[:, n - m:]


def brute_credit(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """credit[j] = sum_i [pos_i > neg_j] + 1/2 [pos_i == neg_j] (O(n+ n-))."""
    return ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).sum(axis=0)


def brute_auc(y: np.ndarray, s: np.ndarray) -> float:
    pos, neg = s[y], s[~y]
    return brute_credit(pos, neg).sum() / (pos.size * neg.size)


def brute_pauc(y: np.ndarray, s: np.ndarray, beta: float) -> float:
    """pAUC averaged over every order of *all* items (positives and negatives alike).

    In each order the items are ranked by (score, priority); ``J`` is the
    ``m`` highest-ranked negatives and a pair counts 1 iff the positive is
    ranked above the negative.
    """
    n = y.size
    m = max(1, spec_ceil(beta * int((~y).sum())))
    key = s[None, :] * n + all_orders(n)          # one row per order, all keys distinct
    neg_keys = np.sort(key[:, ~y], axis=1)[:, ::-1][:, :m]
    above = (key[:, y][:, :, None] > neg_keys[:, None, :]).sum(axis=(1, 2))
    return float(np.mean(above)) / (int(y.sum()) * m)


def brute_precision(y: np.ndarray, s: np.ndarray, K: int) -> float:
    top = top_sets_over_all_orders(s, K)
    return float(np.mean(y[top].sum(axis=1))) / K


def brute_f1(y: np.ndarray, s: np.ndarray, t: float) -> float:
    tp = sum(1 for yi, si in zip(y, s) if yi and si > t)
    fp = sum(1 for yi, si in zip(y, s) if not yi and si > t)
    fn = sum(1 for yi, si in zip(y, s) if yi and not si > t)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


# --------------------------------------------------------------------------
# data: boolean labels and small-range integer scores (many ties)
# --------------------------------------------------------------------------


@st.composite
def labelled(draw, min_size=1, max_size=7, need_pos=False, need_neg=False, max_score=3):
    n = draw(st.integers(min_size, max_size))
    y = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if need_pos and not y.any():
        y[draw(st.integers(0, n - 1))] = True
    if need_neg and y.all():
        y[draw(st.integers(0, n - 1))] = False
    s = np.array(draw(st.lists(st.integers(0, max_score), min_size=n, max_size=n)), dtype=np.int64)
    return y, s


def in_unit_interval(v) -> bool:
    return type(v) is float and 0.0 <= v <= 1.0


# --------------------------------------------------------------------------
# each measure equals its brute-force definition
# --------------------------------------------------------------------------


@FAST
@given(labelled(min_size=2, max_size=40, need_pos=True, need_neg=True, max_score=4))
def test_auc_is_the_pairwise_double_sum_and_sklearn(data):
    y, s = data
    value = auc(y, s)
    assert in_unit_interval(value)
    assert value == pytest.approx(brute_auc(y, s), abs=1e-12)
    assert value == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert partial_auc(y, s, 1.0) == value


@FAST
@given(labelled(min_size=2, max_size=8, need_pos=True, need_neg=True),
       st.sampled_from([0.01, 0.1, 0.25, 1 / 3, 0.5, 0.7, 1.0]))
def test_partial_auc_is_the_expectation_over_all_orders(data, beta):
    y, s = data
    value = partial_auc(y, s, beta)
    assert in_unit_interval(value)
    assert value == pytest.approx(brute_pauc(y, s, beta), abs=1e-12)


@FAST
@given(labelled(min_size=1, max_size=7), st.data())
def test_precision_at_k_is_the_expectation_over_all_orders(data, draw):
    y, s = data
    K = draw.draw(st.integers(1, y.size))
    value = precision_at_k(y, s, K)
    assert in_unit_interval(value)
    assert value == pytest.approx(brute_precision(y, s, K), abs=1e-12)


@FAST
@given(labelled(min_size=1, max_size=7), st.sampled_from([0.01, 0.1, 0.28, 0.5, 0.9, 1.0]))
def test_precision_at_k_fraction_is_ceil_of_k_n(data, k):
    y, s = data
    K = max(1, spec_ceil(k * y.size))
    assert precision_at_k(y, s, k) == pytest.approx(brute_precision(y, s, K), abs=1e-12)


@FAST
@given(labelled(min_size=1, max_size=7, need_pos=True))
def test_prbep_is_precision_at_n_pos(data):
    y, s = data
    value = prbep(y, s)
    assert in_unit_interval(value)
    assert value == pytest.approx(brute_precision(y, s, int(y.sum())), abs=1e-12)


@FAST
@given(labelled(min_size=1, max_size=30, need_pos=True), st.sampled_from([-1, 0, 0.5, 1, 2, 3.5]))
def test_f1_score_is_its_count_formula(data, t):
    y, s = data
    value = f1_score(y, s, threshold=t)
    assert in_unit_interval(value)
    assert value == brute_f1(y, s, t)


def test_hand_computed_values():
    y, s = [1, 0, 1, 0, 0], [0.9, 0.8, 0.3, 0.3, 0.1]
    assert auc(y, s) == 0.75                      # (3 + 0 + 1/2 + 1) / 6
    assert partial_auc(y, s, 0.5) == 0.625        # m = 2: (1 + 3/2) / 4
    # m = 2 of three negatives tied with the positive at the top: the first two of them
    # (random order) have 1/4 and 2/4 of the positive above them: (3/4) / (1 * 2)
    assert partial_auc([1, 0, 0, 0, 0, 0], [5, 5, 5, 5, 1, 0], 0.4) == 0.375
    # K = 3: one negative above, two of three tied (one positive) taken: (2/3) / 3
    assert precision_at_k([0, 1, 0, 0, 1], [9, 5, 5, 5, 0], 3) == pytest.approx(2 / 9, abs=1e-15)
    assert f1_score([1, 1, 0, 1, 0], [0.5, 2.0, 0.1, -1.0, 0.0]) == pytest.approx(2 / 3, abs=1e-15)
    assert f1_score([1, 0], [-1.0, 1.0]) == 0.0   # TP = 0


def test_partial_auc_one_equals_auc_exactly_on_float_scores():
    rng = np.random.default_rng(0)
    y = rng.random(5000) < 0.1
    s = np.round(rng.normal(size=5000), 2)        # real-valued with many ties
    assert partial_auc(y, s, 1.0) == auc(y, s)
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


# --------------------------------------------------------------------------
# ceil after rounding to 9 decimals (docs/measures.md §Rounding)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("beta, n_neg, m", [(0.1, 30, 3), (0.14, 50, 7)])
def test_partial_auc_m_is_ceil9(beta, n_neg, m):
    # one positive ranked just below the m-th highest of distinct negatives:
    # it beats exactly one of the top m  ->  1/m  (m + 1 would give 2/(m + 1)).
    neg = np.arange(n_neg, dtype=float)
    y = np.r_[np.ones(1, bool), np.zeros(n_neg, bool)]
    s = np.r_[n_neg - m + 0.5, neg]               # beats the m-th highest negative, n_neg - m
    assert partial_auc(y, s, beta) == pytest.approx(1 / m, abs=1e-15)
    assert metrics.n_top_negatives(beta, n_neg) == m


def test_the_ceil9_case_is_one_where_a_plain_ceil_differs():
    assert math.ceil(0.14 * 50) == 8              # 7.000000000000001: why docs/measures.md §Rounding rounds first


@pytest.mark.parametrize("k, n, K", [(0.1, 30, 3), (0.28, 25, 7), (3, 30, 3)])
def test_precision_at_k_int_and_float_k(k, n, K):
    # distinct scores n-1, ..., 0; positives at ranks 1..K-1 and K+1: K-1 hits in the top K
    y = np.zeros(n, bool)
    y[: K - 1] = True
    y[K] = True
    s = np.arange(n, 0, -1, dtype=float)
    assert precision_at_k(y, s, k) == pytest.approx((K - 1) / K, abs=1e-15)


# --------------------------------------------------------------------------
# invariances
# --------------------------------------------------------------------------


def all_measures(y, s, t=0.0):
    has_pos = bool(np.any(np.asarray(y) == 1))
    has_neg = bool(np.any(np.asarray(y) != 1))
    out = {"precision_at_k": precision_at_k(y, s, 0.5)}
    if has_pos:
        out.update(prbep=prbep(y, s), f1_score=f1_score(y, s, t))
    if has_pos and has_neg:
        out.update(auc=auc(y, s), partial_auc=partial_auc(y, s, 0.3))
    return out


@FAST
@given(labelled(min_size=1, max_size=30))
def test_label_encodings_give_identical_values(data):
    y, s = data
    reference = all_measures(y, s)
    assert all_measures(np.where(y, 1, -1), s) == reference
    assert all_measures(y.astype(int), s) == reference
    assert all_measures(y.astype(float).tolist(), s.tolist()) == reference


@FAST
@given(labelled(min_size=1, max_size=30, max_score=6), st.integers(-1, 7))
def test_invariant_to_strictly_increasing_transform(data, t):
    y, s = data

    def f(x):
        return np.asarray(x, dtype=float) ** 3 + 2.0 * np.asarray(x, dtype=float) - 11.0

    assert all_measures(y, f(s), float(f(t))) == all_measures(y, s, t)


def test_precision_at_k_needs_no_class():
    s = [3.0, 1.0, 2.0]
    assert precision_at_k([0, 0, 0], s, 2) == 0.0
    assert precision_at_k([1, 1, 1], s, 2) == 1.0
    assert prbep([1, 1, 1], s) == 1.0
    assert f1_score([1, 1, 1], s) == 1.0


# --------------------------------------------------------------------------
# bad input (docs/measures.md §Labels)
# --------------------------------------------------------------------------

MEASURES = {
    "auc": auc,
    "partial_auc": lambda y, s: partial_auc(y, s, 0.3),
    "precision_at_k": lambda y, s: precision_at_k(y, s, 2),
    "prbep": prbep,
    "f1_score": f1_score,
}
Y = [1, 0, 1, 0]
S = [0.4, 0.3, 0.2, 0.1]


@pytest.mark.parametrize("measure", MEASURES.values(), ids=MEASURES.keys())
@pytest.mark.parametrize("y, s, message", [
    (Y, [0.4, np.nan, 0.2, 0.1], r"s\[1\] = .*nan.* not finite"),
    (Y, [0.4, 0.3, np.inf, 0.1], r"s\[2\] = .*inf.* not finite"),
    (Y, [0.4, 0.3, -np.inf, 0.1], r"s\[2\] = .*inf.* not finite"),
    ([1, 0, 2, 0], S, r"y\[2\] = .*2.* is not a valid label"),
    (["b", "a", "b", "a"], S, r"y holds class names \('a', 'b'\), not labels .* y == 'a'"),
    ([[1, 0], [1, 0]], S, r"y must be 1-D"),
    ([1, 0, np.nan, 0], S, r"y\[2\] = .*nan.* is not a valid label"),
    ([1, 0, 1], S, r"s has 4 entries but the labels have 3"),
    (Y, [[0.4, 0.3], [0.2, 0.1]], r"s must be 1-D"),
    ([], [], r"y is empty"),
], ids=["nan-score", "inf-score", "-inf-score", "label-2", "string-labels", "2d-y", "nan-label",
        "length-mismatch", "2d-s", "empty"])
def test_bad_labels_and_scores(measure, y, s, message):
    with pytest.raises(ValueError, match=message):
        measure(y, s)


@pytest.mark.parametrize("name", ["auc", "partial_auc", "prbep", "f1_score"])
def test_no_positive(name):
    with pytest.raises(ValueError, match=rf"{name} needs at least one positive.*no positive"):
        MEASURES[name]([0, 0, 0, 0], S)


@pytest.mark.parametrize("name", ["auc", "partial_auc"])
def test_no_negative(name):
    with pytest.raises(ValueError, match=rf"{name} needs at least one negative.*no negative"):
        MEASURES[name]([1, 1, 1, 1], S)


@pytest.mark.parametrize("beta", [0, 0.0, 1.5, -0.1, float("nan"), True, "0.1", None])
def test_bad_beta(beta):
    with pytest.raises(ValueError, match=r"beta must be a number in \(0, 1\]"):
        partial_auc(Y, S, beta)


@pytest.mark.parametrize("k, message", [
    (0, r"k = 0 is out of range"),
    (5, r"k = 5 is out of range: need 1 <= k <= n = 4"),
    (1.5, r"k must be an int >= 1 or a float in \(0, 1\], got 1.5"),
    (0.0, r"k must be an int"),
    (True, r"k must be an int >= 1 or a float in \(0, 1\], got True"),
    ("2", r"k must be an int"),
])
def test_bad_k(k, message):
    with pytest.raises(ValueError, match=message):
        precision_at_k(Y, S, k)


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), True, "0", None])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match=r"threshold must be a finite number"):
        f1_score(Y, S, threshold)


# --------------------------------------------------------------------------
# building blocks and docstrings
# --------------------------------------------------------------------------


@FAST
@given(labelled(min_size=1, max_size=30, need_pos=True))
def test_pair_credit_is_the_pairwise_count(data):
    y, s = data
    pos = np.sort(s[y])
    np.testing.assert_array_equal(metrics.pair_credit(pos, s), brute_credit(s[y], s))


@FAST
@given(st.lists(st.integers(0, 3), min_size=1, max_size=20), st.data())
def test_top_cut_counts_above_and_at_the_cut_value(scores, draw):
    desc = np.sort(np.array(scores))[::-1]
    m = draw.draw(st.integers(1, desc.size))
    v = sorted(scores, reverse=True)[m - 1]
    assert metrics.top_cut(desc, m) == (sum(x > v for x in scores), sum(x == v for x in scores))


def test_doctests_pass():
    result = doctest.testmod(metrics)
    assert result.attempted >= 10
    assert result.failed == 0


# --------------------------------------------------------------------------
# scale: n = 10^6 against a chunked histogram computation
# --------------------------------------------------------------------------


def histogram_measures(chunks, n_values: int, beta: float, K: int, t: int) -> dict:
    """Every measure from per-chunk histograms of integer scores in [0, n_values)."""
    pos = sum(np.bincount(s[y], minlength=n_values) for y, s in chunks).astype(float)
    neg = sum(np.bincount(s[~y], minlength=n_values) for y, s in chunks).astype(float)
    n_pos, n_neg = pos.sum(), neg.sum()

    def above(h):                                 # items scoring strictly above each value
        return h[::-1].cumsum()[::-1] - h

    def taken(h, m):                              # expected items taken at each value, best first
        return np.clip(m - above(h), 0, h)

    credit = above(pos) + 0.5 * pos               # credit of a negative scoring each value
    m = max(1, spec_ceil(beta * n_neg))
    r = taken(neg, m)                             # negatives of J at each value
    # r of the g tied negatives in J, in random order with the p tied positives:
    # r * (positives above) + p r (r + 1) / (2 (g + 1))
    pauc_pairs = r * above(pos) + pos * r * (r + 1) / (2 * (neg + 1))
    both = pos + neg
    tp = pos[t + 1:].sum()
    return {
        "auc": float((neg * credit).sum() / (n_pos * n_neg)),
        "partial_auc": float(pauc_pairs.sum() / (n_pos * m)),
        "precision_at_k": float((taken(both, K) * np.divide(pos, both, where=both > 0,
                                                            out=np.zeros_like(pos))).sum() / K),
        "f1_score": float(2 * tp / (2 * tp + neg[t + 1:].sum() + (n_pos - tp))),
    }


def test_million_rows_match_a_chunked_computation():
    rng = np.random.default_rng(12345)
    n, n_values, beta, k, t = 10**6, 3000, 0.05, 0.01, 1500
    y = rng.random(n) < 0.03
    s = rng.integers(0, n_values, size=n) + np.where(y, 300, 0)
    s = np.minimum(s, n_values - 1)
    K = spec_ceil(k * n)
    chunks = list(zip(np.array_split(y, 7), np.array_split(s, 7)))

    expected = histogram_measures(chunks, n_values, beta, K, t)
    got = {"auc": auc(y, s), "partial_auc": partial_auc(y, s, beta),
           "precision_at_k": precision_at_k(y, s, k), "f1_score": f1_score(y, s, t)}
    assert got == pytest.approx(expected, rel=1e-12, abs=0)

    # the engine's route: all positives, and per chunk only the negatives scoring at
    # least the chunk's own m-th highest negative score, give the in-memory number exactly
    m = metrics.n_top_negatives(beta, int((~y).sum()))
    candidates = []
    for yc, sc in chunks:
        neg = np.sort(sc[~yc])[::-1]
        candidates.append(neg[neg >= neg[min(m, neg.size) - 1]])
    merged = np.sort(np.concatenate(candidates))[::-1]
    assert metrics.pauc_from_sorted(np.sort(s[y]), merged, m) == got["partial_auc"]
