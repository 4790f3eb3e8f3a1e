"""In-fit selection (docs/solvers.md §Selection): holdout, population, halving, early stopping, plug-in F1."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsdist import NonDecomposableClassifier, metrics
from nsdist.losses.pairs import sigmoid_pairs
from nsdist.solvers.config import TrainConfig
from nsdist.solvers.kernel import SGDState
from nsdist.solvers.plan import Holdout, holdout_sizes, schedule
from nsdist.solvers.measure import f1_threshold
from nsdist.solvers.select import Selection


def make_data(n=1500, d=8, pos=0.08, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    s = X @ rng.normal(size=d) + 0.7 * rng.normal(size=n)
    y = np.where(s >= np.quantile(s, 1 - pos), 1, -1).astype(np.int8)
    return X, y


# ------------------------------------------------------------------ plug-in F1
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-4, 4), st.booleans()), min_size=1, max_size=30))
def test_plug_in_threshold_maximises_f1_brute_force(rows):
    s = np.array([r[0] for r in rows], dtype=float) / 2.0          # heavy ties
    y = np.array([1 if r[1] else -1 for r in rows], dtype=np.int8)
    value, t = f1_threshold(y, s)
    # every labelling a threshold can make: s > t for t at each score, and below the lowest
    brute = max(metrics.f1_score(y, s, threshold=u) if (y > 0).any() and (y < 0).any() else
                _f1(y, s > u) for u in np.append(np.unique(s), s.min() - 1))
    assert value == pytest.approx(brute, abs=1e-12)
    assert _f1(y, s > t) == pytest.approx(value, abs=1e-12)


def test_the_selected_f1_model_takes_the_f1_optimal_threshold_on_every_training_row():
    """The winner is chosen on the validation rows; its threshold is then the F1-optimal one on all the rows
    it was given (brute force over every cut of the sorted scores), not only the validation rows'."""
    X, y = make_data(n=2500, seed=3)
    est = NonDecomposableClassifier("f1", random_state=1, validation_folds=1).fit(X, y)
    s = X @ est.coef_.ravel()
    yy = np.where(y > 0, 1, -1)
    best = max(_f1(yy, s > u) for u in np.append(np.unique(s), s.min() - 1))
    assert _f1(yy, s + est.intercept_[0] > 0) == pytest.approx(best, abs=1e-12)
    val = est._validation
    assert est._selection.value.max() == pytest.approx(max(
        _f1(val[1], val[0] @ w > u) for w in [est._selection.W[:, est._selection.winner()]]
        for u in np.append(np.unique(val[0] @ w), (val[0] @ w).min() - 1)), abs=1e-12)


def _f1(y, pred) -> float:
    tp = int(np.sum(pred & (y > 0)))
    return 0.0 if tp == 0 else 2 * tp / (int(pred.sum()) + int((y > 0).sum()))


# ------------------------------------------------------------ bounded surrogate
def test_sigmoid_pair_sum_is_the_pair_sum_and_its_gradient():
    rng = np.random.default_rng(1)
    p, q = rng.normal(size=7) * 3, rng.normal(size=5) * 3
    sig = lambda t: 1 / (1 + np.exp(-t))                          # noqa: E731
    brute = lambda p, q: float(((1 - sig(p)[:, None] + sig(q)[None, :]) ** 2).sum())   # noqa: E731
    value, dp, dq = sigmoid_pairs(p, q)
    assert value == pytest.approx(brute(p, q), rel=1e-12)
    eps = 1e-6
    for i in range(p.size):
        e = np.eye(p.size)[i] * eps
        assert dp[i] == pytest.approx((brute(p + e, q) - brute(p - e, q)) / (2 * eps), rel=1e-5, abs=1e-7)
    for j in range(q.size):
        e = np.eye(q.size)[j] * eps
        assert dq[j] == pytest.approx((brute(p, q + e) - brute(p, q - e)) / (2 * eps), rel=1e-5, abs=1e-7)


# --------------------------------------------------------------------- holdout
def test_holdout_is_stratified_deterministic_and_capped():
    X, y = make_data(n=2000, pos=0.01)
    ids = np.arange(y.shape[0])
    h = Holdout.draw(y, ids, 7, 0.1, 200_000)
    mask = h.mask(y, ids)
    assert (mask & (y > 0)).sum() == h.n_pos == round(0.1 * (y > 0).sum())
    assert (mask & (y < 0)).sum() == h.n_neg == round(0.1 * (y < 0).sum())
    np.testing.assert_array_equal(mask, Holdout.draw(y, ids, 7, 0.1, 200_000).mask(y, ids))
    assert not np.array_equal(mask, Holdout.draw(y, ids, 8, 0.1, 200_000).mask(y, ids))
    assert holdout_sizes(3, 1000, 0.1, 200_000) == (1, 100)          # the rare class is represented
    assert holdout_sizes(1, 1000, 0.1, 200_000) == (0, 100)          # ... when it can spare a row
    assert sum(holdout_sizes(5000, 95_000, 0.1, 1000)) <= 1000
    # rows held out in one block are held out wherever the block is cut: membership is per row
    part = Holdout.draw(y, ids, 7, 0.1, 200_000)
    np.testing.assert_array_equal(part.mask(y[500:900], ids[500:900]), mask[500:900])


