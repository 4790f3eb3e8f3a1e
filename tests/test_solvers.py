"""The solvers of docs/solvers.md: 1PMB, 2PMB, PSG, CP, FTRL, and their shared pieces."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize

from nsdist.solvers.blocks import gather_block
from nsdist.solvers.cp import cutting_plane, loss_and_grad
from nsdist.solvers.ftrl import FTRL, ftrl
from nsdist.solvers.history import History
from nsdist.solvers.kernel import Population, SGDState, project_l2, run_epochs
from nsdist.solvers.measure import cut_intercept, learns_intercept, make_loss, measure_function
from nsdist.solvers.order import reservoir_keys, row_order
from nsdist.solvers.planes import PlaneModel, maximise_on_simplex
from nsdist.solvers.psg import psg
from nsdist.solvers.sgd import Reservoir, one_pass_mb, rare_label, two_pass_mb


def make_data(n=600, d=5, pos=0.15, noise=0.5, seed=0, dtype=np.float64):
    """A linear problem with a rare positive class (labels in {-1, +1})."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    s = X @ rng.normal(size=d) + noise * rng.normal(size=n)
    y = np.where(s >= np.quantile(s, 1 - pos), 1, -1).astype(np.int8)
    return X.astype(dtype), y


def objective(X, y, loss, w, lam):
    """``J(w) = l(w) + (lam/2)||w||^2``, computed with the loss alone."""
    return loss.value(X, y, w) + lam / 2 * float(w @ w)


LOSSES = [("pauc", {}), ("auc", {}), ("prec@k", {"k": 0.1}), ("prbep", {}), ("f1", {})]


# ---------------------------------------------------------------- 1PMB / 2PMB


@pytest.mark.parametrize("measure, params", LOSSES)
@pytest.mark.parametrize("run", [one_pass_mb, two_pass_mb])
def test_same_seed_same_model_bit_for_bit(run, measure, params):
    X, y = make_data()
    loss = make_loss(measure, **params)
    kw = dict(buffer_size=64, eta=0.3, n_passes=3, random_state=7, fit_intercept=learns_intercept(measure))
    a, b = run(X, y, loss, **kw), run(X, y, loss, **kw)
    assert a.coef.tobytes() == b.coef.tobytes() and a.intercept == b.intercept
    c = run(X, y, loss, **{**kw, "random_state": 8})
    assert not np.array_equal(a.coef, c.coef)


