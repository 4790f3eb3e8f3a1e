"""Bad input end to end: through ``nsdist.api.train`` / ``evaluate`` and the ``nsdist`` command line.

Each bad input is rejected with a message naming what is wrong and where (file,
partition, row, field), the command exits non-zero with that message on one
line, and nothing half-made is left: no model, no metrics, no temporary file.
The per-layer checks behind these messages are tested in test_dataset.py,
test_ingest.py, test_metrics.py and test_losses.py; here they are driven
through a whole job on a real (``LocalCluster``) Dask cluster, where most
partitions are read on a worker, not on the driver.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import free_port
from distributed import Client, LocalCluster
from test_engine import letter_arrays, write_parquet

from nsdist import NonDecomposableClassifier
from nsdist.api import evaluate, open_dataset, train
from nsdist.model import LinearModel, load_model
from nsdist.solvers.plan import holdout_sizes

REPO = Path(__file__).resolve().parents[1]
FEATURES = [f"f{j}" for j in range(16)]
TRAIN = dict(n_passes=1, random_state=1)
TRAIN_ARGS = ["--n-passes", "1", "--random-state", "1", "--no-progress"]


@pytest.fixture(scope="module")
def cluster():
    """One worker process: partitions are read and checked away from the driver."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc, set_as_default=False) as client:
        yield client


@pytest.fixture(scope="module")
def env(cluster) -> dict:
    return {"DASK_SCHEDULER_ADDRESS": cluster.scheduler.address}


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, np.ndarray]:
    """3000 rows of Letter (standardised), 117 of them positive."""
    X, y = letter_arrays()
    return X[:3000], y[:3000]


@pytest.fixture(scope="module")
def good(tmp_path_factory, rows) -> str:
    """Six Parquet files of 500 rows."""
    return write_parquet(tmp_path_factory.mktemp("good"), *rows, rows_per_file=500)


@pytest.fixture(scope="module")
def model(good, cluster) -> LinearModel:
    return train(good, client=cluster, **TRAIN)


def nsdist_cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsdist", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def one_line_error(proc: subprocess.CompletedProcess, code: int) -> str:
    """The one error line (``nsdist COMMAND: ...``) of a failed command; log warnings may precede it."""
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    prefix = f"nsdist {proc.args[3]}: "
    (line,) = [line for line in proc.stderr.splitlines()
               if line.startswith(prefix) and not line.startswith(prefix + "warning: ")]
    return line


def assert_nothing_half_made(out: Path) -> None:
    """A failed ``nsdist train`` leaves no model, metrics, plot or temporary file; a checkpoint is whole."""
    for name in ("model", "metrics.json", "learning_curve.png"):
        assert not (out / name).exists(), name
    assert not list(out.rglob("*.tmp-*")) and not list(out.parent.rglob(".*.tmp-*"))
    if (out / "checkpoint.json").exists():
        json.loads((out / "checkpoint.json").read_text())


# ------------------------------------------------------------------------ bad data
def _rewrite(url: str, partition: int, change) -> None:
    path = Path(url) / f"part-{partition:05d}.parquet"
    pq.write_table(change(pq.read_table(path)), path)


def nan_feature(root: Path, X, y):
    """NaN in a feature"""
    X = X.copy()
    X[1017, 3] = np.nan
    return write_parquet(root, X, y, rows_per_file=500), ["part-00002.parquet (partition 2)", "row 17",
                                                          "feature 'f3' = nan is not finite"]


def inf_feature(root: Path, X, y):
    """-inf in a feature"""
    X = X.copy()
    X[2999, 0] = -np.inf
    return write_parquet(root, X, y, rows_per_file=500), ["part-00005.parquet (partition 5)", "row 499",
                                                          "feature 'f0' = -inf is not finite"]


def bad_label(root: Path, X, y):
    """a label outside {-1,+1}, {0,1}, bool"""
    y = y.astype(np.int64)
    y[1203] = 2
    return write_parquet(root, X, y, rows_per_file=500), ["part-00002.parquet (partition 2)", "label[203] = 2",
                                                          "is not a valid label"]


