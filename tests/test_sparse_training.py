"""Sparse training (CSR) equals dense training: estimator and engine, every measure, both streaming solvers."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import dump_svmlight_file

from nsdist import NonDecomposableClassifier, ingest
from nsdist.api import open_dataset, train

MEASURES = [("pauc", {"beta": 0.2}), ("auc", {}), ("prec@k", {"k": 0.05}), ("prbep", {}), ("f1", {})]


def sparse_data(n=1200, d=60, density=0.08, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.normal(size=X.nnz)
    w = np.zeros(d)
    w[rng.choice(d, 8, replace=False)] = rng.normal(size=8) * 3
    s = X @ w + 0.3 * rng.normal(size=n)
    y = np.where(s > np.quantile(s, 0.92), 1, -1).astype(np.int8)
    return X, y


@pytest.mark.parametrize("solver", ["1pmb", "2pmb"])
@pytest.mark.parametrize("measure, params", MEASURES, ids=[m for m, _ in MEASURES])
def test_estimator_on_csr_equals_dense(measure, params, solver):
    X, y = sparse_data()
    kw = dict(measure=measure, solver=solver, eta=0.5, n_passes=3, buffer_size=100, random_state=1,
              standardize=False, **params)
    dense = NonDecomposableClassifier(**kw).fit(X.toarray(), y)
    csr = NonDecomposableClassifier(**kw).fit(X, y)
    np.testing.assert_allclose(csr.coef_, dense.coef_, rtol=1e-9, atol=1e-12)
    assert csr.intercept_[0] == pytest.approx(dense.intercept_[0], rel=1e-9, abs=1e-12)
    assert csr.score(X, y) == dense.score(X.toarray(), y)


def test_estimator_defaults_select_on_csr_as_on_dense():
    X, y = sparse_data(n=2000)
    dense = NonDecomposableClassifier("prbep", standardize=False).fit(X.toarray(), y)
    csr = NonDecomposableClassifier("prbep", standardize=False).fit(X, y)
    assert [r["name"] for r in csr.selection_ if r["selected"]] == [r["name"] for r in dense.selection_ if r["selected"]]
    np.testing.assert_allclose(csr.coef_, dense.coef_, rtol=1e-7, atol=1e-10)
    assert csr.score(X, y) == pytest.approx(dense.score(X.toarray(), y), abs=1e-12)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        yield client


@pytest.fixture(scope="module")
def both_layouts(tmp_path_factory, cluster):
    X, y = sparse_data(n=1500)
    root = tmp_path_factory.mktemp("svm")
    src = root / "data.svm"
    dump_svmlight_file(X, y, str(src), zero_based=False)     # svmlight is 1-based
    urls = {layout: str(ingest(str(src), str(root / layout), format="svmlight", layout=layout, shuffle=False,
                               n_features=X.shape[1], rows_per_partition=1500, client=cluster).url)
            for layout in ("sparse", "dense")}
    return urls, X, y


@pytest.mark.parametrize("solver", ["1pmb", "2pmb"])
@pytest.mark.parametrize("measure", ["pauc", "f1"])
def test_engine_trains_a_sparse_dataset_as_the_dense_one(cluster, both_layouts, measure, solver):
    urls, X, y = both_layouts
    assert open_dataset(urls["sparse"]).is_sparse and not open_dataset(urls["dense"]).is_sparse
    kw = dict(measure=measure, solver=solver, eta=0.5, n_passes=2, buffer_size=100, random_state=2)
    sparse_model = train(urls["sparse"], client=cluster, standardize=False, **kw)
    dense_model = train(urls["dense"], client=cluster, standardize=False, **kw)
    np.testing.assert_allclose(sparse_model.coef, dense_model.coef, rtol=1e-9, atol=1e-12)
    est = NonDecomposableClassifier(**kw, standardize=False).fit(X, y)      # the same rows, in memory, as CSR
    np.testing.assert_allclose(sparse_model.coef, est.coef_.ravel(), rtol=1e-9, atol=1e-12)


def test_engine_defaults_train_a_sparse_dataset_as_stored(cluster, both_layouts):
    urls, X, y = both_layouts
    model = train(urls["sparse"], client=cluster, measure="prbep", random_state=0)
    assert model.history["selected"] and model.params["standardize"] is True  # a no-op: every column's RMS < 1
    s = np.asarray(X @ model.coef) + model.intercept
    from nsdist import metrics
    assert metrics.prbep(y, s) > 0.5


def test_standardize_leaves_sparse_rows_as_stored():
    X, y = sparse_data()
    kw = dict(measure="prbep", eta=0.5, n_passes=2, buffer_size=100, random_state=1)
    on = NonDecomposableClassifier(**kw).fit(X, y)
    off = NonDecomposableClassifier(**kw, standardize=False).fit(X, y)
    np.testing.assert_array_equal(on.coef_, off.coef_)
    assert on.intercept_[0] == off.intercept_[0]


def test_evaluate_a_wide_model(cluster, tmp_path):
    """A 2^16-feature model scores a sparse dataset out of core (its weights are scattered, not in each task)."""
    from nsdist import evaluate, metrics
    from nsdist.model import LinearModel

    rng = np.random.default_rng(0)
    d = 1 << 16
    X = sp.random(3000, d, density=20 / d, format="csr", random_state=0)
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.1 * rng.normal(size=3000) > 0.3, 1, -1).astype(np.int8)
    src = tmp_path / "wide.svm"
    dump_svmlight_file(X, y, str(src), zero_based=False)
    ds = ingest(str(src), str(tmp_path / "wide"), format="svmlight", layout="sparse", n_features=d,
                rows_per_partition=1000, shuffle=False, client=cluster)
    model = LinearModel(coef=w, intercept=0.0, measure="pauc", feature_names=ds.feature_names)
    got = evaluate(model, ds, client=cluster)
    assert got["partial_auc"] == metrics.partial_auc(y, X @ w, 0.1)
    assert got["n_rows"] == 3000


def _wide(n=1500, d=1 << 18, nnz_row=30, seed=5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), nnz_row)
    cols = rng.zipf(1.3, size=n * nnz_row) % d                   # text-like: a few frequent features
    X = sp.csr_matrix((rng.random(n * nnz_row).astype(dtype), (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    y = np.where(rng.random(n) < 0.1, 1, -1).astype(np.int8)
    return X, y


def _population(d, n, single=False):
    """The default population of PRBEP (ranking and structural candidates), or its first candidate alone."""
    from nsdist.solvers.config import TrainConfig
    from nsdist.solvers.kernel import Population

    pop = TrainConfig.from_params(measure="prbep").resolve(n_features=d, n_rows=n, mean_sq_norm=10.0,
                                                          n_validation=100).population
    return Population(pop.losses[:1], pop.etas[:1], pop.learn_b[:1], pop.constant[:1]) if single else pop


@pytest.mark.parametrize("reservoir", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("which", ["default population", "single"])
def test_lazy_sparse_updates_equal_dense_updates(which, dtype, reservoir):
    """Wide CSR blocks update only the touched weights and sum the iterates lazily: the iterates are the
    dense update's bit for bit, the sums equal to float rounding -- for a population and for M = 1, with
    the epoch buffers read in place from the block's arrays (:func:`csr_rows`) or, with a 2PMB reservoir
    in front, as the stacked scipy matrix."""
    from nsdist.solvers.kernel import SGDState, run_epochs
    from nsdist.solvers.lazy import use_lazy

    X, y = _wide(dtype=dtype)
    d = X.shape[1]
    population = _population(d, X.shape[0], single=which == "single")
    assert use_lazy(X, len(population), 100, None) and not use_lazy(X, len(population), 100, 1e300)
    res = (X[np.flatnonzero(y > 0)[:7]], np.ones(7)) if reservoir else None
    start = SGDState.zeros(d, len(population))
    lazy, _ = run_epochs(start, X, y, population, buffer_size=100, reservoir=res)
    dense, _ = run_epochs(start, X, y, population, buffer_size=100, radius=1e300, reservoir=res)  # whole updates
    assert lazy.epoch == dense.epoch > 0 and np.any(lazy.W != 0)
    np.testing.assert_array_equal(lazy.W, dense.W)
    np.testing.assert_allclose(lazy.W_sum, dense.W_sum, rtol=1e-12, atol=1e-12 * np.abs(dense.W_sum).max())
    np.testing.assert_array_equal(lazy.b_sum, dense.b_sum)
    again, _ = run_epochs(start, X, y, population, buffer_size=100, reservoir=res)
    np.testing.assert_array_equal(again.W_sum, lazy.W_sum)                          # run to run: bit for bit


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_buffers_read_in_place_score_as_scipy_does(dtype):
    """:func:`csr_rows` shares the block's arrays (its offsets index the whole ``indices`` / ``data``), and
    the lazy scores on it are scipy's ``X[a:b] @ W`` to the bit, for one candidate and for several."""
    from nsdist.solvers.kernel import SGDState
    from nsdist.solvers.lazy import LazyWeights, csr_rows

    X, _ = _wide(dtype=dtype)
    rng = np.random.default_rng(3)
    for a, b in ((0, 100), (37, 250), (X.shape[0] - 5, X.shape[0]), (10, 10)):
        rows = csr_rows(X, slice(a, b))
        assert rows.shape == (b - a, X.shape[1]) and np.shares_memory(rows.data, X.data)
        for M in (1, 3):
            st = SGDState.zeros(X.shape[1], M)
            st.W[:] = rng.normal(size=st.W.shape)
            got = LazyWeights(st, np.arange(M), None).scores(rows)
            want = np.asarray(X[a:b] @ st.W.astype(dtype), dtype=np.float64).reshape(b - a, M)
            assert got.shape == (b - a, M)
            np.testing.assert_array_equal(got, want)