@pytest.mark.parametrize("measure, params", LOSSES)
def test_one_epoch_with_the_whole_set_is_one_psg_step(measure, params):
    X, y = make_data()
    loss = make_loss(measure, **params)
    eta, radius = 0.7, 0.05
    _, g = loss.value_and_grad(X, y, np.zeros(X.shape[1]))
    w1 = -eta * g                               # w_1 = Proj(w_0 - (eta / sqrt(1)) g(w_0)), w_0 = 0
    w1 = w1 * min(1.0, radius / np.linalg.norm(w1))
    sgd = one_pass_mb(X, y, loss, buffer_size=X.shape[0], eta=eta, radius=radius, shuffle=False)
    batch = psg(X, y, loss, eta=eta, radius=radius, max_iter=1)
    np.testing.assert_allclose(sgd.coef, w1, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(batch.coef, w1, rtol=1e-12, atol=1e-15)
    assert sgd.state.epoch == batch.state.epoch == 1


def test_psg_iterations_follow_the_step_rule():
    X, y = make_data()
    loss = make_loss("pauc", beta=0.2)
    eta, T = 0.5, 6
    w, iterates, values = np.zeros(X.shape[1]), [], []
    for t in range(1, T + 1):
        v, g = loss.value_and_grad(X, y, w)
        values.append(v)
        w = w - eta / np.sqrt(t) * g
        iterates.append(w)
    avg = psg(X, y, loss, eta=eta, max_iter=T)
    np.testing.assert_allclose(avg.coef, np.mean(iterates, axis=0), rtol=1e-10)
    np.testing.assert_allclose(avg.history.column("loss"), values, rtol=1e-12)
    best = psg(X, y, loss, eta=eta, max_iter=T, average=False)
    t_best = int(np.argmin(values))
    np.testing.assert_allclose(best.coef, ([np.zeros(X.shape[1])] + iterates)[t_best], rtol=1e-10)
    # the same losses to rounding: the products' sums can differ in their last bit with the arrays' alignment
    assert best.best_loss == pytest.approx(min(values), rel=1e-13)


def _iterate_norms_and_iterates(run, X, y, loss, **kw):
    """Every iterate of a run, collected through the validation hook (``average=False``)."""
    iterates = []

    def keep(w, b):
        iterates.append(w.copy())
        return float(np.linalg.norm(w))

    res = run(X, y, loss, average=False, validate=keep, **kw)
    return res, np.array(iterates)


@pytest.mark.parametrize("run", [one_pass_mb, two_pass_mb])
def test_every_iterate_stays_in_the_ball(run):
    X, y = make_data()
    loss = make_loss("pauc", beta=0.3)
    radius = 0.2
    res, iterates = _iterate_norms_and_iterates(run, X, y, loss, buffer_size=50, eta=2.0, radius=radius, n_passes=2)
    norms = np.linalg.norm(iterates, axis=1)
    assert len(norms) == res.state.epoch > 10
    assert np.all(norms <= radius * (1 + 1e-12))
    assert np.isclose(norms.max(), radius)                 # the projection was active
    assert np.linalg.norm(res.coef) <= radius * (1 + 1e-12)


@pytest.mark.parametrize("run", [one_pass_mb, two_pass_mb])
def test_the_averaged_iterate_is_returned(run):
    X, y = make_data()
    loss = make_loss("prbep")
    kw = dict(buffer_size=40, eta=0.5, n_passes=2, random_state=3)
    _, iterates = _iterate_norms_and_iterates(run, X, y, loss, **kw)
    avg = run(X, y, loss, **kw)
    np.testing.assert_allclose(avg.coef, iterates.mean(axis=0), rtol=1e-10, atol=1e-15)
    last = run(X, y, loss, average=False, **kw)
    np.testing.assert_array_equal(last.coef, iterates[-1])


@pytest.mark.parametrize("gather", ["index", "engine"])
@pytest.mark.parametrize("two_pass", [False, True])
def test_drivers_equal_one_kernel_call_per_block_and_pass(two_pass, gather):
    """What the engine does with one partition: ``run_epochs`` on the pass's ordered block, given as ``X[block]``
    (C-ordered) or as the engine makes it (Fortran-ordered, :func:`~nsdist.solvers.blocks.gather_block`)."""
    X, y = make_data(n=700)
    loss = make_loss("pauc")
    kw = dict(buffer_size=64, eta=0.3, radius=1.0, fit_intercept=False)
    run = two_pass_mb if two_pass else one_pass_mb
    res = run(X, y, loss, n_passes=3, random_state=4, **kw)
    rows = np.flatnonzero(y < 0) if two_pass else np.arange(700)
    reservoir = None
    if two_pass:
        top = np.flatnonzero(y > 0)[np.argsort(-reservoir_keys(4, np.flatnonzero(y > 0)))[:64]]
        reservoir = (X[top], y[top])
    state = SGDState.zeros(X.shape[1])
    population = Population.single(loss, kw.pop("eta"), kw.pop("fit_intercept"))
    for p in range(3):
        block = rows[row_order(4, p, 0, rows.shape[0], True)]
        Xb = X[block] if gather == "index" else gather_block([X[:, j].copy() for j in range(X.shape[1])], X.dtype,
                                                             rows=block)
        state, _ = run_epochs(state, Xb, y[block], population, reservoir=reservoir, **kw)
    assert res.state.W.tobytes() == state.W.tobytes() and res.state.W_sum.tobytes() == state.W_sum.tobytes()
    assert res.state.epoch == state.epoch and res.state.rows_seen == state.rows_seen


def _unaligned(A: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``A`` that starts ``offset`` bytes past an aligned address (as a block Dask deserialised can)."""
    raw = np.zeros(A.nbytes + 16, dtype=np.uint8)
    B = raw[offset:offset + A.nbytes].view(A.dtype).reshape(A.shape)
    B[...] = A
    return B


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("two_pass", [False, True])
@pytest.mark.parametrize("candidates", [1, 2])
def test_the_step_does_not_depend_on_where_the_block_lies_in_memory(dtype, two_pass, candidates):
    """Unaligned, C- or Fortran-ordered blocks (and reservoirs) give the same model bit for bit.

    numpy multiplies an unaligned array without BLAS, summing in another
    order: without the kernel's copy the model depended on the worker that
    ran a step, which is how this was found (the engine differed from the
    estimator in the 14th digit in one run of twelve).  With one candidate the
    products are matrix-vector products, which sum in another order on a C- and
    a Fortran-ordered block: the kernel steps on Fortran-ordered blocks only.
    """
    X, y = make_data(n=700, d=16, dtype=dtype)
    population = Population((make_loss("pauc"), make_loss("auc", surrogate="logistic")), (0.3, 0.05), (False, True),
                            (False, True))
    if candidates == 1:
        population = Population.single(make_loss("pauc"), 0.3)
    W = np.random.default_rng(1).normal(size=(16, 1)).astype(dtype)
    assert (X[:100] @ W).tobytes() != (np.asfortranarray(X)[:100] @ W).tobytes()     # what the kernel's copy is for
    strided = np.zeros((700, 32), dtype=dtype)
    strided[:, ::2] = X                                                              # neither C- nor F-ordered
    reservoir = (X[y > 0][:40], y[y > 0][:40]) if two_pass else None
    ref, _ = run_epochs(SGDState.zeros(16, candidates), X, y, population, buffer_size=100, reservoir=reservoir)
    assert not _unaligned(X, 3).flags.aligned
    for moved in (_unaligned(X, 3), _unaligned(X, 4), np.asfortranarray(X), strided[:, ::2]):
        res = None if reservoir is None else (_unaligned(reservoir[0], 5), reservoir[1])
        state, _ = run_epochs(SGDState.zeros(16, candidates), moved, y, population, buffer_size=100, reservoir=res)
        assert state.W.tobytes() == ref.W.tobytes() and state.W_sum.tobytes() == ref.W_sum.tobytes()
        assert state.b.tobytes() == ref.b.tobytes()


def test_stack_rows_gives_the_order_asked_for():
    """2PMB's epoch buffer (reservoir, then the epoch's rows) is Fortran-ordered, as every block the kernel steps
    on, even behind an empty reservoir; the engine's sample stacks C-ordered rows."""
    from nsdist.solvers.kernel import stack_rows

    X = np.asfortranarray(make_data(n=300, d=6, dtype=np.float32)[0])
    for first in (X[:0], np.ascontiguousarray(X[:40]), X[:40]):
        B = stack_rows((first, X[100:200]))
        assert B.flags.f_contiguous and B.dtype == np.float32
        np.testing.assert_array_equal(B, np.vstack([first, X[100:200]]))
    C = stack_rows([np.ascontiguousarray(X[:40]), np.ascontiguousarray(X[40:])], order="C")
    assert C.flags.c_contiguous
    np.testing.assert_array_equal(C, X)


def test_epochs_step_eta_over_sqrt_e_and_run_on_across_passes():
    X, y = make_data(n=200)
    loss = make_loss("auc")
    s, eta = 50, 0.4
    w = np.zeros(X.shape[1])
    for p in range(2):
        order = row_order(11, p, 0, X.shape[0], True)
        for e, sl in enumerate([slice(i, i + s) for i in range(0, 200, s)], start=1 + 4 * p):
            idx = order[sl]
            w = w - eta / np.sqrt(e) * loss.value_and_grad(X[idx], y[idx], w)[1]
    res = one_pass_mb(X, y, loss, buffer_size=s, eta=eta, n_passes=2, random_state=11, average=False)
    np.testing.assert_allclose(res.coef, w, rtol=1e-10)
    assert res.state.epoch == 8 and res.state.rows_seen == 400


def test_epoch_loss_is_the_candidates_mean_only_when_they_share_a_surrogate():
    """An epoch's ``loss`` is the mean of its candidates' surrogate values before the step (computed here from
    the losses themselves) when they train one surrogate; NaN when they train several, whose values are on no
    common scale (a population's mean of a hinge and a logistic loss, diverged ones among them)."""
    X, y = make_data(n=200)
    X = np.asfortranarray(X)
    hinge, logistic = make_loss("auc"), make_loss("auc", surrogate="logistic")
    same = Population((hinge, hinge), (0.1, 1.0), (False, False), (False, False))
    _, stats = run_epochs(SGDState.zeros(X.shape[1], 2), X, y, same, buffer_size=200)
    assert stats["loss"][0] == hinge.value(X, y, np.zeros(X.shape[1]))     # w = 0 for both before the step
    _, stats = run_epochs(SGDState.zeros(X.shape[1], 2), X, y, same, buffer_size=50)
    assert np.isfinite(stats["loss"]).all()
    mixed = Population((hinge, logistic), (0.1, 0.1), (False, False), (False, False))
    _, stats = run_epochs(SGDState.zeros(X.shape[1], 2), X, y, mixed, buffer_size=50)
    assert stats.size == 4 and np.isnan(stats["loss"]).all() and (stats["rows"] == 50).all()


def test_degenerate_buffers_are_skipped_and_counted():
    X, y = make_data(n=400)
    y = np.full(400, -1, dtype=np.int8)
    y[:20] = 1                               # file order: only the first buffer has positives
    loss = make_loss("pauc")
    res = one_pass_mb(X, y, loss, buffer_size=50, eta=0.5, shuffle=False)
    assert res.state.skipped == 7 and res.state.epoch == 1
    assert len(res.history) == 1 and res.state.rows_seen == 400
    two = two_pass_mb(X, y, loss, buffer_size=50, eta=0.5, shuffle=False)   # the reservoir joins every buffer
    assert two.state.skipped == 0 and two.state.epoch == 8


def test_float32_input_trains_in_float32():
    X, y = make_data(dtype=np.float32)
    loss = make_loss("f1")
    for run in (one_pass_mb, two_pass_mb):
        res = run(X, y, loss, buffer_size=64, eta=0.5, fit_intercept=True)
        ref = run(X.astype(np.float64), y, loss, buffer_size=64, eta=0.5, fit_intercept=True)
        assert res.coef.dtype == np.float64 and np.all(np.isfinite(res.coef))
        np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-3, atol=1e-4)
    assert np.isfinite(psg(X, y, loss, eta=0.5, max_iter=5).coef).all()
    assert np.isfinite(cutting_plane(X, y, loss, lam=0.1, max_iter=5).coef).all()


