"""The full-batch candidate (docs/solvers.md §Full-batch candidate): L-BFGS on the logistic loss, one
gradient a pass, inside the population of the default fit and of the engine."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression

from nsdist import NonDecomposableClassifier, losses, train
from nsdist.solvers.batch import BatchState
from nsdist.solvers.config import TrainConfig
from nsdist.solvers.kernel import Population, SGDState, end_pass, mix_states, run_epochs
from nsdist.solvers.select import Selection
from tests.test_engine import write_parquet

LOGLOSS = losses.get("logloss")


def ill_conditioned(n=3000, d=12, seed=0):
    """Rows whose columns span a decade of scale, 5% positives."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.logspace(-0.5, 0.5, d)
    s = X @ (rng.normal(size=d) / np.logspace(-0.5, 0.5, d)) + 0.5 * rng.normal(size=n)
    y = np.where(s >= np.quantile(s, 0.95), 1, -1).astype(np.int8)
    return X, y


def batch_population(X, learn_b: bool = True) -> Population:
    """The full-batch candidate alone, first step ``1 / L`` as the fit sets it."""
    first_step = 4.0 / (float(np.mean(np.einsum("ij,ij->i", X, X))) + 1.0)
    return Population((LOGLOSS,), (first_step,), (learn_b,), (False,), (True,))


def run_passes(X, y, passes: int, blocks: int = 1, learn_b: bool = True) -> SGDState:
    """Full-batch passes over ``X`` cut into ``blocks`` blocks, as a driver runs them."""
    population, state = batch_population(X, learn_b), SGDState.zeros(X.shape[1])
    for _ in range(passes):
        for part in np.array_split(np.arange(X.shape[0]), blocks):
            state, stats = run_epochs(state, np.asfortranarray(X[part]), y[part], population, buffer_size=100)
            assert stats.size == 0                               # a full-batch candidate takes no epochs
        state = end_pass(state, population)
    return state


def objective(x: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """``LogisticRegression(C=1)``'s objective over ``n``: mean logistic loss + ||w||^2 / (2 n), and its gradient."""
    n, w, b = X.shape[0], x[:-1], x[-1]
    z = y * (X @ w + b)
    g = -y / (1.0 + np.exp(z)) / n
    return np.logaddexp(0.0, -z).mean() + w @ w / (2 * n), np.append(X.T @ g + w / n, g.sum())


def test_lbfgs_reaches_the_logistic_regression_optimum():
    """100 passes (100 gradients) reach the minimiser that scikit-learn and scipy find on the same objective."""
    X, y = ill_conditioned()
    state = run_passes(X, y, 100)
    w, b = state.model(0, average=True)
    optimum = minimize(objective, np.zeros(X.shape[1] + 1), args=(X, y), jac=True, method="L-BFGS-B",
                       options=dict(maxiter=10_000, ftol=1e-15, gtol=1e-12))
    assert objective(np.append(w, b), X, y)[0] == pytest.approx(optimum.fun, rel=1e-9)
    lr = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(w, lr.coef_.ravel(), rtol=1e-4, atol=1e-6)
    assert b == pytest.approx(lr.intercept_[0], rel=1e-4)
    assert state.batch.evaluations == 100 and state.rows_seen == 100 * X.shape[0]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.booleans())