def test_validation_rows_are_never_trained_on():
    X, y = make_data()
    ids = np.arange(y.shape[0])
    val = Holdout.draw(y, ids, 0, 0.1, 200_000).mask(y, ids)
    marker = np.zeros((X.shape[0], 1))
    marker[np.flatnonzero(val)[:3]] = 1e3                            # a feature only validation rows have
    Xm = np.hstack([X, marker])
    for measure in ("pauc", "f1"):
        est = NonDecomposableClassifier(measure, random_state=0, standardize=False, validation_folds=1).fit(
            Xm, np.where(y > 0, 1, 0))
        assert np.all(est._state.W[-1] == 0) and np.all(est._state.W_sum[-1] == 0)
        assert est.coef_[0, -1] == 0.0
    # trained on, the marker moves the weights
    est = NonDecomposableClassifier("pauc", eta=0.1, n_passes=2, validation_fraction=0.0,
                                    standardize=False).fit(Xm, y)
    assert est.coef_[0, -1] != 0.0


def test_validation_positives_are_those_the_selection_scored_on():
    """``validation_positives_`` (v+, whose inverse is what the selection resolves) counts the positives of the
    rows the selection scored: 10% of the positives held out, the given validation rows', none without one."""
    X, y = make_data()
    n_pos = int(np.count_nonzero(y > 0))
    est = NonDecomposableClassifier("pauc", random_state=0, validation_folds=1).fit(X, y)
    assert est.validation_positives_ == max(1, round(0.1 * n_pos))
    est = NonDecomposableClassifier("pauc", random_state=0).fit(X, y)     # "auto": 5 folds, every positive
    assert round(0.1 * n_pos) < 100 and est.folds_ == 5 and est.validation_positives_ == n_pos
    Xv, yv = X[:300], y[:300]
    est = NonDecomposableClassifier("prbep", random_state=0).fit(X[300:], y[300:], Xv, yv)
    assert est.validation_positives_ == int(np.count_nonzero(yv > 0)) > 0
    fixed = NonDecomposableClassifier("pauc", eta=0.1, n_passes=1, validation_fraction=0.0).fit(X, y)
    assert fixed.validation_positives_ == 0


# ------------------------------------------------------------------- selection
def test_selection_is_deterministic_and_reports_every_candidate():
    X, y = make_data()
    a = NonDecomposableClassifier("prbep", random_state=3, validation_folds=1).fit(X, y)
    b = NonDecomposableClassifier("prbep", random_state=3, validation_folds=1).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.intercept_ == b.intercept_ and a.selection_ == b.selection_
    # (prbep, auc/sq. hinge, pauc/hinge, pauc/sigmoid, logloss x 2) x 5, and the full-batch logloss/lbfgs
    assert len(a.selection_) == len(a.config_.candidates) == 31
    assert sum(r["selected"] for r in a.selection_) == 1
    best = max(r["validation"] for r in a.selection_ if r["validation"] is not None)
    assert next(r for r in a.selection_ if r["selected"])["validation"] == best
    assert all(r["dropped_at_check"] for r in a.selection_ if not r["selected"] and r["reason"])
    # each candidate's cost: the steps it was alive for, from the state's step counter at each check
    epochs = {p["check"]: p["epoch"] for p in a.validation_curve_}
    for r in a.selection_:
        alive_until = epochs[r["dropped_at_check"]] if r["dropped_at_check"] else a._state.epoch
        assert r["steps_trained"] == alive_until >= r["steps"]
    total = sum(r["steps_trained"] for r in a.selection_)
    assert sum(r["cost_share"] for r in a.selection_) == pytest.approx(1.0)
    assert all(r["cost_share"] == r["steps_trained"] / total for r in a.selection_)


def _selection_cfg(**kw) -> TrainConfig:
    return TrainConfig.from_params(measure="auc", **kw).resolve(n_features=2, n_rows=1000, mean_sq_norm=2.0,
                                                                n_validation=100)


def test_a_diverging_candidate_is_dropped_never_chosen():
    cfg = _selection_cfg(surrogate="hinge")                          # 5 step scales
    rng = np.random.default_rng(0)
    Xv = rng.normal(size=(100, 2))
    yv = np.where(Xv[:, 0] > 0, 1, -1)
    state = SGDState(W=np.tile(np.array([[1.0], [0.0]]), (1, 5)))
    state.W[:, 4] = [np.inf, 1.0]                                   # candidate 4 blew up
    state.W[:, 3] = [1e308, 1e308]                                 # finite weights, overflowing scores
    sel = Selection.start(2, 5)
    state, stop = sel.check(cfg.__class__(**{**cfg.__dict__, "average": False}), state, Xv, yv)
    assert not state.alive[4] and not state.alive[3]
    assert "diverged" in sel.reason[4] and "diverged" in sel.reason[3]
    assert sel.winner() in (0, 1, 2) and np.isfinite(sel.value[sel.winner()])


def test_early_stopping_stops_on_a_plateau_and_runs_on_while_improving():
    cfg = _selection_cfg(surrogate="hinge", eta=1.0, n_iter_no_change=3, average=False)
    rng = np.random.default_rng(0)
    Xv = rng.normal(size=(400, 2))
    yv = np.where(Xv[:, 0] + 0.3 * rng.normal(size=400) > 0, 1, -1)
    # plateau: the same model at every check
    sel, state = Selection.start(2, 1), SGDState(W=np.array([[1.0], [0.0]]))
    stops = [sel.check(cfg, state, Xv, yv)[1] for _ in range(5)]
    assert stops == [False, False, False, True, True]
    # improving: each check's model is closer to the true direction (its AUC rises every time)
    sel = Selection.start(2, 1)
    values = []
    for a in np.linspace(np.pi / 2, 0.0, 8):
        state = SGDState(W=np.array([[np.cos(a)], [np.sin(a)]]))
        _, stop = sel.check(cfg, state, Xv, yv)
        values.append(sel.best)
        assert not stop
    assert np.all(np.diff(values) > 0)