# ------------------------------------------------------------------------ 2PMB


def test_rare_class_is_detected():
    assert rare_label(np.array([1, -1, -1])) == 1
    assert rare_label(np.array([1, 1, -1])) == -1
    assert rare_label(np.array([1, -1])) == 1               # a tie: the positives


def test_2pmb_streams_the_other_class_against_the_reservoir():
    X, y = make_data(n=300, pos=0.7)                        # the negatives are rare here
    loss = make_loss("pauc")
    res = two_pass_mb(X, y, loss, buffer_size=30, eta=0.5, random_state=5)
    r = res.reservoir
    assert r.label == -1 and r.n_rare == np.count_nonzero(y < 0) and r.X.shape == (30, X.shape[1])
    keys = reservoir_keys(5, np.flatnonzero(y < 0))
    top = np.flatnonzero(y < 0)[np.argsort(-keys)[:30]]
    np.testing.assert_array_equal(r.X, X[top])             # top keys, by decreasing key
    assert res.state.rows_seen == np.count_nonzero(y > 0)


def test_reservoir_is_the_same_whatever_the_grouping_of_rows():
    X, y = make_data(n=500)
    whole = Reservoir.empty(1, 25, X.shape[1]).offer(X, y, np.arange(500), 9)
    parts = Reservoir.empty(1, 25, X.shape[1])
    for lo, hi in [(0, 130), (130, 131), (131, 400), (400, 500)]:
        parts = parts.offer(X[lo:hi], y[lo:hi], np.arange(lo, hi), 9)
    np.testing.assert_array_equal(whole.X, parts.X)
    assert whole.n_rare == parts.n_rare == np.count_nonzero(y > 0)


