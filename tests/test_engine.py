"""The Dask engine against the in-memory solvers and metrics (docs/engine.md §Partition chain).

Real Dask only: a ``LocalCluster`` with worker processes, and ``dask scheduler``
/ ``dask worker`` processes on 127.0.0.1 started here.  Real Parquet files of
the Letter data set (positive class ``N``), written the way a user would
(one column per feature and a label column), trained without an ingest step.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster, get_task_stream

import nsdist
from nsdist import metrics
from nsdist.api import evaluate, open_dataset, train
from nsdist.engine import chain as chain_module
from nsdist.engine.chain import (CACHE_KEY, CACHE_SHARE, FUSE_KEY, FUSE_PARTITION_BYTES, ChainConfig,
                                 PartitionChain, cache_fits, fused_rows)
from nsdist.engine.evaluate import sortable_keys
from nsdist.engine.ring import RING_KEY
from nsdist.model import LinearModel
from nsdist.solvers.config import TrainConfig
from nsdist.solvers.kernel import SGDState
from nsdist.solvers.plan import schedule

REPO = Path(__file__).resolve().parents[1]
LETTER = REPO / "data" / "letter" / "letter-recognition.data"


def letter_arrays() -> tuple[np.ndarray, np.ndarray]:
    rows = np.loadtxt(LETTER, delimiter=",", dtype=str)
    X = rows[:, 1:].astype(np.float64)
    y = np.where(rows[:, 0] == "N", 1, -1).astype(np.int8)
    return (X - X.mean(0)) / X.std(0), y


def write_parquet(root: Path, X: np.ndarray, y: np.ndarray, rows_per_file: int | None = None,
                  bounds: list[int] | None = None) -> str:
    """One Parquet file per ``rows_per_file`` rows (or between consecutive ``bounds``)."""
    root.mkdir(parents=True, exist_ok=True)
    bounds = bounds or list(range(0, len(y), rows_per_file)) + [len(y)]
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        cols = {f"f{j}": X[a:b, j] for j in range(X.shape[1])}
        cols["label"] = y[a:b]
        pq.write_table(pa.table(cols), root / f"part-{i:05d}.parquet")
    return str(root)


def negative_aligned_bounds(y: np.ndarray, negatives_per_file: int) -> list[int]:
    """File bounds where each file holds exactly ``negatives_per_file`` negatives (2PMB streams them)."""
    cum = np.cumsum(y < 0)
    cuts = [int(np.searchsorted(cum, t)) + 1 for t in range(negatives_per_file, int(cum[-1]) + 1, negatives_per_file)]
    return [0] + cuts[:-1] + [len(y)]


@pytest.fixture(scope="module")
def letter():
    return letter_arrays()


def letter_by_rows(root: Path, letter: tuple[np.ndarray, np.ndarray], rows_per_file: int):
    """Letter's first 16000 rows in files of ``rows_per_file`` rows: ``(url, X, y)``."""
    X, y = letter[0][:16000], letter[1][:16000]
    return write_parquet(root, X, y, rows_per_file=rows_per_file), X, y


def letter_by_negatives(root: Path, letter: tuple[np.ndarray, np.ndarray], files: int, negatives_per_file: int):
    """Letter's first rows in ``files`` files of exactly ``negatives_per_file`` negatives each: ``(url, X, y)``."""
    X, y = letter
    n = int(np.searchsorted(np.cumsum(y < 0), files * negatives_per_file)) + 1
    X, y = X[:n], y[:n]
    return write_parquet(root, X, y, bounds=negative_aligned_bounds(y, negatives_per_file)), X, y


@pytest.fixture(scope="module")
def letter_parquet(tmp_path_factory, letter):
    """Four files of 4000 rows: 1PMB's epochs of 500 never straddle a file."""
    return letter_by_rows(tmp_path_factory.mktemp("letter"), letter, 4000)


@pytest.fixture(scope="module")
def letter_parquet_2pmb(tmp_path_factory, letter):
    """Files of exactly 3500 negatives each: 2PMB's epochs of 500 negatives never straddle a file."""
    return letter_by_negatives(tmp_path_factory.mktemp("letter2"), letter, 4, 3500)


@pytest.fixture(scope="module")
def cluster():
    # the scheduler (in this process) keeps every transition of a training, for the gate test (default: the
    # last 1000, fewer than a loaded machine's run of the module makes)
    with dask.config.set({"distributed.admin.low-level-log-length": 1_000_000}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        yield client


@pytest.mark.parametrize("solver", ["1pmb", "2pmb"])
@pytest.mark.parametrize("measure", ["pauc", "prbep", "f1"])
def test_engine_equals_in_memory_solver(cluster, letter_parquet, letter_parquet_2pmb, solver, measure):
    """docs/engine.md §Partition chain: the engine's model equals the in-memory solver's on the same rows in the same order."""
    url, X, y = letter_parquet if solver == "1pmb" else letter_parquet_2pmb
    params = dict(measure=measure, solver=solver, buffer_size=500, eta=0.05, n_passes=2, shuffle=False,
                  random_state=3)
    model = train(url, client=cluster, standardize=False, **params)
    est = nsdist.NonDecomposableClassifier(**params, standardize=False).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(np.ravel(est.intercept_)[0])
    assert model.history["rows_seen"] == 2 * (len(y) if solver == "1pmb" else int((y < 0).sum()))


@pytest.mark.parametrize("solver", ["1pmb", "2pmb"])
def test_engine_equals_in_memory_solver_float32_wide_one_candidate(cluster, tmp_path, solver):
    """One candidate on float32 files of 60 columns, standardised: the engine's Fortran-ordered blocks (gathered,
    shifted and scaled in one copy) and the estimator's (nsdist.solvers.blocks.take_rows) give the same model and
    cut to the bit.  A one-candidate product is a matrix-vector product, which sums in another order on C- and
    Fortran-ordered rows: both paths must hand the kernel the same layout."""
    rng = np.random.default_rng(8)
    n, d = 6000, 60
    y = np.where(rng.random(n) < 0.1, 1, -1).astype(np.int8)
    X = (rng.normal(size=(n, d)) * rng.uniform(0.5, 4, size=d) + y[:, None] * rng.normal(size=d) * 0.4
         + 3.0).astype(np.float32)
    if solver == "2pmb":                 # 5 files of 1000 negatives: epochs of 500 never straddle a file
        n = int(np.searchsorted(np.cumsum(y < 0), 5000)) + 1
        X, y = X[:n], y[:n]
    bounds = negative_aligned_bounds(y, 1000) if solver == "2pmb" else [0, 1500, 3000, 4500, 6000]
    url = write_parquet(tmp_path / solver, X, y, bounds=bounds)
    params = dict(measure="pauc", surrogate="logistic", solver=solver, buffer_size=500, eta=0.1, n_passes=2,
                  shuffle=False, random_state=2)      # a smooth surrogate: every difference of a score shows
    model = train(url, client=cluster, **params)
    est = nsdist.NonDecomposableClassifier(**params).fit(X, y)
    assert model.params["standardize"] is True and est.coef_.dtype == np.float64
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])


def test_k_fold_selection_reads_the_rows_onto_the_driver_and_is_the_estimators_model(cluster, tmp_path, letter):
    """``validation_folds=3``: nsdist.train reads the partitions onto the driver (in file order) and fits the
    estimator's K-fold selection there, its fold fits held on the workers in lockstep: the same model to the bit
    as the estimator's in-process fit, the folds' selection in the history."""
    from nsdist.engine.folds import fold_slots

    X, y = letter[0][:3000], letter[1][:3000]
    url = write_parquet(tmp_path / "kfold", X, y, rows_per_file=1000)
    params = dict(measure="prbep", validation_folds=3, random_state=1)
    reports = []
    with get_task_stream(cluster) as stream:
        model = train(url, client=cluster, on_step=reports.append, **params)
    est = nsdist.NonDecomposableClassifier(**params).fit(X, y)
    # each check of the folds' lockstep reported: the check of those planned, the best mean value, no state
    assert [p.step for p in reports] == list(range(1, len(reports) + 1)) and len(reports) >= 3
    assert {(p.unit, p.n_steps) for p in reports} == {("check", reports[0].n_steps)}
    assert reports[0].n_steps >= reports[-1].step
    assert all(p.state is None and p.best is not None and p.alive >= 1 for p in reports)
    assert [p.best for p in reports] == sorted(p.best for p in reports)
    # one task per slot (the folds dealt to the cluster's cores) to start its fits, then one per slot at each
    # check, on the worker holding that slot's fits
    keys = [str(t["key"]) for t in stream.data if str(t["key"]).startswith("nsdist-fold-")]
    seats = sorted(key.rsplit("-", 1)[1] for key in keys if "-start-" in key)
    assert seats == [str(s) for s in range(len(seats))] and 1 <= len(seats) <= min(3, fold_slots(cluster))
    for check in range(1, len(reports) + 1):
        assert sorted(key.rsplit("-", 1)[1] for key in keys if f"-check{check}-" in key) == seats
    where = {}
    for t in stream.data:
        if str(t["key"]).startswith("nsdist-fold-") and "-rows-" not in str(t["key"]):
            where.setdefault(str(t["key"]).rsplit("-", 1)[1], set()).add(t["worker"])
    assert all(len(workers) == 1 for workers in where.values()), where
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])
    assert model.history["folds"] == 3 and model.history["validation_positives"] == int((y > 0).sum())
    assert model.history["selected"] == next(r["name"] for r in est.selection_ if r["selected"])
    assert model.params["validation_folds"] == 3
    with pytest.raises(ValueError, match="not with validation=, n_chains > 1 or init_model="):
        train(url, client=cluster, validation=(X[:100], y[:100]), **params)
    with pytest.raises(ValueError, match="not with validation=, n_chains > 1 or init_model="):
        train(url, client=cluster, n_chains=2, **params)
    # an in-memory fit writes no checkpoint: resume=True is refused, not silently started over
    for how, extra in (("K-fold selection \\(3 folds\\)", {}), ("solver 'ftrl'", {"solver": "ftrl", "validation_folds": 1})):
        with pytest.raises(ValueError, match=f"nothing to resume -- this job fits by {how}"):
            train(url, client=cluster, resume=True, checkpoint=str(tmp_path / "ck.json"), **{**params, **extra})