def test_early_stopping_needs_one_validation_positive_of_gain_over_the_window():
    """Gains that keep coming but add up to less than ``1 / v+`` over ``n_iter_no_change`` checks stop the
    run; the decision is recomputed here from the best values the checks record."""
    cfg = _selection_cfg(surrogate="hinge", eta=1.0, n_iter_no_change=3, average=False)
    rng = np.random.default_rng(1)
    Xv = rng.normal(size=(400, 2))
    yv = np.where(Xv[:, 0] + 0.3 * rng.normal(size=400) > 0, 1, -1)
    resolution = 1.0 / np.count_nonzero(yv > 0)
    sel, bests, stops = Selection.start(2, 1), [], []
    for a in np.linspace(0.6, 0.0, 40):               # AUC creeps up by far less than 1 / v+ per check
        _, stop = sel.check(cfg, SGDState(W=np.array([[np.cos(a)], [np.sin(a)]])), Xv, yv)
        bests.append(sel.best)
        stops.append(stop)
    assert np.all(np.diff(bests) >= 0) and bests[-1] > bests[0]
    expected = [i >= 3 and bests[i] - bests[i - 3] < resolution for i in range(len(bests))]
    assert stops == expected and any(stops) and not all(stops)


def test_defaults_stop_early_before_the_pass_budget():
    X, y = make_data(n=3000)
    est = NonDecomposableClassifier("pauc").fit(X, y)
    assert est.n_iter_ < est.config_.passes
    curve = est.validation_curve_
    assert curve[-1]["check"] >= 1 + est.n_iter_no_change
    assert est.score(X, y) > 0.3


def test_explicit_parameters_fix_one_candidate_trained_on_every_row():
    X, y = make_data()
    est = NonDecomposableClassifier(eta=0.3, n_passes=3).fit(X, y)
    assert len(est.config_.candidates) == 1 and est.selection_ is None
    assert est._state.rows_seen == 3 * X.shape[0] and est.n_iter_ == 3


def test_schedule_checks_every_few_passes_or_inside_long_passes():
    steps, checks = schedule([100], 20, random_state=0, shuffle=False, check_rows=250)
    assert checks == [2, 5, 8, 11, 14, 17, 19]
    steps, checks = schedule([100, 100, 100, 100], 2, random_state=0, shuffle=False, check_rows=250)
    assert checks == [2, 3, 6, 7]
    assert len(steps) == 8


def test_checks_are_fifty_steps_apart_or_five_validation_rows_per_check():
    small = TrainConfig.from_params(measure="pauc").resolve(n_features=2, n_rows=7000, mean_sq_norm=1.0,
                                                           n_validation=800)
    assert small.check_rows == 50 * 500                   # the floor: every average holds >= 50 iterates
    large = TrainConfig.from_params(measure="pauc").resolve(n_features=2, n_rows=10**7, mean_sq_norm=1.0,
                                                           n_validation=200_000)
    assert large.check_rows == 5 * 200_000                # a check costs about a tenth of the training


def test_data_parallel_chains_count_steps_not_rows_for_the_checks_and_the_pass_budget():
    def resolved(k: int) -> TrainConfig:
        return TrainConfig.from_params(measure="pauc").resolve(n_features=2, n_rows=7000, mean_sq_norm=1.0,
                                                              n_validation=800, n_chains=k)
    one, four = resolved(1), resolved(4)
    # a round of 4 chains moves the mixed state by one block's steps: 4 times the rows per step
    assert four.check_rows == 4 * one.check_rows == 4 * 50 * 500
    assert one.passes == math.ceil(20_000 / math.ceil(7000 / 500))          # 20 000 steps
    assert four.passes == math.ceil(20_000 / math.ceil(7000 / (4 * 500)))   # 20 000 mixed steps


def test_cp_returns_its_last_iterate_as_svmperf_does():
    from nsdist.solvers.cp import cutting_plane
    from nsdist.solvers.measure import make_loss

    X, y = make_data(n=600)
    res = cutting_plane(X, y, make_loss("prbep"), lam=1e-4, radius=None, fit_intercept=False, tol=1e-3,
                        max_iter=15)
    est = NonDecomposableClassifier("prbep", solver="cp", max_iter=15, standardize=False).fit(X, y)
    np.testing.assert_array_equal(est.coef_.ravel(), res.last_coef)
    assert not np.array_equal(res.last_coef, res.coef) or res.converged


def test_standardize_is_the_selection_on_rows_scaled_by_every_rows_moments():
    X, y = make_data()
    raw = X * np.array([1e-3, 1.0, 30.0, 1e3, 0.5, 2.0, 7.0, 1e2]) + 5.0
    raw = np.hstack([raw, np.full((raw.shape[0], 1), -0.0023)])     # a constant column: left unscaled
    est = NonDecomposableClassifier("pauc", random_state=2, validation_folds=1).fit(raw, y)
    from nsdist.solvers.scaling import scaling_from_rows
    scaling = scaling_from_rows(raw)
    assert scaling.scale[-1] == 1.0
    manual = NonDecomposableClassifier("pauc", random_state=2, standardize=False, validation_folds=1).fit(
        scaling.apply(raw.copy()), y)
    w, b = scaling.fold(manual.coef_.ravel(), float(manual.intercept_[0]))
    np.testing.assert_array_equal(est.coef_.ravel(), w)
    assert float(est.intercept_[0]) == b
    assert np.all(np.abs(est.coef_) < 1e6)
    assert NonDecomposableClassifier("pauc", fit_intercept=False).fit(raw, y).intercept_[0] == 0.0