def class_name_labels(root: Path, X, y):
    """class names ("fraud" / "ok") in the label column, as users' tables often hold them, without positive="""
    return write_parquet(root, X, np.where(y > 0, "fraud", "ok"), rows_per_file=500), [
        "part-00000.parquet", "label column 'label' holds class names ('fraud', 'ok')", "positive", "'fraud'"]


def missing_column(root: Path, X, y):
    """a partition without one of the feature columns"""
    url = write_parquet(root, X, y, rows_per_file=500)
    _rewrite(url, 4, lambda t: t.drop(["f5"]))
    return url, ["part-00004.parquet", "schema differs from the first partition", "column 'f5' is missing"]


def other_type(root: Path, X, y):
    """a partition where a feature column holds strings"""
    url = write_parquet(root, X, y, rows_per_file=500)
    _rewrite(url, 1, lambda t: t.set_column(5, "f5", t["f5"].cast(pa.string())))
    return url, ["part-00001.parquet", "schema differs from the first partition", "'f5' has type string"]


def all_empty(root: Path, X, y):
    """every partition empty"""
    url = write_parquet(root, X[:0], y[:0], bounds=[0, 0, 0])
    return url, [url, "every Parquet file is empty (2 files)"]


def no_positives(root: Path, X, y):
    """no positive row (pAUC needs both classes)"""
    return write_parquet(root, X[y < 0], y[y < 0], rows_per_file=500), ["no positive"]


def truncated_file(root: Path, X, y):
    """a Parquet file cut in half"""
    url = write_parquet(root, X, y, rows_per_file=500)
    path = Path(url) / "part-00003.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return url, ["part-00003.parquet", "not a readable Parquet file"]