def test_k_fold_fits_run_no_more_at_once_than_the_host_has_cores(tmp_path, letter):
    """Workers whose threads outnumber the cores (two workers of ``cores`` threads each on this host): the
    fold fits are dealt to ``cores`` slots (``fold_slots``), one task per slot at a time (start, each check's
    advance, result), so at most ``cores`` run at once, and the model is the estimator's to the bit.
    Without the limit, two fits shared a core and each took twice as long on its fold's clock (the learning
    curve)."""
    from dask.system import cpu_count

    from nsdist.engine.folds import fold_slots

    cores = cpu_count()
    X, y = letter[0][:4000], letter[1][:4000]
    url = write_parquet(tmp_path / "slots", X, y, rows_per_file=1000)
    params = dict(measure="prbep", validation_folds=min(cores + 3, 10), random_state=2)
    with LocalCluster(n_workers=2, threads_per_worker=cores, dashboard_address=None) as lc, Client(lc) as client:
        assert fold_slots(client) == cores
        with get_task_stream(client) as stream:
            model = train(url, client=client, **params)
    spans = [(ss["start"], ss["stop"]) for t in stream.data if str(t["key"]).startswith("nsdist-fold-")
             for ss in t["startstops"] if ss["action"] == "compute"]
    starts = [t for t in stream.data if "-start-" in str(t["key"])]
    assert len(starts) == cores and len(spans) > 3 * len(starts)
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])    # an end before a start at a tie
    running = np.cumsum([e for _, e in events])
    assert running.max() <= cores
    est = nsdist.NonDecomposableClassifier(**params).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])


@pytest.mark.parametrize("params", [dict(measure="prbep", random_state=1), dict(measure="pauc", solver="ftrl")],
                         ids=["k-fold", "ftrl"])
def test_in_memory_fits_read_float32_files_as_float32(cluster, tmp_path, letter, params):
    """A job that fits in memory (the default's K-fold selection here, or a baseline solver) reads float32 files
    in float32, as the streamed jobs do (``dtype`` follows the files): the model is the estimator's on the same
    float32 rows, bit for bit, not the one it gives on float64 rows."""
    X, y = letter[0][:3000].astype(np.float32), letter[1][:3000]
    url = write_parquet(tmp_path / "f32", X, y, rows_per_file=1000)
    model = train(url, client=cluster, **params)
    assert model.params["dtype"] == "float32"
    np.testing.assert_array_equal(model.coef, nsdist.NonDecomposableClassifier(**params).fit(X, y).coef_.ravel())
    wide = nsdist.NonDecomposableClassifier(**params).fit(X.astype(np.float64), y).coef_.ravel()
    assert not np.array_equal(model.coef, wide)


def test_shuffled_single_partition_equals_in_memory(cluster, tmp_path, letter):
    X, y = letter[0][:5000], letter[1][:5000]
    url = write_parquet(tmp_path / "one", X, y, rows_per_file=5000)
    params = dict(measure="pauc", solver="2pmb", buffer_size=500, n_passes=3, shuffle=True, random_state=11)
    model = train(url, client=cluster, standardize=False, **params)
    est = nsdist.NonDecomposableClassifier(**params, standardize=False).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())


def test_a_file_larger_than_a_partition_trains_as_the_same_rows_in_one_file_per_row_group(cluster, tmp_path):
    from nsdist.data.dataset import SPLIT_BYTES

    rng = np.random.default_rng(3)
    n, d = 300_000, 32                       # 77 MB of float64 features a row group: two are over SPLIT_BYTES
    with pq.ParquetWriter(tmp_path / "big.parquet", pa.schema([(f"f{j}", pa.float64()) for j in range(d)] +
                                                             [("label", pa.int8())])) as writer:
        (tmp_path / "files").mkdir()
        for g in range(2):
            X = rng.normal(size=(n, d))
            y = np.where(X[:, 0] + X[:, 1] + rng.normal(size=n) > 3.5, 1, -1).astype(np.int8)
            table = pa.table({**{f"f{j}": X[:, j] for j in range(d)}, "label": y})
            writer.write_table(table, row_group_size=n)
            pq.write_table(table, tmp_path / "files" / f"part-{g}.parquet")
    big = open_dataset(str(tmp_path / "big.parquet"))
    footer = pq.ParquetFile(tmp_path / "big.parquet").metadata
    assert footer.row_group(0).total_byte_size + footer.row_group(1).total_byte_size > SPLIT_BYTES
    assert [(p.row_groups, p.num_rows, p.row_offset) for p in big.partitions] == [((0, 1), n, 0), ((1, 2), n, n)]
    params = dict(measure="pauc", solver="1pmb", eta=0.1, n_passes=2, standardize=False, random_state=5)
    model = train(big, client=cluster, **params)
    files = train(str(tmp_path / "files"), client=cluster, **params)
    np.testing.assert_array_equal(model.coef, files.coef)
    assert model.intercept == files.intercept and model.history["rows_seen"] == files.history["rows_seen"] == 4 * n


def test_a_partition_no_worker_can_hold_is_refused_before_any_is_read(tmp_path, caplog):
    """A worker's memory limit under twice a partition's rows (as read) would only see workers killed: the job
    is refused up front, naming the partition; with the memory, the same file trains."""
    rng = np.random.default_rng(2)
    n, d = 24_000, 100                       # 19.2 MB a partition as float64: 38.4 MB while read
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = np.where(X[:, 0] > 2, 1, -1).astype(np.int8)
    table = pa.table({**{f"f{j}": X[:, j] for j in range(d)}, "label": y})
    pq.write_table(table, tmp_path / "one.parquet")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="32MiB",
                      dashboard_address=":0") as lc, Client(lc) as client:
        with pytest.raises(ValueError, match=r"one\.parquet \(partition 0\): its 24,000 rows take 0\.02 GiB as "
                                             r"float64, about 2x that while one task reads them, and a worker may "
                                             r"use 0\.03 GiB: a partition is read whole, so write the data in "
                                             r"smaller files or row groups"):
            train(str(tmp_path / "one.parquet"), client=client, measure="pauc", solver="1pmb", eta=0.1,
                  n_passes=1, dtype="float64")
        model = LinearModel(np.ones(d), 0.0, "pauc", {"beta": 0.1}, [f"f{j}" for j in range(d)])
        with pytest.raises(ValueError, match="a partition is read whole"):
            evaluate(model, str(tmp_path / "one.parquet"), client=client)
        assert not any(client.run(lambda dask_worker: len(dask_worker.data)).values())     # nothing was read
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit="8GiB",
                      dashboard_address=":0") as lc, Client(lc) as client:
        model = train(str(tmp_path / "one.parquet"), client=client, measure="pauc", solver="1pmb", eta=0.1,
                      n_passes=1, dtype="float64")
        assert model.history["rows_seen"] == n


@pytest.mark.parametrize("folds", ["auto", 1])
@pytest.mark.parametrize("measure", ["pauc", "prbep", "f1"])
def test_engine_selects_the_estimators_model_with_the_defaults(cluster, tmp_path, letter, measure, folds):
    """Defaults (population, halving, early stopping, plug-in F1; on these 6000 rows with 23 holdout positives
    "auto" selects by 5-fold selection) and one holdout streamed: the same model bit for bit."""
    X, y = letter[0][:6000], letter[1][:6000]
    url = write_parquet(tmp_path / measure, X, y, rows_per_file=6000)
    kw = {} if folds == "auto" else {"validation_folds": folds}
    model = train(url, client=cluster, measure=measure, random_state=5, **kw)       # the defaults everywhere
    est = nsdist.NonDecomposableClassifier(measure, random_state=5, **kw).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])
    selected = [r["name"] for r in est.selection_ if r["selected"]]
    assert model.history["selected"] == selected[0]
    assert [r["validation"] for r in model.history["selection"]] == [r["validation"] for r in est.selection_]
    if folds == "auto":
        assert est.folds_ == model.history["folds"] == 5 and model.params["validation_folds"] == "auto"
        assert model.history["validation_positives"] == int(np.count_nonzero(y > 0))
    else:
        assert est.folds_ is None and model.history["validation_rows"] == est._validation[0].shape[0]


@pytest.mark.parametrize("measure", ["pauc", "prbep"])
def test_2pmb_with_a_holdout_draws_its_reservoir_in_the_validation_pass_and_is_the_estimators_model(
        cluster, tmp_path, letter, measure):
    """docs/engine.md §Reservoir: 2PMB's defaults (population, one holdout) on standardised raw rows far from
    unit scale: the reservoir comes from the validation pass -- no task of a reservoir pass of its own runs --
    and the model is the estimator's, bit for bit."""
    X, y = letter[0][:6000] * 3.0 + 7.0, letter[1][:6000]
    url = write_parquet(tmp_path / measure, X, y, rows_per_file=6000)
    params = dict(measure=measure, solver="2pmb", validation_folds=1, random_state=5)
    with get_task_stream(cluster) as ts:
        model = train(url, client=cluster, **params)
    names = {str(t["key"]).split("-")[0] for t in ts.data}
    assert "_validation_rows" in names and "_partition_candidates" not in names
    est = nsdist.NonDecomposableClassifier(**params).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])
    assert [r["validation"] for r in model.history["selection"]] == [r["validation"] for r in est.selection_]