def test_the_candidates_whose_loss_sees_the_scores_level_learn_an_intercept_the_others_do_not():
    """logloss and the squared hinge on squashed scores ``sigma(s)`` are not invariant to a shift of the
    scores: without an intercept logloss would spend ``w`` on the class prior (on rare positives and
    centred features its ranking collapses) and the squashed loss would centre every buffer's scores
    on ``sigma``'s midpoint. The other pairwise and the structural candidates need none (F1's own
    keeps its threshold)."""
    for measure in ("pauc", "f1"):
        cfg = TrainConfig.from_params(measure=measure).resolve(n_features=4, n_rows=1000, mean_sq_norm=4.0,
                                                               n_validation=100)
        assert any(c.loss.params().get("surrogate") == "sigmoid" for c in cfg.candidates)
        for c in cfg.candidates:
            want = c.loss.name == "logloss" or c.loss.params().get("surrogate") == "sigmoid" or (
                measure == "f1" and c.loss.name == "f1")
            assert c.learn_b == want, c.name
        off = TrainConfig.from_params(measure=measure, fit_intercept=False).resolve(
            n_features=4, n_rows=1000, mean_sq_norm=4.0, n_validation=100)
        assert not any(c.learn_b for c in off.candidates)
    # trained: the logloss candidates' intercepts go to the (negative) log-odds side of 8% positives
    X, y = make_data(n=3000, pos=0.08)
    est = NonDecomposableClassifier("pauc", random_state=0, n_passes=3, validation_folds=1).fit(X, y)
    st_ = est._state
    logloss = [j for j, c in enumerate(est.config_.candidates) if c.loss.name == "logloss"]
    pairwise = [j for j, c in enumerate(est.config_.candidates) if c.loss.shift_invariant]
    squashed = [j for j, c in enumerate(est.config_.candidates) if c.loss.params().get("surrogate") == "sigmoid"]
    assert np.all(st_.b[logloss] < 0.0)
    assert np.all(st_.b[pairwise] == 0.0)
    assert np.count_nonzero(st_.b[squashed]) == len(squashed) == 5


def test_smooth_candidates_step_a_constant_eta_where_the_fit_chooses_it():
    """docs/solvers.md §Selection: the smooth ``phi`` take ``eta`` at every epoch (averaged constant-step
    SGD), logloss both ways; the hinge and the structural surrogates, and any run with a given ``eta``,
    the paper's ``eta / sqrt(e)``."""
    for measure in ("pauc", "f1"):
        cfg = TrainConfig.from_params(measure=measure).resolve(n_features=4, n_rows=1000, mean_sq_norm=4.0,
                                                               n_validation=100)
        names = [c.name for c in cfg.candidates]
        assert len(set(names)) == len(names)
        [batch] = [c for c in cfg.candidates if c.batch]          # its own schedule (tests/test_batch.py)
        assert batch.name == "logloss/lbfgs" and batch.describe()["schedule"] == "L-BFGS, one gradient a pass"
        for c in (c for c in cfg.candidates if not c.batch):
            smooth_phi = c.loss.params().get("surrogate") in ("logistic", "squared_hinge", "sigmoid")
            if c.loss.name == "logloss":
                assert c.constant == ("/const@" in c.name), c.name
            else:
                assert c.constant == smooth_phi, c.name
            assert c.describe()["schedule"] == ("eta" if c.constant else "eta/sqrt(e)")
        logloss = [(c.step_scale, c.constant) for c in cfg.candidates if c.loss.name == "logloss" and not c.batch]
        assert sorted(logloss) == sorted((s, k) for s in (0.1, 1.0, 10.0, 100.0, 1000.0) for k in (True, False))
    fixed = TrainConfig.from_params(measure="auc", surrogate="logistic", eta=0.5).resolve(
        n_features=4, n_rows=1000, n_validation=100)
    assert [c.constant for c in fixed.candidates] == [False]


def test_the_kernel_steps_each_candidate_by_its_schedule():
    """Three epochs of two logloss candidates, one constant, one decaying, against the update written out."""
    from nsdist.losses import LogLoss
    from nsdist.solvers.kernel import Population, run_epochs

    X, y = make_data(n=300, d=5)
    loss = LogLoss()
    population = Population((loss, loss), (0.2, 0.2), (False, False), (True, False))
    state, _ = run_epochs(SGDState.zeros(5, 2), X, y, population, buffer_size=100)
    for m, constant in enumerate((True, False)):
        w, w_sum = np.zeros(5), np.zeros(5)
        for e, sl in enumerate((slice(0, 100), slice(100, 200), slice(200, 300)), start=1):
            _, ds = loss.value_and_dscore(X[sl] @ w, y[sl])
            w = w - (0.2 if constant else 0.2 / np.sqrt(e)) * (X[sl].T @ ds)
            w_sum += w
        np.testing.assert_allclose(state.W[:, m], w, rtol=1e-12)
        np.testing.assert_allclose(state.W_sum[:, m], w_sum, rtol=1e-12)