def test_reservoir_is_a_uniform_sample():
    """Inclusion counts of 20 rare rows in a 5-row reservoir over 4000 seeds: chi-square."""
    n_rare, size, n_seeds = 20, 5, 4000
    y = np.full(60, -1, dtype=np.int8)
    y[np.arange(0, 60, 3)] = 1
    X = np.arange(60, dtype=np.float64)[:, None]           # the row id as the only feature
    counts = np.zeros(60)
    for seed in range(n_seeds):
        r = Reservoir.empty(1, size, 1).offer(X, y, np.arange(60), seed)
        assert len(set(r.X[:, 0])) == size                  # without replacement
        counts[r.X[:, 0].astype(int)] += 1
    observed = counts[y > 0]
    assert counts[y < 0].sum() == 0
    expected = np.full(n_rare, n_seeds * size / n_rare)
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # joint inclusion of pairs is uniform too: P(i and j) = s (s - 1) / (n (n - 1))
    pair = sum(
        {0, 3} <= set(Reservoir.empty(1, size, 1).offer(X, y, np.arange(60), s).X[:, 0].astype(int))
        for s in range(n_seeds))
    p = size * (size - 1) / (n_rare * (n_rare - 1))
    assert stats.binomtest(pair, n_seeds, p).pvalue > 1e-3


