"""``nsdist.losses`` against brute force and first principles (docs/surrogates.md)."""
from __future__ import annotations

import itertools
import math
import tracemalloc
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsdist import losses, metrics

SURROGATES = ("hinge", "logistic", "squared_hinge")
STRUCTURAL = [("prec@k", {"k": 1}), ("prec@k", {"k": 0.3}), ("prbep", {}), ("f1", {})]
PAUC = [("pauc", {"beta": beta, "surrogate": phi}) for beta in (0.1, 0.5) for phi in SURROGATES] + [
    ("auc", {"surrogate": phi}) for phi in SURROGATES
]
ALL = STRUCTURAL + PAUC
IDS = [f"{name}{params}" for name, params in ALL]

fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------


@st.composite
def buffers(draw, max_n: int = 12, both_classes: bool = True):
    """``(X, y, w)``: either small integers (many exact ties) or continuous data."""
    n = draw(st.integers(2 if both_classes else 1, max_n))
    d = draw(st.integers(1, 3))
    if both_classes:
        n_pos = draw(st.integers(1, n - 1))
        y = np.array(draw(st.permutations([1] * n_pos + [-1] * (n - n_pos))), dtype=np.int8)
    else:
        y = np.array(draw(st.lists(st.sampled_from([-1, 1]), min_size=n, max_size=n)), dtype=np.int8)
    if draw(st.booleans()):
        X = np.array(draw(st.lists(st.integers(-3, 3), min_size=n * d, max_size=n * d)), float).reshape(n, d)
        w = np.array(draw(st.lists(st.integers(-2, 2), min_size=d, max_size=d)), float)
    else:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        X, w = rng.standard_normal((n, d)), rng.standard_normal(d)
    return X, y, w


def random_buffer(seed: int, n: int, d: int, pos_frac: float):
    rng = np.random.default_rng(seed)
    n_pos = min(n - 1, max(1, round(pos_frac * n)))
    y = rng.permutation(np.repeat(np.array([1, -1], dtype=np.int8), [n_pos, n - n_pos]))
    X = rng.standard_normal((n, d)) + 0.5 * y[:, None]
    return X, y, rng.standard_normal(d)


# --------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------


@lru_cache(maxsize=None)
def all_labellings(n: int) -> np.ndarray:
    return np.array(list(itertools.product([-1, 1], repeat=n)), dtype=float)


def resolve_count(name: str, params: dict, y: np.ndarray) -> int | None:
    """``K`` of prec@k / prbep, from docs/measures.md §Precision at k directly (None for f1)."""
    if name == "prbep":
        return int(np.sum(y > 0))
    if name == "prec@k":
        k = params["k"]
        return k if isinstance(k, int) else math.ceil(round(k * y.size, 9))
    return None


def structural_objective(name: str, K: int | None, y, s, Ybar: np.ndarray) -> np.ndarray:
    """``Delta(y, ybar) + (1/n) sum_i (ybar_i - y_i) s_i`` per row of ``Ybar`` (-inf if infeasible)."""
    tp = np.sum((Ybar > 0) & (y > 0), axis=1)
    fp = np.sum((Ybar > 0) & (y < 0), axis=1)
    if name == "f1":
        delta = 1.0 - np.where(tp > 0, 2 * tp / np.maximum(tp + fp + np.sum(y > 0), 1), 0.0)
        feasible = np.ones(len(Ybar), bool)
    else:
        delta = 1.0 - tp / K
        feasible = np.sum(Ybar > 0, axis=1) == K
    return np.where(feasible, delta + (Ybar - y) @ s / y.size, -np.inf)