# ---------------------------------------------------------------- K-fold selection
def test_folds_are_stratified_deterministic_and_follow_the_seed():
    from nsdist.solvers.plan import fold_ids

    X, y = make_data(n=1003, pos=0.05)
    ids = np.arange(y.shape[0])
    folds = fold_ids(y, ids, 7, 5)
    assert set(np.unique(folds)) == set(range(5))
    for cls in (y > 0, y < 0):
        counts = np.bincount(folds[cls], minlength=5)
        assert counts.max() - counts.min() <= 1 and counts.sum() == cls.sum()
    np.testing.assert_array_equal(folds, fold_ids(y, ids, 7, 5))
    assert not np.array_equal(folds, fold_ids(y, ids, 8, 5))


def _lockstep_by_barrier(monkeypatch, params: dict, X, y, folds: np.ndarray) -> list:
    """An independent K-fold lockstep: one ``fit(X[fold != f], y[fold != f], X[fold == f], y[fold == f])`` per
    fold in its own thread, its ``Selection.check`` replaced by one that scores as the selection does, then
    meets the other folds at a barrier where the rule is applied to the posted values: a candidate dead on
    one fold is dead on all, halving keeps the best third by the mean of this check's values, the stochastic
    candidates stop when the best mean snapshot has gained less than the coarsest fold's ``1 / v+`` over
    ``n_iter_no_change`` checks, and the fits stop together.  The fold fits whose plan is longer than the
    shortest stop there too (a broken barrier)."""
    import threading

    from nsdist.solvers.select import REDUCTION

    k = int(folds.max()) + 1
    barrier, posts, decided, best = threading.Barrier(k), {}, {}, []

    def check(self, cfg, state, X_val, y_val):
        f = threading.current_thread().fold
        self.checks += 1
        alive = state.alive.copy()
        cols = np.flatnonzero(alive)
        W, b = state.models(cfg.average, cols)
        values, b_eff = self.score(cfg, W, b, X_val, y_val)
        now = np.full(alive.size, -np.inf)
        now[cols] = values
        better = cols[values > self.value[cols]]
        self.value[better] = now[better]
        self.b[better] = b_eff[np.searchsorted(cols, better)]
        self.W[:, better] = W[:, np.searchsorted(cols, better)]
        self.at_epoch[better] = state.epoch
        self.best = max(self.best, float(values.max()))
        batch = np.array([c.batch for c in cfg.candidates])
        self._record(state, batch)               # the curve the full-batch candidates' own rule reads
        resolution = max(1e-4, 1.0 / np.count_nonzero(y_val > 0))
        batch_on = (alive & batch).any() and not (
            self._stalled("best_batch", "passes_batch", cfg.n_iter_no_change, resolution)
            and self._stalled("objective_batch", "passes_batch", cfg.n_iter_no_change, cfg.tol, relative=True))
        posts[f] = (now, alive & np.isfinite(now), self.value.copy(), resolution, batch_on)
        try:
            if barrier.wait(timeout=120) == 0:
                both = np.logical_and.reduce([posts[g][1] for g in range(k)])
                mean = np.array([np.mean([posts[g][0][c] for g in range(k)]) if both[c] else -np.inf
                                 for c in range(both.size)])
                ranked = sorted(np.flatnonzero(both & ~batch), key=lambda c: (-mean[c], c))
                keep = set(ranked[:math.ceil(len(ranked) / REDUCTION)])
                best.append(max(np.mean([posts[g][2][c] for g in range(k)]) for c in np.flatnonzero(~batch)))
                n = cfg.n_iter_no_change
                stalled = len(best) > n and best[-1] - best[-1 - n] < max(posts[g][3] for g in range(k))
                decided["alive"] = np.array([both[c] and (batch[c] or (c in keep and not stalled))
                                             for c in range(both.size)])
                decided["batch_on"] = any(posts[g][4] for g in range(k))
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            return state, True
        for c in np.flatnonzero(alive & ~decided["alive"]):
            self._drop(state, c, "gone")
        return state, not (state.alive & ~batch).any() and not decided["batch_on"]

    monkeypatch.setattr(Selection, "check", check)
    fits = [NonDecomposableClassifier(**params) for _ in range(k)]

    def run(f):
        threading.current_thread().fold = f
        try:
            fits[f].fit(X[folds != f], y[folds != f], X[folds == f], y[folds == f])
        finally:
            barrier.abort()
    threads = [threading.Thread(target=run, args=(f,)) for f in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return fits


@pytest.mark.parametrize("measure, seed, k", [("f1", 2, 3), ("pauc", 4, 4), ("prbep", 1, 5)])
def test_k_fold_selection_equals_fits_on_each_folds_complement_checked_in_lockstep(monkeypatch, measure, seed, k):
    """``validation_folds=K`` against ``K`` fits, each on a fold's complement with the fold as its validation
    rows, held in lockstep by an independent barrier (:func:`_lockstep_by_barrier`): each candidate's value on
    each fold and its steps are theirs, its value the mean of theirs, the winner the best mean, the model the
    mean of the winner's fold models, and F1's threshold the F1-optimal one on every row (brute force); every
    fold keeps the same candidates and stops at the same check; the same seed gives the same model."""
    from nsdist.solvers.plan import fold_ids

    X, y = make_data(n=1800, seed=seed)
    params = dict(measure=measure, random_state=seed)
    est = NonDecomposableClassifier(**params, validation_folds=k).fit(X, y)
    folds = fold_ids(y, np.arange(y.shape[0]), seed, k)
    fits = _lockstep_by_barrier(monkeypatch, params, X, y, folds)
    for m, row in enumerate(est.selection_):
        per_fold = [fit.selection_[m]["validation"] for fit in fits]
        assert [f["validation"] for f in row["folds"]] == per_fold
        assert [f["steps"] for f in row["folds"]] == [fit.selection_[m]["steps"] for fit in fits]
        assert len({f["dropped_at_check"] for f in row["folds"]}) == 1
        if None not in per_fold:
            assert row["validation"] == pytest.approx(np.mean(per_fold), abs=1e-15)
    assert len({len(fit.validation_curve_) for fit in fits}) == 1
    assert [p["fold"] for p in est.validation_curve_] == [f for f in range(k) for _ in fits[f].validation_curve_]
    chosen = [r for r in est.selection_ if r["selected"]]
    assert len(chosen) == 1 and chosen[0]["validation"] == max(r["validation"] for r in est.selection_
                                                               if r["validation"] is not None)
    m = [r["selected"] for r in est.selection_].index(True)
    fold_models = [fit._scaling.fold(fit._selection.W[:, m], float(fit._selection.b[m]))[0] for fit in fits]
    np.testing.assert_allclose(est.coef_.ravel(), np.mean(fold_models, axis=0), rtol=1e-12, atol=1e-14)
    assert est.folds_ == k and est.validation_positives_ == int(np.count_nonzero(y > 0))
    if measure == "f1":
        s = X @ est.coef_.ravel()
        yy = np.where(y > 0, 1, -1)
        best = max(_f1(yy, s > u) for u in np.append(np.unique(s), s.min() - 1))
        assert _f1(yy, s + est.intercept_[0] > 0) == pytest.approx(best, abs=1e-12)
    again = NonDecomposableClassifier(**params, validation_folds=k).fit(X, y)
    np.testing.assert_array_equal(again.coef_, est.coef_)
    np.testing.assert_array_equal(again.intercept_, est.intercept_)


def test_k_fold_fits_on_processes_give_the_same_model_bit_for_bit():
    """``n_jobs=2``: the fold fits are held by two loky processes (real ones) and return the in-process
    model, selection and curve exactly; a fit that is not K-fold ignores ``n_jobs``."""
    X, y = make_data(n=1500, seed=6)
    here = NonDecomposableClassifier("prbep", random_state=1, validation_folds=3).fit(X, y)
    there = NonDecomposableClassifier("prbep", random_state=1, validation_folds=3, n_jobs=2).fit(X, y)
    np.testing.assert_array_equal(there.coef_, here.coef_)
    np.testing.assert_array_equal(there.intercept_, here.intercept_)
    assert there.selection_ == here.selection_ and there.validation_curve_ == here.validation_curve_
    one = NonDecomposableClassifier("prbep", random_state=1, validation_folds=1)
    np.testing.assert_array_equal(one.fit(X, y).coef_, one.set_params(n_jobs=2).fit(X, y).coef_)


def test_fold_processes_raise_a_fits_error_here_and_serve_the_next_fit(tmp_path):
    """``n_jobs=2``: an error inside a fold process (every candidate diverged) is raised by ``fit`` with its
    type and message, as in-process; the same two processes (kept between fits) then give the next fit's
    in-process model; and a script without ``if __name__ == "__main__":`` fits with ``n_jobs=2`` when run
    as ``python file.py`` (its processes do not run the script again)."""
    import subprocess
    import sys

    from nsdist import fold_processes

    X, y = make_data(n=1200, seed=3)
    for n_jobs in (None, 2):
        with pytest.raises(FloatingPointError, match="every candidate diverged"):
            NonDecomposableClassifier("prbep", eta=1e300, standardize=False, validation_folds=3,
                                      n_jobs=n_jobs).fit(X * 1e150, y)
    pids = [p.pid for p, _ in fold_processes._HOSTS]
    assert len(pids) == 2
    here = NonDecomposableClassifier("f1", random_state=4, validation_folds=4).fit(X, y)
    there = NonDecomposableClassifier("f1", random_state=4, validation_folds=4, n_jobs=2).fit(X, y)
    np.testing.assert_array_equal(there.coef_, here.coef_)
    assert there.intercept_[0] == here.intercept_[0]
    assert [p.pid for p, _ in fold_processes._HOSTS] == pids
    script = tmp_path / "fit.py"
    script.write_text(
        "import numpy as np\n"
        "from nsdist import NonDecomposableClassifier\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.standard_normal((1000, 5))\n"
        "y = np.where(X[:, 0] + rng.standard_normal(1000) > 2.5, 1, 0)\n"
        "clf = NonDecomposableClassifier('prbep', validation_folds=3, n_jobs=2).fit(X, y)\n"
        "print('fitted', clf.folds_)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.count("fitted 3") == 1, done.stderr[-2000:]


def test_fold_fits_gather_from_an_aligned_copy_of_misaligned_rows(monkeypatch):
    """Rows at an odd address (as a Dask worker receives a scattered array) are copied once, aligned, and shared
    by the fold fits of that worker when memory is too short for their own copies (gathering from misaligned
    rows was 4 times slower); aligned rows are not copied; the model is the same either way."""
    from nsdist import estimator
    from nsdist.estimator import advance_folds, fit_folds_in_lockstep, fold_plans, fold_results, start_folds
    from nsdist.solvers.plan import fold_ids

    monkeypatch.setattr(estimator, "FOLD_COPY_SHARE", 0.0)
    X, y = make_data(n=900, seed=2)
    raw = np.zeros(X.nbytes + 1, dtype=np.uint8)
    odd = np.frombuffer(raw.data, dtype=np.float64, count=X.size, offset=1).reshape(X.shape)
    odd[:] = X
    assert not odd.flags.aligned
    cfg = TrainConfig.from_params(measure="prbep", max_passes=4).with_folds(3)
    yy = np.where(y > 0, 1, -1)
    fold = fold_ids(yy, np.arange(yy.shape[0]), 0, 3)
    results = []
    for rows in (X, odd):
        fits = start_folds(cfg, rows, yy, fold, [0, 1, 2])
        assert len({id(s.X) for s in fits}) == 1 and fits[0].X.flags.aligned
        assert (fits[0].X is X) == (rows is X)
        fit_folds_in_lockstep(cfg, lambda d, n, a: advance_folds(fits, d, n, a), fold_plans(fits))
        results.append(fold_results(fits))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a["selection"].W, b["selection"].W)


@pytest.mark.parametrize("measure", ["prbep", "pauc"])
def test_k_fold_fits_share_the_rows_when_memory_is_short(monkeypatch, measure):
    """The ``K`` fold fits are held together (lockstep); when their own scaled copies would not fit the memory
    left (here: none may be used), none copies its rows: each gathers and scales a pass's rows from the shared
    ``X`` and holds its own validation rows only; the moments take no float64 copy (``moments_of``) and the
    full-batch candidates' rows (pAUC has one) are gathered by one fold at a time.  Peak over the whole fit:
    one pass's gathered rows, the folds' validation rows (``X`` once), their row indices and small change --
    2.5x the rows' bytes; with a scaled copy per fold it is 9.1x."""
    import tracemalloc

    from nsdist import estimator

    monkeypatch.setattr(estimator, "FOLD_COPY_SHARE", 0.0)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12000, 40))
    y = np.where(X[:, 0] + rng.standard_normal(12000) > 3.0, 1, -1)
    est = NonDecomposableClassifier(measure, validation_folds=5, max_passes=40)
    tracemalloc.start()
    try:
        est.fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert est.folds_ == 5 and est.n_iter_ >= 5 * 3
    assert peak < 2.8 * X.nbytes, peak / X.nbytes