# ------------------------------------------------------------------ CP and QP


def test_simplex_qp_matches_scipy_on_a_rank_deficient_gram():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(12, 3))                            # 12 planes in 3-D: G has rank 3
    Q, c = A @ A.T / 0.1, rng.normal(size=12)
    alpha = maximise_on_simplex(Q, c, np.full(12, 1 / 12), tol=1e-12)
    assert np.all(alpha >= 0) and np.isclose(alpha.sum(), 1)
    ref = minimize(lambda a: 0.5 * a @ Q @ a - c @ a, np.full(12, 1 / 12), jac=lambda a: Q @ a - c,
                   bounds=[(0, None)] * 12, constraints={"type": "eq", "fun": lambda a: a.sum() - 1},
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 1000})
    D = lambda a: c @ a - 0.5 * a @ Q @ a  # noqa: E731
    assert D(alpha) >= D(ref.x) - 1e-9
    g = c - Q @ alpha
    assert g.max() - alpha @ g <= 1e-9 * Q.diagonal().max()      # the ridge of the face systems


@pytest.mark.parametrize("radius", [None, 0.5])
def test_plane_model_dual_bounds_its_primal(radius):
    rng = np.random.default_rng(2)
    model = PlaneModel(4, lam=0.05, radius=radius)
    for _ in range(8):
        model.add(rng.normal(size=4), rng.normal())
    z, dual, gap = model.solve(1e-9)
    primal = 0.05 / 2 * z @ z + max(0.0, float(np.max(model.c[1:] + model.A[1:] @ z)))
    assert gap <= 1e-9 and 0 <= primal - dual <= 1e-8
    if radius is not None:
        assert np.linalg.norm(z) <= radius * (1 + 1e-9)