def test_accepted_points_only_lower_the_objective_and_the_sums_are_the_full_gradient(seed, blocks, learn_b):
    """Armijo: the objective of the accepted point never rises; a pass's sums over any blocking are the
    gradient of the stacked rows; without an intercept ``b`` stays 0."""
    X, y = ill_conditioned(n=400, d=5, seed=seed)
    population, state = batch_population(X, learn_b), SGDState.zeros(X.shape[1])
    accepted = []
    for _ in range(12):
        for part in np.array_split(np.arange(X.shape[0]), blocks):
            state, _ = run_epochs(state, np.asfortranarray(X[part]), y[part], population, buffer_size=50)
        x = state.W[:, 0].tolist() + [state.b[0]]
        f, g = objective(np.asarray(x), X, y)
        bs = state.batch
        np.testing.assert_allclose(bs.value[0] / X.shape[0] + 0.5 * state.W[:, 0] @ state.W[:, 0] / X.shape[0], f,
                                   rtol=1e-10)
        grad = bs.grad[0] / X.shape[0]
        np.testing.assert_allclose(grad[:-1] + state.W[:, 0] / X.shape[0], g[:-1], rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(grad[-1], g[-1], rtol=1e-8, atol=1e-12)
        state = end_pass(state, population)
        accepted.append(state.batch.fx[0])
        assert np.all(np.isfinite(state.W)) and (learn_b or state.b[0] == 0.0)
    assert np.all(np.diff(accepted) <= 0)
    assert accepted[-1] < accepted[0]


def test_mixing_chains_adds_their_sums_and_keeps_the_point():
    """Data-parallel rounds: the mixture's sums are those of one chain over all the round's rows."""
    X, y = ill_conditioned(n=600, d=4)
    population = batch_population(X)
    start = end_pass(run_epochs(SGDState.zeros(4), np.asfortranarray(X), y, population, buffer_size=100)[0],
                     population)
    halves = np.array_split(np.arange(600), 2)
    chains = [run_epochs(start, np.asfortranarray(X[h]), y[h], population, buffer_size=100)[0] for h in halves]
    mixed = mix_states(start, chains)
    whole = run_epochs(start, np.asfortranarray(X), y, population, buffer_size=100)[0]
    np.testing.assert_array_equal(mixed.W, start.W)
    np.testing.assert_allclose(mixed.batch.grad, whole.batch.grad, rtol=1e-12, atol=1e-15)
    assert mixed.batch.rows == whole.batch.rows == 600
    np.testing.assert_array_equal(end_pass(mixed, population).W, end_pass(mixed, population).W)


def test_state_with_the_batch_candidate_round_trips_through_a_checkpoint():
    X, y = ill_conditioned(n=500, d=4)
    state = run_passes(X, y, 7)
    back = SGDState.from_dict(state.to_dict())
    for f in ("x", "gx", "p", "t", "S", "Y", "n_pairs", "fx", "grad", "value"):
        np.testing.assert_array_equal(getattr(back.batch, f), getattr(state.batch, f))
    population = batch_population(X)
    a = end_pass(run_epochs(back, np.asfortranarray(X), y, population, buffer_size=100)[0], population)
    b = end_pass(run_epochs(state, np.asfortranarray(X), y, population, buffer_size=100)[0], population)
    np.testing.assert_array_equal(a.W, b.W)


def test_the_l_bfgs_memory_is_a_ring_and_reads_a_checkpoint_written_before_it():
    """Pair ``j`` goes to row ``j mod MEMORY`` and is never moved, so a pass end changes one row of ``S`` and
    ``Y`` (what the engine's driver fetches).  A checkpoint written before the ring held the pairs oldest first
    from row 0 and no ``written`` count: it resumes to the same model as the ring's own checkpoint."""
    from nsdist.solvers.batch import MEMORY

    X, y = ill_conditioned(n=500, d=4)
    population = batch_population(X)
    state = run_passes(X, y, 2 * MEMORY + 3)
    b = state.batch
    assert b.written[0] > MEMORY + 1 and b.n_pairs[0] == MEMORY
    held = b.pair_rows(0, int(b.written[0]) - MEMORY)
    assert sorted(held.tolist()) == list(range(MEMORY)) and held[-1] == (b.written[0] - 1) % MEMORY
    after = end_pass(run_epochs(state, np.asfortranarray(X), y, population, buffer_size=100)[0], population)
    moved = [r for r in range(MEMORY) if not np.array_equal(after.batch.S[0, r], b.S[0, r])]
    assert moved == [int(b.written[0] % MEMORY)] or after.batch.written[0] == b.written[0]
    old = state.to_dict()                             # the layout before the ring
    old["batch"]["S"], old["batch"]["Y"] = [b.S[0, held].tolist()], [b.Y[0, held].tolist()]
    del old["batch"]["written"]
    a, c = state, SGDState.from_dict(old)
    for _ in range(MEMORY + 2):
        a = end_pass(run_epochs(a, np.asfortranarray(X), y, population, buffer_size=100)[0], population)
        c = end_pass(run_epochs(c, np.asfortranarray(X), y, population, buffer_size=100)[0], population)
    np.testing.assert_array_equal(a.batch.x, c.batch.x)
    assert a.batch.fx[0] == c.batch.fx[0]


@pytest.mark.parametrize("params, expected", [
    ({}, 1),                                          # 1PMB, eta unset: one full-batch candidate
    ({"solver": "2pmb"}, 0),                          # 2PMB streams one class: no full pass to sum
    ({"eta": 0.1}, 0),                                # the user fixed the step: stochastic candidates only
    ({"surrogate": "hinge"}, 0),                      # the user fixed the surrogate: no logistic candidate
])
def test_the_population_has_a_full_batch_candidate_where_it_applies(params, expected):
    cfg = TrainConfig.from_params(measure="pauc", **params).resolve(n_features=3, n_rows=1000, mean_sq_norm=3.0,
                                                                    n_validation=100)
    batch = [c for c in cfg.candidates if c.batch]
    assert len(batch) == expected
    if batch:
        assert batch[0].name == "logloss/lbfgs" and batch[0].learn_b
        assert cfg.population.batch_cols.tolist() == [cfg.candidates.index(batch[0])]
    whole = TrainConfig.from_params(measure="pauc", **params).resolve(
        n_features=3, n_rows=1000, mean_sq_norm=3.0, n_validation=100, whole_passes=False)
    assert not any(c.batch for c in whole.candidates)


def test_partial_fit_has_no_full_batch_candidate():
    X, y = ill_conditioned(n=2000)
    est = NonDecomposableClassifier("pauc", random_state=0)
    for part in np.array_split(np.arange(2000), 4):
        est.partial_fit(X[part], y[part], classes=[-1, 1])
    assert not any(c.batch for c in est.config_.candidates)


def test_the_full_batch_candidate_trains_on_alone_and_stops_when_stalled():
    """Checks fed by hand: the stochastic candidates plateau and stop after ``n_iter_no_change`` checks while
    the full-batch one improves and trains on alone; the run stops once, over its last ``n_iter_no_change``
    passes, both its validation value and its objective stalled -- not while either still moves."""
    cfg = TrainConfig.from_params(measure="pauc", n_iter_no_change=3).resolve(
        n_features=2, n_rows=1000, mean_sq_norm=2.0, n_validation=400)
    b = int(cfg.population.batch_cols[0])
    rng = np.random.default_rng(0)
    Xv = rng.normal(size=(400, 2))
    yv = np.where(Xv[:, 0] + 0.3 * rng.normal(size=400) > 0, 1, -1)
    W = np.tile(np.array([[np.cos(0.8)], [np.sin(0.8)]]), (1, len(cfg.candidates)))
    state, sel = SGDState(W=W), Selection.start(2, len(cfg.candidates))
    state.batch = BatchState.start(np.array([b]), state.W, state.b)
    angles = list(np.linspace(1.2, 0.0, 9)) + [0.0] * 10        # the full-batch model improves, then stays
    objective = list(np.geomspace(1.0, 0.5, 12)) + [0.5] * 7        # its objective falls 3 passes longer
    stops = []
    for a, f in zip(angles, objective):
        state.batch.x[0, :2], state.batch.fx[0] = [np.cos(a), np.sin(a)], f
        state.batch.evaluations += 1
        state, stop = sel.check(cfg, state, Xv, yv)
        stops.append(stop)
        if stop:
            break
    stochastic = [c for c in range(len(cfg.candidates)) if c != b]
    assert not state.alive[stochastic].any() and state.alive[b]
    assert all("stopped early" in sel.reason[c] or "halving" in sel.reason[c] for c in stochastic)
    assert sel.winner() == b
    # the value stalls from check 9 on, the objective from check 12: both over 3 passes first at check 15
    assert stops == [False] * 14 + [True]


def test_selection_never_halves_the_full_batch_candidate():
    cfg = TrainConfig.from_params(measure="pauc").resolve(n_features=2, n_rows=1000, mean_sq_norm=2.0,
                                                          n_validation=100)
    m = len(cfg.candidates)
    b = int(cfg.population.batch_cols[0])
    rng = np.random.default_rng(0)
    Xv = rng.normal(size=(200, 2))
    yv = np.where(Xv[:, 0] > 1.0, 1, -1)
    W = np.tile(np.array([[1.0], [0.0]]), (1, m))
    W[:, b] = [-1.0, 0.0]                                  # the worst model of all
    state, sel = SGDState(W=W), Selection.start(2, m)
    for _ in range(4):
        state, _ = sel.check(cfg, state, Xv, yv)
    assert state.alive[b] and state.alive.sum() == 2


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as lc, Client(lc) as client:
        yield client


def test_engine_trains_the_full_batch_candidate_like_the_estimator(cluster, tmp_path):
    """One partition: the engine's selected model equals the estimator's bit for bit, with the full-batch
    candidate selected; several partitions and two chains: deterministic, and the candidate trained."""
    X, y = ill_conditioned(n=6000)
    one = write_parquet(tmp_path / "one", X, y, rows_per_file=6000)
    model = train(one, client=cluster, measure="pauc", random_state=2)
    est = NonDecomposableClassifier("pauc", random_state=2).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])
    assert [r["validation"] for r in model.history["selection"]] == [r["validation"] for r in est.selection_]
    many = write_parquet(tmp_path / "many", X, y, rows_per_file=1000)
    a = train(many, client=cluster, measure="pauc", random_state=2, n_chains=2)
    b = train(many, client=cluster, measure="pauc", random_state=2, n_chains=2)
    np.testing.assert_array_equal(a.coef, b.coef)
    lbfgs = next(r for r in a.history["selection"] if r["name"] == "logloss/lbfgs")
    assert lbfgs["validation"] is not None and a.history["validation_curve"][-1]["passes_batch"] >= 1


