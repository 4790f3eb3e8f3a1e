"""The whole product against a real S3-compatible server (``moto_server`` on 127.0.0.1).

Credentials reach nsdist only through storage options (``--storage-options``,
a job's ``storage_options``): no ``AWS_*`` variable is set in the tests'
environment nor in the Dask processes they start.  Ingest (SVMlight and CSV),
training on an embedded cluster and on real ``dask scheduler`` / ``dask
worker`` processes with the run directory on ``s3://``, a SIGKILLed run
resumed from its ``s3://`` checkpoint, evaluate and predict to and from
``s3://``, two retrain cycles and two racing retrain runs with the registry on
``s3://``, the lock raced by threads, a worker without credentials, and no
secret in any file a run wrote.
"""
from __future__ import annotations

import bz2
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from s3_server import apply, clean_environment, start_s3  # noqa: E402

from nsdist import api  # noqa: E402
from nsdist.data import Dataset, DataNotFoundError  # noqa: E402
from nsdist.data.fs import (INCOMPLETE, REDACTED, StorageAccessError, forwarded_options, merge_options,  # noqa: E402
                            redact, redact_job, resolve)
from nsdist.jobs import parse_storage_options  # noqa: E402
from nsdist.model import LinearModel, load_model  # noqa: E402
from nsdist.registry import LockHeld, RegistryLock  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LETTER = REPO / "data" / "letter" / "letter-recognition.data"

#: stdout + stderr of every command run here (searched for secrets at the end)
OUTPUTS: list[str] = []


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A ``moto_server`` with a bucket; the environment is credential-free while the module runs."""
    work = tmp_path_factory.mktemp("moto")
    undo = apply(clean_environment(work))
    server = start_s3(work)
    try:
        yield server
    finally:
        server.close()
        apply(undo)


@pytest.fixture(scope="module")
def cluster(s3, dask_processes):
    """A ``dask scheduler`` and two ``dask worker`` processes, started with no credentials in their environment."""
    return dask_processes(2)


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """Where the runs of this module write local files (searched for secrets at the end)."""
    return tmp_path_factory.mktemp("s3-local")


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> Path:
    """The user's own files that hold the credentials (an options file, a job file): not searched."""
    return tmp_path_factory.mktemp("s3-secrets")


@pytest.fixture(scope="module")
def opts(s3, secrets) -> str:
    """``--storage-options @FILE`` argument."""
    return f"@{s3.write_options(secrets / 'options.json')}"


@pytest.fixture(scope="module")
def letter_url(s3, cluster, opts) -> str:
    """Letter ingested in place to the bucket by ``nsdist ingest`` on the real workers (20 partitions), once a
    module: every test that reads it asks for it, so that each also runs alone."""
    nsdist("ingest", LETTER, s3.url("letter"), "--format", "csv", "--label-column", 0, "--positive", "N",
           "--rows-per-partition", 1000, "--storage-options", opts, "--scheduler", cluster.address)
    return s3.url("letter")


@pytest.fixture(scope="module")
def embedded_run(s3, letter_url, secrets) -> str:
    """A 2PMB run on an embedded cluster, its run directory on the bucket; the job file gives the credentials
    once (top-level storage_options)."""
    job = secrets / "letter-s3.yaml"
    job.write_text(yaml.safe_dump({
        "dataset": {"url": letter_url, "holdout": 0.3},
        "measure": {"name": "pauc", "beta": 0.1}, "solver": {"name": "2pmb", "n_passes": 1, "random_state": 0,
                                                             "validation_folds": 1},
        "cluster": {"n_workers": 1}, "output": {"dir": s3.url("runs/embedded")}, "storage_options": s3.options}))
    nsdist("train", job, "--no-progress")
    return s3.url("runs/embedded")