def _wide_rows(n: int = 800, d: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """Rows wide enough that OpenBLAS divides their products among its threads (Letter's 16 features are not)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, :20].sum(axis=1) + 3 * rng.normal(size=n) > 6, 1, -1).astype(np.int8)
    return X, y


@pytest.mark.parametrize("folds", ["auto", 1])
def test_on_wide_rows_the_engine_and_the_estimator_agree_whatever_blas_threads_each_has(cluster, tmp_path, folds):
    """The workers' nanny gives BLAS one thread; the driver's BLAS here has two: the fold fits, the chain's steps,
    the checks on the driver and the cut all run on one BLAS thread (nsdist._threads), so the models are the
    same bit for bit.  Before, the 600 features gave the engine and the estimator different bits."""
    from threadpoolctl import threadpool_limits

    X, y = _wide_rows()
    url = write_parquet(tmp_path / "wide", X, y, rows_per_file=X.shape[0])     # one block, as the estimator's
    kw = dict(measure="pauc", random_state=0, validation_folds=folds, max_passes=3)
    with threadpool_limits(limits=2, user_api="blas"):
        model = train(url, client=cluster, **kw)
        est = nsdist.NonDecomposableClassifier(**kw).fit(X, y)
    assert (est.folds_ == 5) == (folds == "auto")
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])


def test_auto_folds_stream_a_holdout_when_the_rows_exceed_the_validation_cap(cluster, tmp_path, letter, caplog):
    """``validation_folds="auto"`` reads the rows onto the driver only up to ``validation_max_rows`` rows: past it
    the job streams with one holdout, and logs why and that K-fold selection would choose on every positive."""
    X, y = letter[0][:6000], letter[1][:6000]
    url = write_parquet(tmp_path / "capped", X, y, rows_per_file=2000)
    caplog.set_level(logging.INFO, logger="nsdist")
    model = train(url, client=cluster, measure="prbep", validation_max_rows=5000, random_state=1)
    v_pos = model.history["validation_positives"]
    assert (f"validation_folds='auto' keeps one holdout ({v_pos} positives): K-fold selection reads every row onto "
            "the driver, and the 6000 rows exceed validation_max_rows=5000") in caplog.text
    assert f"with {v_pos} validation positives, K-fold selection (validation_folds=5) would choose" in caplog.text
    assert model.history.get("folds") is None and model.history["validation_rows"] > 0
    assert len(model.history["curve"]) > 0                                  # the partition chain ran
    est = nsdist.NonDecomposableClassifier("prbep", validation_max_rows=5000, random_state=1).fit(X, y)
    assert est.folds_ is None


def _scheduler_keys(dask_scheduler, prefix: str) -> list[str]:
    """The keys the scheduler holds that start with ``prefix``."""
    return [str(k) for k in dask_scheduler.tasks if str(k).startswith(prefix)]


def _scheduler_transitions(dask_scheduler, prefix: str, since: float) -> list[tuple]:
    """``(key, start, finish, time)`` of the scheduler's transitions since ``since`` (its clock) for keys
    starting with ``prefix``."""
    return [(str(t.key), t.start, t.finish, t.timestamp) for t in dask_scheduler.transition_log
            if str(t.key).startswith(prefix) and t.timestamp >= since]


def test_identical_jobs_scatter_under_keys_of_their_own(cluster, letter_parquet, tmp_path, letter):
    """Two identical jobs back to back (a resumed job, a retrain loop) scatter their data under keys of their
    own -- the 2PMB reservoir, the K-fold rows -- not keys hashed from the data: the second job's scatter
    then cannot race Dask's forgetting of the first's (dask/distributed#8576: a resumed 2PMB job's
    reservoir scatter hung once), and both give the same model."""
    url, _, _ = letter_parquet
    X, y = letter[0][:3000], letter[1][:3000]
    kfold = write_parquet(tmp_path / "kfold", X, y, rows_per_file=1000)
    jobs = [(url, dict(measure="pauc", solver="2pmb", eta=0.1, n_passes=1, random_state=3), "Reservoir-"),
            (kfold, dict(measure="prbep", validation_folds=3, random_state=4), "nsdist-fold-rows-")]
    for where, params, prefix in jobs:
        keys: list[set] = [set(), set()]

        def held(k: int):
            def on_step(_) -> None:            # the scattered keys the scheduler holds while job k runs
                keys[k] |= set(cluster.run_on_scheduler(_scheduler_keys, prefix=prefix))
            return on_step

        a, b = (train(where, client=cluster, on_step=held(k), **params) for k in range(2))
        # (the first job's key may still be held while the second runs: the very window of the race)
        assert keys[0] and keys[1] - keys[0], (prefix, keys)
        np.testing.assert_array_equal(a.coef, b.coef)


@pytest.mark.parametrize("prefetch, wide", [(1, False), (2, False), (3, False), (2, True)])
def test_a_load_waits_for_the_step_prefetch_partitions_back(cluster, letter_parquet, prefetch, wide, monkeypatch):
    """docs/engine.md §Partition chain: load ``j`` is scheduled only once step ``j - g`` is done, ``g =
    min(prefetch + 1, worker threads)`` (the gate that makes a one-thread worker step the block it holds before
    it loads another).  Read from the scheduler's transition log, on the scheduler's one clock: a task moves to
    ``processing`` only after its dependencies are in memory, whatever the workers' timing.  (Steps not fused:
    these small partitions would be, docs/engine.md §Fused steps.)  ``wide``: every state handled as a wide
    one (``GATHER_BYTES = 0``), whose loads wait on the step's small summary task instead -- the same order,
    no load depends on a state, and the same model."""
    import nsdist.engine.chain as chain

    url, _, _ = letter_parquet
    params = dict(measure="pauc", solver="1pmb", eta=0.1, n_passes=3, prefetch=prefetch,
                  random_state=7 + prefetch + 10 * wide)     # its own keys: no task of another case is reused
    with dask.config.set({FUSE_KEY: False}):
        narrow = train(url, client=cluster, **params) if wide else None
        if wide:
            monkeypatch.setattr(chain, "GATHER_BYTES", 0)
        since = cluster.run_on_scheduler(time.time)      # the log also holds the module's earlier trainings
        model = train(url, client=cluster, **params)
    log = cluster.run_on_scheduler(_scheduler_transitions, prefix="nsdist-", since=since)
    n, threads = 12, sum(w["nthreads"] for w in cluster.scheduler_info()["workers"].values())
    gap = min(prefetch + 1, threads)
    token = {kind: next(key for key, *_ in log if key.startswith(f"nsdist-{kind}-") and key.endswith("-11")
                        ).split("-")[2] for kind in ("load", "step")}

    def when(kind: str, j: int, finish: str) -> float:
        return min(t for key, _, fin, t in log if key == f"nsdist-{kind}-{token[kind]}-{j}" and fin == finish)

    assert model.history["rows_seen"] == 3 * 16000
    assert all(when("load", j, "processing") >= when("step", j - gap, "memory") for j in range(gap, n))
    if wide:
        assert any(key.startswith("nsdist-summary-") for key, *_ in log)
        np.testing.assert_array_equal(model.coef, narrow.coef)


def test_same_seed_same_model_other_seed_other_model(cluster, letter_parquet):
    url, _, _ = letter_parquet
    a = train(url, client=cluster, measure="pauc", solver="1pmb", n_passes=2, random_state=5)
    b = train(url, client=cluster, measure="pauc", solver="1pmb", n_passes=2, random_state=5)
    c = train(url, client=cluster, measure="pauc", solver="1pmb", n_passes=2, random_state=6)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert not np.array_equal(a.coef, c.coef)


def test_monitor_rows_draw_the_papers_curve_and_change_nothing(cluster, tmp_path, letter):
    """``monitor=(X, y)`` measures the model as it trains, as the paper's figures do, without touching it: one
    candidate over 20 partitions x 6 passes gets a point every 2nd step (at most ``MONITOR_POINTS``) and at the
    last, whose value is the returned model's pAUC on those rows; a population gets one at every check (its
    best snapshot); the models are the ones trained without monitor, bit for bit."""
    from nsdist.api import MONITOR_POINTS

    X, y = letter
    url = write_parquet(tmp_path / "d", X[:16000], y[:16000], rows_per_file=800)
    Xt, yt = X[16000:], y[16000:]
    params = dict(measure="pauc", solver="1pmb", eta=0.5, n_passes=6)
    plain = train(url, client=cluster, **params)
    watched = train(url, client=cluster, monitor=(Xt, yt), **params)
    np.testing.assert_array_equal(watched.coef, plain.coef)
    assert watched.intercept == plain.intercept and "monitor" not in plain.history
    curve = watched.history["curve"]
    every = -(-len(curve) // MONITOR_POINTS)
    assert len(curve) == 120 and every == 2
    assert [i for i, p in enumerate(curve) if "monitor" in p] == [i for i in range(120) if (i + 1) % 2 == 0]
    assert curve[-1]["monitor"] == metrics.partial_auc(yt, Xt @ watched.coef + watched.intercept, 0.1)
    assert watched.history["monitor"] == {"rows": len(yt), "positives": int((yt > 0).sum())}
    values = [p["monitor"] for p in curve if "monitor" in p]
    assert values[-1] > values[0] + 0.05                   # it learns: the curve rises
    defaults = dict(measure="pauc", validation_folds=1, max_passes=4)
    population = train(url, client=cluster, monitor=(Xt, yt), **defaults)
    np.testing.assert_array_equal(population.coef, train(url, client=cluster, **defaults).coef)
    points = population.history["curve"]
    checked = [i for i, p in enumerate(points) if p.get("measure") is not None]
    assert checked and [i for i, p in enumerate(points) if "monitor" in p] == checked
    assert points[checked[-1]]["monitor"] == \
        metrics.partial_auc(yt, Xt @ population.coef + population.intercept, 0.1)
    with pytest.raises(ValueError, match="monitor rows must have the dataset's 16 features, got shape"):
        train(url, client=cluster, monitor=(Xt[:, :3], yt), **params)
    f1 = train(url, client=cluster, monitor=(Xt, yt), measure="f1", validation_folds=1, max_passes=4)
    assert f1.history["curve"][-1]["monitor"] == metrics.f1_score(yt, Xt @ f1.coef + f1.intercept)
    for solver in ("cp", "ftrl"):      # the in-memory baselines: a point per iteration / round, the same model
        fixed = dict(measure="pauc", solver=solver, max_iter=15)
        baseline = train(url, client=cluster, monitor=(Xt, yt), **fixed)
        np.testing.assert_array_equal(baseline.coef, train(url, client=cluster, **fixed).coef)
        assert len(baseline.history["curve"]) >= 15 and all("monitor" in p for p in baseline.history["curve"])
        assert baseline.history["curve"][-1]["monitor"] == \
            metrics.partial_auc(yt, Xt @ baseline.coef + baseline.intercept, 0.1)


def test_k_fold_selection_draws_each_folds_winner_on_the_monitor_rows(cluster, tmp_path, letter):
    """K-fold selection with ``monitor=(X, y)``: at each check of each fold, the measure on the monitor rows of
    that fold's winner so far (at its last check: the winner's snapshot the fold returns, folded back), each
    check's training time, and the returned model's measure on the rows; the model is the one trained without
    monitor, bit for bit; the learning curve PNG plots them against the folds' training time."""
    from PIL import Image

    from nsdist.estimator import map_folds_here
    from nsdist.report import folds_curve_png
    from nsdist.solvers.config import TrainConfig
    from nsdist.solvers.plan import fold_ids

    X, y = letter
    Xt, yt = X[6000:9000], y[6000:9000]
    url = write_parquet(tmp_path / "d", X[:6000], y[:6000], rows_per_file=1500)
    params = dict(measure="prbep", validation_folds=3, max_passes=3, random_state=2)
    plain = train(url, client=cluster, **params)
    watched = train(url, client=cluster, monitor=(Xt, yt), **params)
    np.testing.assert_array_equal(watched.coef, plain.coef)
    assert watched.intercept == plain.intercept and "monitor" not in plain.history
    assert "monitor" not in plain.history["validation_curve"][0]
    h = watched.history
    assert h["folds"] == 3 and h["monitor"] == {"rows": len(yt), "positives": int((yt > 0).sum())}
    assert h["monitor_returned"] == metrics.prbep(yt, Xt @ watched.coef + watched.intercept)
    checks = h["validation_curve"]
    assert all(p["monitor"] is not None and p["time"] > 0 for p in checks)
    for f in range(3):                     # each fold's clock runs forward
        times = [p["time"] for p in checks if p["fold"] == f]
        assert times == sorted(times)
    cfg = TrainConfig.from_params(**params).with_folds(3)       # the rows and folds the estimator fits on
    parts = [open_dataset(url).read_partition(i, dtype="float64") for i in range(4)]
    Xa, ya = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    folds = fold_ids(ya, np.arange(ya.shape[0]), cfg.random_state, 3)
    for f, r in enumerate(map_folds_here(cfg, Xa, ya, folds)):
        m = int(np.argmax(r["selection"].value))
        w, b = r["selection"].W[:, m], float(r["selection"].b[m])
        if r["scaling"] is not None:
            w, b = r["scaling"].fold(w, b)
        assert [p for p in checks if p["fold"] == f][-1]["monitor"] == metrics.prbep(yt, Xt @ w + b)
    png = folds_curve_png(h, measure="validation", title="t", monitor="PRBEP on test rows")
    plotted = json.loads(Image.open(io.BytesIO(png)).text["nsdist-curve"])
    assert plotted["time"] == [p["time"] for p in checks] and plotted["monitor"] == [p["monitor"] for p in checks]
    assert plotted["returned"] == h["monitor_returned"]