def corrupt_page(root: Path, X, y):
    """a Parquet file whose footer is intact but whose first data page is garbage (read on a worker)"""
    url = write_parquet(root, X, y, rows_per_file=500)
    path = Path(url) / "part-00002.parquet"
    data = bytearray(path.read_bytes())
    data[4:68] = np.random.default_rng(0).integers(0, 256, 64, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return url, ["part-00002.parquet (partition 2)", "cannot read the Parquet file"]


def missing_path(root: Path, X, y):
    """a path that does not exist"""
    url = str(root / "nowhere")
    return url, [f"no such file or directory: '{url}'"]


def missing_file_url(root: Path, X, y):
    """a file:// URL that does not exist"""
    url = f"file://{root}/nowhere"
    return url, [f"no such file or directory: '{url}'"]


def missing_memory_url(root: Path, X, y):
    """a memory:// URL that does not exist"""
    url = f"memory://nsdist-nowhere-{root.name}/data"
    return url, [f"no such file or directory: '{url}'"]


BAD_DATA = [nan_feature, inf_feature, bad_label, class_name_labels, missing_column, other_type, all_empty, no_positives,
            truncated_file, corrupt_page, missing_path, missing_file_url, missing_memory_url]


@pytest.mark.parametrize("make", BAD_DATA, ids=lambda f: f.__name__)
def test_bad_data_is_rejected_naming_where(make, rows, model, cluster, env, tmp_path, reliability):
    """train (1PMB and 2PMB) and evaluate raise ``ValueError`` naming the file, partition, row and
    field; ``nsdist train`` exits 1 with that message on one line and leaves nothing half-made."""
    url, needles = make(tmp_path / "data", *rows)
    messages = []
    for call in (lambda: train(url, client=cluster, solver="1pmb", **TRAIN),
                 lambda: train(url, client=cluster, solver="2pmb", **TRAIN),
                 lambda: evaluate(model, url, client=cluster)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)       # "file has no rows; skipped"
            with pytest.raises(ValueError) as info:
                call()
        messages.append(str(info.value))
    out = tmp_path / "run"
    line = one_line_error(nsdist_cli("train", url, *TRAIN_ARGS, "--out", out, env=env), 1)
    reliability("bad input", make.__doc__, rejected_by=["train 1pmb", "train 2pmb", "evaluate", "nsdist train"],
                exit_code=1, message=line)
    for text in [*messages, line]:
        for needle in needles:
            assert needle in text, (needle, text)
    assert line.startswith("nsdist train: error: ")
    assert_nothing_half_made(out)


def test_bad_data_is_rejected_by_nsdist_evaluate(model, rows, env, tmp_path, reliability):
    """``nsdist evaluate`` on a partition with a NaN exits 1 naming it, and writes no evaluation."""
    url, needles = nan_feature(tmp_path / "data", *rows)
    model.save(str(tmp_path / "model"))
    line = one_line_error(nsdist_cli("evaluate", tmp_path / "model", url, "--out", tmp_path / "eval.json",
                                     env=env), 1)
    reliability("bad input", "NaN in a feature, to `nsdist evaluate`", exit_code=1, message=line)
    assert line.startswith("nsdist evaluate: error: ") and all(n in line for n in needles)
    assert not (tmp_path / "eval.json").exists()


def test_class_names_train_and_evaluate_with_positive(rows, cluster, env, tmp_path):
    """Labels stored as class names train with ``positive=``: the same model, bit for bit, as the same rows
    labelled +1/-1 (1PMB and 2PMB), the same measures from ``evaluate``, and ``nsdist train --positive`` /
    ``nsdist evaluate --positive`` do the same; naming the other class as positive trains another model."""
    X, y = rows
    plain = write_parquet(tmp_path / "plain", X, y, rows_per_file=500)
    named = write_parquet(tmp_path / "named", X, np.where(y > 0, "fraud", "ok"), rows_per_file=500)
    models = {}
    for solver in ("1pmb", "2pmb"):
        models[solver] = train(plain, client=cluster, solver=solver, **TRAIN)
        got = train(named, client=cluster, solver=solver, positive="fraud", **TRAIN)
        np.testing.assert_array_equal(got.coef, models[solver].coef)
        assert got.intercept == models[solver].intercept
    assert got.dataset_fingerprint != models["2pmb"].dataset_fingerprint    # the labels were read another way
    measures = evaluate(models["1pmb"], plain, client=cluster)
    assert evaluate(models["1pmb"], named, client=cluster, positive="fraud") == measures
    flipped = train(named, client=cluster, positive="ok", **TRAIN)
    assert not np.array_equal(flipped.coef, models["1pmb"].coef)
    # rows given beside the data (validation=, monitor=) are labelled as the data is read
    given = dict(validation=(X[:600], y[:600]), monitor=(X[600:1200], y[600:1200]))
    same = {key: (rows[0], np.where(rows[1] > 0, "fraud", "ok")) for key, rows in given.items()}
    a = train(plain, client=cluster, **given, **TRAIN)
    b = train(named, client=cluster, positive="fraud", **same, **TRAIN)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert [p.get("monitor") for p in a.history["curve"]] == [p.get("monitor") for p in b.history["curve"]]
    with pytest.raises(ValueError, match=r"validation y\[0\]: label is missing"):
        train(named, client=cluster, positive="fraud", validation=(X[:3], np.array(["", "ok", "fraud"])), **TRAIN)
    out = tmp_path / "run"
    proc = nsdist_cli("train", named, "--positive", "fraud", *TRAIN_ARGS, "--out", out, env=env)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_model(str(out / "model")).coef, models["1pmb"].coef)
    proc = nsdist_cli("evaluate", out / "model", named, "--positive", "fraud", "--out", tmp_path / "e.json", env=env)
    assert proc.returncode == 0, proc.stderr
    evaluated = json.loads((tmp_path / "e.json").read_text())
    assert {k: evaluated[k] for k in measures} == measures
    # the learning curve's rows (a sample of the evaluation data) are labelled as the data is read, K-fold
    # selection (this small set's default) and streamed alike: the curve of the same rows labelled +1/-1
    for how in ([], ["--set", "solver.validation_folds=1"]):
        runs = {name: tmp_path / f"curve-{name}-{len(how)}" for name in ("named", "plain")}
        for name, args in (("named", [named, "--positive", "fraud"]), ("plain", [plain])):
            proc = nsdist_cli("train", *args, *TRAIN_ARGS, *how, "--out", runs[name], env=env)
            assert proc.returncode == 0, proc.stderr
        got, want = (load_model(str(runs[name] / "model")).history for name in ("named", "plain"))
        key = "curve" if how else "validation_curve"
        assert [p.get("monitor") for p in got[key]] == [p.get("monitor") for p in want[key]]
        assert any(p.get("monitor") is not None for p in got[key])
        assert got.get("monitor_returned") == want.get("monitor_returned") and ("monitor_returned" in got) != bool(how)