def test_lazy_updates_across_blocks_and_frozen_candidates():
    """Two blocks in a row, a warm start, a frozen candidate: still the dense update (W exactly); the state
    handed in, whose weights the lazy update shares and only reads, is left as it was."""
    from nsdist.solvers.kernel import SGDState, run_epochs

    X, y = _wide(n=1200, seed=7)
    d = X.shape[1]
    population = _population(d, X.shape[0])
    rng = np.random.default_rng(0)
    W0 = np.zeros((d, len(population)))
    W0[rng.choice(d, 500, replace=False)] = rng.normal(size=(500, len(population)))
    start = SGDState(W=W0.copy(), W_sum=3 * W0, epoch=3)
    start.alive[1] = False
    out = {}
    for name, radius in (("lazy", None), ("dense", 1e300)):
        st, _ = run_epochs(start, X[:700], y[:700], population, buffer_size=100, radius=radius)
        st, _ = run_epochs(st, X[700:], y[700:], population, buffer_size=100, radius=radius)
        out[name] = st
    np.testing.assert_array_equal(out["lazy"].W, out["dense"].W)
    np.testing.assert_array_equal(out["lazy"].W[:, 1], W0[:, 1])
    np.testing.assert_array_equal(start.W, W0)
    np.testing.assert_array_equal(start.W_sum, 3 * W0)
    assert start.epoch == 3 and start.alive.sum() == len(population) - 1
    np.testing.assert_allclose(out["lazy"].W_sum, out["dense"].W_sum, rtol=1e-12,
                               atol=1e-12 * np.abs(out["dense"].W_sum).max())
    assert np.array_equal(out["lazy"].W_sum[:, 1], 3 * W0[:, 1])