def _twenty_partitions(root: Path, letter, seed: int):
    """Letter in 20 files of 1000 rows, a one-pass 1PMB config and its plan."""
    X, y = letter
    ds = open_dataset(write_parquet(root, X, y, rows_per_file=1000))
    config = TrainConfig.from_params(measure="pauc", eta=0.5, n_passes=1, random_state=seed).resolve(
        n_features=ds.n_features, n_rows=ds.num_rows)
    steps, _ = schedule([p.num_rows for p in ds.partitions], 1, random_state=seed, shuffle=True, check_rows=None)
    return ds, config, steps


def _loads_held(cluster) -> int:
    """Partitions the workers hold as loaded blocks right now."""
    return sum(str(k).startswith("nsdist-load") for ks in cluster.has_what().values() for k in ks)


def test_prefetch_bounds_partitions_in_memory(cluster, tmp_path, letter):
    ds, config, steps = _twenty_partitions(tmp_path / "many", letter, seed=0)
    held: list[int] = []

    def count_loaded(_):
        held.append(_loads_held(cluster))

    chain = PartitionChain(cluster, ds, ChainConfig(config), steps, prefetch=2, on_step=count_loaded)
    chain.run(SGDState.zeros(ds.n_features), 0, len(steps))
    assert len(held) == 20
    assert max(held) <= 2 + 1


def test_next_segments_loads_start_before_its_check_and_are_read_once(cluster, tmp_path, letter):
    """docs/engine.md §Partition chain: while a segment's last steps run, the loads of the next segment's first
    ``prefetch`` steps are submitted (behind the gate), so the check between segments does not stall the
    chain; the next segment uses them (every partition of the plan is read once), the memory bound holds,
    and the model is the one a single segment gives."""
    ds, config, steps = _twenty_partitions(tmp_path / "segments", letter, seed=11)
    held: list[int] = []

    def count_loaded(_):
        held.append(_loads_held(cluster))

    since = cluster.run_on_scheduler(time.time)
    chain = PartitionChain(cluster, ds, ChainConfig(config), steps, prefetch=2, on_step=count_loaded)
    state = chain.run(SGDState.zeros(ds.n_features), 0, 10)
    tasks = cluster.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks])
    known = {int(k.rsplit("-", 1)[1]) for k in tasks if k.startswith("nsdist-load-")}
    assert known - set(range(10)) == {10, 11}         # the next segment's first two loads, and no more
    state = chain.run(state, 10, 20)
    chain.release()
    log = cluster.run_on_scheduler(_scheduler_transitions, prefix="nsdist-load-", since=since)
    computed = [key for key, _, finish, _ in log if finish == "memory"]
    assert sorted(int(k.rsplit("-", 1)[1]) for k in computed) == list(range(20))
    assert len(held) == 20 and max(held) <= 2 + 1
    whole = PartitionChain(cluster, ds, ChainConfig(config), steps, prefetch=2).run(SGDState.zeros(ds.n_features),
                                                                                    0, 20)
    np.testing.assert_array_equal(state.W, whole.W)
    np.testing.assert_array_equal(state.W_sum, whole.W_sum)


@pytest.mark.parametrize("standardize", [True, False])
def test_partition_cache_reads_each_file_once_and_gives_the_same_model(cluster, letter_parquet, standardize, caplog):
    """docs/engine.md §Partition cache: a job of several passes over data that fits keeps each partition on
    the workers as read and scaled, and gathers every pass's rows from it -- each file is read once, not
    once a pass -- and its model is the uncached job's bit for bit (scaling is elementwise, so scaling
    then gathering gives what gathering then scaling gives)."""
    url, X, y = letter_parquet
    params = dict(measure="pauc", solver="1pmb", eta=0.05, n_passes=3, random_state=5, standardize=standardize)

    def computed(prefix: str, since: float) -> list[str]:
        log = cluster.run_on_scheduler(_scheduler_transitions, prefix=prefix, since=since)
        return [key for key, _, finish, _ in log if finish == "memory"]

    since = cluster.run_on_scheduler(time.time)
    with caplog.at_level("INFO", logger="nsdist"), dask.config.set({FUSE_KEY: False}):     # a load task a step
        cached = train(url, client=cluster, **params)
    assert len(computed("nsdist-cached-", since)) == 4                  # 4 files, read once for 3 passes
    assert len(computed("nsdist-load-", since)) == 12                 # a block a pass, gathered from them
    assert "partition cache: the 4 partitions" in caplog.text
    deadline = time.monotonic() + 30        # the job let its cache go: the scheduler forgets it (asynchronously)
    while (left := cluster.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if str(k)
                                                                  .startswith("nsdist-cached-")])) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    since = cluster.run_on_scheduler(time.time)
    with dask.config.set({CACHE_KEY: False}):
        plain = train(url, client=cluster, **params)
    assert computed("nsdist-cached-", since) == []
    np.testing.assert_array_equal(cached.coef, plain.coef)
    assert cached.intercept == plain.intercept
    since = cluster.run_on_scheduler(time.time)
    fused = train(url, client=cluster, **params)        # docs/engine.md §Fused steps: groups, not loads and steps
    assert len(computed("nsdist-cached-", since)) == 4 and len(computed("nsdist-group-", since)) >= 1
    assert computed("nsdist-load-", since) == computed("nsdist-step-", since) == []
    np.testing.assert_array_equal(fused.coef, plain.coef)
    since = cluster.run_on_scheduler(time.time)
    one_pass = train(url, client=cluster, **{**params, "n_passes": 1})    # nothing read twice: nothing kept
    assert one_pass.history["passes"] == 1 and computed("nsdist-cached-", since) == []
    assert len(computed("nsdist-ring-", since)) == 4 and computed("nsdist-load-", since) == []   # §The ring
    since = cluster.run_on_scheduler(time.time)
    with dask.config.set({RING_KEY: False}):
        train(url, client=cluster, **{**params, "n_passes": 1})
    assert len(computed("nsdist-load-", since)) == 4 and computed("nsdist-ring-", since) == []