def test_monitor_rows_of_one_class_are_refused_and_the_clis_curve_skips_them(rows, cluster, tmp_path, caplog):
    """``monitor=`` rows of one class (or fewer than Prec@k's k) have no measure: refused before training,
    naming it; the CLI's curve sample (whole partitions drawn by seed) of one class draws no line instead of
    failing the job."""
    from nsdist.data import Dataset
    from nsdist.run import curve_rows

    X, y = rows
    url = write_parquet(tmp_path / "d", X, y, rows_per_file=500)
    with pytest.raises(ValueError, match="monitor rows: only negative labels in 40 rows; the measure needs both"):
        train(url, client=cluster, monitor=(X[:40], -np.ones(40)), **TRAIN)
    with pytest.raises(ValueError, match=r"monitor rows: k = 50 is out of range: need 1 <= k <= n = 40"):
        train(url, client=cluster, monitor=(X[:40], y[:40]), measure="prec@k", k=50, **TRAIN)
    y_split = np.where(np.arange(len(y)) < 500, -1, y)      # the first file holds no positive
    named = write_parquet(tmp_path / "n", X, np.where(y_split > 0, "fraud", "ok"), rows_per_file=500)
    ds = Dataset.open(named, positive="fraud")
    drawn = {}
    for seed in range(20):
        with caplog.at_level(logging.INFO, logger="nsdist"):
            drawn[seed] = curve_rows(ds, 500, seed, {"measure": "pauc"})
    assert any(r is None for r in drawn.values()) and any(r is not None for r in drawn.values())
    assert "no line on the 500 rows drawn for it (output.curve_rows): only negative labels in 500 rows" in caplog.text
    with caplog.at_level(logging.INFO, logger="nsdist"):
        assert curve_rows(ds, 2000, 0, {"measure": "prec@k", "k": 5000}) is None
    assert "k = 5000 is out of range: need 1 <= k <= n = 2000" in caplog.text
    for r in drawn.values():
        if r is not None:                    # the labels as stored, which train reads with positive=
            assert set(r[1]) == {"fraud", "ok"} and r[0].shape == (500, X.shape[1])


def test_an_empty_partition_among_others_is_skipped_with_a_warning(rows, cluster, tmp_path):
    """An empty file is not an error: it is skipped, named in a warning, and the model is the one
    trained without it."""
    X, y = rows
    without = write_parquet(tmp_path / "without", X, y, rows_per_file=500)
    within = write_parquet(tmp_path / "with", X, y, rows_per_file=500)
    pq.write_table(pq.read_table(Path(within) / "part-00000.parquet").slice(0, 0),
                   Path(within) / "part-00002-empty.parquet")
    with pytest.warns(UserWarning, match="part-00002-empty.parquet: Parquet file has no rows; skipped"):
        skipped = train(within, client=cluster, solver="2pmb", **TRAIN)
    np.testing.assert_array_equal(skipped.coef, train(without, client=cluster, solver="2pmb", **TRAIN).coef)


def test_a_null_in_the_last_file_stops_the_job_before_its_first_step(rows, cluster, env, tmp_path):
    """Twelve files, one null feature in the last: ``nsdist.train`` and ``nsdist train`` fail as they open the
    dataset, naming the file, row and feature, before a step is taken (``on_step`` is never called), where a job
    of one explicit candidate (no holdout to gather, no moments: nothing read before the chain) used to stream
    the good files first; the command leaves no run directory."""
    X, y = rows
    root = Path(write_parquet(tmp_path / "data", X, y, rows_per_file=250))
    last = root / "part-00011.parquet"
    table = pq.read_table(last)
    f7 = table.column("f7").combine_chunks()
    table = table.set_column(table.schema.get_field_index("f7"), "f7",
                             pa.array(f7.to_numpy(), mask=np.arange(len(f7)) == 121))
    pq.write_table(table, last)
    steps = []
    message = "part-00011.parquet (partition 11): row 121: feature 'f7' is missing (null)"
    with pytest.raises(ValueError, match=re.escape(message)):
        train(str(root), client=cluster, on_step=steps.append, solver="1pmb", eta=1.0, standardize=False, **TRAIN)
    assert steps == []
    proc = nsdist_cli("train", root, "--out", tmp_path / "run", "--solver", "1pmb", "--eta", "1", "--standardize",
                      "false", *TRAIN_ARGS, env=env)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "run").exists()