def test_lazy_update_holds_the_live_candidates_row_major():
    """With a frozen candidate between live ones the live columns are copied out row-major (C order): scipy's
    ``X @ W`` then reads W as it lies instead of copying all d x M weights every epoch, and a step touches
    whole rows.  Live columns side by side are worked on where they lie (views of the state), and the
    scores read a C-ordered copy in the rows' width."""
    from nsdist.solvers.kernel import SGDState
    from nsdist.solvers.lazy import LazyWeights

    st = SGDState.zeros(5000, 6)
    st.W[:] = np.arange(30000.0).reshape(5000, 6)
    cols = np.array([0, 2, 3, 5])
    weights = LazyWeights(st, cols, None)
    assert not weights.in_place and weights.W.flags.c_contiguous and weights.W_sum.flags.c_contiguous
    np.testing.assert_array_equal(weights.W, st.W[:, cols])
    for cols in (np.array([1, 2, 3]), np.array([4])):
        weights = LazyWeights(st, cols, None)
        assert weights.in_place and np.shares_memory(weights.W, st.W) and np.shares_memory(weights.W_sum, st.W_sum)
        for dtype in (np.float64, np.float32):
            weights._wc = None
            cast = weights._cast(np.dtype(dtype))
            assert cast.flags.c_contiguous and cast.dtype == dtype and not np.shares_memory(cast, st.W)
            np.testing.assert_array_equal(cast, st.W[:, cols].astype(dtype).reshape(cast.shape))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("frozen", ["none", "first", "last", "middle", "all but one"])