def nsdist(*args, code: int = 0, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nsdist", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))
    OUTPUTS.append(proc.stdout + proc.stderr)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    return proc


def letter_rows(n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rows = np.loadtxt(LETTER, delimiter=",", dtype=str)[:n]
    return rows[:, 1:].astype(np.float64), np.where(rows[:, 0] == "N", 1, -1).astype(np.int8)


def keys(fs, prefix: str) -> list[str]:
    return sorted(p[len(prefix) + 1:] for p in fs.find(prefix))


# ------------------------------------------------------------------ options, without a server
def test_options_merge_redact_and_parse(tmp_path):
    base = {"key": "AKIA1", "secret": "s3cr3t-value", "client_kwargs": {"endpoint_url": "http://x", "a": 1}}
    merged = merge_options(base, {"client_kwargs": {"a": 2}, "secret": REDACTED})
    assert merged == {"key": "AKIA1", "secret": "s3cr3t-value", "client_kwargs": {"endpoint_url": "http://x", "a": 2}}
    assert redact(base) == {"key": REDACTED, "secret": REDACTED, "client_kwargs": {"endpoint_url": "http://x", "a": 1}}
    assert redact({"anon": True, "token": None, "password": "pw12"}) == {"anon": True, "token": None,
                                                                       "password": REDACTED}
    job = {"dataset": {"url": "s3://b/d", "storage_options": base}, "measure": {"key": "partial_auc"}}
    assert redact_job(job)["dataset"]["storage_options"]["secret"] == REDACTED
    assert redact_job(job)["measure"] == {"key": "partial_auc"}     # only storage options are redacted
    (tmp_path / "o.yaml").write_text("key: a\nsecret: b\n")
    assert parse_storage_options(f"@{tmp_path / 'o.yaml'}") == {"key": "a", "secret": "b"}
    assert parse_storage_options('{"anon": true}') == {"anon": True}
    with pytest.raises(ValueError, match="expected a mapping") as err:
        parse_storage_options('"the-secret"')
    assert "the-secret" not in str(err.value)


def test_driver_credentials_are_forwarded_for_s3_only(monkeypatch, tmp_path):
    for name, value in clean_environment(tmp_path).items():
        monkeypatch.delenv(name, raising=False) if value is None else monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    out = forwarded_options("s3://b/x", {})
    assert (out["key"], out["secret"], out["client_kwargs"]["endpoint_url"]) == ("AKIAENV", "env-secret-1",
                                                                               "http://127.0.0.1:1")
    assert forwarded_options("s3://b/x", {"anon": True}).get("key") is None       # explicit options win
    assert forwarded_options("memory://x", {}) == {}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    (tmp_path / "credentials").write_text("[dev]\naws_access_key_id = AKIAPROF\naws_secret_access_key = prof-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    out = forwarded_options("s3://b/x", {"profile": "dev"})        # the workers have no such profile
    assert (out.get("profile"), out["key"], out["secret"]) == (None, "AKIAPROF", "prof-1")
    assert "key" not in forwarded_options("s3://b/x", {})          # no default profile, no role copied


# ------------------------------------------------------------------ ingest
def write_svmlight(path: Path, n: int) -> Path:
    X, y = letter_rows(n)
    lines = (f"{'+1' if label > 0 else '-1'} " + " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row) if v)
             for row, label in zip(X, y))
    with bz2.open(path, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def test_ingest_svmlight_and_csv_to_s3_publish_in_place(s3, cluster, local, opts, letter_url):
    """Both ingests (the CSV one: ``letter_url``'s) exit 0 at the first attempt and publish parts + manifest,
    with no marker or staging left; the bytes are those of a local ingest; an existing dataset is refused, then
    replaced with --overwrite."""
    svm = write_svmlight(local / "letter.svm.bz2", 3000)
    nsdist("ingest", svm, s3.url("svm"), "--rows-per-partition", 500, "--storage-options", opts)
    fs = s3.filesystem()
    for name, n in (("svm", 6), ("letter", 20)):
        assert keys(fs, f"{s3.bucket}/{name}") == ["_nsdist.json", *(f"part-{i:05d}.parquet" for i in range(n))]
    ds = Dataset.open(s3.url("letter"), storage_options=s3.options)
    assert (ds.num_rows, len(ds.partitions), ds.metadata["positives"]) == (20000, 20, 783)

    here = api.ingest(str(LETTER), str(local / "letter"), format="csv", label_column=0, positive="N",
                      rows_per_partition=1000, client=cluster.address)
    remote = json.loads(fs.cat_file(f"{s3.bucket}/letter/_nsdist.json"))
    assert remote["content_sha256"] == here.metadata["content_sha256"]

    line = nsdist("ingest", svm, s3.url("svm"), "--storage-options", opts, code=1).stderr
    assert "already exists" in line and s3.url("svm") in line
    nsdist("ingest", svm, s3.url("svm"), "--rows-per-partition", 1000, "--overwrite", "--storage-options", opts)
    assert keys(fs, f"{s3.bucket}/svm") == ["_nsdist.json", *(f"part-{i:05d}.parquet" for i in range(3))]
    assert not [k for k in keys(fs, s3.bucket) if ".tmp-" in k]          # the staging prefix is gone
    assert Dataset.open(s3.url("svm"), storage_options=s3.options).num_rows == 3000


def test_a_failed_ingest_over_an_s3_dataset_leaves_it_as_it_was(s3, local, opts):
    """``--overwrite`` of a published dataset on S3 by an ingest that fails on a worker: the old dataset's every
    object is byte for byte as it was, it opens, and no staging prefix is left (the new ingest wrote beside it)."""
    rows = LETTER.read_text().splitlines()[:3000]
    good, bad = local / "good.csv", local / "bad.csv"
    good.write_text("\n".join(rows) + "\n")
    rows[2500] = rows[2500].replace(",", ",x", 1)             # a bad feature value, found by a worker
    bad.write_text("\n".join(rows) + "\n")
    args = ("--format", "csv", "--label-column", 0, "--positive", "N", "--storage-options", opts)
    nsdist("ingest", good, s3.url("kept"), "--rows-per-partition", 500, *args)
    fs = s3.filesystem()
    before = {n: fs.cat_file(f"{s3.bucket}/kept/{n}") for n in keys(fs, f"{s3.bucket}/kept")}
    assert len(before) == 7
    line = nsdist("ingest", bad, s3.url("kept"), "--rows-per-partition", 1000, "--overwrite", *args,
                  code=1).stderr
    assert "line 2501" in line, line
    fs.invalidate_cache()
    assert {n: fs.cat_file(f"{s3.bucket}/kept/{n}") for n in keys(fs, f"{s3.bucket}/kept")} == before
    assert not [k for k in keys(fs, s3.bucket) if ".tmp-" in k]
    assert Dataset.open(s3.url("kept"), storage_options=s3.options).num_rows == 3000


def test_a_failed_ingest_to_s3_leaves_nothing_behind(s3, local, opts):
    rows = LETTER.read_text().splitlines()[:3000]
    rows[2500] = rows[2500].replace(",", ",x", 1)             # a bad feature value, found by a worker
    bad = local / "bad.csv"
    bad.write_text("\n".join(rows) + "\n")
    line = nsdist("ingest", bad, s3.url("bad"), "--format", "csv", "--label-column", 0, "--positive", "N",
                  "--rows-per-partition", 500, "--storage-options", opts, code=1).stderr
    assert "line 2501" in line, line
    assert not s3.filesystem().exists(f"{s3.bucket}/bad")


def test_what_a_killed_run_left_beside_an_s3_dataset_is_named_by_the_next_run(s3, local, opts):
    """A staging prefix of a killed ingest (``.left.tmp-TOKEN/``, as SIGKILL leaves it) beside an S3 dataset: the
    next ingest into it warns, naming the prefix, and leaves it alone (another run could be writing there);
    the run after a clean one says nothing."""
    good = local / "few.csv"
    good.write_text("\n".join(LETTER.read_text().splitlines()[:600]) + "\n")
    args = ("--format", "csv", "--label-column", 0, "--positive", "N", "--storage-options", opts, "--overwrite")
    fs = s3.filesystem()
    fs.pipe_file(f"{s3.bucket}/.left.tmp-0123456789ab/part-00000.parquet", b"half a file")
    warned = nsdist("ingest", good, s3.url("left"), *args).stderr
    assert "left beside it by a killed run, which could not clean up: .left.tmp-0123456789ab" in warned, warned
    assert fs.exists(f"{s3.bucket}/.left.tmp-0123456789ab/part-00000.parquet")
    fs.rm(f"{s3.bucket}/.left.tmp-0123456789ab", recursive=True)
    assert "killed run" not in nsdist("ingest", good, s3.url("left"), *args).stderr


def held_calls(gate: str, owner: str, name: str):
    """``(hold, restore)`` for ``client.run``: ``hold`` makes a worker's calls of ``name`` of ``owner`` (a module,
    or ``"module:Class"``) mark a file ``gate/started-*`` and wait for the file ``gate/release`` (60 s at most)
    before they run; ``restore`` puts ``name`` back.  (Closures: Dask sends them by value.)"""
    def where():
        import importlib

        module, _, cls = owner.partition(":")
        return getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)

    def hold(dask_worker) -> None:
        import uuid

        original = getattr(where(), name)
        dask_worker.nsdist_held = original

        def held(*args, **kwargs):
            Path(gate, f"started-{uuid.uuid4().hex}").touch()
            deadline = time.monotonic() + 60
            while not Path(gate, "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            return original(*args, **kwargs)
        setattr(where(), name, held)

    def restore(dask_worker) -> None:
        setattr(where(), name, dask_worker.nsdist_held)

    return hold, restore


#: a command stopped while its workers run: what its tasks call (held), how many run at once on the two
#: one-thread workers, where it writes
STOPPED = {
    "ingest": ("nsdist.data.ingestion:_Job", "scatter", 1, "stopped"),        # the input's one chunk, encoded
    "predict": ("nsdist.engine.predict", "_score_file", 2, "scores/stopped"),  # a part file scored per worker
}


@pytest.mark.parametrize("command", sorted(STOPPED))
def test_a_command_stopped_while_workers_write_to_s3_leaves_nothing_behind(s3, cluster, local, opts, letter_url,
                                                                          embedded_run, tmp_path, command):
    """SIGTERM while the workers of a real cluster run an ingest's or a predict's tasks, writing in place to a
    new S3 prefix: Dask cannot stop a running task (cancelling drops only its result), so the command waits for
    them to end before it removes what was written.  It used to remove and exit first, and a task then wrote
    under the new prefix (the ingest: ``stopped/_work/chunk-00000000.arrow``): an object with no marker and no
    manifest, which the next run into that place refused as an existing output."""
    from distributed import Client

    from nsdist._faults import wait_for_tasks

    owner, name, running, where = STOPPED[command]
    good = local / "stopped.csv"
    good.write_text("\n".join(LETTER.read_text().splitlines()[:3000]) + "\n")
    args = {"ingest": [good, s3.url(where), "--format", "csv", "--label-column", 0, "--positive", "N",
                       "--rows-per-partition", 500],
            "predict": [embedded_run, letter_url, s3.url(where)]}[command]
    args = [*map(str, args), "--storage-options", opts]
    gate = tmp_path / "gate"
    gate.mkdir()
    hold, restore = held_calls(str(gate), owner, name)
    fs = s3.filesystem()
    with Client(cluster.address) as client:
        client.run(hold)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "nsdist", command, *args, "--scheduler", cluster.address],
                                    cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ))
            deadline = time.monotonic() + 120
            while len(list(gate.glob("started-*"))) < running:         # every worker runs one
                assert proc.poll() is None and time.monotonic() < deadline, "the tasks did not start"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(subprocess.TimeoutExpired):     # it waits for the held tasks
                proc.wait(timeout=3)
            (gate / "release").touch()
            _, stderr = proc.communicate(timeout=120)
            OUTPUTS.append(stderr)
            assert wait_for_tasks(client, f"nsdist-{command}", timeout=60) == []    # no write can come after this
        finally:
            (gate / "release").touch()
            client.run(restore)
    assert proc.returncode == 143, stderr
    assert f"{command}: stopped; waiting for {running} running task(s) to end before it cleans up" in stderr, stderr
    fs.invalidate_cache()
    assert not fs.exists(f"{s3.bucket}/{where}"), keys(fs, f"{s3.bucket}/{where}")
    assert not [k for k in keys(fs, s3.bucket) if ".tmp-" in k]
    nsdist(command, *args)                                          # the place is free: no --overwrite
    parts = {"ingest": 6, "predict": 20}[command]
    assert keys(fs, f"{s3.bucket}/{where}") == ["_nsdist.json", *(f"part-{i:05d}.parquet" for i in range(parts))]


def test_an_unfinished_in_place_ingest_is_refused_as_incomplete(s3, letter_url):
    fs = s3.filesystem()
    fs.pipe_file(f"{s3.bucket}/half/{INCOMPLETE}", b"{}")
    fs.copy(f"{s3.bucket}/letter/part-00000.parquet", f"{s3.bucket}/half/part-00000.parquet")
    with pytest.raises(DataNotFoundError, match="is incomplete: an ingest into it has not finished"):
        Dataset.open(s3.url("half"), storage_options=s3.options)


# ------------------------------------------------------------------ train, evaluate, predict
def test_train_on_an_embedded_cluster_run_directory_on_s3_then_evaluate_and_predict(s3, cluster, opts,
                                                                                     embedded_run):
    """A job file gives the credentials once (top-level storage_options); its echo job.yaml does not."""
    fs = s3.filesystem()
    run = f"{s3.bucket}/runs/embedded"
    assert {"job.yaml", "metrics.json", "run.log", "checkpoint.json", "learning_curve.png", "model/model.json"} \
        <= set(keys(fs, run))
    echoed = yaml.safe_load(fs.cat_file(f"{run}/job.yaml"))
    assert echoed["storage_options"]["key"] == echoed["storage_options"]["secret"] == REDACTED
    assert echoed["storage_options"]["client_kwargs"]["endpoint_url"] == s3.endpoint
    metrics = json.loads(fs.cat_file(f"{run}/metrics.json"))
    assert metrics["evaluation"]["data"] == "holdout" and metrics["measure"]["value"] > 0.5

    out = nsdist("evaluate", s3.url("runs/embedded"), s3.url("letter"), "--storage-options", opts,
                 "--scheduler", cluster.address).stdout
    assert f"written to {s3.url('runs/embedded/evaluation.json')}" in out
    evaluation = json.loads(fs.cat_file(f"{run}/evaluation.json"))
    assert evaluation["n_rows"] == 20000 and 0.5 < evaluation["partial_auc"] <= 1

    nsdist("predict", s3.url("runs/embedded"), s3.url("letter"), s3.url("scores/letter.parquet"),
           "--storage-options", opts)
    scores = pq.read_table(f"{s3.bucket}/scores/letter.parquet", filesystem=fs)
    assert scores.num_rows == 20000 and scores.column_names == ["label", "score", "prediction"]
    model = load_model(s3.url("runs/embedded/model"), s3.options)
    X, _ = Dataset.open(s3.url("letter"), storage_options=s3.options).read_partition(0)
    np.testing.assert_allclose(scores.column("score").to_numpy()[:1000], model.decision_function(X))


def test_predict_scores_an_s3_dataset_into_an_s3_directory_on_the_workers(s3, cluster, opts, embedded_run):
    """``nsdist predict`` to a directory: the real workers, which have no credentials of their own, read the 20
    partitions and write the 20 parts with the forwarded options; the manifest comes last and the marker is gone;
    the scores are the model's on the rows.  A run refused on the driver (a model of other features), and one
    that fails on a worker (a null feature), leave the published output as it was."""
    fs = s3.filesystem()
    out = f"{s3.bucket}/scores/letter-parts"
    stdout = nsdist("predict", embedded_run, s3.url("letter"), s3.url("scores/letter-parts"), "--storage-options",
                    opts, "--scheduler", cluster.address, "--keep", "label").stdout
    assert "20000 rows scored on the cluster into 20 part files" in stdout
    names = keys(fs, out)
    assert names == ["_nsdist.json", *(f"part-{i:05d}.parquet" for i in range(20))] and INCOMPLETE not in names
    assert json.loads(fs.cat_file(f"{out}/_nsdist.json"))["format"] == "nsdist-predictions"
    scores = pa.concat_tables([pq.read_table(f"{out}/{n}", filesystem=fs) for n in names[1:]])
    model = load_model(embedded_run + "/model", s3.options)
    ds = Dataset.open(s3.url("letter"), storage_options=s3.options)
    blocks = [ds.read_partition(p.index) for p in ds.partitions]
    X, y = np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
    np.testing.assert_allclose(scores.column("score").to_numpy(), model.decision_function(X), rtol=1e-12)
    np.testing.assert_array_equal(scores.column("label").to_numpy(), y)
    before = {n: fs.cat_file(f"{out}/{n}") for n in names}
    other = LinearModel(np.ones(16), 0.0, "pauc", feature_names=[f"f{j}" for j in range(16)])
    other.save(s3.url("other-model"), s3.options)
    line = nsdist("predict", s3.url("other-model"), s3.url("letter"), s3.url("scores/letter-parts"),
                  "--storage-options", opts, "--scheduler", cluster.address, code=1).stderr
    assert "f0" in line and {n: fs.cat_file(f"{out}/{n}") for n in keys(fs, out)} == before
    # a run that fails on a worker (a null in the fourth file) leaves the published scores as they were too
    src = f"{s3.bucket}/letter-null"
    for i in range(4):
        fs.copy(f"{s3.bucket}/letter/part-{i:05d}.parquet", f"{src}/part-{i:05d}.parquet")
    table = pq.read_table(f"{src}/part-00003.parquet", filesystem=fs)
    column = table.column_names[1]
    values = table.column(column).to_pylist()
    values[17] = None
    table = table.set_column(1, column, pa.array(values, type=table.schema.field(column).type))
    with fs.open(f"{src}/part-00003.parquet", "wb") as fh:
        pq.write_table(table, fh)
    line = nsdist("predict", embedded_run, s3.url("letter-null"), s3.url("scores/letter-parts"),
                  "--storage-options", opts, "--scheduler", cluster.address, code=1).stderr
    assert "part-00003.parquet: row 17" in line, line
    fs.invalidate_cache()
    assert {n: fs.cat_file(f"{out}/{n}") for n in keys(fs, out)} == before
    assert not [k for k in keys(fs, f"{s3.bucket}/scores") if ".tmp-" in k]


def test_the_defaults_k_fold_selection_reads_s3_on_the_workers_and_is_the_estimators_model(s3, cluster, letter_url):
    """The default on the S3 copy of Letter selects by 5 folds (a holdout would hold 78 positives): the workers,
    which have no credentials of their own, read the partitions with the forwarded options, the fold fits run
    there, and the model is the estimator's on the same rows in file order, bit for bit."""
    import nsdist

    ds = Dataset.open(s3.url("letter"), storage_options=s3.options)
    model = api.train(ds, client=cluster.address, measure="prbep", random_state=3)
    assert model.history["folds"] == 5
    blocks = [ds.read_partition(p.index) for p in ds.partitions]
    X, y = np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
    est = nsdist.NonDecomposableClassifier("prbep", random_state=3).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.intercept == float(est.intercept_[0])


def test_a_large_file_on_s3_is_read_by_runs_of_its_row_groups_on_the_workers(s3, cluster, monkeypatch, tmp_path):
    """A file read as several partitions (docs/engine.md §Dataset format): the workers read only their row
    groups' byte ranges from the bucket, and the model is the estimator's on the file's rows, bit for bit."""
    import nsdist
    import nsdist.data.dataset as dataset_module

    X, y = letter_rows(6000)
    table = pa.table({**{f"f{j}": X[:, j] for j in range(X.shape[1])}, "label": y})
    pq.write_table(table, tmp_path / "one.parquet", row_group_size=1000)
    s3.filesystem().put(str(tmp_path / "one.parquet"), s3.url("big/one.parquet"))
    footer = pq.ParquetFile(tmp_path / "one.parquet").metadata
    monkeypatch.setattr(dataset_module, "SPLIT_BYTES", footer.row_group(0).total_byte_size)   # in this driver
    ds = Dataset.open(s3.url("big/one.parquet"), storage_options=s3.options)
    assert [p.row_groups for p in ds.partitions] == [(g, g + 1) for g in range(6)]
    params = dict(measure="pauc", solver="1pmb", buffer_size=500, eta=0.05, n_passes=2, shuffle=False,
                  standardize=False, random_state=3)
    model = api.train(ds, client=cluster.address, **params)
    est = nsdist.NonDecomposableClassifier(**params).fit(X, y)
    np.testing.assert_array_equal(model.coef, est.coef_.ravel())
    assert model.history["rows_seen"] == 2 * len(y)


def test_footers_on_s3_are_read_together_and_the_first_bad_file_is_named(s3, tmp_path):
    """Dataset.open reads an object store's footers FOOTER_THREADS at a time: the partitions come out in path
    order with their rows, and of two unreadable files the first in path order is the one named."""
    from nsdist.data.dataset import FOOTER_THREADS

    X, y = letter_rows(2000)
    n = FOOTER_THREADS + 8
    bounds = np.linspace(0, len(y), n + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        pq.write_table(pa.table({**{f"f{j}": X[a:b, j] for j in range(X.shape[1])}, "label": y[a:b]}),
                       tmp_path / f"part-{i:03d}.parquet")
    fs = s3.filesystem()
    fs.put(str(tmp_path) + "/", s3.url("footers/"), recursive=True)
    ds = Dataset.open(s3.url("footers"), storage_options=s3.options)
    assert [p.num_rows for p in ds.partitions] == list(np.diff(bounds))
    assert [p.path.rsplit("/", 1)[1] for p in ds.partitions] == [f"part-{i:03d}.parquet" for i in range(n)]
    for i in (n - 3, 5):                                    # the later one first: order must not depend on timing
        fs.pipe(s3.url(f"footers/part-{i:03d}.parquet"), b"not parquet at all")
    with pytest.raises(ValueError, match=r"footers/part-005\.parquet: not a readable Parquet file"):
        Dataset.open(s3.url("footers"), storage_options=s3.options)


def test_atomic_writer_publishes_an_s3_object_whole_or_not_at_all(s3):
    """nsdist predict's output on an object store: written to a sibling key as it comes, copied onto the key at
    the end; an error on the way leaves the key's old content and no sibling."""
    from nsdist.data.fs import atomic_writer

    fs, url = s3.filesystem(), s3.url("written/scores.parquet")
    with atomic_writer(url, s3.options) as f:
        f.write(b"old" * 1000)
        assert not fs.exists(url)                                   # nothing published before the end
    assert fs.cat(url) == b"old" * 1000
    with pytest.raises(RuntimeError, match="interrupted"):
        with atomic_writer(url, s3.options) as f:
            f.write(b"new" * 3_000_000)                             # more than one multipart block
            raise RuntimeError("interrupted")
    fs.invalidate_cache()
    assert fs.cat(url) == b"old" * 1000 and fs.ls(s3.url("written")) == [url[len("s3://"):]]


TRAIN = ["--measure", "pauc", "--solver", "2pmb", "--n-passes", 2, "--random-state", 5, "--checkpoint-every", 1,
         "--no-progress", "--set", "solver.validation_folds=1"]          # streamed: one holdout


def test_killed_run_resumes_from_its_s3_checkpoint_to_the_identical_model(s3, cluster, opts, letter_url):
    """On real Dask processes; credentials only on the command line, never in the job file."""
    nsdist("train", s3.url("letter"), *TRAIN, "--out", s3.url("runs/full"), "--scheduler", cluster.address,
           "--storage-options", opts)
    fs = s3.filesystem()
    checkpoint = f"{s3.bucket}/runs/killed/checkpoint.json"
    proc = subprocess.Popen([sys.executable, "-m", "nsdist", "train", s3.url("letter"), *map(str, TRAIN), "--out",
                             s3.url("runs/killed"), "--scheduler", cluster.address, "--storage-options", opts],
                            cwd=REPO, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, position = time.monotonic() + 240, -1
    while position < 8:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        try:
            position = json.loads(fs.cat_file(checkpoint))["position"]
        except FileNotFoundError:
            time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert not fs.exists(f"{s3.bucket}/runs/killed/model/model.json")

    nsdist("train", s3.url("runs/killed/job.yaml"), "--resume", "--storage-options", opts)
    resumed, full = (json.loads(fs.cat_file(f"{s3.bucket}/runs/{name}/model/model.json"))
                     for name in ("killed", "full"))
    assert resumed["weights"]["sha256"] == full["weights"]["sha256"]
    log = fs.cat_file(f"{s3.bucket}/runs/killed/run.log").decode()
    assert f"resuming from {s3.url('runs/killed/checkpoint.json')} at partition step" in log


def test_driver_environment_credentials_reach_remote_workers(s3, cluster, monkeypatch, embedded_run):
    """With credentials in the driver's environment only, workers that have none still read."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    model = load_model(s3.url("runs/embedded/model"))
    result = api.evaluate(model, s3.url("letter"), client=cluster.address)
    assert result["n_rows"] == 20000
    ds = api.ingest(str(LETTER), s3.url("env-ingest"), format="csv", label_column=0, positive="N",
                    rows_per_partition=5000, client=cluster.address)       # the workers write the parts
    assert ds.num_rows == 20000 and len(ds.partitions) == 4


def test_a_driver_without_credentials_says_so_in_one_line(s3, embedded_run):
    for args in (["evaluate", s3.url("runs/embedded"), s3.url("letter")],
                 ["predict", s3.url("runs/embedded/model"), s3.url("letter"), s3.url("scores/x.parquet")],
                 ["train", s3.url("runs/embedded/job.yaml"), "--resume"]):
        err = nsdist(*args, code=1).stderr.strip().splitlines()[-1]
        assert err.startswith(f"nsdist {args[0]}: error: the driver cannot read s3://"), err
        assert "no credentials" in err and "storage_options" in err, err


def test_a_worker_without_credentials_says_it_was_a_worker_which_url_and_what(s3, cluster, letter_url):
    import s3fs

    ds = Dataset.open(s3.url("letter"), storage_options=s3.options)
    blind = dataclasses.replace(ds, fs=s3fs.S3FileSystem(skip_instance_cache=True,
                                                         client_kwargs=s3.options["client_kwargs"]))
    model = LinearModel(coef=np.zeros(ds.n_features), intercept=0.0, measure="pauc", feature_names=ds.feature_names)
    with pytest.raises(StorageAccessError) as err:
        api.evaluate(model, blind, client=cluster.address)
    message = str(err.value)
    assert message.startswith("Dask worker ") and "tcp://127.0.0.1:" in message, message
    assert f"cannot read {s3.url('letter')}/part-000" in message and "no credentials" in message, message


# ------------------------------------------------------------------ retrain and its lock
def arrive(fs, s3, day: int, X: np.ndarray, y: np.ndarray) -> None:
    table = pa.table({**{f"f{j}": X[:, j] for j in range(X.shape[1])}, "label": y})
    pq.write_table(table, f"{s3.bucket}/stream/date=2026-11-{day:02d}/part-00000.parquet", filesystem=fs)


def test_two_retrain_cycles_then_two_racing_runs_with_the_registry_on_s3(s3, cluster, local, opts):
    fs = s3.filesystem()
    X, y = letter_rows()
    X = (X - X.mean(0)) / X.std(0)
    job = local / "retrain.yaml"
    job.write_text(yaml.safe_dump({
        "dataset": {"url": s3.url("stream")}, "measure": {"name": "pauc", "beta": 0.1},
        "solver": {"name": "1pmb", "random_state": 0}, "output": {"dir": s3.url("registry")},
        "retrain": {"tolerance": 0.05}}))

    def retrain(*extra) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "nsdist", "retrain", str(job), "--scheduler", cluster.address,
                                 "--storage-options", opts, *extra], cwd=local, env=dict(os.environ),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(proc) -> tuple[int, dict]:
        out, err = proc.communicate(timeout=300)
        OUTPUTS.append(out + err)
        assert proc.returncode in (0, 75), err
        return proc.returncode, json.loads(out)

    for day in (1, 2):
        arrive(fs, s3, day, X[(day - 1) * 3000:day * 3000], y[(day - 1) * 3000:day * 3000])
    _, first = finish(retrain("--summary", s3.url("summaries/first.json")))
    assert (first["status"], first["version"]) == ("promoted", "v0001")
    assert json.loads(fs.cat_file(f"{s3.bucket}/summaries/first.json"))["status"] == "promoted"
    arrive(fs, s3, 3, X[6000:9000], y[6000:9000])
    _, second = finish(retrain())
    assert second["status"] in ("promoted", "refused") and second["version"] == "v0002"

    arrive(fs, s3, 4, X[9000:12000], y[9000:12000])
    held = RegistryLock(*resolve(s3.url("registry/LOCK"), s3.options), stale_after=None)
    with held:                                         # another run holds the lock: exit 75, nothing written
        code, locked = finish(retrain())
    assert (code, locked["status"]) == (75, "locked") and locked["holder"]["token"] == held.token
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{s3.bucket}/registry") if "/v0" in p) == ["v0001", "v0002"]
    racers = [retrain(), retrain()]
    outcomes = [finish(proc) for proc in racers]
    statuses = sorted(summary["status"] for _, summary in outcomes)
    assert sum(s in ("promoted", "refused") for s in statuses) == 1, outcomes
    assert statuses[0] in ("locked", "no_new_data") or statuses[1] in ("locked", "no_new_data"), outcomes
    versions = sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{s3.bucket}/registry") if "/v0" in p)
    assert versions == ["v0001", "v0002", "v0003"]
    assert not fs.exists(f"{s3.bucket}/registry/LOCK")
    current = json.loads(fs.cat_file(f"{s3.bucket}/registry/CURRENT"))["version"]
    load_model(s3.url(f"registry/{current}/model"), s3.options)


def test_the_lock_on_s3_is_a_conditional_put_exactly_one_of_many_racers_wins(s3):
    fs, path = resolve(s3.url("locks/race/LOCK"), s3.options)
    barrier, winners, errors = threading.Barrier(8), [], []

    def race(i: int) -> None:
        lock = RegistryLock(fs, path, stale_after=None)
        barrier.wait()
        try:
            lock.acquire()
            winners.append(lock)
        except LockHeld:
            pass
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(winners) == 1
    winners[0].release()
    assert not fs.exists(path)


def test_two_runs_breaking_the_same_stale_s3_lock_cannot_both_take_over(s3):
    fs, path = resolve(s3.url("locks/stale/LOCK"), s3.options)
    fs.pipe_file(path, json.dumps({"token": "dead", "host": "elsewhere", "pid": 1, "created_ts": 0}).encode())
    barrier, winners = threading.Barrier(4), []

    def race() -> None:
        lock = RegistryLock(fs, path, stale_after=3600)
        barrier.wait()
        try:
            lock.acquire()
            winners.append(lock)
        except LockHeld:
            pass

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    holder = json.loads(fs.cat_file(path)) if fs.exists(path) else None
    assert holder is None or [w.token for w in winners] == [holder["token"]]
    assert not fs.exists(path + ".break")


# ------------------------------------------------------------------ secrets
def test_no_secret_in_any_file_the_runs_wrote_nor_in_their_output(s3, local, cluster, embedded_run):
    """Every object in the bucket, every local file of the runs, the Dask processes' logs, every command's output
    (run last: what the module's other tests wrote; alone: at least the ingest and the embedded run)."""
    fs = s3.filesystem()
    objects = fs.find(s3.bucket)
    assert any(p.endswith("runs/embedded/metrics.json") for p in objects)
    leaks = [p for p in objects if s3.secret.encode() in fs.cat_file(p) or s3.key.encode() in fs.cat_file(p)]
    files = [p for root in (local, cluster.workdir) for p in root.rglob("*") if p.is_file()]
    assert any(p.name == "w0.log" for p in files)
    leaks += [str(p) for p in files if s3.secret.encode() in p.read_bytes() or s3.key.encode() in p.read_bytes()]
    leaks += [text for text in OUTPUTS if s3.secret in text or s3.key in text]
    assert not leaks