def test_partition_cache_of_sparse_rows_reads_each_file_once_and_gives_the_same_model(cluster, tmp_path):
    """The same for the sparse layout: the cache is sized by the footers' non-zero counts (``PartitionInfo.nnz``)
    and a pass's rows are taken from the kept CSR rows."""
    rng = np.random.default_rng(4)
    d, files = 1 << 12, 3
    for k in range(files):
        rows = [np.unique(rng.integers(0, d, size=rng.integers(1, 30))) for _ in range(1500)]
        w = np.cos(np.arange(d))
        y = np.array([1 if w[r].sum() > 2.0 else 0 for r in rows], dtype=np.int8)
        table = pa.table({"indices": pa.array([r.tolist() for r in rows], pa.list_(pa.int32())),
                          "values": pa.array([rng.random(r.size).tolist() for r in rows], pa.list_(pa.float64())),
                          "label": y})
        pq.write_table(table.replace_schema_metadata({b"nsdist": json.dumps({"n_features": d}).encode()}),
                       tmp_path / f"part-{k}.parquet")
    ds = open_dataset(str(tmp_path))
    assert [p.nnz for p in ds.partitions] == [pq.read_table(tmp_path / f"part-{k}.parquet").column("indices")
                                              .combine_chunks().values.__len__() for k in range(files)]
    params = dict(measure="prec@k", k=0.05, solver="1pmb", eta=0.5, n_passes=3, random_state=2)
    since = cluster.run_on_scheduler(time.time)
    cached = train(str(tmp_path), client=cluster, **params)
    log = cluster.run_on_scheduler(_scheduler_transitions, prefix="nsdist-cached-", since=since)
    assert len({key for key, _, finish, _ in log if finish == "memory"}) == files
    with dask.config.set({CACHE_KEY: False}):
        plain = train(str(tmp_path), client=cluster, **params)
    np.testing.assert_array_equal(cached.coef, plain.coef)
    assert cached.intercept == plain.intercept


def _long_running(dask_worker, since: float) -> dict[str, bool]:
    """Of every task a worker ran since ``since`` (its clock): whether it left the thread pool (its state went
    from executing to long-running: ``distributed.secede``)."""
    ran: dict[str, bool] = {}
    for entry in dask_worker.state.log:
        if len(entry) >= 4 and entry[1] == "executing" and isinstance(entry[-1], float) and entry[-1] >= since:
            ran[str(entry[0])] = ran.get(str(entry[0]), False) or entry[2] == "long-running"
    return ran


@pytest.mark.parametrize("mode", ["sequential", "uncached", "fused", "rounds"])
def test_a_load_leaves_the_thread_pool_in_the_sequential_chain_only(cluster, tmp_path, letter, mode):
    """docs/engine.md §Partition chain: in the sequential chain every load task that gathers from the partition
    cache (every pass's, the cache on) secedes from its worker's thread pool, so that a ready step need not
    wait behind it; a load that reads its file (the cache off) keeps its slot, and so do the steps, a fused
    group, which loads inside its own task, and the loads of data-parallel rounds, which step on every worker
    at once.  The sequential chain's model is the estimator's either way.  (A job that reads every file each
    pass runs as a ring by default, which loads inside its steps -- docs/engine.md §The ring; here it is off.)"""
    X, y = letter[0][:8000], letter[1][:8000]
    url = write_parquet(tmp_path / "d", X, y, rows_per_file=2000)
    params = dict(measure="pauc", solver="1pmb", eta=0.1, n_passes=2, buffer_size=500, shuffle=False,
                  standardize=False, random_state=1)     # epochs within partitions: the estimator's model
    since = min(cluster.run(time.time).values())
    with dask.config.set({FUSE_KEY: mode == "fused", CACHE_KEY: mode != "uncached", RING_KEY: False}):
        model = train(url, client=cluster, n_chains=2 if mode == "rounds" else 1, **params)
    ran = {}
    for tasks in cluster.run(_long_running, since=since).values():
        ran.update(tasks)
    loads, groups, steps = ([v for k, v in ran.items() if k.startswith(prefix)]
                            for prefix in ("nsdist-load-", "nsdist-group-", "nsdist-step-"))
    if mode == "fused":
        assert groups and not loads
    else:
        assert len(loads) == 8 and steps and not groups
    assert all(loads) if mode == "sequential" else not any(loads)
    assert not any(groups + steps)
    if mode != "rounds":
        est = nsdist.NonDecomposableClassifier(**params).fit(X, y)
        np.testing.assert_array_equal(model.coef, est.coef_.ravel())


def _fused_groups(client: Client) -> list[int]:
    """The last step of every fused group ``client`` has submitted and holds (key ``nsdist-group-<token>-<end>``;
    the client's own record: what it sent may not have reached the scheduler yet)."""
    return [int(str(k).rsplit("-", 1)[1]) for k in list(client.futures) if str(k).startswith("nsdist-group-")]


@pytest.mark.parametrize("group_bytes", [None, 300_000])
@pytest.mark.parametrize("case", ["selection", "fixed-2pmb-monitor"])
def test_fused_steps_give_the_unfused_model_and_report_every_step(cluster, tmp_path, letter, monkeypatch, case,
                                                                   group_bytes, caplog):
    """docs/engine.md §Fused steps: a cached dataset of small partitions is gathered and stepped several
    partitions to a task, on one worker -- the unfused chain's model, selection, per-step curve and monitor
    points (read from every step's state), bit for bit; every step is reported, in order.  While a step is
    reported, a group past it is already submitted, also at a segment's end, before the check (the next
    segment's first group); the population's halving and early stopping discard such a group, and the model
    is still the unfused one; the job returns once it is no longer running.  Once only the full-batch
    candidate trains, each partition's file-order block is made once (fused or not) -- the model of a job
    that reads its files every pass.  Groups of a whole segment (the default size) and of two 1000-row partitions."""
    X, y = letter
    url = write_parquet(tmp_path / "d", X[:12000], y[:12000], rows_per_file=1000)
    if group_bytes is not None:
        monkeypatch.setattr(chain_module, "FUSE_GROUP_BYTES", group_bytes)
    if case == "selection":
        params = dict(measure="pauc", validation_folds=1, random_state=3)      # population, halving, early stop
    else:
        params = dict(measure="prbep", solver="2pmb", eta=0.5, n_passes=4, buffer_size=200, random_state=3,
                      monitor=(X[12000:], y[12000:]))

    def run(fuse: bool, cache: bool = True) -> tuple[LinearModel, list[tuple[int, int, float]], list[bool], int]:
        reported, ahead = [], []
        since = cluster.run_on_scheduler(time.time)

        def on_step(p) -> None:
            reported.append((p.step, p.rows_seen, p.loss))
            if fuse and p.step < p.n_steps:
                ahead.append(max(_fused_groups(cluster), default=-1) >= p.step)

        with dask.config.set({FUSE_KEY: fuse, CACHE_KEY: cache}):
            model = train(url, client=cluster, on_step=on_step, **params)
        # no group runs on after the job (one submitted ahead of the check that stopped it, cancelled while
        # running, would: a cluster closed under it logs a CancelledError warning)
        running = cluster.run(lambda dask_worker: [str(t.key) for t in dask_worker.state.tasks.values()
                                                   if t.state in ("executing", "cancelled")])
        assert not any(k.startswith("nsdist-group-") for keys in running.values() for k in keys)
        log = cluster.run_on_scheduler(_scheduler_transitions, prefix="nsdist-ordered-", since=since)
        return model, reported, ahead, len({key for key, _, finish, _ in log if finish == "memory"})

    with caplog.at_level("INFO", logger="nsdist"):
        plain, plain_steps, _, plain_ordered = run(False)
        assert "fused steps" not in caplog.text
        fused, fused_steps, ahead, fused_ordered = run(True)
        assert "fused steps: the partitions average" in caplog.text
    np.testing.assert_array_equal(fused.coef, plain.coef)
    assert fused.intercept == plain.intercept
    np.testing.assert_array_equal(np.array(fused_steps), np.array(plain_steps))     # (NaN losses: equal)
    assert [s for s, *_ in fused_steps] == list(range(1, len(fused_steps) + 1))
    assert ahead and all(ahead)
    points = [{k: v for k, v in p.items() if k != "time"} for p in plain.history["curve"]]
    assert json.dumps([{k: v for k, v in p.items() if k != "time"} for p in fused.history["curve"]]) == \
        json.dumps(points)      # (NaN losses of a population: equal as text)
    if case == "selection":
        assert fused.history["selection"] == plain.history["selection"]
        # once only the full-batch candidate trains, each partition's file-order block is made once and kept
        # (both ways), and the model is the one read from the files every pass
        assert fused_ordered == plain_ordered == 12
        uncached, *_ = run(False, cache=False)
        np.testing.assert_array_equal(fused.coef, uncached.coef)
        assert fused.intercept == uncached.intercept
        assert any(r["dropped_at_check"] for r in plain.history["selection"])     # halved: a discarded group
        assert fused.history["passes"] < fused.history["max_passes"]       # stopped early: a group discarded
    else:
        assert sum("monitor" in p for p in points) > 2