def test_a_step_leaves_the_state_it_was_handed_unchanged():
    """The engine redoes a failed step from the state it handed in: neither a block (which shares the L-BFGS
    memory with its input) nor a pass end (which changes it) may change that state."""
    X, y = ill_conditioned(n=500, d=4)
    population = batch_population(X)
    state = run_passes(X, y, 12)
    before = state.to_dict()
    after_block, _ = run_epochs(state, np.asfortranarray(X), y, population, buffer_size=100)
    assert state.to_dict() == before
    end_pass(after_block, population)
    mix_states(state, [after_block, after_block])
    assert state.to_dict() == before and after_block.batch.S is state.batch.S


@pytest.mark.parametrize("layout", ["dense", "csr"])
def test_a_state_is_the_one_it_started_from_with_what_its_blocks_changed(layout):
    """The engine's driver fetches at a segment's end only what the segment can have changed (the live and
    full-batch candidates' columns, the intercepts and counters, the full-batch sums; the L-BFGS memory when
    a pass ended) and applies it to the state the segment started from: that is the segment's end state bit
    for bit -- through blocks, a pass end and a data-parallel mix of 3 chains (whose mean of 3 equal frozen
    columns would round)."""
    import scipy.sparse as sp

    X, y = ill_conditioned(n=1200, d=40, seed=3)
    X[np.abs(X) < 1.0] = 0.0                      # some zeros, so that the CSR blocks are sparse
    blocks = [X[a:a + 300] for a in range(0, 1200, 300)]
    blocks = [sp.csr_matrix(b) if layout == "csr" else np.asfortranarray(b) for b in blocks]
    cfg = TrainConfig.from_params(measure="pauc", beta=0.1).resolve(n_features=40, n_rows=1200, mean_sq_norm=30.0,
                                                                    n_validation=100)
    population = cfg.population
    assert population.batch_cols.size == 1 and len(population) > 6

    def run(state, part):
        return run_epochs(state, blocks[part], y[part * 300:(part + 1) * 300], population, buffer_size=50)[0]

    start = end_pass(run(run(SGDState.zeros(40, len(population)), 0), 1), population)
    start.alive[1::2] = False                     # frozen by the selection (the full-batch one stays alive)
    start.alive[population.batch_cols] = True

    def same(a: SGDState, b: SGDState) -> bool:
        return a.to_dict() == b.to_dict()

    ends = {"a block": run(start, 2),                                   # no pass ends: the L-BFGS memory stays
            "two blocks and a pass end": end_pass(run(run(start, 2), 3), population),
            "a mix of 3 chains": mix_states(start, [run(start, p) for p in (1, 2, 3)])}
    before, paired = start.to_dict(), []
    for what, end in ends.items():
        change = end.change(start.alive, start.batch.clock())
        assert same(start.changed(change), end), what
        assert start.to_dict() == before, what                            # a new state; the start as it was
        into = start.copy()                  # the chain's way: the pairs written into the start's own memory
        assert same(into.changed(change, in_place=True), end), what
        if change.pairs is not None:
            assert into.changed(change, in_place=True).batch.S is into.batch.S, what
            paired.append(what)
        assert change.W.shape == (40, int(start.alive.sum())), what      # the frozen columns did not travel
        assert (change.rest.batch is None) == (end.batch.evaluations == start.batch.evaluations), what
        frozen = ~start.alive
        np.testing.assert_array_equal(end.W[:, frozen], start.W[:, frozen], err_msg=what)
        np.testing.assert_array_equal(end.W_sum[:, frozen], start.W_sum[:, frozen], err_msg=what)
    assert paired == ["two blocks and a pass end"]
    first = SGDState.zeros(40, len(population))     # before any block: no full-batch memory to start from
    end = run(first, 0)
    assert same(first.changed(end.change(first.alive, None)), end)
    # the engine steps a wide state narrowed to the candidates that train (the alive and full-batch ones):
    # widened back, it is the whole state's run bit for bit
    cols = np.union1d(np.flatnonzero(start.alive), population.batch_cols)
    narrow_cfg = replace(cfg, candidates=tuple(cfg.candidates[c] for c in cols))
    narrow = start.narrowed(cols)
    assert narrow.W.shape == (40, cols.size) and narrow.batch.cols.tolist() == [cols.tolist().index(
        int(population.batch_cols[0]))]
    for last in (False, True):
        whole, part = run(start, 2), run_epochs(narrow, blocks[2], y[600:900], narrow_cfg.population,
                                                buffer_size=50)[0]
        if last:
            whole, part = end_pass(whole, population), end_pass(part, narrow_cfg.population)
        assert same(start.widened(part, cols), whole), last
        assert same(start.widened(narrow.changed(part.change(narrow.alive, narrow.batch.clock())), cols), whole)


