"""Partial AUC with tied scores: the expectation over a random order of the tied items (docs/measures.md).

The reference here is exhaustive and exact: every order of the items within
each group of equal scores is enumerated (``itertools.permutations`` per
group, the groups' orders combined by ``itertools.product``), the pAUC of
each resulting ranking is counted, and the average is kept as a
:class:`fractions.Fraction`.  ``partial_auc`` divides Python integers once,
so it must equal ``float(reference)`` exactly, not approximately.

The rule being checked, where the cut-off falls inside a group of ``g``
negatives and ``p`` positives all scored ``t`` and ``r`` of those negatives
are in ``J``: in a random order the ``p`` positives fall uniformly into the
``g + 1`` gaps between the tied negatives, so the ``i``-th has ``p i / (g+1)``
positives above it, and the group's pairs earn ``p r (r + 1) / (2 (g + 1))``.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nsdist.metrics as metrics
from nsdist.data import Dataset
from nsdist.metrics import auc, partial_auc

FAST = settings(max_examples=150, deadline=None, database=None)
BETAS = [0.01, 0.1, 0.2, 0.25, 1 / 3, 0.4, 0.5, 0.7, 0.9, 1.0]


def spec_m(beta: float, n_neg: int) -> int:
    """``m = ceil(beta n-)`` after rounding the product to 9 decimals, at least 1."""
    return max(1, math.ceil(round(beta * n_neg, 9)))


def rankings(y: np.ndarray, s: np.ndarray):
    """Every ranking (best first) obtained by ordering the items of each tie group in every way.

    Each ranking comes from the same number of orders of all items, so a
    uniform average over them is the expectation over a uniformly random order.
    """
    groups = [np.flatnonzero(s == v).tolist() for v in sorted(set(s.tolist()), reverse=True)]
    for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield [i for order in orders for i in order]


def exhaustive_pauc(y: np.ndarray, s: np.ndarray, beta: float) -> Fraction:
    """pAUC as an exact fraction: the average over :func:`rankings` of
    ``(1/(n+ m)) #{(i pos, j in J) : i ranked above j}``."""
    y = np.asarray(y, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    m = spec_m(beta, n_neg)
    total, n_rankings = 0, 0
    for ranking in rankings(y, np.asarray(s)):
        pos_seen, taken = 0, 0
        for i in ranking:
            if y[i]:
                pos_seen += 1
            elif taken < m:
                taken += 1
                total += pos_seen                 # positives ranked above this negative of J
        n_rankings += 1
    return Fraction(total, n_rankings * n_pos * m)


def sampled_pauc(y: np.ndarray, s: np.ndarray, beta: float, n_orders: int, rng) -> tuple[float, float]:
    """Mean and standard error of the pAUC over ``n_orders`` uniformly random tie-breaks."""
    y = np.asarray(y, dtype=bool)
    m = spec_m(beta, int((~y).sum()))
    values = []
    for _ in range(n_orders):
        order = np.lexsort((rng.random(y.size), -np.asarray(s)))   # by score, ties at random
        ranked = y[order]
        pos_above = np.cumsum(ranked)[~ranked][:m]                  # positives above each negative
        values.append(pos_above.sum() / (y.sum() * m))
    values = np.asarray(values)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(n_orders))


@st.composite
def tied(draw, min_size=2, max_size=8, max_score=2):
    """Labels with both classes and small-range integer scores: heavy ties, often at the cut-off."""
    n = draw(st.integers(min_size, max_size))
    y = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if not y.any():
        y[draw(st.integers(0, n - 1))] = True
    if y.all():
        y[draw(st.integers(0, n - 1))] = False
    s = np.array(draw(st.lists(st.integers(0, max_score), min_size=n, max_size=n)), dtype=np.int64)
    return y, s


# --------------------------------------------------------------------------
# the exhaustive reference itself
# --------------------------------------------------------------------------