@pytest.mark.parametrize("measure", ["f1", "pauc"])
def test_fold_fits_scale_their_own_rows_once_when_memory_allows(monkeypatch, measure):
    """With memory to spare, each fold fit copies and scales its training rows once (the rows of every other
    fold, no shared ``X``) instead of scaling every pass's rows again; with none to spare they share ``X``.
    Either way each fold fit selects the same candidates to the bit, and the estimator returns the same model."""
    from nsdist import estimator
    from nsdist.estimator import advance_folds, fit_folds_in_lockstep, fold_plans, fold_results, start_folds
    from nsdist.solvers.plan import fold_ids

    X, y = make_data(n=1200, d=6, seed=5)
    cfg = TrainConfig.from_params(measure=measure, max_passes=6, random_state=3).with_folds(3)
    fold = fold_ids(y, np.arange(y.shape[0]), 3, 3)
    runs = {}
    for share in (estimator.FOLD_COPY_SHARE, 0.0):
        monkeypatch.setattr(estimator, "FOLD_COPY_SHARE", share)
        fits = start_folds(cfg, X, y, fold, [0, 1, 2])
        owned = share > 0
        assert all(s.owns_rows == owned for s in fits)
        assert len({id(s.X) for s in fits}) == (3 if owned else 1)
        for f, s in enumerate(fits):
            if owned:      # the rows outside fold f, scaled: what the shared path gathers and scales every pass
                np.testing.assert_array_equal(s.X, s.scaling.apply(X[fold != f]))
            else:
                assert s.X is X and s.rows is not None
        fit_folds_in_lockstep(cfg, lambda d, n, a: advance_folds(fits, d, n, a), fold_plans(fits))
        runs[share] = (fold_results(fits), NonDecomposableClassifier(measure, validation_folds=3, max_passes=6,
                                                                     random_state=3).fit(X, y))
    (copied, est_copied), (shared, est_shared) = runs.values()
    for a, b in zip(copied, shared):
        np.testing.assert_array_equal(a["selection"].W, b["selection"].W)
        np.testing.assert_array_equal(a["selection"].b, b["selection"].b)
        assert a["passes"] == b["passes"]
    np.testing.assert_array_equal(est_copied.coef_, est_shared.coef_)
    assert est_copied.intercept_ == est_shared.intercept_