def test_parquet_with_an_id_and_a_timestamp_trains_and_evaluates_with_drop(rows, cluster, env, tmp_path):
    """Letter's rows as users keep them: a transaction id and a text timestamp beside the features.  ``drop``
    leaves both out, so ``nsdist.train`` gives the model of ``feature_columns=`` naming the 16 features, bit for
    bit; ``nsdist train --drop`` records the key in its job file and ``nsdist evaluate --drop`` measures the
    model on the same files; without it the timestamp is refused, naming it."""
    X, y = rows
    root = tmp_path / "users"
    root.mkdir()
    for i, a in enumerate(range(0, len(y), 500)):
        pq.write_table(pa.table({"txn": np.arange(a, a + 500), "when": [f"t{j}" for j in range(a, a + 500)],
                                 **{f: X[a:a + 500, j] for j, f in enumerate(FEATURES)}, "label": y[a:a + 500]}),
                       root / f"part-{i:05d}.parquet")
    dropped = train(str(root), client=cluster, drop=["txn", "when"], **TRAIN)
    named = train(str(root), client=cluster, feature_columns=FEATURES, **TRAIN)
    assert list(dropped.feature_names) == FEATURES
    np.testing.assert_array_equal(dropped.coef, named.coef)
    assert dropped.intercept == named.intercept
    with pytest.raises(ValueError, match="'when'"):
        train(str(root), client=cluster, **TRAIN)
    proc = nsdist_cli("train", root, "--out", tmp_path / "run", "--drop", "txn", "--drop", "when", *TRAIN_ARGS,
                      env=env)
    assert proc.returncode == 0, proc.stderr
    assert "- txn" in (tmp_path / "run" / "job.yaml").read_text()
    proc = nsdist_cli("evaluate", tmp_path / "run", root, "--drop", "txn", "--drop", "when", "--out",
                      tmp_path / "ev.json", env=env)
    assert proc.returncode == 0, proc.stderr
    measured = json.loads((tmp_path / "ev.json").read_text())
    expected = evaluate(load_model(str(tmp_path / "run" / "model")), str(root), client=cluster, drop=["txn", "when"])
    assert measured["auc"] == expected["auc"] and measured["n_rows"] == len(y)


def test_train_names_the_columns_it_took_for_features(rows, env, tmp_path):
    """An integer id beside the features is a number, so it trains as a feature unless dropped: ``nsdist train``
    names the columns it took (every one but the label), in its summary, its log and ``metrics.json``; with
    ``--drop txn`` the id is not among them; features named by the job are not listed (nothing was guessed)."""
    X, y = rows
    root = tmp_path / "users"
    root.mkdir()
    for i, a in enumerate(range(0, 2000, 500)):
        pq.write_table(pa.table({"txn": np.arange(a, a + 500), **{f: X[a:a + 500, j] for j, f in enumerate(FEATURES)},
                                 "label": y[a:a + 500]}), root / f"part-{i:05d}.parquet")
    listed = "txn, f0, f1, f2, f3, f4, f5, f6, ... (17 in all)"
    for name, extra, said, inferred in (
            ("all", [], f"features: {listed} (every column but the label;", ["txn"] + FEATURES),
            ("dropped", ["--drop", "txn"], "features: f0, f1, f2, f3, f4, f5, f6, f7, ... (16 in all) (every column "
                                           "but the label and the dropped ones;", FEATURES),
            ("named", ["--set", f"dataset.feature_columns={FEATURES}"], None, None)):
        proc = nsdist_cli("train", root, "--out", tmp_path / name, *extra, *TRAIN_ARGS, env=env)
        assert proc.returncode == 0, proc.stderr
        lines = [line for line in proc.stdout.splitlines() if line.startswith("features:")]
        if said is None:
            assert lines == []
        else:
            assert len(lines) == 1 and lines[0].startswith(said), lines
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        assert metrics["dataset"]["inferred_features"] == inferred
        assert load_model(str(tmp_path / name / "model")).feature_names == (inferred or FEATURES)
        log = (tmp_path / name / "run.log").read_text()
        assert ("features (every column but the label and drop): " in log) == (inferred is not None)