def test_lazy_updates_in_place_or_copied_out_equal_dense_updates(frozen, dtype):
    """Whichever candidates are frozen -- the live columns side by side (updated in place, through views) or
    not (copied out and back) -- two lazy blocks from a warm start give the dense update's iterates bit for
    bit and its sums to float rounding, and leave the state handed in as it was."""
    from nsdist.solvers.kernel import SGDState, run_epochs

    X, y = _wide(n=1000, seed=11, dtype=dtype)
    d = X.shape[1]
    population = _population(d, X.shape[0])
    M = len(population)
    rng = np.random.default_rng(1)
    W0 = np.zeros((d, M))
    W0[rng.choice(d, 400, replace=False)] = rng.normal(size=(400, M))
    start = SGDState(W=W0.copy(), W_sum=2 * W0, epoch=2)
    dead = {"none": [], "first": [0], "last": [M - 1], "middle": [M // 2], "all but one": [j for j in range(M)
                                                                                           if j != 1]}[frozen]
    start.alive[dead] = False
    out = {}
    for name, radius in (("lazy", None), ("dense", 1e300)):
        st, _ = run_epochs(start, X[:600], y[:600], population, buffer_size=100, radius=radius)
        out[name], _ = run_epochs(st, X[600:], y[600:], population, buffer_size=100, radius=radius)
    assert out["lazy"].epoch == out["dense"].epoch > start.epoch
    np.testing.assert_array_equal(out["lazy"].W, out["dense"].W)
    np.testing.assert_allclose(out["lazy"].W_sum, out["dense"].W_sum, rtol=1e-12,
                               atol=1e-12 * np.abs(out["dense"].W_sum).max())
    np.testing.assert_array_equal(out["lazy"].W[:, dead], W0[:, dead])
    np.testing.assert_array_equal(out["lazy"].W_sum[:, dead], 2 * W0[:, dead])
    np.testing.assert_array_equal(start.W, W0)
    np.testing.assert_array_equal(start.W_sum, 2 * W0)