@pytest.mark.parametrize("gather_bytes", [None, 0], ids=["state-gathered", "state-left-on-cluster"])
def test_resume_mid_pass_with_the_full_batch_candidate_gives_the_identical_model(cluster, tmp_path, gather_bytes,
                                                                                monkeypatch):
    """A checkpoint taken in the third pass holds the full-batch candidate's sums and L-BFGS memory; the
    resumed job ends with the uninterrupted job's model and selection, bit for bit."""
    import json
    import shutil

    import nsdist.engine.chain as chain

    X, y = ill_conditioned(n=6000)
    url = write_parquet(tmp_path / "ck", X, y, rows_per_file=1000)       # 6 partitions: a pass is 6 steps
    ckpt, snapshot = tmp_path / "ckpt.json", tmp_path / "mid.json"
    params = dict(measure="pauc", random_state=4, validation_folds=1)          # streamed: one holdout
    full = train(url, client=cluster, **params)
    if gather_bytes is not None:
        monkeypatch.setattr(chain, "GATHER_BYTES", gather_bytes)

    def keep_midway(p):
        if p.step == 14:
            shutil.copy(ckpt, snapshot)

    train(url, client=cluster, checkpoint=str(ckpt), checkpoint_every=1, on_step=keep_midway, **params)
    state = json.loads(snapshot.read_text())
    assert state["position"] == 14 and state["state"]["batch"]["evaluations"] == 2
    shutil.copy(snapshot, ckpt)
    resumed = train(url, client=cluster, checkpoint=str(ckpt), resume=True, **params)
    np.testing.assert_array_equal(resumed.coef, full.coef)
    assert resumed.intercept == full.intercept
    assert resumed.history["selection"] == full.history["selection"]