@pytest.mark.parametrize("measure, params", LOSSES)
def test_cp_reaches_the_psg_optimum_of_the_regularised_objective(measure, params):
    """CP on ``J = l + (lam/2)||w||^2`` against PSG on the ball of CP's norm (Lagrange duality).

    The minimiser ``w*`` of ``J`` minimises ``l`` over ``||w|| <= ||w*||``, so PSG
    projected on that ball approaches ``J(w*)``; CP certifies ``J(w_cp) <= J* + tol``.
    """
    X, y = make_data(n=300, d=4, noise=0.3, seed=1)
    loss = make_loss(measure, **params)
    lam, tol = 0.01, 1e-4
    cp = cutting_plane(X, y, loss, lam=lam, tol=tol, max_iter=500)
    assert cp.converged and cp.gap <= tol
    J_cp = objective(X, y, loss, cp.coef, lam)
    assert np.isclose(J_cp, cp.objective) and np.isclose(loss.value(X, y, cp.coef), cp.loss)
    R = float(np.linalg.norm(cp.coef))
    assert R > 0.1                                          # a non-trivial optimum
    ref = psg(X, y, loss, eta=R, radius=R, max_iter=3000, average=False)
    J_psg = objective(X, y, loss, ref.coef, lam)
    assert J_cp <= J_psg + tol
    assert J_psg - J_cp <= 5e-3


def test_cp_respects_the_ball_and_is_optimal_on_it():
    X, y = make_data(n=300, d=4, noise=0.3, seed=1)
    loss = make_loss("pauc", beta=0.25)
    lam, R = 1e-3, 0.3
    cp = cutting_plane(X, y, loss, lam=lam, radius=R, tol=1e-4, max_iter=500)
    assert cp.converged and np.linalg.norm(cp.coef) <= R * (1 + 1e-9)
    ref = psg(X, y, loss, eta=R, radius=R, max_iter=3000, average=False)
    assert cp.objective <= objective(X, y, loss, ref.coef, lam) + 1e-4


def test_cp_with_intercept_uses_a_bias_feature():
    X, y = make_data(n=300, d=4, noise=0.3, seed=3)
    loss = make_loss("f1")
    lam = 0.01
    cp = cutting_plane(X, y, loss, lam=lam, fit_intercept=True, tol=1e-4, max_iter=500)
    z = np.append(cp.coef, cp.intercept)
    Xb = np.hstack([X, np.ones((300, 1))])
    assert np.isclose(cp.objective, objective(Xb, y, loss, z, lam))
    value, g = loss_and_grad(X, y, loss, z, True)
    np.testing.assert_allclose(g, loss.value_and_grad(Xb, y, z)[1])
    ref = psg(Xb, y, loss, eta=1.0, radius=float(np.linalg.norm(z)), max_iter=3000, average=False)
    assert cp.objective <= objective(Xb, y, loss, ref.coef, lam) + 1e-4


# ------------------------------------------------------------------------ FTRL


def test_ftrl_penalties_are_the_seed_definition():
    X, y = make_data(n=240, d=3, seed=5)
    loss = make_loss("pauc", beta=0.5)
    learner = FTRL(loss, 3, eta=2.0, tol=1e-6, max_iter=300)
    for t, lo in enumerate(range(0, 240, 60)):
        w_t = learner.w.copy()
        penalty = learner.round(X[lo:lo + 60], y[lo:lo + 60])
        prev = loss.value(X[:lo], y[:lo], w_t) * lo if lo else 0.0
        assert np.isclose(penalty, (lo + 60) * loss.value(X[:lo + 60], y[:lo + 60], w_t) - prev)
        # the leader solves the FTRL problem: J_t(w_{t+1}) <= J_t(w) for a PSG reference
        J = lambda w: loss.value(X[:lo + 60], y[:lo + 60], w) * (lo + 60) + 1.0 * w @ w  # noqa: E731
        ref = psg(X[:lo + 60], y[:lo + 60], loss, eta=1.0, max_iter=500, average=False)
        assert J(learner.w) <= J(ref.coef) + (lo + 60) * 1e-6
    assert learner.t == 4 and learner.n_rows == 240
    assert np.isclose(learner.average_penalty(), sum(learner.penalties) / 240)