def phi_and_slope(surrogate: str, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``phi(c)`` and ``phi'(c)`` elementwise (``phi'(1) := 0`` for the hinge)."""
    if surrogate == "hinge":
        return np.maximum(0.0, 1.0 - c), np.where(c < 1.0, -1.0, 0.0)
    if surrogate == "squared_hinge":
        return np.maximum(0.0, 1.0 - c) ** 2, -2.0 * np.maximum(0.0, 1.0 - c)
    return np.logaddexp(0.0, -c), -1.0 / (1.0 + np.exp(c))


def pauc_pair_sum(s, y, beta: float, surrogate: str) -> tuple[float, np.ndarray, bool]:
    """Direct double sum over (positive, top-m negative) pairs; also whether negatives tie at the cut."""
    pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y < 0)
    m = math.ceil(round(beta * neg.size, 9))
    by_score = neg[np.argsort(-s[neg], kind="stable")]
    top = by_score[:m]
    tie_at_cut = m < neg.size and s[by_score[m - 1]] == s[by_score[m]]
    phi, slope = phi_and_slope(surrogate, s[pos][:, None] - s[top][None, :])
    scale = 1.0 / (pos.size * m)
    dscore = np.zeros(s.size)
    dscore[pos] = scale * slope.sum(axis=1)
    dscore[top] = -scale * slope.sum(axis=0)
    return scale * phi.sum(), dscore, tie_at_cut


def f1_enumeration(s, y) -> float:
    """``max`` over all (TP, FP) counts: the O(n+ n-) enumeration (Joachims' Algorithm 2)."""
    n = s.size
    sp, sn = np.sort(s[y > 0])[::-1], np.sort(s[y < 0])[::-1]
    cp, cn = np.concatenate(([0.0], np.cumsum(sp))), np.concatenate(([0.0], np.cumsum(sn)))
    a, b = np.arange(sp.size + 1)[:, None], np.arange(sn.size + 1)[None, :]
    f1 = np.where(a > 0, 2 * a / (a + b + sp.size), 0.0)
    return float(np.max(1.0 - f1 + 2.0 / n * (cp[a] + cn[b] - sp.sum())))


def labelling_of(dscore: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The ``ybar`` with ``dscore = (ybar - y) / n``; fails if there is none."""
    ybar = y + dscore * y.size
    assert np.allclose(ybar, np.round(ybar), atol=1e-9) and set(np.round(ybar)) <= {-1.0, 1.0}
    return np.round(ybar)


# --------------------------------------------------------------------------
# structural losses: brute force over all 2^n labellings
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, params", STRUCTURAL, ids=IDS[: len(STRUCTURAL)])
@fast
@given(data=buffers(both_classes=False))
def test_structural_equals_enumeration(name, params, data):
    X, y, w = data
    value, grad = losses.get(name, **params).value_and_grad(X, y, w)
    s = X @ w
    if y.min() == y.max():
        assert value == 0.0 and not grad.any()
        return
    K = resolve_count(name, params, y)
    objective = structural_objective(name, K, y, s, all_labellings(y.size))
    assert value == pytest.approx(objective.max(), abs=1e-9)
    _, dscore = losses.get(name, **params).value_and_dscore(s, y)
    ybar = labelling_of(dscore, y)
    assert structural_objective(name, K, y, s, ybar[None])[0] == pytest.approx(objective.max(), abs=1e-9)
    np.testing.assert_allclose(grad, X.T @ dscore, atol=1e-12)


@pytest.mark.parametrize("seed, n, pos_frac, kind", [
    (seed, n, frac, kind)
    for seed, (n, frac) in enumerate(itertools.product((20, 300, 2000), (0.01, 0.2, 0.5, 0.95)))
    for kind in ("normal", "integer", "constant")
])
def test_f1_maximiser_equals_enumeration(seed, n, pos_frac, kind):
    _, y, _ = random_buffer(seed, n, 1, pos_frac)
    rng = np.random.default_rng(seed)
    s = {"normal": rng.standard_normal(n) * 3, "integer": rng.integers(-4, 5, n).astype(float),
         "constant": np.full(n, rng.choice([-0.5, 0.0, 0.5]))}[kind]
    value, dscore = losses.get("f1").value_and_dscore(s, y)
    best = f1_enumeration(s, y)
    assert value == pytest.approx(best, abs=1e-9)
    attained = structural_objective("f1", None, y, s, labelling_of(dscore, y)[None])[0]
    assert attained == pytest.approx(best, abs=1e-9)


# --------------------------------------------------------------------------
# pAUC / AUC: the direct pair sum
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, params", PAUC, ids=IDS[len(STRUCTURAL):])
@fast
@given(data=buffers(max_n=30))
def test_pauc_equals_pair_sum(name, params, data):
    X, y, w = data
    loss = losses.get(name, **params)
    value, grad = loss.value_and_grad(X, y, w)
    s = X @ w
    ref_value, ref_dscore, tie_at_cut = pauc_pair_sum(s, y, params.get("beta", 1.0), params["surrogate"])
    assert value == pytest.approx(ref_value, rel=1e-9, abs=1e-9)
    _, dscore = loss.value_and_dscore(s, y)
    if not tie_at_cut:
        np.testing.assert_allclose(dscore, ref_dscore, atol=1e-12)
        np.testing.assert_allclose(grad, X.T @ ref_dscore, atol=1e-9)
    else:  # any top-m set is a maximiser: dscore must be a subgradient in score space
        rng = np.random.default_rng(0)
        for scale in (1e-3, 0.1, 1.0, 10.0):
            s2 = s + scale * rng.standard_normal(s.size)
            assert loss.value_and_dscore(s2, y)[0] >= value + dscore @ (s2 - s) - 1e-9


@pytest.mark.parametrize("surrogate", ["hinge", "squared_hinge"])
def test_pauc_at_scale_equals_grouped_pair_sum(surrogate):
    """n = 200 000, 10% positives, beta = 1 (3.6 10^9 pairs), in O(n) memory.

    Scores are multiples of 1/16 (exact arithmetic, many ties and kinks), so the
    reference can sum ``phi`` over pairs of *distinct* score values, in chunks,
    weighted by how many positives and negatives hold each value.
    """
    rng = np.random.default_rng(7)
    n, n_pos = 200_000, 20_000
    y = rng.permutation(np.repeat(np.array([1, -1], dtype=np.int8), [n_pos, n - n_pos]))
    s = rng.integers(-2000, 2001, n) / 16.0 + (y > 0)
    tracemalloc.start()
    value, dscore = losses.get("auc", surrogate=surrogate).value_and_dscore(s, y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200 * n  # bytes: a pair matrix would take 8 * 20 000 * 180 000

    values, inverse = np.unique(s, return_inverse=True)
    count_pos = np.bincount(inverse[y > 0], minlength=values.size).astype(float)
    count_neg = np.bincount(inverse[y < 0], minlength=values.size).astype(float)
    ref_value, slope_pos, slope_neg = 0.0, np.zeros(values.size), np.zeros(values.size)
    for chunk in np.array_split(np.arange(values.size), 16):
        phi, slope = phi_and_slope(surrogate, values[chunk, None] - values[None, :])
        ref_value += count_pos[chunk] @ phi @ count_neg
        slope_pos[chunk] = slope @ count_neg
        slope_neg -= count_pos[chunk] @ slope
    scale = 1.0 / (n_pos * (n - n_pos))
    assert value == pytest.approx(scale * ref_value, rel=1e-12)
    expected = scale * np.where(y > 0, slope_pos[inverse], slope_neg[inverse])
    np.testing.assert_allclose(dscore, expected, rtol=1e-12)


# --------------------------------------------------------------------------
# every loss: subgradient, derivative, upper bound
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, params", ALL, ids=IDS)
@fast
@given(data=buffers(max_n=20), seed=st.integers(0, 2**32 - 1))
def test_subgradient_inequality(name, params, data, seed):
    X, y, w = data
    loss = losses.get(name, **params)
    value, grad = loss.value_and_grad(X, y, w)
    rng = np.random.default_rng(seed)
    for scale in (1e-3, 0.1, 1.0, 10.0):
        w2 = w + scale * rng.standard_normal(w.size)
        assert loss.value(X, y, w2) >= value + grad @ (w2 - w) - 1e-9 * max(1.0, abs(value))


@pytest.mark.parametrize("name, params", [
    ("pauc", {"beta": 0.3, "surrogate": phi}) for phi in SURROGATES
] + [("auc", {"surrogate": phi}) for phi in SURROGATES])
@pytest.mark.parametrize("seed", range(3))
def test_gradient_matches_finite_differences(name, params, seed):
    """At generic points (continuous data: no ties at the cut, no pair at a kink)."""
    X, y, w = random_buffer(seed, 60, 4, 0.25)
    loss = losses.get(name, **params)
    _, grad = loss.value_and_grad(X, y, w)
    h = 1e-6
    steps = h * np.eye(w.size)
    numeric = np.array([(loss.value(X, y, w + e) - loss.value(X, y, w - e)) / (2 * h) for e in steps])
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


@fast
@given(data=buffers(max_n=30))
def test_surrogates_upper_bound_the_measure(data):
    """``l >= 1 - P(prediction)``; the natural-log logistic bounds ``ln 2 (1 - pAUC)``."""
    X, y, w = data
    s = X @ w
    for beta in (0.1, 0.5, 1.0):
        gap = 1.0 - metrics.partial_auc(y, s, beta)
        for phi in SURROGATES:
            bound = math.log(2.0) * gap if phi == "logistic" else gap
            assert losses.get("pauc", beta=beta, surrogate=phi).value(X, y, w) >= bound - 1e-12
    assert losses.get("auc").value(X, y, w) >= 1.0 - metrics.auc(y, s) - 1e-12
    assert losses.get("prbep").value(X, y, w) >= 1.0 - metrics.prbep(y, s) - 1e-12
    assert losses.get("f1").value(X, y, w) >= 1.0 - metrics.f1_score(y, s) - 1e-12


# --------------------------------------------------------------------------
# buffers, dtypes, parameters
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, params", ALL, ids=IDS)
@pytest.mark.parametrize("label", [1, -1])
def test_buffer_lacking_a_class_gives_zero(name, params, label):
    X = np.random.default_rng(0).standard_normal((10, 3))
    y = np.full(10, label, dtype=np.int8)
    loss = losses.get(name, **params)
    value, dscore = loss.value_and_dscore(X @ np.ones(3), y)
    assert value == 0.0 and dscore.shape == (10,) and not dscore.any()
    value, grad = loss.value_and_grad(X, y, np.ones(3))
    assert value == 0.0 and grad.shape == (3,) and not grad.any()


@pytest.mark.parametrize("name, params", ALL, ids=IDS)
def test_float32_scores_stay_float32(name, params):
    X, y, w = random_buffer(3, 500, 10, 0.05)
    X32 = X.astype(np.float32)
    loss = losses.get(name, **params)
    seen = []
    dscore_of = loss.value_and_dscore
    loss.value_and_dscore = lambda s, y_: (seen.append(s.dtype), dscore_of(s, y_))[1]
    value32, grad32 = loss.value_and_grad(X32, y, w)
    assert seen == [np.float32] and grad32.dtype == np.float64
    value64, grad64 = losses.get(name, **params).value_and_grad(X32.astype(np.float64), y, w)
    assert value32 == pytest.approx(value64, rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(grad32, grad64, rtol=1e-4, atol=1e-4 * np.abs(grad64).max())


def test_registry():
    assert losses.NAMES == ("pauc", "auc", "prec@k", "prbep", "f1", "logloss")
    assert losses.get("pauc").params() == {"beta": 0.1, "surrogate": "hinge"}
    assert losses.get("auc", surrogate="logistic").params() == {"surrogate": "logistic"}
    assert losses.get("prec@k", k=0.01).params() == {"k": 0.01}
    assert losses.get("prec@k", k=np.int64(5)).params() == {"k": 5}
    assert {losses.get(name, **params).name for name, params in ALL} | {"logloss"} == set(losses.NAMES)
    assert repr(losses.get("pauc", beta=0.5)) == "PartialAUCLoss(beta=0.5, surrogate='hinge')"


def test_logloss_is_logistic_regressions_mean_loss_and_its_gradient():
    """The ranking candidate ``logloss``: value and gradient against the formula and finite differences."""
    rng = np.random.default_rng(3)
    X, y, w = rng.normal(size=(40, 5)), np.where(rng.random(40) < 0.3, 1, -1), rng.normal(size=5)
    loss = losses.get("logloss")
    brute = lambda v: float(np.mean(np.log1p(np.exp(-y * (X @ v)))))       # noqa: E731
    value, grad = loss.value_and_grad(X, y, w)
    assert value == pytest.approx(brute(w), rel=1e-12)
    eps = 1e-6
    numeric = [(brute(w + eps * e) - brute(w - eps * e)) / (2 * eps) for e in np.eye(5)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)
    assert loss.value_and_dscore(np.array([800.0, -800.0]), np.array([-1, 1]))[0] == pytest.approx(800.0)


@pytest.mark.parametrize("name, params, match", [
    ("pAUC", {}, r"unknown loss 'pAUC'; valid: 'pauc', 'auc', 'prec@k', 'prbep', 'f1'"),
    (None, {}, "unknown loss None"),
    ("pauc", {"beta": 0.0}, "beta"),
    ("pauc", {"beta": 1.5}, "beta"),
    ("pauc", {"beta": True}, "beta"),
    ("pauc", {"surrogate": "svm"}, r"unknown surrogate 'svm'; valid: 'hinge', 'logistic', 'squared_hinge'"),
    ("auc", {"beta": 0.5}, r"unknown parameter 'beta' for loss 'auc'; valid parameters: 'surrogate'"),
    ("f1", {"k": 3}, r"unknown parameter 'k' for loss 'f1'; valid parameters: none"),
    ("prec@k", {}, "needs the parameter 'k'"),
    ("prec@k", {"k": 0}, r"k must be an int >= 1 or a float in \(0, 1\], got 0"),
    ("prec@k", {"k": 1.5}, "k must be"),
    ("prec@k", {"k": True}, "k must be"),
    ("prec@k", {"k": "5"}, "k must be"),
])
def test_bad_parameters_raise(name, params, match):
    with pytest.raises(ValueError, match=match):
        losses.get(name, **params)


def test_k_larger_than_the_buffer_raises():
    y = np.array([1, -1, -1], dtype=np.int8)
    with pytest.raises(ValueError, match=r"k = 4 is out of range"):
        losses.get("prec@k", k=4).value_and_dscore(np.zeros(3), y)


# --------------------------------------------------------------------------
# a population's surrogate in one call: bit for bit the per-column loop
# --------------------------------------------------------------------------

MANY = ([("pauc", {"beta": beta, "surrogate": phi}) for beta in (0.1, 0.5, 1.0)
         for phi in SURROGATES + ("sigmoid",)] + [("auc", {"surrogate": "hinge"}), ("logloss", {})]
        + STRUCTURAL)


@pytest.mark.parametrize("name, params", MANY, ids=[f"{n}{p}" for n, p in MANY])
@fast
@given(n=st.integers(1, 40), m=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), ties=st.booleans(),
       scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_value_and_dscore_many_is_the_loop_bit_for_bit(name, params, n, m, seed, ties, scale):
    """``value_and_dscore_many`` (the kernel's one call per surrogate) gives every column exactly
    what ``value_and_dscore`` gives it -- a population trains each candidate as if it were alone."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < rng.uniform(0.05, 0.95), 1, -1).astype(np.int8)
    S = rng.standard_normal((n, m)) * scale
    if ties:
        S = np.round(S / scale, 0) * scale            # many exact ties, across classes too
    values, dS = losses.get(name, **params).value_and_dscore_many(S, y)
    assert values.shape == (m,) and dS.shape == (n, m) and dS.dtype == np.float64
    loss = losses.get(name, **params)
    for j in range(m):
        v, d = loss.value_and_dscore(S[:, j], y)
        assert v == values[j]
        np.testing.assert_array_equal(d, dS[:, j])


@fast
@given(n_pos=st.integers(1, 80), n_neg=st.integers(1, 500), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1e-3, 1.0, 1e3]), ties=st.booleans())
def test_f1_best_false_positives_counted_equals_searched(n_pos, n_neg, seed, scale, ties):
    """Small buffers count ``b*(a)`` on the delta table, large ones binary-search it, both below the
    rising bound: the same ``b*`` as the count over the whole table (the definition)."""
    from nsdist.losses import structural

    rng = np.random.default_rng(seed)
    qs = rng.standard_normal(n_neg) * scale + rng.choice([0.0, -2.0 * scale])
    qs = np.sort(np.round(qs / scale) * scale if ties else qs)[::-1]
    a, n = np.arange(n_pos + 1), n_pos + n_neg
    t = (a + n_pos)[:, None] + np.arange(n_neg)
    whole = np.count_nonzero(2.0 * a[:, None] / (t * (t + 1)) + (2.0 / n) * qs > 0, axis=1)
    counted = structural._best_false_positives(a, qs, n_pos, n)
    many = structural._best_false_positives_many(a, np.stack([qs, qs]), n_pos, n)
    saved = structural._DENSE_SEARCH
    try:
        structural._DENSE_SEARCH = 0
        searched = structural._best_false_positives(a, qs, n_pos, n)
        many_searched = structural._best_false_positives_many(a, np.stack([qs, qs]), n_pos, n)
    finally:
        structural._DENSE_SEARCH = saved
    for b in (counted, many[0], many[1], many_searched[0], searched):
        np.testing.assert_array_equal(b, whole)
    assert structural._rising_bound(qs, n_pos, n) >= whole.max()


SHIFTED = ALL + [("pauc", {"beta": 0.1, "surrogate": "sigmoid"}), ("auc", {"surrogate": "sigmoid"}), ("logloss", {})]


INVARIANT = [(name, params) for name, params in SHIFTED if losses.get(name, **params).shift_invariant]


@pytest.mark.parametrize("name, params", INVARIANT, ids=[f"{n}{p}" for n, p in INVARIANT])
@given(data=buffers(max_n=20), shift=st.integers(-6, 6).filter(bool))
@fast
def test_a_shift_invariant_loss_has_the_same_subgradient_on_shifted_scores(name, params, data, shift):
    """``Loss.shift_invariant`` (no intercept learned): the same ``dl/ds`` on ``s + c`` as on ``s``
    (a shift in halves keeps small integer scores exact)."""
    X, y, w = data
    loss = losses.get(name, **params)
    s = X @ w
    np.testing.assert_allclose(loss.value_and_dscore(s + shift / 2, y)[1], loss.value_and_dscore(s, y)[1],
                               rtol=1e-9, atol=1e-12)


def test_the_losses_that_are_not_shift_invariant_move_with_a_shift():
    """F1, the point-wise logistic loss and the squashed scores' loss: their subgradient moves with a
    common shift of the scores (so their candidates learn an intercept); every other loss is invariant."""
    X, y, w = random_buffer(5, 200, 4, 0.2)
    s = X @ w
    moving = set()
    for name, params in SHIFTED:
        loss = losses.get(name, **params)
        if not np.allclose(loss.value_and_dscore(s + 1.5, y)[1], loss.value_and_dscore(s, y)[1]):
            moving.add((name, params.get("surrogate")))
        assert loss.shift_invariant == ((name, params.get("surrogate")) not in moving), (name, params)
    assert moving == {("pauc", "sigmoid"), ("auc", "sigmoid"), ("f1", None), ("logloss", None)}


@fast
@given(n=st.integers(1, 60), m=st.integers(0, 40), seed=st.integers(0, 2**32 - 1))
def test_weight_gradient_uses_exactly_the_rows_with_a_nonzero_entry(n, m, seed):
    """A population's ``X.T @ dscore`` runs over the rows where any of the ``M`` entries is non-zero
    (NaN counts as non-zero, -0.0 as zero), and equals the product over all rows."""
    from nsdist.losses.base import weight_gradient

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    dscore = np.where(rng.random((n, m)) < 0.1, rng.standard_normal((n, m)), 0.0)
    if n and m:
        dscore[rng.integers(n), rng.integers(m)] = -0.0
    rows = np.flatnonzero(np.any(dscore != 0, axis=1))
    expected = X.T @ dscore if 4 * rows.size >= n else X[rows].T @ dscore[rows]
    np.testing.assert_array_equal(weight_gradient(X, dscore), expected)
    if m:
        dscore[rng.integers(n), 0] = np.nan
    rows = np.flatnonzero(np.any(dscore != 0, axis=1))
    expected = X.T @ dscore if 4 * rows.size >= n else X[rows].T @ dscore[rows]
    np.testing.assert_array_equal(weight_gradient(X, dscore), expected)