def test_exhaustive_reference_on_hand_computed_cases():
    # one positive, three negatives, all tied; m = 2: the positive is in each of the 4 gaps
    # with probability 1/4; the first two negatives have 1/4 and 2/4 of it above them
    assert exhaustive_pauc([1, 0, 0, 0], [5, 5, 5, 5], 0.5) == Fraction(3, 8)
    # no ties: the plain count
    assert exhaustive_pauc([1, 0, 1, 0], [4, 3, 2, 1], 0.5) == Fraction(1, 2)
    # whole tied group inside J (m = 1): the 1/2 rule; m = 2 adds a clear win: (1/2 + 1) / 2
    assert exhaustive_pauc([1, 0, 0, 0], [5, 5, 1, 0], 0.2) == Fraction(1, 2)
    assert exhaustive_pauc([1, 0, 0, 0], [5, 5, 1, 0], 0.5) == Fraction(3, 4)


def test_group_formula_equals_the_exhaustive_average():
    """``p r (r+1) / (2 (g+1))`` for a lone tied group, every (g, p, r) up to g + p = 7."""
    for g in range(1, 6):
        for p in range(1, 8 - g):
            y = np.r_[np.ones(p, bool), np.zeros(g, bool)]
            s = np.zeros(p + g, dtype=np.int64)
            for r in range(1, g + 1):
                beta = r / g
                expected = Fraction(p * r * (r + 1), 2 * (g + 1)) / (p * r)
                assert exhaustive_pauc(y, s, beta) == expected, (g, p, r)
                assert partial_auc(y, s, beta) == float(expected), (g, p, r)


# --------------------------------------------------------------------------
# partial_auc equals the exhaustive expectation, exactly
# --------------------------------------------------------------------------


@FAST
@given(tied(), st.sampled_from(BETAS))
def test_partial_auc_equals_exhaustive_expectation_exactly(data, beta):
    y, s = data
    assert partial_auc(y, s, beta) == float(exhaustive_pauc(y, s, beta))


@FAST
@given(tied(max_size=9, max_score=1), st.sampled_from(BETAS))
def test_two_score_levels_exactly(data, beta):
    """Only two distinct scores: the cut-off nearly always falls inside a mixed group."""
    y, s = data
    assert partial_auc(y, s, beta) == float(exhaustive_pauc(y, s, beta))


@FAST
@given(tied(max_size=40, max_score=3))
def test_beta_one_is_auc_exactly(data):
    y, s = data
    assert partial_auc(y, s, 1.0) == auc(y, s)


@FAST
@given(tied(max_size=40, max_score=3), st.sampled_from(BETAS), st.randoms(use_true_random=False))
def test_row_order_does_not_matter(data, beta, random):
    y, s = data
    perm = list(range(y.size))
    random.shuffle(perm)
    assert partial_auc(y[perm], s[perm], beta) == partial_auc(y, s, beta)


@FAST
@given(tied(max_size=40, max_score=3), st.sampled_from(BETAS))
def test_ties_never_beat_breaking_them_in_favour_of_positives(data, beta):
    """The expectation lies between the worst and the best tie-break."""
    y, s = data
    best = partial_auc(y, s * 2 + y, beta)        # positives ahead of tied negatives
    worst = partial_auc(y, s * 2 + ~y, beta)      # negatives ahead
    assert worst <= partial_auc(y, s, beta) <= best


@pytest.mark.parametrize("n_pos, n_neg", [(1, 1), (1, 5), (3, 30), (7, 100), (50, 997), (1, 10**5)])
@pytest.mark.parametrize("beta", [0.01, 0.1, 0.14, 0.5, 1.0])
def test_constant_scores_give_m_plus_one_over_twice_n_neg_plus_one(n_pos, n_neg, beta):
    y = np.r_[np.ones(n_pos, bool), np.zeros(n_neg, bool)]
    m = spec_m(beta, n_neg)
    expected = Fraction(m + 1, 2 * (n_neg + 1))
    for c in (0.0, -3.5, 1e300):
        assert partial_auc(y, np.full(y.size, c), beta) == float(expected)
    if beta == 1.0:
        assert float(expected) == 0.5
    elif n_neg >= 1000:
        assert abs(float(expected) - beta / 2) < 1e-3