def test_memory_left_in_a_dask_worker_is_bounded_by_its_memory_limit():
    """In a worker process with a memory limit, what the fold fits may fill is bounded by that limit less what
    the worker holds; outside a worker, by the machine's available memory."""
    import psutil
    from distributed import Client, LocalCluster

    from nsdist.estimator import memory_left

    assert 0 < memory_left() <= psutil.virtual_memory().total
    with LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="400MB", dashboard_address="127.0.0.1:0",
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        left, rss = client.submit(lambda: (memory_left(), psutil.Process().memory_info().rss)).result()   # a task
    assert 0 < left <= 400e6 - rss + 50e6       # the worker's resident memory moved a little between the calls
    assert left < psutil.virtual_memory().available


@pytest.mark.parametrize("n_jobs", [0, 1.5, "2", True])
def test_n_jobs_must_be_a_nonzero_int(n_jobs):
    X, y = make_data(n=600)
    with pytest.raises(ValueError, match="n_jobs must be None or a nonzero int"):
        NonDecomposableClassifier("pauc", n_jobs=n_jobs, validation_folds=1).fit(X, y)


@pytest.mark.parametrize("params, fit_kw, message", [
    (dict(validation_folds=0), {}, "validation_folds must be 'auto' or an int >= 1"),
    (dict(validation_folds=2.5), {}, "validation_folds must be 'auto' or an int >= 1"),
    (dict(validation_folds="5"), {}, "validation_folds must be 'auto' or an int >= 1"),
    (dict(validation_folds=3, solver="cp"), {}, "needs solver '1pmb' or '2pmb'"),
    (dict(validation_folds=3, eta=0.1, n_passes=2), {}, "eta or n_passes left unset"),
    (dict(validation_folds=3), {"val": True}, "not both"),
    (dict(validation_folds=200), {}, "fewer than one a fold"),
])
def test_k_fold_selection_rejects_what_it_cannot_do(params, fit_kw, message):
    X, y = make_data(n=600)
    args = (X[100:], y[100:], X[:100], y[:100]) if fit_kw else (X, y)
    with pytest.raises(ValueError, match=message):
        NonDecomposableClassifier("pauc", **params).fit(*args)