def test_fused_rows_needs_small_partitions_that_fit_one_worker(cluster):
    """:func:`fused_rows`: fused when the cached bytes fit a quarter of the smallest worker's memory limit and the
    partitions average at most ``FUSE_PARTITION_BYTES``; a group holds about ``FUSE_GROUP_BYTES`` of rows."""
    limit = min(w["memory_limit"] for w in cluster.scheduler_info()["workers"].values())
    assert fused_rows(cluster, 10 << 20, 10_000, 1) == int(chain_module.FUSE_GROUP_BYTES * 10_000 // (10 << 20))
    assert fused_rows(cluster, FUSE_PARTITION_BYTES + 1, 10_000, 1) == 0            # partitions too large
    big = int(CACHE_SHARE * limit) + 1
    assert fused_rows(cluster, big, 10 ** 6, -(-big // FUSE_PARTITION_BYTES)) == 0   # not on one worker
    assert fused_rows(cluster, 1 << 30, 1000, 1 << 20) >= 1 or (1 << 30) > CACHE_SHARE * limit
    with dask.config.set({FUSE_KEY: False}):
        assert fused_rows(cluster, 1 << 20, 1000, 10) == 0


def test_cache_fits_a_quarter_of_the_workers_memory(cluster):
    limits = [w["memory_limit"] for w in cluster.scheduler_info()["workers"].values()]
    assert cache_fits(cluster, int(CACHE_SHARE * sum(limits)))
    assert not cache_fits(cluster, int(CACHE_SHARE * sum(limits)) + 1)
    with dask.config.set({CACHE_KEY: False}):
        assert not cache_fits(cluster, 1)


def test_evaluate_equals_in_memory_metrics_with_ties(cluster, tmp_path, letter):
    X, y = letter
    Xi = np.rint(X * 2)                             # integer features: many tied scores
    url = write_parquet(tmp_path / "ties", Xi, y, rows_per_file=3000)
    rng = np.random.default_rng(0)
    w = rng.integers(-2, 3, size=X.shape[1]).astype(float)
    s = Xi @ w + 1.0
    assert np.unique(s).size < len(s) // 10
    for beta, k in [(0.1, None), (0.05, 50), (1.0, 0.2)]:
        model = LinearModel(coef=w, intercept=1.0, measure="pauc" if k is None else "prec@k",
                            params={"beta": beta, "k": k}, feature_names=[f"f{j}" for j in range(X.shape[1])])
        got = evaluate(model, url, client=cluster)
        kk = k if k is not None else int((y > 0).sum()) / len(y)
        assert got["partial_auc"] == metrics.partial_auc(y, s, 0.1 if model.measure != "pauc" else beta)
        assert got["auc"] == metrics.auc(y, s)
        assert got["precision_at_k"] == metrics.precision_at_k(y, s, kk)
        assert got["prbep"] == metrics.prbep(y, s)
        assert got["f1_score"] == metrics.f1_score(y, s)


def test_radix_selection_finds_exact_order_statistics(cluster):
    rng = np.random.default_rng(1)
    s = np.concatenate([rng.normal(size=3000), -np.abs(rng.normal(size=1000)), np.zeros(500), [-0.0] * 10,
                        rng.integers(-3, 4, size=2000).astype(float)])
    order = np.argsort(sortable_keys(s), kind="stable")
    assert np.all(np.diff(s[order]) >= 0)


def test_evaluate_refuses_other_schema(cluster, letter_parquet):
    url, X, _ = letter_parquet
    model = LinearModel(coef=np.ones(X.shape[1]), intercept=0.0, measure="pauc",
                        feature_names=[f"g{j}" for j in range(X.shape[1])])
    with pytest.raises(ValueError, match="missing 'g0'"):
        evaluate(model, url, client=cluster)


@pytest.mark.parametrize("gather_bytes", [None, 0], ids=["state-gathered", "state-left-on-cluster"])
def test_resume_from_checkpoint_gives_identical_model(cluster, tmp_path, letter, gather_bytes, monkeypatch):
    """``gather_bytes=0``: as for a wide model, the driver fetches a step's state only for a checkpoint
    (``ChainProgress.state``) and at a segment's end (nsdist.engine.chain.GATHER_BYTES)."""
    import nsdist.engine.chain as chain

    X, y = letter
    url = write_parquet(tmp_path / "ck", X, y, rows_per_file=2000)      # 10 partitions
    ckpt = tmp_path / "ckpt.json"
    params = dict(measure="pauc", solver="2pmb", n_passes=2, random_state=2, validation_folds=1)    # streamed
    full = train(url, client=cluster, **params)
    if gather_bytes is not None:
        monkeypatch.setattr(chain, "GATHER_BYTES", gather_bytes)
    snapshot = tmp_path / "mid.json"

    def keep_midway(p):
        if p.step == 7:
            shutil.copy(ckpt, snapshot)

    train(url, client=cluster, checkpoint=str(ckpt), checkpoint_every=1, on_step=keep_midway, **params)
    assert json.loads(snapshot.read_text())["position"] == 7
    shutil.copy(snapshot, ckpt)
    resumed = train(url, client=cluster, checkpoint=str(ckpt), resume=True, **params)
    np.testing.assert_array_equal(resumed.coef, full.coef)
    assert resumed.intercept == full.intercept
    assert resumed.history["epochs"] == full.history["epochs"]
    # the learning curve goes on from the interrupted run's: its 7 points as they were, then the rest; all but
    # the clock as in the uninterrupted run
    def plain(points: list[dict], keep=lambda k: True) -> list[dict]:     # NaN (a step of skipped epochs) as None
        return [{k: None if isinstance(v, float) and np.isnan(v) else v for k, v in p.items() if keep(k)}
                for p in points]

    curve = resumed.history["curve"]
    assert plain(curve[:7]) == plain(json.loads(snapshot.read_text())["curve"])
    untimed = [plain(c, lambda k: k != "time") for c in (curve, full.history["curve"])]
    assert len(curve) == 20 and untimed[0] == untimed[1]
    assert all(b["time"] >= a["time"] for a, b in zip(curve, curve[1:]))
    older = json.loads(snapshot.read_text())             # a checkpoint written before the curve was kept
    del older["curve"]
    ckpt.write_text(json.dumps(older))
    again = train(url, client=cluster, checkpoint=str(ckpt), resume=True, **params)
    np.testing.assert_array_equal(again.coef, full.coef)
    assert plain(again.history["curve"], lambda k: k != "time") == untimed[1][7:]
    with pytest.raises(ValueError, match="other training parameters"):
        train(url, client=cluster, checkpoint=str(ckpt), resume=True, **{**params, "random_state": 9})


@pytest.fixture(scope="module")
def real_cluster(dask_processes) -> str:
    """A ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1 (tests/conftest.py)."""
    return dask_processes(2).address


def test_scheduler_address_runs_same_job_bit_identical(real_cluster, cluster, letter_parquet):
    addr = real_cluster
    url, _, _ = letter_parquet
    params = dict(measure="prbep", solver="2pmb", n_passes=2, random_state=4)
    remote = train(url, client=addr, **params)
    local = train(url, client=cluster, **params)
    np.testing.assert_array_equal(remote.coef, local.coef)
    assert evaluate(remote, url, client=addr) == evaluate(local, url, client=cluster)


def test_standardize_equals_estimator_on_scaled_rows_and_folds_back(cluster, letter_parquet):
    """``standardize=True`` trains on (x - mean)/std and returns the equal model on raw features.

    The moments come from the sample of whole partitions (here: all of them, in file order), not
    from an extra pass; the full-pass moments agree to rounding.  The estimator does the same.
    """
    from nsdist.engine.scaling import feature_scaling, scaling_from_rows

    url, X, y = letter_parquet
    raw = X * 3.0 + 7.0                                    # a raw scale far from unit variance
    root = Path(url).parent / "raw"
    url_raw = write_parquet(root, raw, y, rows_per_file=4000)
    ds = open_dataset(url_raw)
    scaling = scaling_from_rows(raw)
    full = feature_scaling(cluster, ds)
    np.testing.assert_allclose(scaling.mean, full.mean, rtol=1e-12)
    np.testing.assert_allclose(scaling.scale, full.scale, rtol=1e-12)
    params = dict(measure="f1", solver="1pmb", eta=0.05, n_passes=2, shuffle=False, random_state=1)
    model = train(url_raw, client=cluster, standardize=True, **params)
    est = nsdist.NonDecomposableClassifier(**params, standardize=False).fit(scaling.apply(raw.copy()), y)
    w, b = scaling.fold(est.coef_.ravel(), float(est.intercept_[0]))
    np.testing.assert_array_equal(model.coef, w)
    assert model.intercept == b
    np.testing.assert_allclose(model.decision_function(raw), est.decision_function(scaling.apply(raw.copy())),
                               rtol=1e-9, atol=1e-9)
    assert model.params["standardize"] is True
    scaled_est = nsdist.NonDecomposableClassifier(**params).fit(raw, y)        # standardize=True in memory
    np.testing.assert_array_equal(scaled_est.coef_.ravel(), model.coef)
    assert float(scaled_est.intercept_[0]) == model.intercept


def test_one_class_dataset_fails_before_training(cluster, tmp_path, letter):
    """1PMB on data without positives: a clear error naming the dataset, before any epoch runs."""
    X, y = letter
    neg = y < 0
    url = write_parquet(tmp_path / "neg", X[neg][:4000], y[neg][:4000], rows_per_file=2000)
    steps: list = []
    for measure in ("f1", "pauc"):
        with pytest.raises(ValueError, match=r"neg.*no positive row"):
            train(url, client=cluster, measure=measure, solver="1pmb", on_step=steps.append)
    assert steps == []


def test_moments_without_a_float64_copy_equal_row_moments_to_the_bit():
    """docs/engine.md §Holdout and sample: the chunked moments are row_moments of a float64 copy, bit for bit
    (one block or several in a row, float32 or float64, any chunk size)."""
    from nsdist.solvers.scaling import moments_of, row_moments

    rng = np.random.default_rng(3)
    for trial in range(12):
        d = int(rng.integers(1, 40))
        dtype = (np.float32, np.float64)[trial % 2]
        blocks = [(rng.normal(size=(int(rng.integers(1, 9000)), d)) * rng.uniform(0.01, 100) + 7).astype(dtype)
                  for _ in range(int(rng.integers(1, 4)))]
        ref = row_moments(np.concatenate(blocks).astype(np.float64))
        for got in (moments_of(blocks), moments_of(np.concatenate(blocks), chunk=int(rng.integers(1, 5000)))):
            assert got[0] == ref[0]
            np.testing.assert_array_equal(got[1], ref[1])
            np.testing.assert_array_equal(got[2], ref[2])


def test_fixed_run_sample_lost_is_read_again(cluster, letter_parquet):
    """A fixed run's sample lives on a worker (docs/engine.md §Holdout and sample): lost there, it is
    read again, and its moments and cut are the same numbers as on the rows in memory."""
    from nsdist.engine.holdout import WorkerSample, sample_partitions
    from nsdist.solvers.measure import cut_intercept
    from nsdist.solvers.scaling import row_moments, scaling_from_moments

    url, X, y = letter_parquet
    ds = open_dataset(url)
    parts = sample_partitions(ds, 0, 200_000)
    assert parts == list(range(len(ds.partitions)))          # a small dataset: the whole of it, in file order
    sample = WorkerSample(cluster, ds, parts, dtype="float64")
    assert sample.futures == []                              # read when first needed
    ref = row_moments(X.astype(np.float64))
    for _ in range(2):
        n, mean, m2 = sample.moments()
        assert n == ref[0]
        np.testing.assert_array_equal(mean, ref[1])
        np.testing.assert_array_equal(m2, ref[2])
        cluster.cancel(sample.futures)                       # as if its worker died
    w = np.linspace(-1, 1, X.shape[1])
    assert sample.cut(w, None, "pauc", None) == cut_intercept("pauc", y, np.asarray(X @ w, dtype=np.float64))
    # scaled: each block scaled as it is stacked, the numbers of scaling a copy of all the rows
    scaling = scaling_from_moments(*ref, center=True)
    Xs = scaling.apply(X.astype(np.float64))
    assert len(parts) > 1
    assert sample.cut(w, scaling, "pauc", None) == cut_intercept("pauc", y, np.asarray(Xs @ w, dtype=np.float64))
    sample.release()
    assert sample.futures == []


@pytest.mark.parametrize("measure, k", [("pauc", None), ("prec@k", 0.05)])
def test_sparse_sample_cut_is_the_cut_of_the_stacked_rows(cluster, tmp_path, measure, k):
    """CSR sample blocks are scored where they lie (no concatenation): the cut is the one of the product over
    the stacked rows, to the bit; read again when lost."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file

    from nsdist import ingest
    from nsdist.engine.holdout import WorkerSample
    from nsdist.solvers.measure import cut_intercept
    from nsdist.solvers.scaling import Scaling

    rng = np.random.default_rng(5)
    X = sp.random(900, 70, density=0.1, format="csr", random_state=5, dtype=np.float64)
    X.data = rng.normal(size=X.nnz) * 3
    y = np.where(rng.random(900) < 0.1, 1, -1)
    dump_svmlight_file(X, y, str(tmp_path / "d.svm"), zero_based=False)
    url = str(ingest(str(tmp_path / "d.svm"), str(tmp_path / "d"), format="svmlight", layout="sparse",
                     n_features=70, rows_per_partition=300, shuffle=False, client=cluster).url)
    ds = open_dataset(url)
    assert len(ds.partitions) == 3
    parts = [0, 2]
    blocks = [ds.read_partition(p, dtype="float32") for p in parts]
    Xs = sp.vstack([b[0] for b in blocks], format="csr")
    ys = np.concatenate([b[1] for b in blocks])
    w = rng.normal(size=70)
    scaling = Scaling(mean=np.zeros(70), scale=rng.uniform(0.5, 2, size=70), centered=False)
    sample = WorkerSample(cluster, ds, parts, dtype="float32")
    for sc in (None, scaling):
        rows = Xs if sc is None else sc.apply(Xs.copy())
        ref = cut_intercept(measure, ys, np.asarray(rows @ w.astype(np.float32), dtype=np.float64), k=k)
        assert sample.cut(w, sc, measure, k) == ref
        cluster.cancel(sample.futures)                       # lost: read again, the same cut
        assert sample.cut(w, sc, measure, k) == ref
    sample.release()


def test_sample_adopts_blocks_in_any_row_order(cluster, tmp_path, letter_parquet):
    """WorkerSample.adopt takes CSR blocks already on the workers (the chain's loads: every row of a partition,
    in stream order): the cut is the one of the partitions read in file order, to the bit; cancelled (as if
    lost), they are read afresh, the same cut; scores made ahead by a model future serve only a cut of that
    very model; dense blocks are refused (a dense product's bits follow the row order)."""
    import scipy.sparse as sp
    from distributed import get_task_stream, wait
    from sklearn.datasets import dump_svmlight_file

    from nsdist import ingest
    from nsdist.engine.holdout import WorkerSample
    from nsdist.solvers.measure import cut_intercept

    rng = np.random.default_rng(8)
    X = sp.random(900, 50, density=0.1, format="csr", random_state=8, dtype=np.float64)
    X.data = rng.normal(size=X.nnz)
    y = np.where(rng.random(900) < 0.1, 1, -1)
    dump_svmlight_file(X, y, str(tmp_path / "d.svm"), zero_based=False)
    url = str(ingest(str(tmp_path / "d.svm"), str(tmp_path / "d"), format="svmlight", layout="sparse",
                     n_features=50, rows_per_partition=300, shuffle=False, client=cluster).url)
    ds = open_dataset(url)
    parts = [2, 0]
    read = [ds.read_partition(p, dtype="float64") for p in parts]
    w = rng.normal(size=50)
    ref = cut_intercept("prec@k", np.concatenate([r[1] for r in read]),
                        np.asarray(sp.vstack([r[0] for r in read]) @ w, dtype=np.float64), k=0.05)
    shuffled = []
    for Xp, yp in read:
        rows = rng.permutation(Xp.shape[0])
        shuffled.append((Xp[rows], yp[rows]))
    sample = WorkerSample(cluster, ds, sorted(parts), dtype="float64")
    sample.adopt(cluster.scatter(shuffled[::-1]))
    assert sample.cut(w, None, "prec@k", 0.05) == ref
    cluster.cancel(sample.futures)                       # lost: read from the files, the same cut
    assert sample.cut(w, None, "prec@k", 0.05) == ref
    sample.release()

    # scored ahead by a model on the cluster (the chain's last step's): taken when the cut's w is that model,
    # to the bit; another w (one ulp off), or scores lost, are scored afresh -- the cut of the w asked for
    def scored(model_w):
        [model] = cluster.scatter([(model_w, None)], hash=False)
        sample.adopt(cluster.scatter(shuffled, hash=False), model=model)
        wait([*sample._scored[:2], *sample._scored[2]])     # made before the cut is asked for
        return sample

    def block_scores(ts):
        return sum(str(r["key"]).startswith("_block_scores") for r in ts.data)

    other = w.copy()
    other[7] = np.nextafter(other[7], np.inf)
    ref_other = cut_intercept("prec@k", np.concatenate([r[1] for r in read]),
                              np.asarray(sp.vstack([r[0] for r in read]) @ other, dtype=np.float64), k=0.05)
    for model_w, asked, expected, scorings in ((w, w, ref, 2), (w, other, ref_other, 4), (other, w, ref, 4)):
        with get_task_stream(cluster) as ts:
            assert scored(model_w).cut(asked, None, "prec@k", 0.05) == expected
            assert sample._scored is None                # used once
        assert block_scores(ts) == scorings                 # 2 ahead, 2 more when scored afresh
    sample.adopt(cluster.scatter(shuffled, hash=False), model=cluster.scatter([(w, None)], hash=False)[0])
    cluster.cancel(sample._scored[2])                       # the scores made ahead lost: scored afresh
    assert sample.cut(w, None, "prec@k", 0.05) == ref
    sample.release()
    one = WorkerSample(cluster, ds, [2], dtype="float64")   # one partition: its scores made ahead too
    one.adopt(cluster.scatter(shuffled[:1], hash=False), model=cluster.scatter([(w, None)], hash=False)[0])
    wait([*one._scored[:2], *one._scored[2]])
    with get_task_stream(cluster) as ts:
        assert one.cut(w, None, "prec@k", 0.05) == cut_intercept("prec@k", read[0][1], read[0][0] @ w, k=0.05)
    assert block_scores(ts) == 0                            # already made when the cut was asked for
    one.release()
    with pytest.raises(ValueError, match="CSR blocks only"):
        WorkerSample(cluster, open_dataset(letter_parquet[0]), [0], dtype="float64").adopt([])


@contextlib.contextmanager
def scheduler_gathers(client) -> Iterator[list]:
    """The gathers the embedded scheduler of ``client`` is asked for meanwhile (a 1 each): results fetched
    through it, not straight from the workers."""
    scheduler = client.cluster.scheduler
    gather, asked = scheduler.handlers["gather"], []

    def counting(*args, **kwargs):
        asked.append(1)
        return gather(*args, **kwargs)

    scheduler.handlers["gather"] = counting
    try:
        yield asked
    finally:
        scheduler.handlers["gather"] = gather


def test_the_driver_fetches_straight_from_workers_on_this_machine(cluster):
    """Results come to the driver straight from workers on this machine (not through the scheduler: two hops,
    both on an embedded cluster's driver process); through the scheduler from workers elsewhere, Dask's
    default, unless the client was made to say otherwise."""
    from distributed import Client

    from nsdist.engine.cluster import _on_this_machine, direct_to_workers, fetch

    assert _on_this_machine("tcp://127.0.0.1:8786") and _on_this_machine("tcp://[::1]:8786")
    assert _on_this_machine("inproc://10.0.0.1/123/1")
    assert not _on_this_machine("tcp://192.0.2.7:8786")          # TEST-NET-1: no machine's own address
    assert direct_to_workers(cluster)
    with Client(cluster.cluster, direct_to_workers=False, set_as_default=False) as told:
        assert not direct_to_workers(told)
    with scheduler_gathers(cluster) as asked:
        future = cluster.submit(np.arange, 1 << 20, pure=False)
        np.testing.assert_array_equal(fetch(cluster, future), np.arange(1 << 20))
        assert asked == []
        np.testing.assert_array_equal(fetch(cluster, future, direct=False), np.arange(1 << 20))
        assert asked == [1]


def behind(gate: Path, then: Callable[[], object]) -> Callable[[], object]:
    """A task that waits for the file ``gate`` (60 s at most), then returns ``then()``.  A file, not a
    ``distributed.Event``: an Event in a task starts a client on its worker, and that client's handshake fails
    (``assert len(msg) == 1`` in ``Client._ensure_connected``) when the scheduler's first batch to it also holds
    a message to every client -- the "cancelled-keys" of a cancel made at that moment, as the settle test makes
    one (a failed run of this module; the same error when the scheduler sends such a message as a worker's
    client registers).  (A closure: Dask sends it by value.)"""
    def task():
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return then()
    return task


def held_answers(seconds: float):
    """``(hold, restore)`` for ``client.run``: ``hold`` makes a worker wait ``seconds`` before it answers a
    ``get_data`` request (a fetch of a result straight from it) and counts them; ``restore`` puts its handler
    back and returns the count.  (Closures: Dask sends them by value.)"""
    def hold(dask_worker) -> None:
        get_data = dask_worker.handlers["get_data"]
        dask_worker.nsdist_get_data, dask_worker.nsdist_gets = get_data, 0

        async def held(comm, keys, who=None, serializers=None):
            import asyncio

            dask_worker.nsdist_gets += 1
            await asyncio.sleep(seconds)
            return await get_data(comm, keys, who=who, serializers=serializers)
        dask_worker.handlers["get_data"] = held

    def restore(dask_worker) -> int:
        dask_worker.handlers["get_data"] = dask_worker.nsdist_get_data
        return dask_worker.nsdist_gets

    return hold, restore


def in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, list]:
    """``fn(*args, **kwargs)`` started in a thread; the list gets what it returned or raised."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as exc:  # (what it raised, for the assertions)
            out.append(exc)
    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_fetch_that_times_out_leaves_the_gather_it_shares_with_another_to_end(cluster):
    """The client's gathers share a request to the workers while it waits for one of its five slots.  A fetch
    that times out then (here five other gathers hold the slots: a worker's answers are held 3 s) leaves that
    request be, and the fetch that shares it gets its result; cutting it off ended the other in an
    ``asyncio.CancelledError``, which Dask's ``sync`` lets out as an UnboundLocalError (the ring's watch, in a
    CI run's redo).  A cancelled future's fetch raises an error the redo takes as transient."""
    from nsdist._faults import is_transient
    from nsdist.engine.cluster import fetch

    hold, restore = held_answers(3.0)
    held_worker = min(cluster.scheduler_info()["workers"])
    slow = [cluster.submit(np.full, 3, i, pure=False, workers=[held_worker]) for i in range(5)]
    target = cluster.submit(np.arange, 5, pure=False)
    cluster.gather(slow + [target])
    cluster.run(hold, workers=[held_worker])
    try:
        blockers = []
        for f in slow:          # each its own request (one at a time), holding one slot for 3 s
            blockers.append(in_thread(fetch, cluster, f, direct=True))
            time.sleep(0.05)
        cut, cut_out = in_thread(fetch, cluster, target, direct=True, timeout=1.0)
        time.sleep(0.3)         # its request waits for a slot: this fetch shares it
        assert fetch(cluster, target, direct=True).tolist() == [0, 1, 2, 3, 4]
        for thread, _ in blockers + [(cut, cut_out)]:
            thread.join(30)
        assert [out[0].tolist() for _, out in blockers] == [[i] * 3 for i in range(5)]
        assert len(cut_out) == 1 and isinstance(cut_out[0], TimeoutError)
    finally:
        cluster.run(restore, workers=[held_worker])
    cluster.cancel([target], reason="a test's cancel")
    with pytest.raises(Exception, match="cancelled for reason: a test's cancel") as lost:
        fetch(cluster, target)
    assert is_transient(lost.value)


def test_a_watch_that_times_out_again_and_again_asks_the_worker_for_the_result_once(cluster, tmp_path):
    """The ring's watch fetches a step's result with a 0.5 s timeout, and after each timeout looks at the
    workers and fetches again, leaving the timed-out gather to end by itself.  When the result comes, the
    gathers left waiting on it share one request to its worker: a step that runs long is fetched once, not
    once per timeout (the result can be a wide state, 16 MB to 260 MB)."""
    from nsdist.engine.cluster import fetch

    hold, restore = held_answers(0.0)           # (held for no time: counts the worker's get_data requests)
    cluster.run(hold)
    try:
        step = cluster.submit(behind(tmp_path / "go", lambda: np.arange(1 << 18)), pure=False)
        for _ in range(6):
            with pytest.raises(TimeoutError):
                fetch(cluster, step, direct=True, timeout=0.1)
        (tmp_path / "go").touch()
        assert fetch(cluster, step, direct=True).tolist() == list(range(1 << 18))
        time.sleep(0.5)                         # (a gather left behind that asked on its own has asked by now)
    finally:
        gets = cluster.run(restore)
    assert sum(gets.values()) == 1, gets


def test_settle_waits_for_futures_to_end_and_fetches_none_of_them(cluster, tmp_path):
    """``settle`` (what the chain's release waits with) returns once every future has finished, erred or been
    cancelled -- False at its timeout -- and no result crosses to the driver (it fetched the wide state of a
    default job's last step for nothing: 1-1.7 s of a 20 s job)."""
    from nsdist.engine.cluster import settle

    hold, restore = held_answers(0.0)
    cluster.run(hold)
    with scheduler_gathers(cluster) as asked:
        try:
            waiting = cluster.submit(behind(tmp_path / "go", lambda: np.zeros(1 << 20)), pure=False)
            done = cluster.submit(np.arange, 3, pure=False)
            erred = cluster.submit(lambda: 1 / 0, pure=False)
            cancelled = cluster.submit(lambda x: x, waiting, pure=False)   # (never runs: it waits for that one)
            cluster.cancel([cancelled])
            assert settle([done, erred, cancelled], 30)
            assert (done.status, erred.status, cancelled.status) == ("finished", "error", "cancelled")
            assert not settle([waiting, done], 0.3) and waiting.status == "pending"
            (tmp_path / "go").touch()
            assert settle([waiting], 30) and waiting.status == "finished"
            assert settle([], 0)
        finally:
            gets = cluster.run(restore)
    assert asked == [] and sum(gets.values()) == 0


def test_a_cancelled_running_task_is_waited_for_until_it_ends(cluster, tmp_path):
    """Cancelling a running task drops its result but not its thread: ``running_tasks`` still names it, and
    ``wait_for_tasks`` (what a stopped ingest or predict waits with before it cleans up) returns once it has
    ended -- after the file it writes last exists -- or, at its timeout, with the keys still running."""
    from nsdist._faults import running_tasks, wait_for_tasks

    done = tmp_path / "written"
    fut = cluster.submit(behind(tmp_path / "go", lambda: done.write_text("late")), key="nsdist-stoptest-0",
                         pure=False)
    other = cluster.submit(np.arange, 3, key="nsdist-other-0", pure=False)
    deadline = time.monotonic() + 60
    while not running_tasks(cluster, "nsdist-stoptest-"):
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.01)
    cluster.cancel([fut])
    assert fut.status == "cancelled" and other.result() is not None
    assert running_tasks(cluster, "nsdist-stoptest-") == ["nsdist-stoptest-0"]     # it runs on
    assert running_tasks(cluster, "nsdist-other-") == []
    assert wait_for_tasks(cluster, "nsdist-stoptest-", timeout=0.3) == ["nsdist-stoptest-0"]
    (tmp_path / "go").touch()
    assert wait_for_tasks(cluster, "nsdist-stoptest-", timeout=60) == []
    assert done.read_text() == "late"


def test_checks_fall_at_pass_ends_once_only_full_batch_candidates_train(cluster, letter_parquet, monkeypatch):
    """Once only full-batch candidates train, whose models move only at the end of a pass, the checks inside
    a pass are skipped (nsdist.solvers.sgd.drive): the same model, selection and stop as with every check of
    the plan, and each check left out would have seen what the check before it saw."""
    import nsdist.api
    from nsdist.solvers import sgd

    url = letter_parquet[0]
    kw = dict(measure="prbep", random_state=0, n_iter_no_change=2, buffer_size=100,    # checks inside passes
              validation_folds=1)
    model = train(url, client=cluster, **kw)
    monkeypatch.setattr(nsdist.api, "drive", lambda *args, population=None, **kwargs: sgd.drive(*args, **kwargs))
    every = train(url, client=cluster, **kw)
    np.testing.assert_array_equal(model.coef, every.coef)
    assert model.intercept == every.intercept and model.history["selected"] == every.history["selected"]
    assert model.history["rows_seen"] == every.history["rows_seen"]
    kept, all_checks = model.history["validation_curve"], every.history["validation_curve"]
    assert len(kept) < len(all_checks)                          # some checks were inside passes: left out

    def seen(point):         # what a check saw of the models (not its count, its clock, or who was alive before it)
        return {k: v for k, v in point.items() if k not in ("check", "rows_seen", "alive")}

    rows = [p["rows_seen"] for p in kept]
    for i, point in enumerate(all_checks):
        if point["rows_seen"] not in rows:                       # left out: the check before it saw the same
            assert point["alive"] == 1 and point["best_stochastic"] is not None and i > 0
            assert seen(point) == seen(all_checks[i - 1])
    per_pass = every.history["rows_seen"] // every.history["passes"]
    alone = [p for p in kept if p["alive"] == 1 and p["passes_batch"] > 0]
    assert alone and all(p["rows_seen"] % per_pass == 0 for p in alone[1:])   # at pass ends