def test_positives_above_the_straddling_group_count_fully():
    # negatives: 9 (above), then four at 5; positives: one at 7, two at 5, one at 0.
    # n- = 5, beta = 0.6 -> m = 3: J = the 9 and r = 2 of the g = 4 at 5.
    y = [0, 1, 0, 0, 0, 0, 1, 1, 1]
    s = [9, 7, 5, 5, 5, 5, 5, 5, 0]
    # pairs: the 9 beats all -> 0; the positive at 7 beats both J-negatives at 5 -> 2;
    # the two positives at 5 against r = 2 of g = 4: 2 * 2 * 3 / (2 * 5) = 6/5
    expected = Fraction(2) + Fraction(6, 5)
    assert exhaustive_pauc(np.array(y, bool), np.array(s), 0.6) == expected / (4 * 3)
    assert partial_auc(y, s, 0.6) == float(expected / (4 * 3))


def test_larger_tied_sample_matches_random_tie_breaks():
    """n = 400, eleven score levels: the mean over 4000 random tie-breaks is within 5 standard errors."""
    rng = np.random.default_rng(7)
    y = rng.random(400) < 0.2
    s = rng.integers(0, 11, size=400) + 3 * y
    for beta in (0.05, 0.13, 0.3):
        mean, se = sampled_pauc(y, s, beta, 4000, rng)
        assert abs(partial_auc(y, s, beta) - mean) <= 5 * se + 1e-12


# --------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------


@FAST
@given(tied(min_size=1, max_size=30, max_score=4))
def test_pair_credit2_is_twice_pair_credit(data):
    y, s = data
    pos = np.sort(s[y])
    twice = metrics.pair_credit2(pos, s)
    assert twice.dtype.kind == "i"
    np.testing.assert_array_equal(twice, 2 * metrics.pair_credit(pos, s))


def test_pauc_from_counts_refuses_a_cut_outside_the_tied_group():
    with pytest.raises(ValueError, match="cut-off"):
        metrics.pauc_from_counts(0, n_above=3, n_tied=2, pos_above=0, pos_tied=0, n_pos=1, m=3)
    with pytest.raises(ValueError, match="cut-off"):
        metrics.pauc_from_counts(0, n_above=0, n_tied=2, pos_above=0, pos_tied=0, n_pos=1, m=3)