def _plain_parquet(root: Path, X: np.ndarray, y: np.ndarray) -> str:
    """Files whose size depends only on the number of rows (no compression, dictionary, statistics)."""
    root.mkdir()
    for i in range(0, len(y), 500):
        table = pa.table({**{f: X[i:i + 500, j] for j, f in enumerate(FEATURES)}, "label": y[i:i + 500]})
        pq.write_table(table, root / f"part-{i // 500:05d}.parquet", compression="none", use_dictionary=False,
                       write_statistics=False)
    return str(root)


def test_a_failed_job_leaves_nothing_on_the_cluster_and_a_fixed_copy_trains_on_its_own_rows(
        rows, cluster, tmp_path):
    """After a job fails on a NaN, no task of it is left on the cluster (no partition held in a
    worker's memory), and a corrected copy elsewhere — files of the same names and sizes, so the
    same dataset fingerprint — trains on its own rows, exactly as the in-memory solver does."""
    X, y = rows
    broken = X.copy()
    broken[1017, 3] = np.nan
    bad, fixed = _plain_parquet(tmp_path / "bad", broken, y), _plain_parquet(tmp_path / "fixed", X, y)
    params = dict(measure="pauc", solver="1pmb", shuffle=False, buffer_size=500, eta=0.05, **TRAIN)
    with pytest.raises(ValueError, match="bad/part-00002.parquet"):
        train(bad, client=cluster, **params)
    assert _nsdist_tasks(cluster) == []
    assert open_dataset(bad).fingerprint == open_dataset(fixed).fingerprint
    got = train(fixed, client=cluster, **params)
    np.testing.assert_array_equal(got.coef, NonDecomposableClassifier(**params).fit(X, y).coef_.ravel())


def _nsdist_tasks(client) -> list[str]:
    """The keys of the scheduler's tasks that nsdist made, after up to 10 s for released ones to go."""
    deadline = time.monotonic() + 10
    while (left := [k for k in client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))
                    if str(k).startswith("nsdist-")]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_failed_k_fold_job_leaves_nothing_on_the_cluster_while_its_error_is_held(good, cluster):
    """K-fold selection scatters every row to the workers: a job whose fold fits fail (Prec@k's k above the
    rows) cancels its fold tasks and drops its rows, even while the caller still holds the error and its
    traceback; its rows were under keys of its own, never a user's ``X``."""
    mine = cluster.scatter({"X": np.arange(3.0)})["X"]
    with pytest.raises(ValueError, match="k = 3001 is out of range") as info:
        train(good, client=cluster, measure="prec@k", k=3001, **TRAIN)
    assert any("nsdist/engine/folds.py" in str(entry.path) for entry in info.traceback)   # raised by a fold fit
    assert _nsdist_tasks(cluster) == []
    np.testing.assert_array_equal(mine.result(), np.arange(3.0))


# ------------------------------------------------------------------ bad parameters
BAD_PARAMETERS = [  # estimator parameters, nsdist train options, API message, CLI exit code, CLI message
    pytest.param(dict(beta=0.0), ["--beta", "0"], "beta must be a number in (0, 1], got 0.0", 2,
                 "measure.beta: expected a value > 0", id="beta=0"),
    pytest.param(dict(beta=1.5), ["--beta", "1.5"], "beta must be a number in (0, 1], got 1.5", 2,
                 "measure.beta: expected a value <= 1.0", id="beta=1.5"),
    pytest.param(dict(measure="prec@k", k=0), ["--measure", "prec@k", "--k", "0"], "k = 0 is out of range", 2,
                 "measure.k: expected a value >= 1", id="k=0"),
    pytest.param(dict(measure="prec@k", k=1.5), ["--measure", "prec@k", "--k", "1.5"],
                 "k must be an int >= 1 or a float in (0, 1], got 1.5", 2, "measure.k: expected", id="k=1.5"),
    pytest.param(dict(measure="prec@k", k=3001), ["--measure", "prec@k", "--k", "3001"],
                 "k = 3001 is out of range: need 1 <= k <= n = 3000", 1,
                 "k = 3001 is out of range: need 1 <= k <= n = 3000", id="k>n"),
    pytest.param(dict(buffer_size=1), ["--buffer-size", "1"], "buffer_size must be an int >= 2, got 1", 2,
                 "solver.buffer_size: expected a value >= 2", id="buffer_size=1"),
    pytest.param(dict(measure="pacu"), ["--measure", "pacu"], "unknown measure 'pacu'", 2,
                 "did you mean 'pauc'?", id="measure=pacu"),
    pytest.param(dict(solver="sgd"), ["--solver", "sgd"], "unknown solver 'sgd'", 2,
                 "solver.name: expected one of", id="solver=sgd"),
]


