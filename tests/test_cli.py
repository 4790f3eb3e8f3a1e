"""The ``nsdist`` command line end to end, in subprocesses, on the bundled Letter data.

One small ``LocalCluster`` (started here) serves the module's commands through
``DASK_SCHEDULER_ADDRESS``; the demo runs on its own embedded cluster, as
``make demo`` does.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import LocalCluster
from PIL import Image

from nsdist import metrics
from nsdist.cli import build_parser
from nsdist.run import holdout_split, load_rows
from nsdist.data import Dataset
from nsdist.engine.chain import ChainProgress
from nsdist.model import load_model
from nsdist.progress import TrainingBar, progress_text
from nsdist.report import measures_of

REPO = Path(__file__).resolve().parents[1]
LETTER = REPO / "data" / "letter" / "letter-recognition.data"
MEASURES = ("auc", "partial_auc", "precision_at_k", "prbep", "f1_score")


def nsdist(*args, env: dict | None = None, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m nsdist ARGS`` (stderr is not a terminal: no progress bar)."""
    return subprocess.run([sys.executable, "-m", "nsdist", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr
    return proc


def one_line_error(proc: subprocess.CompletedProcess, code: int = 1) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def scheduler():
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address="127.0.0.1:0") as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def env(scheduler):
    return {"DASK_SCHEDULER_ADDRESS": scheduler}


@pytest.fixture(scope="module")
def run(tmp_path_factory, env):
    """ingest -> train -> evaluate -> predict, as a user would type them."""
    tmp = tmp_path_factory.mktemp("cli")
    data, out = tmp / "data", tmp / "run"
    steps = {"ingest": nsdist("ingest", LETTER, data, "--format", "csv", "--label-column", 0, "--positive", "N",
                              "--rows-per-partition", 1000, env=env)}
    steps["train"] = nsdist("train", data, "--measure", "pauc", "--beta", 0.1, "--solver", "2pmb",
                            "--n-passes", 2, "--holdout", 0.3, "--checkpoint-every", 5, "--out", out,
                            "--set", "solver.validation_folds=1", env=env)      # streamed: one holdout
    steps["evaluate"] = nsdist("evaluate", out, data, "--out", tmp / "eval.json", env=env)
    X, y = load_rows(Dataset.open(data), 700)
    frame = pd.DataFrame(X, columns=[f"col{j}" for j in range(1, 17)])
    frame.insert(0, "id", np.arange(len(y)))
    frame["label"] = y
    frame.to_csv(tmp / "rows.csv", index=False)
    steps["predict"] = nsdist("predict", out, tmp / "rows.csv", tmp / "scores.parquet", "--keep", "id", env=env)
    return {"tmp": tmp, "data": data, "out": out, "frame": frame, **steps}


def test_end_to_end_exit_codes_and_files(run):
    for step in ("ingest", "train", "evaluate", "predict"):
        ok(run[step])
    assert "20000 rows (783 positive), 16 features, 20 partitions" in run["ingest"].stdout
    assert "Dask scheduler tcp://" in run["train"].stdout and "dashboard" in run["train"].stdout
    names = {p.name for p in run["out"].iterdir()}
    assert {"model", "job.yaml", "metrics.json", "learning_curve.png", "run.log", "checkpoint.json"} <= names
    assert not [n for n in names if ".tmp-" in n]
    assert "pAUC(0,0.1)" in run["train"].stdout and "run directory" in run["train"].stdout


def test_metrics_json_equals_the_in_memory_measures(run):
    m = json.loads((run["out"] / "metrics.json").read_text())
    assert m["measure"]["name"] == "pauc" and m["measure"]["value"] == m["evaluation"]["partial_auc"]
    assert m["evaluation"]["data"] == "holdout" and m["evaluation"]["n_rows"] == 6000
    assert m["dataset"]["rows"] == 14000 and m["dataset"]["partitions"] == 14 and m["dataset"]["features"] == 16
    assert m["training"]["rows_seen"] > 0 and m["training"]["rows_per_second"] > 0 and m["training"]["passes"] == 2
    assert m["model"]["params"]["solver"] == "2pmb"
    model = load_model(str(run["out"] / "model"))
    _, test = holdout_split(Dataset.open(str(run["data"])), 0.3)
    X, y = load_rows(test)
    expected = measures_of(y, model.decision_function(X), beta=0.1, k=m["evaluation"]["k"])
    assert {k: m["evaluation"][k] for k in MEASURES} == {k: expected[k] for k in MEASURES}


def test_evaluate_prints_and_writes_every_measure(run):
    result = json.loads((run["tmp"] / "eval.json").read_text())
    X, y = load_rows(Dataset.open(str(run["data"])))
    model = load_model(str(run["out"] / "model"))
    assert result["n_rows"] == 20000 and result["n_positives"] == 783
    assert result["partial_auc"] == metrics.partial_auc(y, model.decision_function(X), 0.1)
    for title in ("pAUC(0,0.1)", "AUC", "PRBEP", "F1"):
        assert title in run["evaluate"].stdout


def test_predict_writes_scores_labels_and_kept_columns(run):
    scores = pd.read_parquet(run["tmp"] / "scores.parquet")
    frame = run["frame"]
    model = load_model(str(run["out"] / "model"))
    assert list(scores.columns) == ["id", "label", "score", "prediction"]
    np.testing.assert_array_equal(scores["id"], frame["id"])
    np.testing.assert_array_equal(scores["label"], frame["label"])
    expected = model.decision_function(frame[model.feature_names].to_numpy())
    # the same w.x + b summed in another order: equal to rounding, relative to the scores' scale
    np.testing.assert_allclose(scores["score"], expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_array_equal(scores["prediction"], np.where(scores["score"] > 0, 1, -1))


def test_predict_reads_a_parquet_dataset(run, env):
    out = run["tmp"] / "all.parquet"
    ok(nsdist("predict", run["out"], run["data"], out, env=env))
    scores = pd.read_parquet(out)
    X, y = load_rows(Dataset.open(str(run["data"])))
    assert list(scores.columns) == ["label", "score", "prediction"] and len(scores) == 20000
    np.testing.assert_array_equal(scores["label"], y)
    expected = load_model(str(run["out"] / "model")).decision_function(X)   # summed in another order: to rounding
    np.testing.assert_allclose(scores["score"], expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_predict_scores_a_file_in_batches_of_a_bounded_size(run, tmp_path, monkeypatch):
    """Scoring streams: one row group of 5,000 rows is decoded in batches of SCAN_BYTES as float64, not whole."""
    from nsdist.data import scoring

    X, y = load_rows(Dataset.open(str(run["data"])), 5000)
    names = [f"col{j}" for j in range(1, 17)]
    pq.write_table(pa.table({**{n: X[:, j] for j, n in enumerate(names)}, "label": y}), tmp_path / "one.parquet",
                   row_group_size=5000)
    monkeypatch.setattr(scoring, "SCAN_BYTES", 8 * 17 * 1500)           # 1,500 rows of the 17 columns
    model = load_model(str(run["out"] / "model"))
    batches = list(scoring.table_rows(model, str(tmp_path / "one.parquet")))
    assert max(len(s) for _, s in batches) == 1500 and sum(len(s) for _, s in batches) == 5000
    scores = np.concatenate([s for _, s in batches])
    np.testing.assert_array_equal(np.concatenate([c.column("label").to_numpy() for c, _ in batches]), y)
    expected = model.decision_function(X)
    np.testing.assert_allclose(scores, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_predict_streams_its_output_and_a_late_bad_row_leaves_the_old_output(run, tmp_path):
    """The output is written as the rows are scored, into a sibling published at the end: an svmlight line
    that fails after 30,000 rows were written leaves the previous output as it was, and no sibling behind."""
    from nsdist.data.scoring import write_scores

    model = load_model(str(run["out"] / "model"))
    X, y = load_rows(Dataset.open(str(run["data"])), 20000)
    lines = [f"{int(label)} " + " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row)) for row, label in zip(X, y)]
    good, bad = tmp_path / "rows.svm", tmp_path / "bad.svm"
    good.write_text("\n".join(lines) + "\n")
    bad.write_text("\n".join(lines + lines[:10000] + ["1 3:oops"]) + "\n")
    out = tmp_path / "scores.parquet"
    assert write_scores(model, str(good), str(out)) == 20000
    before = out.read_bytes()
    scores = pq.read_table(out)
    expected = model.decision_function(X)      # CSR rows: summed in another order, equal to rounding
    np.testing.assert_allclose(scores["score"].to_numpy(), expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    with pytest.raises(ValueError, match="line 30001"):
        write_scores(model, str(bad), str(out))
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == \
        ["bad.svm", "rows.svm", "scores.parquet"]


def test_predict_to_csv(run, env):
    out = run["tmp"] / "scores.csv"
    ok(nsdist("predict", run["out"] / "model", run["tmp"] / "rows.csv", out, "--keep", "id", env=env))
    assert list(pd.read_csv(out).columns) == ["id", "label", "score", "prediction"]


def test_predict_refuses_a_schema_mismatch_naming_the_difference(run, env):
    bad = run["frame"].drop(columns="id").rename(columns={"col3": "colour"})
    bad.to_csv(run["tmp"] / "bad.csv", index=False)
    line = one_line_error(nsdist("predict", run["out"], run["tmp"] / "bad.csv", run["tmp"] / "bad.parquet",
                                 env=env))
    assert "missing 'col3'" in line and "unexpected 'colour'" in line
    assert not (run["tmp"] / "bad.parquet").exists()
    line = one_line_error(nsdist("predict", run["out"], run["tmp"] / "rows.csv", run["tmp"] / "bad.parquet",
                                 env=env))
    assert "unexpected 'id'" in line and "--keep" in line


def test_model_round_trip(run, tmp_path):
    model = load_model(str(run["out"] / "model"))
    meta = json.loads((run["out"] / "model" / "model.json").read_text())
    assert meta["measure"] == "pauc" and meta["feature_names"] == [f"col{j}" for j in range(1, 17)]
    weights = np.load(run["out"] / "model" / meta["weights"]["file"], allow_pickle=False)
    np.testing.assert_array_equal(weights, np.append(model.coef, model.intercept))
    again = load_model(model.save(str(tmp_path / "copy")))
    np.testing.assert_array_equal(again.coef, model.coef)
    assert again.intercept == model.intercept and again.params == model.params
    assert again.history == model.history and again.dataset_fingerprint == model.dataset_fingerprint


def test_learning_curve_png_holds_the_history(run):
    png = run["out"] / "learning_curve.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    image = Image.open(png)
    assert image.size[0] > 300 and image.size[1] > 300
    plotted = json.loads(image.text["nsdist-curve"])
    history = load_model(str(run["out"] / "model")).history
    curve, checks = history["curve"], history["validation_curve"]
    assert len(curve) == 2 * 14                      # one point per partition and pass
    assert plotted["time"] == [p["time"] for p in curve]
    # the measure: the selection's best on the validation rows, at the partitions its checks followed (the fit
    # keeps no test rows: no leak); below it, a population's live candidates (not its mixed surrogates' loss)
    assert plotted["measure"] == [p.get("measure") for p in curve]
    assert [v for v in plotted["measure"] if v is not None] == [c["best"] for c in checks]
    assert "loss" not in plotted and [a for a in plotted["alive"] if a is not None] == [c["alive"] for c in checks]
    assert [i for i, a in enumerate(plotted["alive"]) if a is not None] == \
        [i for i, v in enumerate(plotted["measure"]) if v is not None]
    assert all(0 <= v <= 1 for v in plotted["measure"] if v is not None)
    # the paper's line: the measure on the evaluation rows (6000 held-out rows, within output.curve_rows) of the
    # best snapshot at each check; the last one is the returned model, whose pAUC metrics.json reports
    metrics = json.loads((run["out"] / "metrics.json").read_text())
    assert history["monitor"] == {"rows": 6000, "positives": metrics["evaluation"]["n_positives"]}
    assert plotted["monitor"] == [p.get("monitor") for p in curve]
    assert [i for i, v in enumerate(plotted["monitor"]) if v is not None] == \
        [i for i, v in enumerate(plotted["measure"]) if v is not None]
    assert [v for v in plotted["monitor"] if v is not None][-1] == metrics["evaluation"]["partial_auc"]


def test_the_curve_shows_one_candidates_loss_and_a_populations_live_candidates():
    """``curve_png``'s bottom panel: the surrogate loss of a run with one candidate; the live candidates at each
    check of a population, whose per-epoch loss averages different surrogates (diverged ones too: 1e277 seen)."""
    from nsdist.report import curve_png

    curve = [{"time": 0.1 * i, "pass": i // 3, "loss": 1e277 if i == 4 else 1.0 / (i + 1), "rows_seen": 100 * i}
             for i in range(6)]
    for i, alive in ((2, 11), (5, 4)):
        curve[i].update(measure=0.5 + 0.01 * i, alive=alive)
    one = json.loads(Image.open(io.BytesIO(curve_png({"curve": curve}, measure="m", title="t"))).text["nsdist-curve"])
    assert one["loss"] == [p["loss"] for p in curve] and "alive" not in one
    many = {"curve": curve, "selection": [{"name": "a"}, {"name": "b"}]}
    two = json.loads(Image.open(io.BytesIO(curve_png(many, measure="m", title="t"))).text["nsdist-curve"])
    assert two["alive"] == [None, None, 11, None, None, 4] and "loss" not in two
    assert two["measure"] == [None, None, 0.52, None, None, 0.55]


def test_run_log_tells_what_happened(run):
    log = (run["out"] / "run.log").read_text()
    for needle in ("cluster: Dask scheduler", "training data:", "14 partitions", "holdout data:",
                   "2PMB reservoir", "pass 1/2 done", "pass 2/2 done", "checkpoints:", "trained in",
                   "skipped", "model saved", "metrics on the holdout data", "learning curve:"):
        assert needle in log, needle
    # a population's checks say how its selection stands; its passes do not print the mean of its candidates'
    # different surrogate losses
    checks = load_model(str(run["out"] / "model")).history["validation_curve"]
    assert f"best pauc {checks[-1]['best']:.4f}, {checks[-1]['alive']} candidate(s) alive" in log
    assert not [line for line in log.splitlines() if " done at " in line and "loss" in line]


def test_resume_continues_from_the_checkpoint(run, env):
    checkpoint = json.loads((run["out"] / "checkpoint.json").read_text())
    assert checkpoint["position"] == checkpoint["n_steps"] == 28
    before = json.loads((run["out"] / "model" / "model.json").read_text())
    ok(nsdist("train", run["out"] / "job.yaml", "--resume", env=env))
    after = json.loads((run["out"] / "model" / "model.json").read_text())
    assert after["weights"] == before["weights"]
    assert after["history"]["curve"] == before["history"]["curve"] and len(before["history"]["curve"]) == 28
    assert "resuming a training job" in (run["out"] / "run.log").read_text()
    assert "pass 1/2 done" in (run["out"] / "run.log").read_text()       # the earlier run's lines are kept


def test_job_file_errors_one_line_each(tmp_path, run):
    job = tmp_path / "bad.yaml"
    job.write_text(f"dataset: {{url: {run['data']}}}\nsolver: {{etta: 2, n_passes: many}}\n")
    proc = nsdist("train", job)
    assert proc.returncode == 2
    from nsdist.jobs import SolverSpec

    assert sorted(proc.stderr.splitlines()) == [
        f"nsdist train: {job}: solver.etta: unknown key; did you mean 'eta'? (valid keys: "
        f"{', '.join(SolverSpec.model_fields)})",
        f"nsdist train: {job}: solver.n_passes: expected an integer, got 'many'"]


@pytest.mark.parametrize("args, code, needle", [
    (["train", "{data}", "--set", "solver.eta=fast"], 2, "command line: solver.eta: expected a number, got 'fast'"),
    (["train", "{data}", "--set", "solver.eta"], 2, "expected KEY.PATH=VALUE"),
    (["train", "{data}", "--beta", "2"], 2, "measure.beta: expected a value <= 1.0, got '2'"),
    (["train", "{data}", "--n-passes", "two"], 2, "solver.n_passes: expected an integer, got 'two'"),
    (["train", "{data}", "--solver", "sgd"], 2, "did you mean"),
    (["train", "{tmp}/nowhere", "--out", "{tmp}/x"], 1, "no such file or directory"),
    (["train", "{tmp}/nowhere.yaml"], 1, "no such file or directory"),
    (["evaluate", "{out}", "{tmp}/nowhere"], 1, "no such file or directory"),
    (["evaluate", "{tmp}", "{data}"], 1, "not an nsdist model directory"),
    (["predict", "{out}", "{tmp}/nowhere.csv", "{tmp}/o.csv"], 1, "no such file or directory"),
    (["ingest", "{tmp}/nowhere.csv", "{tmp}/d"], 1, "no such file"),
    (["ingest", str(LETTER), "{tmp}/d", "--format", "csv", "--label-column", "99"], 1, "out of range"),
    (["bench", "nope"], 1, "no bench script 'nope'"),
    (["retrain", "job.yaml"], 1, "retrain"),
    (["frobnicate"], 2, "invalid choice"),
])
def test_errors_are_one_line(run, env, args, code, needle):
    filled = [a.format(data=run["data"], out=run["out"], tmp=run["tmp"]) for a in args]
    assert needle in one_line_error(nsdist(*filled, env=env), code)


def test_debug_shows_the_traceback(run, env):
    proc = nsdist("--debug", "evaluate", run["out"], run["tmp"] / "nowhere", env=env)
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_progress_bar_shows_pass_partition_rate_and_loss_only_on_a_terminal():
    reports = [ChainProgress(step=i, n_steps=4, pass_index=(i - 1) // 2, partition=i % 2, rows_seen=500 * i,
                             loss=0.25, elapsed=0.5 * i, state=None) for i in range(1, 5)]
    drawn, quiet = io.StringIO(), io.StringIO()
    for stream, enabled in ((drawn, True), (quiet, None)):       # a StringIO is not a terminal
        with TrainingBar(2, file=stream, enabled=enabled) as bar:
            for report in reports:
                bar(report)
    assert "4/4" in drawn.getvalue() and "pass 2/2, partition 0, 1,000 rows/s, loss 0.25" in drawn.getvalue()
    assert quiet.getvalue() == ""
    selecting = io.StringIO()        # a population: its candidates before the first check, then the best so far
    with TrainingBar(2, file=selecting, enabled=True) as bar:
        for report, best, alive in zip(reports[:2], (None, 0.625), (30, 10)):
            report.loss, report.best, report.alive = float("nan"), best, alive
            bar(report)
    assert "best on validation 0.625, 10 alive" in selecting.getvalue() and "loss" not in selecting.getvalue()
    reports[0].best = None                # (the bar draws its last report)
    assert progress_text(reports[0]) == "30 candidates, first check to come"
    folds = io.StringIO()            # K-fold selection: a tick per check of the folds in lockstep
    with TrainingBar("?", file=folds, enabled=True) as bar:
        for check, best, alive in ((1, 0.5, 10), (2, 0.75, 4), (3, 0.8125, 2)):
            p = ChainProgress(check, 40, 0, 0, 0, float("nan"), 0.1 * check, unit="check")
            p.best, p.alive = best, alive
            bar(p)
    assert "K-fold selection" in folds.getvalue() and "3/40" in folds.getvalue()
    assert "best on validation 0.8125, 2 alive" in folds.getvalue() and "pass" not in folds.getvalue()


def test_ingest_progress_bar_draws_each_stage_only_on_a_terminal():
    from nsdist.data.ingestion import IngestProgress
    from nsdist.progress import IngestBar

    reports = ([IngestProgress("read", 1, i, None, 6000 * i) for i in (1, 2, 3)]
               + [IngestProgress("shuffle", 2, i, 3, 6000 * i) for i in (1, 2, 3)]
               + [IngestProgress("write", 3, i, 8, 2500 * i) for i in range(1, 9)])
    drawn, quiet = io.StringIO(), io.StringIO()
    for stream, enabled in ((drawn, True), (quiet, None)):       # a StringIO is not a terminal
        with IngestBar(file=stream, enabled=enabled) as bar:
            for report in reports:
                bar(report)
    text = drawn.getvalue()
    assert "ingest 1/3: reading" in text and "3chunk" in text.replace(" ", "") and "18,000 rows" in text
    assert "ingest 2/3: shuffling" in text and "3/3" in text
    assert "ingest 3/3: writing" in text and "8/8" in text and "20,000 rows" in text
    assert text.index("1/3: reading") < text.index("2/3: shuffling") < text.index("3/3: writing")
    assert quiet.getvalue() == ""


def test_predict_progress_bar_counts_the_files_scored_only_on_a_terminal():
    from nsdist.progress import FileBar

    drawn, quiet = io.StringIO(), io.StringIO()
    for stream, enabled in ((drawn, True), (quiet, None)):       # a StringIO is not a terminal
        with FileBar(file=stream, enabled=enabled) as bar:
            for done in range(1, 8):
                bar(done, 7, 3000 * done)
    text = drawn.getvalue()
    assert "scoring" in text and "7/7" in text and "21,000 rows" in text and quiet.getvalue() == ""


def test_every_subcommand_help_explains_every_option_with_an_example():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == {"ingest", "train", "evaluate", "predict", "retrain", "bench"}
    for name, command in sub.choices.items():
        text = command.format_help()
        assert "examples:\n  nsdist " + name in text, name
        for action in command._actions:
            assert action.help, (name, action.dest)
            for option in action.option_strings:
                assert option in text, (name, option)
            if not action.option_strings:
                assert (action.metavar or action.dest) in text, (name, action.dest)


def test_console_script_and_module_entry_points():
    script = Path(sys.executable).with_name("nsdist")
    proc = ok(subprocess.run([str(script), "train", "--help"], capture_output=True, text=True, timeout=60))
    assert "--checkpoint-every" in proc.stdout and "--resume" in proc.stdout and "--scheduler" in proc.stdout
    assert "nsdist 0." in ok(nsdist("--version")).stdout
    assert "losses" in ok(nsdist("bench")).stdout


def test_demo_runs_and_writes_its_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "pipelines.demo", "--out", str(out), "--set", "solver.n_passes=1",
                           "--set", "cluster.n_workers=1"], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "embedded LocalCluster" in proc.stdout and "dashboard: http" in proc.stdout
    for row in ("nsdist 2PMB", "LogisticRegression ", "LogisticRegression balanced", "pAUC(0,0.1)"):
        assert row in proc.stdout
    for name in ("model/model.json", "metrics.json", "learning_curve.png", "run.log", "comparison.json",
                 "data/letter/_nsdist.json"):
        assert (out / name).is_file(), name
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["test_rows"] == 6000 and len(comparison["models"]) == 3
    assert all(0 <= r["partial_auc"] <= 1 for r in comparison["models"].values())


# ------------------------------------------------------- issue 14: the first hour
def test_ingest_connects_like_every_entry_point(tmp_path, monkeypatch):
    """Item 11: ``ingest`` uses the one ``connect``: DASK_SCHEDULER_ADDRESS and the TLS check apply."""
    from nsdist import ingest

    src = tmp_path / "in.csv"
    src.write_text("a,label\n1,0\n2,1\n")
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tls://127.0.0.1:1")
    with pytest.raises(ValueError, match="TLS scheduler but no client certificate"):
        ingest(str(src), str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()



def test_column_positions_on_the_command_line_are_positions_unless_a_column_has_that_name(
        tmp_path, env, shared_data):
    """The command line gives every column as text: ``--label-column 41 --categorical 1 ... --drop 0`` of a CSV
    without a header (kddcup99's real rows) are positions, as the same integers given to ``nsdist.ingest``; a
    header naming a column ``1`` makes ``--categorical 1`` that column; pandas' Parquet of unnamed columns
    (``'0' .. '3'``) ingests with ``--label-column 3`` (it was refused: "must be a column name"); ``evaluate``
    and ``predict`` of the CSV take its columns by position as well, to the same numbers and bytes as by name."""
    import gzip

    from nsdist import ingest

    with gzip.open(shared_data / "kddcup99" / "kddcup.data_10_percent.gz", "rt") as f:
        (tmp_path / "kdd.csv").write_text("".join(next(f) for _ in range(3000)))
    common = dict(positive=["normal."], rows_per_partition=1000)
    ok(nsdist("ingest", tmp_path / "kdd.csv", tmp_path / "cli", "--label-column", 41, "--positive", "normal.",
              "--categorical", 1, "--categorical", 2, "--categorical", 3, "--drop", 0, "--rows-per-partition", 1000,
              env=env))
    api = ingest(str(tmp_path / "kdd.csv"), str(tmp_path / "api"), label_column=41, categorical=[1, 2, 3], drop=[0],
                 **common)
    cli = Dataset.open(tmp_path / "cli")
    assert cli.feature_names == api.feature_names and cli.feature_names[0] == "col1=icmp"
    assert "col0" not in cli.feature_names and cli.n_features == api.n_features
    for i in range(len(api.partitions)):
        for a, b in zip(cli.read_partition(i), api.read_partition(i)):
            np.testing.assert_array_equal(a, b)
    ok(nsdist("train", tmp_path / "cli", "--n-passes", 1, "--out", tmp_path / "run", "--no-progress", env=env))
    for how, given in (("at", ["--label-column", 41, "--drop", 0]), ("named", ["--label-column", "col41", "--drop",
                                                                              "col0"])):
        ok(nsdist("evaluate", tmp_path / "run", tmp_path / "kdd.csv", *given, "--positive", "normal.", "--out",
                  tmp_path / f"{how}.json", env=env))
        ok(nsdist("predict", tmp_path / "run", tmp_path / "kdd.csv", tmp_path / f"{how}.csv", *given, env=env))
    assert json.loads((tmp_path / "at.json").read_text()) == json.loads((tmp_path / "named.json").read_text())
    assert (tmp_path / "at.csv").read_bytes() == (tmp_path / "named.csv").read_bytes()
    assert (tmp_path / "at.csv").read_text().splitlines()[0] == '"col41","score","prediction"'
    (tmp_path / "header.csv").write_text("a,1,label\n0.5,x,1\n0.1,y,-1\n0.3,x,-1\n")
    ok(nsdist("ingest", tmp_path / "header.csv", tmp_path / "header", "--header", "--categorical", 1, env=env))
    assert Dataset.open(tmp_path / "header").feature_names == ["a", "1=x", "1=y"]
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(size=(400, 3))).assign(label=(rng.random(400) < 0.2).astype(int))
    frame.columns = [str(c) for c in range(4)]
    frame.to_parquet(tmp_path / "pandas.parquet")
    ok(nsdist("ingest", tmp_path / "pandas.parquet", tmp_path / "pq", "--label-column", 3, env=env))
    ds = Dataset.open(tmp_path / "pq")
    assert ds.feature_names == ["0", "1", "2"] and ds.metadata["positives"] == int(frame["3"].sum())


def test_train_with_the_defaults_reports_the_selection(run, env):
    """Issue #10 item 4: metrics.json lists every candidate (validation value, steps, when dropped, cost) and
    the CLI prints the winner and the runner-up."""
    out = run["tmp"] / "defaults"
    proc = ok(nsdist("train", run["data"], "--measure", "f1", "--holdout", 0.3, "--set", "solver.max_passes=2",
                     "--out", out, env=env))
    sel = json.loads((out / "metrics.json").read_text())["selection"]
    names = [c["name"] for c in sel["candidates"]]
    assert sorted(sel["ranked"]) == sorted(names) and len(names) == 31      # 30 stochastic + logloss/lbfgs
    winner = next(c for c in sel["candidates"] if c["selected"])
    assert sel["selected"] == winner["name"] == sel["ranked"][0]
    scored = [c for c in sel["candidates"] if c["validation"] is not None]
    assert winner["validation"] == max(c["validation"] for c in scored)
    runner = next(c for c in scored if c["name"] == sel["ranked"][1])
    assert runner["validation"] <= winner["validation"]
    assert sum(c["cost_share"] for c in sel["candidates"]) == pytest.approx(1.0)
    assert all(c["dropped_at_check"] is None or c["dropped_at_check"] >= 1 for c in sel["candidates"])
    line = next(l for l in proc.stdout.splitlines() if l.startswith("selected "))
    assert not any(l.startswith("features:") for l in proc.stdout.splitlines())    # ingest chose the columns
    assert line.startswith(f"selected {winner['name']} (validation {winner['validation']:.4f}")
    assert f"runner-up {runner['name']} ({runner['validation']:.4f})" in line
    # what the selection resolves: a 10% holdout would hold 55 positives, so "auto" chose on every one (5 folds)
    v_pos = sel["validation_positives"]
    train, _ = holdout_split(Dataset.open(str(run["data"])), 0.3)
    assert v_pos == int((load_rows(train)[1] > 0).sum()) and round(0.1 * v_pos) < 100
    assert all(len(c["folds"]) == 5 for c in sel["candidates"])
    assert f"{v_pos} validation positives resolve about {1 / v_pos:.4f}" in line
    assert ("(the runner-up is within it)" in line) == (winner["validation"] - runner["validation"] < 1 / v_pos)
    # the log says why: a holdout coarser than a point of the measure; a streamed holdout's log points to K-fold
    log = (out / "run.log").read_text()
    assert (f"K-fold selection (validation_folds='auto'): a holdout of the 14000 rows would "
            f"hold {round(0.1 * v_pos)} positives (fewer than 100), so 5 folds choose on every positive") in log
    hint = "K-fold selection (validation_folds=5) would choose on every positive"
    assert hint not in log and hint in (run["out"] / "run.log").read_text()      # streamed, 55 holdout positives


def test_train_with_k_fold_selection_reports_the_folds_selection(run, env):
    """``--set solver.validation_folds=3``: the rows are read onto the driver and the estimator's K-fold selection
    fits there; metrics.json gives each candidate's mean over the folds, the CLI the winner, and every training
    positive took part in the choice."""
    out = run["tmp"] / "kfold"
    proc = ok(nsdist("train", run["data"], "--measure", "prbep", "--holdout", 0.3, "--set", "solver.validation_folds=3",
                     "--set", "solver.max_passes=2", "--out", out, env=env))
    sel = json.loads((out / "metrics.json").read_text())["selection"]
    winner = next(c for c in sel["candidates"] if c["selected"])
    assert all(len(c["folds"]) == 3 for c in sel["candidates"])
    assert winner["validation"] == pytest.approx(np.mean([f["validation"] for f in winner["folds"]]), abs=1e-15)
    train, _ = holdout_split(Dataset.open(str(run["data"])), 0.3)
    assert sel["validation_positives"] == int((load_rows(train)[1] > 0).sum())
    assert f"selected {winner['name']} (validation {winner['validation']:.4f}" in proc.stdout
    # the learning curve: each fold's best validation measure against its steps (no partition streams)
    log = (out / "run.log").read_text()
    assert "K-fold selection streams no partitions" in log
    checks = [int(line.split("K-fold selection: check ")[1].split(":")[0]) for line in log.splitlines()
              if "K-fold selection: check " in line]     # the folds checked in lockstep, each check logged once
    assert checks == list(range(1, len(checks) + 1))
    assert f"3 fold fits done in lockstep over {len(checks)} checks" in log
    assert "pass 1 done" not in log
    assert "checkpoints:" not in log                       # nothing streams, so nothing is checkpointed
    assert json.loads((out / "metrics.json").read_text())["training"]["folds"] == 3
    plotted = json.loads(Image.open(out / "learning_curve.png").text["nsdist-curve"])
    assert sorted(set(plotted["fold"])) == [0, 1, 2]
    assert plotted["best"] == [p["best"] for p in sel["validation_curve"]]
    assert plotted["epoch"] == [p["epoch"] for p in sel["validation_curve"]]
    # nothing was checkpointed, so --resume is refused in one line, and the run directory stays as it was
    files = {f: f.read_bytes() for f in out.rglob("*") if f.is_file() and f.name != "run.log"}
    line = one_line_error(nsdist("train", out / "job.yaml", "--resume", env=env))
    assert line == ("nsdist train: error: --resume: nothing to resume -- this job fits by K-fold selection "
                    "(3 folds) on rows read onto the driver, which writes no checkpoint; run it again without resume")
    assert {f: f.read_bytes() for f in out.rglob("*") if f.is_file() and f.name != "run.log"} == files


def test_selection_summary_says_whether_the_runner_up_is_within_the_holdouts_resolution():
    """1 / v+ is the smallest difference the validation rows resolve; the summary says when the runner-up is
    closer than that."""
    from nsdist.run import selection_summary

    def cands(a, b):
        return [{"name": "a", "validation": a, "steps": 50, "selected": True},
                {"name": "b", "validation": b, "steps": 100, "selected": False},
                {"name": "c", "validation": None, "steps": 0, "selected": False}]

    close = selection_summary(cands(0.60, 0.59), validation_positives=50)      # 0.01 < 1/50
    assert close.endswith("; 3 candidates; 50 validation positives resolve about 0.0200 (the runner-up is within it)")
    apart = selection_summary(cands(0.60, 0.55), validation_positives=50)      # 0.05 >= 1/50
    assert apart.endswith("; 3 candidates; 50 validation positives resolve about 0.0200")
    assert selection_summary(cands(0.60, 0.59)).endswith("; 3 candidates")  # unknown v+: nothing claimed