def test_huge_counts_stay_exact():
    """Counts past 2**53 are Python integers: the ratio is still correctly rounded."""
    n_pos, n_neg = 10**9, 10**10
    value = metrics.pauc_from_counts(0, n_above=0, n_tied=n_neg, pos_above=0, pos_tied=n_pos,
                                     n_pos=n_pos, m=n_neg // 10)
    assert value == float(Fraction(n_neg // 10 + 1, 2 * (n_neg + 1)))


# --------------------------------------------------------------------------
# the out-of-core evaluation on a real LocalCluster gives the same numbers
# --------------------------------------------------------------------------


def write_partitions(root, X: np.ndarray, y: np.ndarray, n_parts: int) -> str:
    """``n_parts`` Parquet files of consecutive rows, columns ``f0..`` and ``label``."""
    root.mkdir(parents=True, exist_ok=True)
    for i, idx in enumerate(np.array_split(np.arange(y.size), n_parts)):
        cols = {f"f{j}": X[idx, j] for j in range(X.shape[1])}
        cols["label"] = y[idx].astype(np.int8)
        pq.write_table(pa.table(cols), root / f"part-{i:05d}.parquet")
    return str(root)


@pytest.fixture(scope="module")
def tied_dataset(tmp_path_factory):
    """3000 rows, 10% positive, 2 integer features in {0, 1, 2}: about nine distinct scores."""
    rng = np.random.default_rng(3)
    n = 3000
    y = np.where(rng.random(n) < 0.1, 1, -1)
    X = rng.integers(0, 3, size=(n, 2)).astype(np.float64)
    X[y > 0, 0] = np.minimum(X[y > 0, 0] + rng.integers(0, 2, size=int((y > 0).sum())), 2)
    return write_partitions(tmp_path_factory.mktemp("pauc-ties"), X, y, 5), X, y


@pytest.mark.parametrize("w, b", [((1.0, 1.0), 0.0), ((2.0, 0.0), -1.0), ((0.0, 0.0), 0.0),
                                  ((1.0, 3.0), 0.5)], ids=["sum", "one-feature", "constant", "lexicographic"])
def test_evaluate_dataset_equals_in_memory_on_heavy_ties(dask_client, tied_dataset, w, b):
    from nsdist.engine.evaluate import evaluate_dataset

    url, X, y = tied_dataset
    w = np.asarray(w)
    s = X @ w + b
    assert np.unique(s).size <= 9
    ds = Dataset.open(url)
    for beta in (0.01, 0.1, 0.137, 0.5, 1.0):
        got = evaluate_dataset(dask_client, ds, w, b, beta=beta)
        assert got["partial_auc"] == partial_auc(y, s, beta), beta
        assert got["auc"] == auc(y, s)
    if not w.any():
        n_neg = int((y < 0).sum())
        m = spec_m(0.1, n_neg)
        assert evaluate_dataset(dask_client, ds, w, b, beta=0.1)["partial_auc"] == \
            float(Fraction(m + 1, 2 * (n_neg + 1)))


def test_evaluate_cut_straddles_a_mixed_group(dask_client, tmp_path):
    """A cut-off inside a group of tied positives and negatives spread over several partitions."""
    from nsdist.engine.evaluate import evaluate_dataset

    # scores are the single feature: 40 negatives at 3, then 200 negatives and 30 positives at 2,
    # then the rest at 0 / 1; beta = 0.1 of 1000 negatives -> m = 100 cuts the group at 2 (r = 60)
    rng = np.random.default_rng(11)
    s = np.r_[np.full(40, 3.0), np.full(230, 2.0), rng.integers(0, 2, 770).astype(float), np.full(5, 4.0)]
    y = np.r_[-np.ones(40), np.where(np.arange(230) < 30, 1, -1), -np.ones(760), np.ones(10), np.ones(5)]
    perm = rng.permutation(s.size)
    s, y = s[perm], y[perm].astype(int)
    url = write_partitions(tmp_path / "straddle", s[:, None], y, 7)
    got = evaluate_dataset(dask_client, Dataset.open(url), np.array([1.0]), 0.0, beta=0.1)
    n_neg = int((y < 0).sum())
    assert n_neg == 1000 and spec_m(0.1, n_neg) == 100
    n_pos = int((y > 0).sum())
    pos_above = int(((y > 0) & (s > 2)).sum())
    # the 40 negatives at 3 and the 60 of J at 2 each have the pos_above positives above them
    expected = Fraction(100 * pos_above) + Fraction(30 * 60 * 61, 2 * 201)
    assert got["partial_auc"] == partial_auc(y, s, 0.1) == float(expected / (n_pos * 100))


@settings(max_examples=25, deadline=None, database=None)
@given(st.integers(20, 300), st.integers(1, 4), st.integers(1, 4), st.sampled_from(BETAS),
       st.randoms(use_true_random=False))
def test_evaluate_dataset_equals_in_memory_on_random_tied_data(dask_client, tmp_path_factory, n, n_parts,
                                                               n_levels, beta, random):
    """Random data with 1-4 score levels over 1-4 partitions: every measure, exactly."""
    from nsdist.engine.evaluate import evaluate_dataset

    rng = np.random.default_rng(random.getrandbits(32))
    y = np.where(rng.random(n) < rng.uniform(0.05, 0.6), 1, -1)
    y[:2] = [1, -1]
    s = rng.integers(0, n_levels, size=n).astype(np.float64)
    url = write_partitions(tmp_path_factory.mktemp("random-ties"), s[:, None], y, min(n_parts, n))
    got = evaluate_dataset(dask_client, Dataset.open(url), np.array([1.0]), 0.0, beta=beta, k=0.2)
    assert got["partial_auc"] == partial_auc(y, s, beta)
    assert got["auc"] == auc(y, s)
    assert got["precision_at_k"] == metrics.precision_at_k(y, s, 0.2)
    assert got["prbep"] == metrics.prbep(y, s)
    assert got["f1_score"] == metrics.f1_score(y, s)