def test_lazy_iterate_sum_is_completed_in_slices(monkeypatch):
    """The block's ``W_sum += n W`` in slices of FINISH_ROWS rows (one not dividing d, a frozen candidate):
    the same bits as in one piece."""
    import nsdist.solvers.blocks as blocks
    import nsdist.solvers.lazy as lazy
    from nsdist.solvers.kernel import SGDState, run_epochs

    X, y = _wide(n=600, seed=3)
    population = _population(X.shape[1], X.shape[0])
    start = SGDState.zeros(X.shape[1], len(population))
    start.alive[2] = False
    out = []
    for rows in (X.shape[1], 1000):
        monkeypatch.setattr(lazy, "FINISH_ROWS", rows)
        monkeypatch.setattr(blocks, "COLUMN_ROWS", rows // 3)       # the live columns taken out and put back too
        out.append(run_epochs(start, X, y, population, buffer_size=100)[0])
    assert out[0].epoch > 0
    np.testing.assert_array_equal(out[1].W, out[0].W)
    np.testing.assert_array_equal(out[1].W_sum, out[0].W_sum)


def test_dense_or_lazy_is_chosen_by_the_buffer_density():
    from nsdist.solvers.lazy import LAZY_FEATURES, use_lazy

    X, _ = _wide(n=200, d=1 << 16, nnz_row=10)
    assert use_lazy(X, 1, 100, None)                      # 1000 non-zeros a buffer of 65536 features
    assert not use_lazy(X, 1, 100, 1.0)                   # a projection rescales every weight
    assert not use_lazy(X.toarray(), 1, 100, None)        # dense rows
    assert not use_lazy(sp.vstack([X] * 50, format="csr"), 1, 10**4, None)   # 10^5 non-zeros a buffer > d
    assert use_lazy(sp.vstack([X] * 50, format="csr"), 2, 10**4, None)       # a population: up to 2 d
    small, _ = _wide(n=200, d=LAZY_FEATURES // 2, nnz_row=2)
    assert not use_lazy(small, 1, 10, None)


@pytest.mark.parametrize("solver", ["1pmb", "2pmb"])
def test_lazy_engine_equals_estimator(cluster, tmp_path, solver):
    """The lazy update on a wide one-partition dataset: the engine's model is the same run to run and the
    estimator's, to the bit -- both make one kernel call per block (the estimator records its history from
    the kernel's per-epoch statistics), so both complete the lazy iterate sum at the same epochs
    (nsdist/solvers/lazy.py)."""
    from nsdist.solvers.lazy import use_lazy

    X, y = _wide(n=1500, d=1 << 14, nnz_row=10, seed=3)
    y[:40] = 1                                                    # enough positives for every buffer
    assert use_lazy(X, 1, 100, None)
    src = tmp_path / "wide.svm"
    dump_svmlight_file(X, y, str(src), zero_based=False)
    url = str(ingest(str(src), str(tmp_path / "wide"), format="svmlight", layout="sparse", n_features=X.shape[1],
                     rows_per_partition=1500, shuffle=False, client=cluster).url)
    kw = dict(measure="prec@k", k=0.05, solver=solver, eta=0.5, n_passes=2, buffer_size=100, random_state=4,
              standardize=False)
    engine = train(url, client=cluster, **kw)
    again = train(url, client=cluster, **kw)
    Xr, yr = open_dataset(url).read_partition(0, dtype="float64")     # the rows as ingested (svmlight's text
    est = NonDecomposableClassifier(**kw).fit(Xr, yr)                 # rounds some values in their 17th digit)
    np.testing.assert_array_equal(engine.coef, again.coef)
    assert engine.intercept == again.intercept
    np.testing.assert_array_equal(engine.coef, est.coef_.ravel())
    assert engine.intercept == est.intercept_[0]
    assert np.array_equal(est.history_.column("step"), np.arange(1, len(est.history_) + 1))  # every epoch


def test_a_diverging_candidate_in_the_lazy_update_warns_nothing():
    """A candidate whose step overflows goes non-finite quietly (the selection drops it at its next check):
    completing the block's iterate sum (``n W + sum``, inf - inf) raises no numpy warning either."""
    import warnings
    from dataclasses import replace

    from nsdist.solvers.kernel import SGDState, run_epochs

    X, y = _wide(n=600, seed=4)
    population = _population(X.shape[1], X.shape[0])
    population = replace(population, etas=tuple(1e300 if loss.name == "auc" else eta       # squared hinge
                                                for loss, eta in zip(population.losses, population.etas)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st, _ = run_epochs(SGDState.zeros(X.shape[1], len(population)), X, y, population, buffer_size=100)
    blown = np.array([not np.isfinite(st.W_sum[:, m]).all() for m in range(len(population))])
    assert blown.any() and not blown.all()


@pytest.mark.filterwarnings("ignore:Sending large graph:UserWarning")     # the gathered run embeds its state
def test_a_wide_state_stays_where_it_is_and_the_blocks_come_to_it(cluster, tmp_path, monkeypatch):
    """Dask runs a step where moving its inputs costs least, judged by their sizes: it must see a population
    state's arrays (here 2 x 2^16 x 31 float64, 45 MB with the full-batch candidate's memory; 520 MB at
    2^20).  Seen as the 145 bytes of ``sys.getsizeof``, the state moved to every other block's worker and
    no block moved.  Now the blocks (a few hundred kB) travel to the state; Dask's work stealing, which
    weighs a move against the step's compute time, may still send a step to an idle worker now and then.
    Between segments the state is not sent back from the driver either (``with_alive``), nor fetched whole:
    the driver applies what each segment changed to the state it started from."""
    from dask.sizeof import sizeof
    from distributed import get_task_stream

    import nsdist.engine.chain as chain
    from nsdist.engine.chain import state_bytes
    from nsdist.solvers.kernel import SGDState

    st = SGDState.zeros(1 << 12, 5)
    assert sizeof(st) == state_bytes(st) >= st.W.nbytes + st.W_sum.nbytes
    assert sizeof((st, np.zeros(3))) >= st.W.nbytes + st.W_sum.nbytes
    X, y = _wide(n=4000, d=1 << 16, seed=9)
    src = tmp_path / "wide.svm"
    dump_svmlight_file(X, y, str(src), zero_based=False)
    ds = ingest(str(src), str(tmp_path / "wide"), format="svmlight", layout="sparse", n_features=X.shape[1],
                rows_per_partition=500, shuffle=False, client=cluster)
    kw = dict(measure="prbep", validation_folds=1, max_passes=3, buffer_size=50, random_state=0)   # 6 checks
    cluster.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
    with get_task_stream(cluster) as stream:
        model = train(ds.url, client=cluster, **kw)
    assert len(model.history["selection"]) > 1
    moved = cluster.run(lambda dask_worker: [(k, n) for t in dask_worker.transfer_incoming_log
                                             for k, n in t["keys"].items()])
    moved = [(k, n) for got in moved.values() for k, n in got]
    states = [k for k, _ in moved if k.startswith("nsdist-step")]
    blocks = [k for k, _ in moved if k.startswith("nsdist-load")]
    assert blocks and 4 * len(states) <= len(blocks), moved
    # after each check the worker holding the segment's last state makes the next one from the alive mask (the
    # driver's fetched copy is not scattered back): the same model as a chain that gathers every state
    checks = len(model.history["validation_curve"])
    made = [t["key"] for t in stream.data if t["key"].startswith("nsdist-alive")]
    assert checks > 2 and len(made) == checks - 1, (made, checks)
    # ... the driver fetched, at each segment's end, what the segment changed, not the whole state, and the job
    # started from zeros made on a worker, not sent there
    changes = [t["key"] for t in stream.data if t["key"].startswith("nsdist-change")]
    zeros = [t["key"] for t in stream.data if t["key"].startswith("nsdist-zero")]
    assert len(changes) == checks and len(zeros) == 1, (changes, zeros)
    monkeypatch.setattr(chain, "GATHER_BYTES", 1 << 40)
    gathered = train(ds.url, client=cluster, **kw)
    np.testing.assert_array_equal(model.coef, gathered.coef)
    assert model.intercept == gathered.intercept
    assert model.history["selection"] == gathered.history["selection"]
    assert model.history["validation_curve"] == gathered.history["validation_curve"]


def _six_partitions(tmp_path, cluster):
    X, y = sparse_data(n=1800, seed=4)
    src = tmp_path / "d.svm"
    dump_svmlight_file(X, y, str(src), zero_based=False)
    url = str(ingest(str(src), str(tmp_path / "d"), format="svmlight", layout="sparse", n_features=X.shape[1],
                     rows_per_partition=300, shuffle=False, client=cluster).url)
    assert len(open_dataset(url).partitions) == 6
    return url, X, y


@pytest.mark.parametrize("measure, params", [("prec@k", {"k": 0.05}), ("pauc", {"beta": 0.2})])
def test_fixed_sparse_run_cuts_on_the_blocks_the_chain_loaded_last(cluster, tmp_path, measure, params):
    """A fixed 1PMB run over CSR data places its ranking cut on the rows of the partitions its chain loaded
    last (up to validation_max_rows), scored where the chain left them, once, by the model of the last step
    made on the cluster: none is read a second time, and the intercept is the cut of those rows read afresh
    and scored by the returned model, to the bit."""
    from distributed import get_task_stream

    from nsdist.solvers.measure import cut_intercept

    url, X, y = _six_partitions(tmp_path, cluster)
    ds = open_dataset(url)
    kw = dict(measure=measure, solver="1pmb", eta=0.5, n_passes=2, buffer_size=100, random_state=3,
              validation_max_rows=700, **params)
    with get_task_stream(cluster) as ts:
        model = train(url, client=cluster, **kw)
    keys = [str(r["key"][0] if isinstance(r["key"], tuple) else r["key"]) for r in ts.data]
    loads = [k for k in keys if k.startswith("nsdist-load-")]
    assert len(loads) == 2 * 6 and not [k for k in keys if k.startswith("_read-")]   # each partition once a pass
    assert sum(k.startswith("nsdist-model-") for k in keys) == 1
    assert sum(k.startswith("_block_scores") for k in keys) == 2                   # scored once, ahead
    last = [p["partition"] for p in model.history["curve"]][::-1][:2]      # the last two steps: 600 rows <= 700
    assert len(set(last)) == 2
    rows = [ds.read_partition(p, dtype="float64") for p in last]
    Xs, ys = sp.vstack([r[0] for r in rows], format="csr"), np.concatenate([r[1] for r in rows])
    k = params.get("k")
    assert model.intercept == cut_intercept(measure, ys, np.asarray(Xs @ model.coef, dtype=np.float64), k=k)
    assert model.intercept != cut_intercept(measure, y, np.asarray(X @ model.coef, dtype=np.float64), k=k)


@pytest.mark.parametrize("position", [7, 11])
def test_resumed_fixed_sparse_run_cuts_on_the_same_rows(cluster, tmp_path, position):
    """Resumed before the kept steps (7 of 12), the chain loads and keeps them; resumed between them (11), one
    was loaded by the interrupted run, and the sample is read from the files instead: the same model, to the
    bit, intercept included."""
    import json
    import shutil

    url, _, _ = _six_partitions(tmp_path, cluster)
    kw = dict(measure="prec@k", k=0.05, solver="1pmb", eta=0.5, n_passes=2, buffer_size=100, random_state=3,
              validation_max_rows=700)
    full = train(url, client=cluster, **kw)
    ckpt, snapshot = tmp_path / "ck.json", tmp_path / "mid.json"

    def keep(p):
        if p.step == position:
            shutil.copy(ckpt, snapshot)

    train(url, client=cluster, checkpoint=str(ckpt), checkpoint_every=1, on_step=keep, **kw)
    assert json.loads(snapshot.read_text())["position"] == position
    shutil.copy(snapshot, ckpt)
    resumed = train(url, client=cluster, checkpoint=str(ckpt), resume=True, **kw)
    np.testing.assert_array_equal(resumed.coef, full.coef)
    assert resumed.intercept == full.intercept


# ------------------------------------------------------- scaling: sparse columns are only shrunk
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 8), density=st.floats(0.05, 1.0), seed=st.integers(0, 10**6),
       factors=st.lists(st.sampled_from([1e-3, 0.5, 1.0, 3.0, 1e4]), min_size=8, max_size=8))
def test_shrinking_scaling_divides_by_the_root_mean_square_where_it_exceeds_one(n, d, density, seed, factors):
    """Against the root mean square of the dense matrix, column by column: a column whose RMS exceeds 1 is
    divided by it, the others keep 1; never centred; no scaling at all where no column exceeds 1."""
    from nsdist.solvers.scaling import row_moments, shrinking_scaling

    X = sp.random(n, d, density=density, format="csr", random_state=seed)
    X = X @ sp.diags(np.asarray(factors[:d]))
    rms = np.sqrt((X.toarray() ** 2).mean(axis=0))
    scaling = shrinking_scaling(*row_moments(X))
    if not (rms > 1 + 1e-9).any():
        assert scaling is None or np.allclose(scaling.scale, 1.0)
        return
    assert not scaling.centered and not scaling.mean.any()
    big = rms > 1 + 1e-9
    np.testing.assert_allclose(scaling.scale[big], rms[big], rtol=1e-12)
    assert (scaling.scale[rms < 1 - 1e-9] == 1.0).all()
    folded_w, folded_b = scaling.fold(np.arange(1.0, d + 1), 0.5)
    np.testing.assert_allclose(X @ folded_w + folded_b, scaling.apply(X.copy()) @ np.arange(1.0, d + 1) + 0.5,
                               rtol=1e-12)


def _with_an_amount(X: sp.csr_matrix, seed: int) -> tuple[sp.csr_matrix, float]:
    """``X`` with one more column present on every row, of values around 100 (a raw amount beside sparse
    features), and that column's root mean square."""
    rng = np.random.default_rng(seed)
    amount = np.round(np.abs(rng.normal(100, 60, X.shape[0])) + 1, 2)
    return sp.hstack([X, sp.csr_matrix(amount[:, None])], format="csr"), float(np.sqrt(np.mean(amount ** 2)))


def test_a_selecting_fit_shrinks_a_sparse_column_of_large_values_and_nothing_else():
    """The default fit on CSR rows with a column of amounts (RMS about 115): the model equals, to rounding, the
    one fitted on the rows with that column divided by its RMS beforehand (then no column exceeds 1 and the rows
    train as stored) -- so the fit divided that column by its RMS and no other; a fixed run trains as stored."""
    X, y = sparse_data(n=2000)
    Xa, rms = _with_an_amount(X, seed=1)
    pre = Xa.copy()
    pre.data[pre.indices == X.shape[1]] /= rms
    kw = dict(measure="prbep", random_state=0, validation_folds=1, max_passes=4)
    raw, divided = NonDecomposableClassifier(**kw).fit(Xa, y), NonDecomposableClassifier(**kw).fit(pre, y)
    assert [r["name"] for r in raw.selection_ if r["selected"]] == [r["name"] for r in divided.selection_
                                                                    if r["selected"]]
    np.testing.assert_allclose(raw.coef_[0, :-1], divided.coef_[0, :-1], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(raw.coef_[0, -1] * rms, divided.coef_[0, -1], rtol=1e-7, atol=1e-10)
    fixed = dict(measure="prbep", eta=0.5, n_passes=2, buffer_size=100, random_state=1)
    np.testing.assert_array_equal(NonDecomposableClassifier(**fixed).fit(Xa, y).coef_,
                                  NonDecomposableClassifier(**fixed, standardize=False).fit(Xa, y).coef_)


def test_engine_shrinks_a_sparse_column_as_the_estimator_does(cluster, tmp_path):
    """The same rows as a sparse Parquet dataset: the engine's default (selecting) run takes the moments in its
    validation pass and gives the estimator's model bit for bit."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    X, y = sparse_data(n=2000, seed=2)
    Xa, _ = _with_an_amount(X, seed=3)
    rows = [Xa[i] for i in range(Xa.shape[0])]
    table = pa.table({"indices": pa.array([r.indices.tolist() for r in rows], pa.list_(pa.int32())),
                      "values": pa.array([r.data.tolist() for r in rows], pa.list_(pa.float64())),
                      "label": pa.array(y)})
    meta = {b"nsdist": json.dumps({"n_features": Xa.shape[1]}).encode()}
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "part-0.parquet")
    kw = dict(measure="prbep", random_state=0, validation_folds=1, max_passes=4)
    model = train(str(tmp_path), client=cluster, **kw)
    est = NonDecomposableClassifier(**kw).fit(*open_dataset(str(tmp_path)).read_partition(0, dtype="float64"))
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])
    assert model.history["selected"] == [r["name"] for r in est.selection_ if r["selected"]][0]