def test_ftrl_average_penalty_approaches_the_batch_optimum():
    """Regret: (1/n_T) sum_t L_t(w_t) - min_w lbar(x_{1:T}, w) shrinks as the stream grows."""
    X, y = make_data(n=2400, d=4, noise=0.3, seed=6)
    loss = make_loss("pauc", beta=0.2)
    regrets = []
    for n in (300, 1200, 2400):
        learner = ftrl(X[:n], y[:n], loss, buffer_size=60, eta=1.0, shuffle=False, tol=1e-4, max_iter=300)
        best = cutting_plane(X[:n], y[:n], loss, lam=1e-6, tol=1e-5, max_iter=2000).loss
        regrets.append(learner.average_penalty() - best)
    assert regrets[0] > regrets[1] > regrets[2] and regrets[2] < 0.05


def test_ftrl_rounds_follow_the_stream_order():
    X, y = make_data(n=200, d=3)
    loss = make_loss("prbep")
    a = ftrl(X, y, loss, buffer_size=50, eta=1.0, random_state=3)
    b = FTRL(loss, 3, eta=1.0)
    order = row_order(3, 0, 0, 200, True)
    for lo in range(0, 200, 50):
        b.round(X[order[lo:lo + 50]], y[order[lo:lo + 50]])
    assert a.model()[0].tobytes() == b.model()[0].tobytes()
    assert [r.rows_seen for r in a.history] == [50, 100, 150, 200]


# ------------------------------------------------------------- history, measure


def test_history_is_plain_data():
    X, y = make_data()
    loss = make_loss("pauc")
    P = measure_function("pauc")
    res = one_pass_mb(X, y, loss, buffer_size=100, eta=0.5, validate=lambda w, b: P(y, X @ w + b))
    h = res.history
    assert [r.step for r in h] == list(range(1, 7)) and all(r.measure is not None for r in h)
    assert np.all(np.diff(h.column("time")) >= 0) and h[-1].rows_seen == 600
    back = History.from_dicts(json.loads(h.to_json()))
    assert back == h


def test_cut_intercept_puts_the_threshold_at_the_measure_cut():
    y = np.array([1, -1, 1, -1, -1, -1, 1, -1])
    s = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    assert np.count_nonzero(s + cut_intercept("prbep", y, s) > 0) == 3
    assert np.count_nonzero(s + cut_intercept("prec@k", y, s, k=0.25) > 0) == 2
    assert np.count_nonzero(s + cut_intercept("prec@k", y, s, k=8) > 0) == 8
    assert np.count_nonzero(s + cut_intercept("pauc", -np.ones(8), s) > 0) == 0
    # F1: the F1-optimal cut (top 3: F1 = 2 * 2 / (3 + 3), above top 1's 0.5 and top 7's 0.6)
    assert np.count_nonzero(s + cut_intercept("f1", y, s) > 0) == 3


def test_measure_names_map_to_losses_and_metrics():
    assert make_loss("pauc", beta=0.3).params() == {"beta": 0.3, "surrogate": "hinge"}
    assert make_loss("auc", surrogate="logistic").params() == {"surrogate": "logistic"}
    for bad in [dict(measure="acc"), dict(measure="f1", surrogate="logistic"), dict(measure="prec@k"),
                dict(measure="pauc", beta=0.0), dict(measure="pauc", surrogate="exp")]:
        with pytest.raises(ValueError):
            make_loss(**bad)
    y, s = np.array([1, -1, 1, -1]), np.array([0.3, 0.2, -0.1, 0.5])
    assert measure_function("auc")(y, s) == 0.25
    assert measure_function("f1")(y, s) == pytest.approx(0.4)
    assert project_l2(np.array([3.0, 4.0]), 1.0) == pytest.approx([0.6, 0.8])