@pytest.mark.parametrize("params, options, api_message, code, cli_message", BAD_PARAMETERS)
def test_bad_parameters_are_rejected_before_training(params, options, api_message, code, cli_message, good,
                                                     cluster, env, tmp_path, reliability):
    """beta outside (0, 1], k out of range, buffer_size < 2, an unknown measure or solver: the API
    raises ``ValueError`` saying which value and why; ``nsdist train`` exits 2 (a bad job, nothing
    written) or 1 (k against the data's row count) with the same on one line."""
    calls: list[str] = []
    with pytest.raises(ValueError) as info:
        train(good, client=cluster, on_step=lambda p: calls.append(p), **params, **TRAIN)
    assert api_message in str(info.value) and calls == []
    out = tmp_path / "run"
    line = one_line_error(nsdist_cli("train", good, *options, *TRAIN_ARGS, "--out", out, env=env), code)
    reliability("bad input", "parameter " + ", ".join(f"{k}={v!r}" for k, v in params.items()), exit_code=code,
                message=line)
    assert cli_message in line
    if code == 2:
        assert not out.exists()
    assert_nothing_half_made(out)


def test_unreachable_scheduler_fails_with_its_address(good, tmp_path, reliability):
    """A scheduler address nothing listens on: the job fails within the connect timeout, naming it."""
    address = f"tcp://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    line = one_line_error(nsdist_cli("train", good, *TRAIN_ARGS, "--scheduler", address, "--out", tmp_path / "run",
                                     env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}), 1)
    reliability("bad input", "a scheduler address nothing listens on", exit_code=1, message=line)
    assert address in line and time.monotonic() - t0 < 60
    assert_nothing_half_made(tmp_path / "run")


# -------------------------------------------------------------------- bad models
def other_schema(path: Path, model: LinearModel) -> list[str]:
    """a model whose feature names are not the data's"""
    LinearModel(coef=model.coef, intercept=0.0, measure="pauc", feature_names=[f"g{j}" for j in range(16)]
                ).save(str(path))
    return ["feature schema of dataset", "does not match the model: missing 'g0', 'g1'", "unexpected 'f0'"]


def other_order(path: Path, model: LinearModel) -> list[str]:
    """a model whose features are the data's in another order"""
    LinearModel(coef=model.coef, intercept=0.0, measure="pauc", feature_names=FEATURES[::-1]).save(str(path))
    return ["feature order of dataset", "differs from the model's at position 0: 'f0' where the model has 'f15'"]


def truncated_json(path: Path, model: LinearModel) -> list[str]:
    """model.json cut short"""
    model.save(str(path))
    meta = path / "model.json"
    meta.write_bytes(meta.read_bytes()[:100])
    return [f"{path}/model.json is truncated or not valid JSON"]


def flipped_weights(path: Path, model: LinearModel) -> list[str]:
    """one byte of the weights file changed"""
    model.save(str(path))
    (weights,) = path.glob("weights-*.npy")
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40
    weights.write_bytes(bytes(data))
    return [weights.name, "checksum mismatch — the weights file is truncated or was modified"]


def missing_weights(path: Path, model: LinearModel) -> list[str]:
    """the weights file named by model.json deleted"""
    model.save(str(path))
    (weights,) = path.glob("weights-*.npy")
    weights.unlink()
    return [f"weights file '{weights.name}' named by model.json is missing"]


BAD_MODELS = [other_schema, other_order, truncated_json, flipped_weights, missing_weights]