@pytest.mark.parametrize("folds", [1, 3])
def test_constant_features_are_refused_saying_so(folds):
    """Every feature constant (0 once standardised): the step size cannot be scaled and nothing ranks the rows;
    the error says that, not only "set eta" (a user's wrong column selection, typically)."""
    X, y = make_data(n=600)
    with pytest.raises(ValueError, match="every feature is constant"):
        NonDecomposableClassifier("prbep", validation_folds=folds).fit(np.ones_like(X), y)


def test_auto_folds_take_k_fold_selection_exactly_where_a_holdout_would_hold_under_100_positives():
    """``validation_folds="auto"``: 5 folds where the 10% holdout would hold < 100 positives, the rows fit the
    validation cap and each fold gets a positive; one holdout otherwise, or where no holdout would be drawn."""
    auto = TrainConfig.from_params(measure="prbep")
    assert auto.validation_folds == "auto"
    assert holdout_sizes(994, 50_000, 0.1, 200_000)[0] == 99 and auto.folds(994, 50_000) == 5
    assert holdout_sizes(995, 50_000, 0.1, 200_000)[0] == 100 and auto.folds(995, 50_000) == 1
    assert auto.folds(5, 1000) == 5 and auto.folds(4, 1000) == 1             # a positive in every fold
    assert auto.folds(50, 199_950) == 5 and auto.folds(50, 199_951) == 1      # rows <= validation_max_rows
    assert TrainConfig.from_params(measure="prbep", validation_max_rows=1000).folds(50, 1000) == 1
    assert auto.folds(50, 1000, holdout=False) == 1                          # validation rows given, ...
    assert TrainConfig.from_params(measure="prbep", validation_fraction=0.0).folds(50, 1000) == 1
    assert TrainConfig.from_params(measure="prbep", eta=0.1, n_passes=2).folds(50, 1000) == 1   # no selection
    assert TrainConfig.from_params(measure="prbep", solver="ftrl").folds(50, 1000) == 1
    assert TrainConfig.from_params(measure="prbep", validation_folds=1).folds(50, 1000) == 1
    assert TrainConfig.from_params(measure="prbep", validation_folds=3).folds(5000, 10_000) == 3
    # the estimator resolves it from its training rows' class counts, and says which it took
    X, y = make_data(n=600)
    assert NonDecomposableClassifier("pauc").fit(X, y).folds_ == 5
    assert NonDecomposableClassifier("pauc").fit(X[100:], y[100:], X[:100], y[:100]).folds_ is None
    assert NonDecomposableClassifier("pauc", validation_max_rows=500).fit(X, y).folds_ is None


def test_partial_fit_refuses_an_explicit_k_fold_selection():
    X, y = make_data(n=600)
    est = NonDecomposableClassifier("pauc", validation_folds=2).fit(X, y)
    with pytest.raises(ValueError, match="K-fold selection .* is fit's"):
        est.partial_fit(X, y)
    with pytest.raises(ValueError, match="K-fold selection .* is fit's"):
        NonDecomposableClassifier("pauc", validation_folds=2).partial_fit(X, y)


def test_winner_watch_measures_each_snapshot_once():
    """WinnerWatch measures the winner's snapshot at a check only when it differs from the one measured last
    (a snapshot changes only with its value), and nothing before a candidate has a finite value."""
    from nsdist.solvers.select import WinnerWatch

    sel = Selection.start(3, 2)
    seen = []
    watch = WinnerWatch(lambda w, b: seen.append((w.copy(), b)) or float(w.sum() + b))
    assert watch(sel) is None and seen == []
    sel.value[:] = [0.5, 0.7]
    sel.W[:, 1], sel.b[1] = [1.0, 2.0, 3.0], 0.5
    assert watch(sel) == 6.5 and watch(sel) == 6.5 and len(seen) == 1
    sel.value[1], sel.W[0, 1] = 0.8, 10.0                      # the winner's snapshot improved
    assert watch(sel) == 15.5 and len(seen) == 2
    sel.value[0], sel.W[:, 0] = 0.9, [1.0, 1.0, 1.0]          # another winner
    assert watch(sel) == 3.0 and len(seen) == 3 and watch(sel) == 3.0 and len(seen) == 3
