"""``NonDecomposableClassifier`` (docs/solvers.md §Estimator): scikit-learn contract, parameters, solvers."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils.estimator_checks import estimator_checks_generator

from nsdist import NonDecomposableClassifier
from nsdist.estimator import expected_failed_checks
from nsdist import metrics
from nsdist.solvers.measure import make_loss
from nsdist.solvers.plan import Holdout
from nsdist.solvers.sgd import one_pass_mb, two_pass_mb


def make_data(n=800, d=6, pos=0.1, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    s = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)
    y = (s >= np.quantile(s, 1 - pos)).astype(int)          # {0, 1}
    return X.astype(dtype), y


# Every configuration of every measure and solver, small budgets where a solver
# iterates.  ``check_array_api_input`` is left out: the estimator is numpy-only
# and does not claim array-API support (the check only skips itself without
# SCIPY_ARRAY_API, and a skip would say nothing).  A check that a configuration
# fails by design (``expected_failed_checks``: Prec@k with k under the positive
# rate labels only its top K positive) is run and must fail, for the stated reason.
_CHECKED = [
    NonDecomposableClassifier(),
    NonDecomposableClassifier("auc", solver="1pmb", max_passes=20),
    NonDecomposableClassifier("prec@k", k=0.1, max_passes=20),
    NonDecomposableClassifier("prbep", solver="2pmb", max_passes=20),
    NonDecomposableClassifier("f1", solver="2pmb"),
    NonDecomposableClassifier("f1", max_passes=20),
    NonDecomposableClassifier("prbep", solver="psg", max_iter=20),
    NonDecomposableClassifier("auc", solver="cp"),
    NonDecomposableClassifier("f1", solver="cp", max_iter=30),
    NonDecomposableClassifier("prec@k", k=0.5, solver="ftrl", max_iter=30),
    NonDecomposableClassifier("pauc", solver="ftrl", max_iter=30),
]


def _check_name(check) -> str:
    return getattr(check, "func", check).__name__


@pytest.mark.parametrize(
    "estimator, check",
    [(est, check) for template in _CHECKED
     for est, check in estimator_checks_generator(template, legacy=True)
     if _check_name(check) != "check_array_api_input"],
    ids=lambda v: _check_name(v) if callable(v) else repr(v),
)
def test_sklearn_estimator_checks(estimator, check):
    reason = expected_failed_checks(estimator).get(_check_name(check))
    if reason is None:
        check(estimator)
    else:
        with pytest.raises(AssertionError):
            check(estimator)


BAD = [
    (dict(measure="accuracy"), "unknown measure"),
    (dict(measure=None), "unknown measure"),
    (dict(solver="sgd"), "unknown solver"),
    (dict(surrogate="exponential"), "unknown surrogate"),
    (dict(measure="f1", surrogate="logistic"), "pairwise measures"),
    (dict(beta=0.0), "beta"),
    (dict(beta=1.5), "beta"),
    (dict(beta=-0.1), "beta"),
    (dict(beta="0.1"), "beta"),
    (dict(measure="prec@k"), "needs k"),
    (dict(measure="prec@k", k=0), "k"),
    (dict(measure="prec@k", k=10_000), "out of range"),
    (dict(measure="prec@k", k=1.5), "k"),
    (dict(measure="prec@k", k=-0.2), "k"),
    (dict(buffer_size=1), "buffer_size"),
    (dict(buffer_size=0), "buffer_size"),
    (dict(buffer_size=2.5), "buffer_size"),
    (dict(eta=-0.1), "eta"),
    (dict(eta=0.0), "eta"),
    (dict(eta=float("nan")), "eta"),
    (dict(radius=0), "radius"),
    (dict(radius=-1.0), "radius"),
    (dict(alpha=0.0), "alpha"),
    (dict(n_passes=0), "n_passes"),
    (dict(max_iter=0), "max_iter"),
    (dict(tol=0.0), "tol"),
    (dict(random_state=-1), "random_state"),
    (dict(random_state=np.random.RandomState(0)), "random_state"),
    (dict(average="yes"), "average"),
    (dict(shuffle=None), "shuffle"),
    (dict(fit_intercept=1), "fit_intercept"),
]


@pytest.mark.parametrize("params, match", BAD)
def test_every_bad_parameter_is_a_clear_value_error_at_fit(params, match):
    X, y = make_data(n=100)
    est = NonDecomposableClassifier(**params)                 # construction never validates
    with pytest.raises(ValueError, match=match):
        est.fit(X, y)


def test_bad_data_is_a_value_error():
    X, y = make_data(n=100)
    with pytest.raises(ValueError, match="both classes"):
        NonDecomposableClassifier().fit(X, np.ones(100))
    with pytest.raises(ValueError, match="Only binary"):
        NonDecomposableClassifier().fit(X, np.arange(100) % 3)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        NonDecomposableClassifier().fit(Xn, y)
    est = NonDecomposableClassifier().fit(X, y)
    with pytest.raises(ValueError, match="not one of the classes"):
        est.score(X, np.where(y == 1, 1, 7))
    with pytest.raises(ValueError, match="features"):
        est.decision_function(X[:, :3])


@pytest.mark.parametrize("solver", ["1pmb", "2pmb", "ftrl", "psg", "cp"])
def test_same_seed_same_coef_bit_for_bit(solver):
    X, y = make_data()
    kw = dict(solver=solver, max_iter=20, random_state=5)
    a = NonDecomposableClassifier(**kw).fit(X, y)
    b = NonDecomposableClassifier(**kw).fit(X, y)
    assert a.coef_.tobytes() == b.coef_.tobytes() and a.intercept_.tobytes() == b.intercept_.tobytes()


@pytest.mark.parametrize("solver", ["1pmb", "2pmb"])
def test_fit_is_the_solver_on_pm1_labels(solver):
    X, y = make_data()
    est = NonDecomposableClassifier("f1", solver=solver, eta=0.5, buffer_size=100, n_passes=2,
                                    standardize=False).fit(X, y)
    run = one_pass_mb if solver == "1pmb" else two_pass_mb
    ref = run(X, np.where(y == 1, 1, -1), make_loss("f1"), buffer_size=100, eta=0.5, n_passes=2,
              fit_intercept=True)
    assert est.coef_[0].tobytes() == ref.coef.tobytes() and est.intercept_[0] == ref.intercept
    assert est.n_iter_ == 2 and len(est.history_) == ref.state.epoch


@pytest.mark.parametrize("measure", ["pauc", "f1"])
def test_partial_fit_equals_fit_on_the_concatenated_blocks(measure):
    X, y = make_data(n=1200)
    kw = dict(measure=measure, buffer_size=100, shuffle=False, n_passes=1, eta=0.3, standardize=False)
    full = NonDecomposableClassifier(**kw).fit(X, y)
    part = NonDecomposableClassifier(**kw)
    for lo, hi in [(0, 300), (300, 800), (800, 1200)]:           # multiples of buffer_size
        part.partial_fit(X[lo:hi], y[lo:hi])
    assert part.coef_.tobytes() == full.coef_.tobytes()
    if measure == "f1":                                         # a learned intercept
        assert part.intercept_.tobytes() == full.intercept_.tobytes()
    assert [r.step for r in part.history_] == [r.step for r in full.history_]
    assert part.n_iter_ == 3


def test_partial_fit_continues_fit_and_needs_classes_for_a_one_class_block():
    X, y = make_data()
    est = NonDecomposableClassifier(buffer_size=100, validation_folds=1).fit(X, y)
    epochs = est._state.epoch
    est.partial_fit(X[:200], y[:200])
    assert est._state.epoch == epochs + 2
    neg = y == 0
    with pytest.raises(ValueError, match="one class"):
        NonDecomposableClassifier().partial_fit(X[neg][:50], y[neg][:50])
    est = NonDecomposableClassifier(solver="2pmb", buffer_size=20)
    est.partial_fit(X[neg][:50], y[neg][:50], classes=[0, 1])      # the positives are rare: +1
    est.partial_fit(X, y)
    assert est._reservoir.label == 1 and est._reservoir.X.shape[0] == 20


def test_partial_fit_after_a_k_fold_fit_starts_a_stream_at_its_model():
    """No population to continue after K-fold selection: every candidate starts at the fitted model, expressed on
    the block's scaled features (nsdist.train's init_model rule), and the calls after it continue that stream."""
    X, y = make_data()
    est = NonDecomposableClassifier("prbep", buffer_size=100).fit(X, y)
    assert est.folds_ == 5 and est._state is None
    coef, intercept = est.coef_.ravel().copy(), float(est.intercept_[0])
    neg = np.flatnonzero(y == 0)[:300]
    est.partial_fit(X[neg], y[neg])                # one class: every epoch skipped, the state stays at w_0
    assert est.folds_ is None and est._state.epoch == 0 and est._state.skipped == 3     # 270 training rows
    mean, sd = X[neg].mean(axis=0), X[neg].std(axis=0)
    w0 = coef * sd                                  # the raw model on the block's standardised features
    np.testing.assert_allclose(est._state.W, np.repeat(w0[:, None], est._state.W.shape[1], axis=1), rtol=1e-12)
    learn = np.asarray(est.config_.population.learn_b)
    np.testing.assert_allclose(est._state.b[learn], intercept + coef @ mean, rtol=1e-12)
    assert np.all(est._state.b[~learn] == 0.0)
    epochs = est._state.epoch
    est.partial_fit(X[:200], y[:200])               # then the stream goes on from there
    assert est._state.epoch == epochs + 2


def test_partial_fit_plays_one_ftrl_round_per_call():
    X, y = make_data(n=400)
    est = NonDecomposableClassifier(solver="ftrl", buffer_size=100, shuffle=False, max_iter=30, standardize=False)
    full = clone(est).fit(X, y)
    for lo in range(0, 400, 100):
        est.partial_fit(X[lo:lo + 100], y[lo:lo + 100])
    assert est.n_iter_ == full.n_iter_ == 4
    assert est.coef_.tobytes() == full.coef_.tobytes()
    assert len(est._ftrl.penalties) == 4


@pytest.mark.parametrize("solver", ["psg", "cp"])
def test_batch_solvers_have_no_partial_fit(solver):
    est = NonDecomposableClassifier(solver=solver)
    assert not hasattr(est, "partial_fit")
    with pytest.raises(AttributeError, match="partial_fit") as err:
        est.partial_fit(*make_data(n=50))
    assert "batch method: use fit" in str(err.value.__cause__)       # shown in the traceback


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_input_works(dtype):
    X, y = make_data(dtype=dtype)
    est = NonDecomposableClassifier("f1").fit(X, y)
    s = est.decision_function(X)
    assert s.dtype == np.float64 and np.all(np.isfinite(s))
    ref = NonDecomposableClassifier("f1").fit(X.astype(np.float64), y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), (False, True), ("ham", "spam")])
def test_labels_keep_their_encoding(labels):
    X, y01 = make_data()
    y = np.asarray(labels)[y01]
    est = NonDecomposableClassifier("prbep").fit(X, y)
    assert list(est.classes_) == list(np.unique(y))
    assert set(np.unique(est.predict(X))) <= set(est.classes_)
    assert est.score(X, y) == metrics.prbep(y01, est.decision_function(X))


def test_pos_label_names_the_positive_class_of_class_names():
    """``pos_label="fraud"`` trains the model of the same rows labelled +1 / -1, bit for bit, puts that class
    last in ``classes_`` (a positive score means ``classes_[1]``), and predicts and scores it; without it the
    larger name ('ok', most of the rows) is positive, with a warning that says what to pass."""
    X, y01 = make_data()
    names = np.where(y01 == 1, "fraud", "ok")
    ref = NonDecomposableClassifier("prbep").fit(X, y01)
    est = NonDecomposableClassifier("prbep", pos_label="fraud").fit(X, names)
    assert est.classes_.tolist() == ["ok", "fraud"]
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    assert est.intercept_ == ref.intercept_
    np.testing.assert_array_equal(est.predict(X) == "fraud", ref.predict(X) == 1)
    assert est.score(X, names) == ref.score(X, y01) == metrics.prbep(y01, est.decision_function(X))
    with pytest.warns(UserWarning, match=r"the positive class is taken to be 'ok', the larger of \['fraud', 'ok'\], "
                                         r"which holds 90.0% of the rows; .* pass pos_label='fraud' if that is it"):
        NonDecomposableClassifier("prbep", eta=0.1, n_passes=1).fit(X, names)
    with pytest.raises(ValueError, match=r"pos_label='spam' is not one of the classes \['fraud', 'ok'\]"):
        NonDecomposableClassifier(pos_label="spam").fit(X, names)
    part = NonDecomposableClassifier("prbep", pos_label="fraud", eta=0.1)
    part.partial_fit(X[:400], names[:400], classes=["ok", "fraud"])
    assert part.classes_.tolist() == ["ok", "fraud"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # standard encodings, even with most rows positive: no warning
        NonDecomposableClassifier("prbep", eta=0.1, n_passes=1).fit(X, 1 - y01)


@pytest.mark.parametrize("measure, metric", [
    ("pauc", lambda y, s: metrics.partial_auc(y, s, 0.2)),
    ("auc", metrics.auc),
    ("prec@k", lambda y, s: metrics.precision_at_k(y, s, 0.05)),
    ("prbep", metrics.prbep),
    ("f1", metrics.f1_score),
])
def test_score_is_the_measure(measure, metric):
    X, y = make_data()
    est = NonDecomposableClassifier(measure, beta=0.2, k=0.05).fit(X, y)
    assert est.score(X, y) == metric(y, est.decision_function(X))
    assert est.score(X, y) > 0.6


def test_ranking_models_predict_at_their_cut_and_int_k_trains_on_a_fraction():
    X, y = make_data()
    val = Holdout.draw(np.where(y == 1, 1, -1), np.arange(800), 0, 0.1, 200_000).mask(np.where(y == 1, 1, -1),
                                                                                      np.arange(800))
    est = NonDecomposableClassifier("prbep", validation_folds=1).fit(X, y)   # the cut: on the validation rows
    assert np.count_nonzero(est.predict(X[val])) == np.count_nonzero(y[val])
    est = NonDecomposableClassifier("prbep").fit(X, y)             # 5-fold selection: the cut on every row
    assert est.folds_ == 5 and np.count_nonzero(est.predict(X)) == np.count_nonzero(y)
    est = NonDecomposableClassifier("prec@k", k=40, validation_folds=1).fit(X, y)
    assert est.config_.train_k == 40 / 800
    assert np.count_nonzero(est.predict(X[val])) == int(np.ceil(40 / 800 * val.sum()))
    est = NonDecomposableClassifier("prbep", eta=0.5, n_passes=2).fit(X, y)   # no holdout: the training rows
    assert np.count_nonzero(est.predict(X)) == np.count_nonzero(y)
    est = NonDecomposableClassifier("pauc", fit_intercept=False).fit(X, y)
    assert est.intercept_[0] == 0.0


@pytest.mark.parametrize("solver, params", [("cp", {"max_iter": 30}), ("cp", {}), ("psg", {"max_iter": 30}),
                                            ("ftrl", {"max_iter": 20})])
def test_a_baselines_last_recorded_measure_is_the_returned_models(solver, params):
    """The learning curve of FTRL, PSG and CP ends at the model the fit returns (CP: its last iterate, as
    SVMperf returns it; its curve followed the best iterate, whose pAUC differs)."""
    X, y = make_data(n=600)
    est = NonDecomposableClassifier("pauc", solver=solver, **params).fit(X[:400], y[:400], X[400:], y[400:])
    assert est.history_[-1].measure == est.score(X[400:], y[400:])


def test_validation_data_is_recorded_in_the_history():
    X, y = make_data(n=1000)
    est = NonDecomposableClassifier(buffer_size=100, n_passes=2, eta=0.3).fit(X[:800], y[:800], X_val=X[800:],
                                                                              y_val=y[800:])
    measures = [r.measure for r in est.history_]
    assert len(measures) == 16 and all(0 <= m <= 1 for m in measures)
    assert np.isclose(measures[-1], est.score(X[800:], y[800:]))
    with pytest.raises(ValueError, match="both"):
        NonDecomposableClassifier().fit(X, y, X_val=X)


def test_config_resolves_the_candidates_for_the_engine():
    cfg = NonDecomposableClassifier("f1").config().resolve(n_features=20, n_rows=900, mean_sq_norm=20.0,
                                                           n_validation=100)
    own = [c for c in cfg.candidates if c.loss.name == "f1"]
    assert len(own) == 5 and all(c.learn_b for c in own) and cfg.plug_in
    assert [c.eta for c in own] == [0.1 / 20, 1 / 20, 10 / 20, 100 / 20, 1000 / 20]
    # ranking candidates: the pairwise ones need no intercept; the point-wise logloss and the squashed
    # scores' pAUC loss learn one (Loss.shift_invariant)
    level = {"logloss", "logloss/lbfgs", "pauc/sigmoid"}
    assert all(c.learn_b == (c.name.split("@")[0].removesuffix("/const") in level)
               for c in cfg.candidates if c.loss.name != "f1")
    assert {c.name.split("@")[0] for c in cfg.candidates} >= {"pauc/sigmoid", "logloss", "logloss/const"}
    prec = NonDecomposableClassifier("prec@k", k=0.1).config().resolve(n_features=20, n_rows=900,
                                                                         mean_sq_norm=20.0, n_validation=100)
    assert all(c.learn_b == (c.name.split("@")[0].removesuffix("/const") in level) for c in prec.candidates)
    fixed = NonDecomposableClassifier(eta=0.3, n_passes=3).config().resolve(n_features=20, n_rows=1000)
    assert not fixed.selects and [(c.eta, c.loss.surrogate) for c in fixed.candidates] == [(0.3, "hinge")]
    with pytest.raises(ValueError, match="validation_fraction=0"):
        NonDecomposableClassifier(validation_fraction=0.0).config().resolve(n_features=20, n_rows=1000)


def test_the_model_does_not_depend_on_the_blas_threads_of_the_process():
    """OpenBLAS divides a product among its threads by their number, and the sums round differently: on these
    600 features one and two threads gave different models before every fit ran on one BLAS thread
    (nsdist._threads), and the process's own setting is back afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, 600))
    y = np.where(X[:, :20].sum(axis=1) + 3 * rng.normal(size=800) > 6, 1, -1).astype(np.int8)
    models = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            clf = NonDecomposableClassifier("pauc", random_state=0, validation_folds=1, max_passes=3).fit(X, y)
            clf.partial_fit(X[:300], y[:300])
            assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {threads}
        models.append((clf.coef_, clf.intercept_))
    np.testing.assert_array_equal(models[0][0], models[1][0])
    np.testing.assert_array_equal(models[0][1], models[1][1])
    # K-fold selection's fold fits on loky processes (one BLAS thread each) and here (two): the same model
    with threadpool_limits(limits=2, user_api="blas"):
        here, pool = (NonDecomposableClassifier("pauc", random_state=0, validation_folds=5, max_passes=2,
                                                n_jobs=n_jobs).fit(X, y) for n_jobs in (None, 2))
    np.testing.assert_array_equal(here.coef_, pool.coef_)


def test_fits_in_threads_of_one_process_keep_one_blas_thread_until_the_last_ends():
    """The BLAS limit is process-wide: fits that start and end at different times in two threads (while the
    process's BLAS has two) each give the model they give alone, and the process's setting is back after."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_info, threadpool_limits

    rng = np.random.default_rng(1)
    X = rng.normal(size=(800, 600))
    y = np.where(X[:, :20].sum(axis=1) + 3 * rng.normal(size=800) > 6, 1, -1).astype(np.int8)

    def fit(passes: int) -> np.ndarray:
        return NonDecomposableClassifier("pauc", random_state=0, validation_folds=1, max_passes=passes,
                                         n_iter_no_change=50).fit(X, y).coef_

    with threadpool_limits(limits=2, user_api="blas"):
        alone = {p: fit(p) for p in (1, 2, 3, 4)}
        with ThreadPoolExecutor(2) as pool:
            together = dict(zip((1, 2, 3, 4), pool.map(fit, (1, 2, 3, 4))))
        assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {2}
    for p in alone:
        np.testing.assert_array_equal(together[p], alone[p])