@pytest.mark.parametrize("make", BAD_MODELS, ids=lambda f: f.__name__)
def test_bad_model_is_refused(make, model, good, cluster, env, tmp_path, reliability):
    """``evaluate`` raises ``ValueError`` saying what is wrong with the model; ``nsdist evaluate``
    exits 1 with that line and writes no evaluation."""
    path = tmp_path / "model"
    needles = make(path, model)
    with pytest.raises(ValueError) as info:
        evaluate(str(path), good, client=cluster)
    out = tmp_path / "eval.json"
    line = one_line_error(nsdist_cli("evaluate", path, good, "--out", out, env=env), 1)
    reliability("bad input", make.__doc__, exit_code=1, message=line)
    for needle in needles:
        assert needle in str(info.value) and needle in line, needle
    assert not out.exists()


# ------------------------------------------------------------------------ safety
class _Payload:
    """Unpickling this runs ``open(marker, "w")``: proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_model_carrying_a_pickle_is_refused_unopened(model, tmp_path, reliability):
    """A weights file swapped for an object array (a pickle), its checksum updated in model.json:
    loading refuses it as not a plain array, and the pickle never runs."""
    path, marker = tmp_path / "model", tmp_path / "pwned"
    model.save(str(path))
    (weights,) = path.glob("weights-*.npy")
    buf = io.BytesIO()
    np.save(buf, np.array([_Payload(marker)] * 17, dtype=object), allow_pickle=True)
    weights.write_bytes(buf.getvalue())
    meta = json.loads((path / "model.json").read_text())
    meta["weights"]["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="not a plain .npy array") as info:
        load_model(str(path))
    line = one_line_error(nsdist_cli("predict", path, tmp_path / "in.csv", tmp_path / "out.csv"), 1)
    reliability("safety", "a model whose weights file is a pickle", rejected=True, message=str(info.value))
    assert "not a plain .npy array" in line
    assert not marker.exists()


def test_models_and_checkpoints_are_plain_data(good, rows, cluster, tmp_path, reliability):
    """What a job writes loads without pickle: the weights with ``allow_pickle=False``, the rest as JSON."""
    ckpt = tmp_path / "checkpoint.json"
    trained = train(good, client=cluster, solver="2pmb", checkpoint=str(ckpt), checkpoint_every=1,
                    validation_folds=1, **TRAIN)                    # streamed: one holdout
    trained.save(str(tmp_path / "model"))
    meta = json.loads((tmp_path / "model" / "model.json").read_text())
    vec = np.load(tmp_path / "model" / meta["weights"]["file"], allow_pickle=False)
    np.testing.assert_array_equal(vec, np.append(trained.coef, trained.intercept))
    checkpoint = json.loads(ckpt.read_text())
    assert checkpoint["position"] == checkpoint["n_steps"] == 6
    n_pos = int((rows[1] > 0).sum())
    held_out = holdout_sizes(n_pos, rows[1].shape[0] - n_pos, 0.1, 200_000)[0]     # never trained on
    assert len(checkpoint["reservoir"]["X"]) == checkpoint["reservoir"]["n_rare"] == n_pos - held_out
    reliability("safety", "models and checkpoints are plain data (npy without pickle, JSON)", rejected=False)


def test_a_job_file_cannot_run_code(good, tmp_path, reliability):
    """YAML tags that would call Python (``!!python/object/apply:os.system``) in a job file or a
    ``--set`` value are refused as invalid YAML (exit 2), and nothing runs."""
    marker = tmp_path / "pwned"
    job = tmp_path / "job.yaml"
    job.write_text(f"dataset: {{url: {good}}}\nsolver: !!python/object/apply:os.system [\"touch {marker}\"]\n")
    line = one_line_error(nsdist_cli("train", job), 2)
    assert f"{job}: invalid YAML at line 2" in line
    override = f"solver.eta=!!python/object/apply:os.system [\"touch {marker}\"]"
    line2 = one_line_error(nsdist_cli("train", good, "--set", override, "--out", tmp_path / "run"), 2)
    reliability("safety", "a job file / --set value with a !!python/object/apply tag", rejected=True, message=line)
    assert "the value is not valid YAML" in line2
    assert not marker.exists() and not (tmp_path / "run").exists()
