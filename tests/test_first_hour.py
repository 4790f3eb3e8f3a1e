"""Issue 14, "the first hour": what a new user hits, each a test that failed before its fix.

The command-line cases run ``python -m nsdist`` in subprocesses against one
small ``LocalCluster`` (through ``DASK_SCHEDULER_ADDRESS``, or ``--scheduler``
for the scheduler-log check, which uses real ``dask scheduler`` / ``dask
worker`` processes).  Each bad input is recorded for ``bench/reliability.py``.
Items 1, 5 and 12 are in ``test_retrain.py``, 6 and 7's examples in
``test_readme.py``, 11 in ``test_cli.py``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import LocalCluster

REPO = Path(__file__).resolve().parents[1]
LETTER = REPO / "data" / "letter" / "letter-recognition.data"
PYTHON_NAMES = ("Error:", "Error(", "Warning:", "pass overwrite", "pass format", "label_column=", "positive=",
                "Traceback")


def nsdist(*args, env: dict | None = None, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "nsdist", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**base, **(env or {})})


def one_line_error(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for python in PYTHON_NAMES:
        assert python not in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def env():
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address="127.0.0.1:0") as cluster:
        yield {"DASK_SCHEDULER_ADDRESS": cluster.scheduler_address}


@pytest.fixture(scope="module")
def letter(tmp_path_factory, env) -> Path:
    """Letter ingested as the README does it: 20 partitions, label ``label``, features col1 .. col16."""
    data = tmp_path_factory.mktemp("letter") / "data"
    proc = nsdist("ingest", LETTER, data, "--format", "csv", "--label-column", 0, "--positive", "N",
                  "--rows-per-partition", 1000, env=env)
    assert proc.returncode == 0, proc.stderr
    return data


# ----------------------------------------------------------- item 3: the label
def test_a_wrong_label_column_that_exists_is_refused(letter, env, tmp_path, reliability):
    """``--label-column col3`` would train with the real label as a feature and report 1.0000 everywhere."""
    out = tmp_path / "run"
    line = one_line_error(nsdist("train", letter, "--label-column", "col3", "--n-passes", 1, "--out", out,
                                 env=env), 1)
    reliability("bad input", "train --label-column naming a feature (col3) of an ingested dataset", exit_code=1,
                message=line)
    assert "column 'label' is the label, not a feature" in line
    assert "--label-column 'label' (dataset.label_column)" in line
    assert not out.exists()                                        # refused before anything was written
    from nsdist import train

    with pytest.raises(ValueError, match="'label' is the label, not a feature"):
        train(str(letter), label_column="col3", client=env["DASK_SCHEDULER_ADDRESS"])
    with pytest.raises(ValueError, match="'label' is the label, not a feature"):
        train(str(letter), feature_columns=["col1", "label"], client=env["DASK_SCHEDULER_ADDRESS"])


def test_a_feature_that_separates_the_classes_alone_warns_loudly(env, tmp_path, reliability):
    """A label leak that is not the label column itself (here ``leak = 3 * label``): trained, but warned."""
    rng = np.random.default_rng(0)
    y = np.where(rng.random(2000) < 0.1, 1, -1)
    for part in range(2):
        rows = slice(1000 * part, 1000 * (part + 1))
        (tmp_path / "data").mkdir(exist_ok=True)
        pq.write_table(pa.table({"a": rng.normal(size=1000), "leak": 3.0 * y[rows], "label": y[rows]}),
                       tmp_path / "data" / f"part-{part}.parquet")
    proc = nsdist("train", tmp_path / "data", "--n-passes", 1, "--out", tmp_path / "run", env=env)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    reliability("bad input", "a feature that separates the training classes by itself (a label leak)",
                exit_code=0, message=" ".join(warned))
    assert len(warned) == 1 and "feature 'leak' alone separates the 2000 training rows" in warned[0]
    assert "'a'" not in warned[0]


# ---------------------------------------------------- item 4: one class at ingest
def test_ingest_refuses_a_dataset_with_one_class_naming_the_labels_found(tmp_path, env, reliability):
    src = tmp_path / "in.csv"
    src.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{1 + i % 3}\n" for i in range(30)))
    line = one_line_error(nsdist("ingest", src, tmp_path / "d", "--positive", "7", env=env), 1)
    reliability("bad input", "ingest --positive 7 where no row has label 7", exit_code=1, message=line)
    assert "all 30 rows are negative, with --positive 7" in line
    assert "the label values found are '1', '2', '3'" in line and "needs both classes" in line
    assert not (tmp_path / "d").exists()


# ------------------------------------------- item 7: checked before a cluster
@pytest.mark.parametrize("args, code, needle", [
    (["ingest", LETTER, "{tmp}/d", "--label-column", "0", "--positive", "N"], 1,
     "cannot tell the format of"),
    (["ingest", LETTER, "{tmp}", "--format", "csv", "--label-column", "0", "--positive", "N"], 1,
     "already exists; pass --overwrite to replace it"),
    (["train", "{tmp}/nowhere", "--out", "{tmp}/run"], 1, "no such file or directory"),
    (["train", "{letter}", "--measure", "prec@k"], 2, "measure: k is required for prec@k (--k)"),
    (["train", "{letter}", "--measure", "PAUC"], 2, "got 'PAUC'; did you mean 'pauc'?"),
    (["train", "{letter}", "--holdout", "0.97", "--out", "{tmp}/run"], 1,
     "has (20); ingest it again with a smaller rows_per_partition (589 makes 34 partitions of its 20000 rows)"),
])
def test_bad_arguments_fail_before_a_cluster_starts(args, code, needle, letter, tmp_path, reliability):
    """No scheduler is given: a cluster would start (seconds) and print its dashboard before failing."""
    filled = [str(a).format(tmp=tmp_path, letter=letter) for a in args]
    t0 = time.monotonic()
    proc = nsdist(*filled)
    seconds = time.monotonic() - t0
    line = one_line_error(proc, code)
    reliability("bad input", " ".join(["nsdist", *[a.replace(str(tmp_path), "…").replace(str(REPO) + "/", "")
                                                    for a in filled]]), exit_code=code, message=line)
    assert needle in line, line
    assert "LocalCluster" not in proc.stdout and "dashboard" not in proc.stdout
    assert not (tmp_path / "run").exists()
    assert seconds < 30


# ------------------------------------------------ item 8: errors speak the CLI
def test_warnings_are_one_line_without_a_source_line(letter, env, tmp_path, reliability):
    data = tmp_path / "data"
    data.mkdir()
    for part in sorted(letter.glob("part-*.parquet"))[:3]:
        (data / part.name).write_bytes(part.read_bytes())
    empty = pq.read_table(sorted(letter.glob("part-*.parquet"))[0]).slice(0, 0)
    pq.write_table(empty, data / "part-00099.parquet")
    proc = nsdist("train", data, "--n-passes", 1, "--out", tmp_path / "run", env=env)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "no rows" in line]
    reliability("bad input", "an empty Parquet partition (a warning)", exit_code=0, message=" ".join(warned))
    assert warned and all(line.startswith("nsdist train: warning: ") for line in warned), proc.stderr
    assert "UserWarning" not in proc.stderr and "warnings.warn" not in proc.stderr


def test_text_in_number_columns_names_the_ingest_options_that_encode_them(tmp_path, env, reliability):
    """A CSV's columns of categories, not named as such: the error names each, in the option as it is given on
    the command line (once a value); pasting it ingests the file."""
    src = tmp_path / "in.csv"
    src.write_text("a,proto,service,label\n" + "".join(f"{i},{('tcp', 'udp')[i % 2]},{('http', 'ftp', 'smtp')[i % 3]},"
                                                     f"{int(i % 4 == 0)}\n" for i in range(40)))
    line = one_line_error(nsdist("ingest", src, tmp_path / "d", env=env), 1)
    reliability("bad input", "ingest a CSV whose columns of categories are not named", exit_code=1, message=line)
    hint = "one-hot encode them: --categorical proto --categorical service)"
    assert "line 2, column 'proto': value 'tcp' is not a number (2 columns of categories?" in line and hint in line
    options = hint[len("one-hot encode them: "):-1].split()
    proc = nsdist("ingest", src, tmp_path / "d", *options, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "40 rows (10 positive), 6 features, 1 partition" in proc.stdout


def test_parquet_columns_that_are_not_numbers_get_options_to_paste(tmp_path, env):
    """Parquet as users have it (a timestamp, a text column): ``nsdist train`` names them and gives the ``--set``
    that keeps the numeric columns, which then trains, and the ingest option for the text one; ``nsdist ingest
    --categorical`` then gives the ``--feature-column`` options that leave the timestamp out, which ingest."""
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "when": pd.Timestamp("2026-01-01"),
                       "shop": rng.choice(["north", "south"], n), "label": rng.random(n) < 0.2})
    (tmp_path / "raw").mkdir()
    df.to_parquet(tmp_path / "raw" / "part-0.parquet")
    line = one_line_error(nsdist("train", tmp_path / "raw", "--out", tmp_path / "run", env=env), 1)
    keep = "--set \"dataset.feature_columns=['a', 'b']\""
    assert f"to keep the 2 numeric ones, pass {keep}" in line and "at ingest: --categorical shop" in line, line
    assert "to leave the columns that are not numbers out (an id, a timestamp): --drop when --drop shop" in line
    proc = nsdist("train", tmp_path / "raw", "--set", keep.split('"')[1], "--eta", 1, "--n-passes", 1,
                  "--out", tmp_path / "run", "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run" / "model" / "model.json").read_text())["feature_names"] == ["a", "b"]
    proc = nsdist("train", tmp_path / "raw", "--drop", "when", "--drop", "shop", "--eta", 1, "--n-passes", 1,
                  "--out", tmp_path / "dropped", "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "dropped" / "model" / "model.json").read_text())["feature_names"] == ["a", "b"]
    line = one_line_error(nsdist("ingest", tmp_path / "raw", tmp_path / "d", "--categorical", "shop", env=env), 1)
    flags = "--feature-column a --feature-column b --feature-column shop"
    assert f"to keep the 3 numeric and categorical ones, pass {flags}" in line, line
    proc = nsdist("ingest", tmp_path / "raw", tmp_path / "d", "--categorical", "shop", *flags.split(), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "400 rows" in proc.stdout and "4 features" in proc.stdout


def test_a_test_set_is_ingested_into_the_training_sets_one_hot_features(tmp_path, env):
    """``--categories-of DATASET``: a test CSV's columns are one-hot encoded with the training set's categories
    (its feature names are the training set's; a value the training set never had encodes as zeros)."""
    train_csv, test_csv = tmp_path / "train.csv", tmp_path / "test.csv"
    train_csv.write_text("a,proto,label\n" + "".join(f"{i},{('tcp', 'udp')[i % 2]},{int(i % 4 == 0)}\n"
                                                      for i in range(20)))
    test_csv.write_text("a,proto,label\n1,udp,1\n2,icmp,0\n3,tcp,0\n")
    made = nsdist("ingest", train_csv, tmp_path / "train", "--categorical", "proto", env=env)
    assert made.returncode == 0, made.stderr
    proc = nsdist("ingest", test_csv, tmp_path / "test", "--categories-of", tmp_path / "train", "--no-shuffle",
                  env=env)
    assert proc.returncode == 0, proc.stderr
    from nsdist.data import Dataset

    train, test = Dataset.open(str(tmp_path / "train")), Dataset.open(str(tmp_path / "test"))
    assert list(test.feature_names) == list(train.feature_names) == ["a", "proto=tcp", "proto=udp"]
    X, _ = test.read_partition(0)
    np.testing.assert_array_equal(X, [[1, 0, 1], [2, 0, 0], [3, 1, 0]])
    line = one_line_error(nsdist("ingest", test_csv, tmp_path / "t2", "--categories-of", tmp_path / "train",
                                 "--categorical", "proto", env=env), 1)
    assert "--categories-of takes the columns to encode from its dataset: drop --categorical" in line


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_jobs_test_set_is_ingested_into_the_training_sets_one_hot_features(tmp_path, env, fmt):
    """A job that ingests its training and test files with ``categorical`` columns: the test set is encoded with
    the training set's categories (the test file lacks one and has one more), so the model evaluates on it.
    Parquet input as users have it also holds a timestamp, which ``feature_columns`` leaves out."""
    import pandas as pd

    rng = np.random.default_rng(1)
    rows = lambda n, cats: "".join(f"{rng.normal():.3f},{cats[i % len(cats)]},{int(rng.random() < 0.3)}\n"
                                   for i in range(n))
    for name, n, cats in (("train", 300, ("tcp", "udp", "icmp")), ("test", 100, ("tcp", "udp", "sctp"))):
        (tmp_path / f"{name}.csv").write_text("a,proto,label\n" + rows(n, cats))
        if fmt == "parquet":
            pd.read_csv(tmp_path / f"{name}.csv").assign(when=pd.Timestamp("2026-01-01")).to_parquet(
                tmp_path / f"{name}.parquet")
    ingest = "{src: %s, categorical: [proto], rows_per_partition: 100" + (
        ", feature_columns: [a, proto]}" if fmt == "parquet" else "}")
    (tmp_path / "job.yaml").write_text(
        f"dataset:\n  url: {tmp_path / 'train'}\n  test_url: {tmp_path / 'test'}\n"
        f"  ingest: {ingest % (tmp_path / f'train.{fmt}')}\n  test_ingest: {ingest % (tmp_path / f'test.{fmt}')}\n"
        f"measure: {{name: auc}}\nsolver: {{name: 1pmb, eta: 0.1, n_passes: 2}}\noutput: {{dir: {tmp_path / 'run'}}}\n")
    proc = nsdist("train", tmp_path / "job.yaml", "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    from nsdist.data import Dataset

    train, test = Dataset.open(str(tmp_path / "train")), Dataset.open(str(tmp_path / "test"))
    assert list(test.feature_names) == list(train.feature_names) == ["a", "proto=icmp", "proto=tcp", "proto=udp"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["evaluation"]["data"] == "test" and metrics["evaluation"]["n_rows"] == 100


def test_counts_are_singular_when_one(tmp_path, env):
    src = tmp_path / "in.csv"
    src.write_text("a,label\n1,0\n2,1\n")
    proc = nsdist("ingest", src, tmp_path / "d", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "2 rows (1 positive), 1 feature, 1 partition\n" in proc.stdout


def test_library_keywords_are_said_as_the_commands_options():
    """A library message's ``name=value`` in a command's terms: its option (given once a value when repeatable),
    or ``--set`` for a job key without one; a name that is neither stays."""
    from nsdist._cli_messages import cli_names, speak_cli
    from nsdist.cli import build_parser

    train, ingest = cli_names(build_parser(), "train"), cli_names(build_parser(), "ingest")
    said = speak_cli("pass feature_columns=['a', 'b']; pass feature_columns= to choose; categorical=['c']; "
                     "label_column='y'; other=1", train)
    assert said == ("pass --set \"dataset.feature_columns=['a', 'b']\"; pass --set dataset.feature_columns=... to "
                    "choose; --categorical c; --label-column 'y' (dataset.label_column); other=1")
    assert speak_cli("pass feature_columns=['a', 'b']", ingest) == "pass --feature-column a --feature-column b"


def test_internal_errors_say_so_without_a_class_name_first():
    from nsdist._cli_messages import one_line

    assert one_line(FileExistsError("x already exists")) == "x already exists"
    assert one_line(KeyError("k")).startswith("'k'")
    text = one_line(TypeError("bad operand"))
    assert text.startswith("bad operand (an internal error") and "--debug" in text


# ------------------------------------------------------------------ item 9: noise
def test_metrics_and_help_do_not_import_dask():
    code = ("import sys, time; t = time.perf_counter(); import nsdist.metrics; from nsdist.cli import build_parser; "
            "build_parser().format_help(); "
            "print(sorted(m for m in ('dask', 'distributed', 'sklearn', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
    import nsdist

    assert nsdist.NonDecomposableClassifier.__name__ == "NonDecomposableClassifier"   # lazy exports resolve
    assert callable(nsdist.train) and callable(nsdist.ingest) and "train" in dir(nsdist)


def test_help_answers_in_well_under_half_a_second():
    script = Path(sys.executable).with_name("nsdist")
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([str(script), "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    assert min(times) < 0.5, times


def test_license_is_an_spdx_string():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "BSD-3-Clause"
    assert "setuptools>=77" in project["build-system"]["requires"]       # PEP 639 license strings


def test_clients_close_cleanly_on_a_real_scheduler(dask_processes, letter, tmp_path):
    """The scheduler logs no ``CommClosedError`` for the CLI's connections (it logged one or two each)."""
    cluster = dask_processes(2)
    for args in (["train", letter, "--holdout", "0.3", "--n-passes", 1, "--out", tmp_path / "run"],
                 ["evaluate", tmp_path / "run", letter, "--out", tmp_path / "eval.json"],
                 ["ingest", LETTER, tmp_path / "again", "--format", "csv", "--label-column", 0, "--positive", "N"]):
        proc = nsdist(*args, "--scheduler", cluster.address)
        assert proc.returncode == 0, proc.stderr
    time.sleep(1)
    log = (cluster.workdir / "scheduler.log").read_text()
    assert log.count("Receive client connection") >= 3
    assert "CommClosedError" not in log


def _listening() -> set[tuple[int, str, int]]:
    """``(pid, address, port)`` of every socket listening in this process and its child processes."""
    import psutil

    found = set()
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            sockets = getattr(proc, "net_connections", proc.connections)(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found |= {(proc.pid, s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN}
    return found


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
def test_the_embedded_cluster_listens_on_this_machine_only(processes, capsys):
    """The embedded cluster opens no port on the machine's network interfaces, and the link it prints opens its
    dashboard.  Before: the dashboard listened on every interface (Dask's ``:0``), so did the in-process worker's
    HTTP server (``ingest``, ``evaluate``), and the in-process link named the machine's network address, where
    nothing listens once the dashboard is on loopback."""
    from urllib.parse import urlsplit
    from urllib.request import urlopen

    from nsdist.engine.cluster import connect
    from nsdist.run import announce

    before = _listening()
    with connect(n_workers=1, processes=processes, quiet=True) as client:
        opened = _listening() - before
        where = announce(client)
        link = where.split("dashboard: ")[1]
        with urlopen(link, timeout=30) as page:
            assert page.status == 200
    assert f"dashboard: {link}" in capsys.readouterr().out
    assert urlsplit(link).hostname == "127.0.0.1" and urlsplit(link).port in {port for _, _, port in opened}
    # the scheduler and the dashboard, and the workers' own ports (a worker in this process talks through memory)
    assert len(opened) >= (4 if processes else 2), opened
    assert {address for _, address, _ in opened} == {"127.0.0.1"}, opened


SLOW_SCHEDULER = """
import asyncio, sys, time
from nsdist.engine.cluster import connect

def slow_heartbeats(dask_scheduler):
    answer = dask_scheduler.handlers["heartbeat_worker"]
    async def late(*args, **kwargs):         # a loaded machine: the reply comes 0.4 s late
        await asyncio.sleep(0.4)
        return answer(*args, **kwargs)
    dask_scheduler.handlers["heartbeat_worker"] = late

if __name__ == "__main__":
    with connect(n_workers=2, processes=sys.argv[1] == "processes") as client:
        client.run_on_scheduler(slow_heartbeats)
        time.sleep(2)                        # heartbeats every 0.5 s: one is on its way as the cluster closes
    print("closed")
"""


@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_the_embedded_cluster_closes_without_a_traceback_while_a_heartbeat_waits(mode, tmp_path):
    """A worker closing with a heartbeat on its way logged 'Failed to communicate with scheduler during heartbeat'
    and a traceback (dask/distributed#7105; a README example's second run, in CI): before this fix it did here for
    every worker in every run."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCHEDULER, encoding="utf-8")
    proc = subprocess.run([sys.executable, script.name, mode], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout == "closed\n", proc.stderr
    assert "Traceback" not in proc.stderr and "heartbeat" not in proc.stderr, proc.stderr


# ------------------------------------------------- item 12: parser and run apart
def test_the_command_line_only_parses_and_the_pipelines_use_the_run_module():
    code = ("import sys; import pipelines.demo, pipelines.retrain; "
            "print('nsdist.cli' in sys.modules, 'nsdist.run' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "True"]
    from nsdist import cli, run

    assert not hasattr(cli, "run_train") and not hasattr(cli, "run_predict")
    assert callable(run.run_train) and callable(run.run_predict)
    assert len((REPO / "nsdist" / "cli.py").read_text().splitlines()) < 600
