"""Scheduled retraining (``nsdist retrain``, :mod:`nsdist.retrain`, :mod:`nsdist.registry`).

The cycle runs as a scheduler would run it: ``nsdist train`` and ``nsdist
retrain`` subprocesses against a real ``dask scheduler`` with two ``dask
worker`` processes on 127.0.0.1, on the Letter data (positive class ``N``)
arriving as hive-style daily partitions ``date=2026-11-DD/part-00000.parquet``.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from nsdist.cli import main as cli_main
from nsdist.model import LinearModel, load_model
from nsdist.registry import LockHeld, Registry, RegistryLock
from nsdist.jobs import JobError
from nsdist.retrain import EXIT_LOCKED, RetrainSpec, load_retrain_job, plan, run_retrain

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared"
LETTER = next(p for p in (SHARED / "data" / "letter" / "letter-recognition.data",
                          REPO / "data" / "letter" / "letter-recognition.data") if p.exists())
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
TOLERANCE = 0.05


# ------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def letter() -> tuple[np.ndarray, np.ndarray]:
    """Standardised Letter features and labels (+1 for ``N``), rows in a fixed random order."""
    rows = np.loadtxt(LETTER, delimiter=",", dtype=str)
    X = rows[:, 1:].astype(np.float64)
    y = np.where(rows[:, 0] == "N", 1, -1).astype(np.int8)
    order = np.random.default_rng(0).permutation(len(y))
    return ((X - X.mean(0)) / X.std(0))[order], y[order]


def arrive(stream: Path, day: int, X: np.ndarray, y: np.ndarray) -> None:
    """Publish one day's partition the way a producer should: write aside, then rename."""
    folder = stream / f"date=2026-11-{day:02d}"
    folder.mkdir(parents=True)
    table = pa.table({**{f"f{j}": X[:, j] for j in range(X.shape[1])}, "label": y})
    pq.write_table(table, folder / ".part-00000.parquet.tmp")
    os.replace(folder / ".part-00000.parquet.tmp", folder / "part-00000.parquet")


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``roots`` with its size and mtime."""
    out = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            st = path.stat()
            out[str(path)] = (st.st_size if path.is_file() else -1, st.st_mtime_ns)
    return out


def nsdist(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "nsdist"), *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)


def retrain(job: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = nsdist("retrain", str(job), *extra, cwd=job.parent)
    assert result.returncode in (0, EXIT_LOCKED), result.stderr
    return result, json.loads(result.stdout)


def write_job(path: Path, stream: Path, registry: Path, **retrain_keys) -> Path:
    job = {"dataset": {"url": str(stream)}, "measure": {"name": "pauc", "beta": 0.1},
           "solver": {"name": "1pmb", "random_state": 0}, "output": {"dir": str(registry)},
           "retrain": {"tolerance": TOLERANCE, **retrain_keys}}
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.fixture(scope="module")
def scheduler(dask_processes) -> str:
    """A ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1; yields the address."""
    return dask_processes(2).address


# ----------------------------------------------------------- the full cycle
def test_train_then_two_arrivals_promote_refuse_then_no_op(scheduler, letter, tmp_path):
    X, y = letter
    stream, registry, base = tmp_path / "stream", tmp_path / "registry", tmp_path / "base"
    arrive(stream, 20, X[:3000], y[:3000])
    arrive(stream, 21, X[3000:6000], y[3000:6000])
    trained = nsdist("train", str(stream), "--scheduler", scheduler, "--measure", "pauc", "--beta", "0.1",
                     "--solver", "1pmb", "--random-state", "0", "--out", str(base), "--no-progress", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    job = write_job(tmp_path / "retrain.yaml", stream, registry, initial_model=str(base / "model"),
                    window_partitions=2)
    summary_file = tmp_path / "summary.json"

    # the first run adopts the trained model as v0001
    _, out = retrain(job, "--scheduler", scheduler, "--summary", str(summary_file))
    assert (out["status"], out["version"], out["current"]) == ("promoted", "v0001", "v0001")
    assert json.loads(summary_file.read_text()) == out
    reg = Registry(str(registry))
    assert reg.record("v0001")["decision"] == "adopted"
    np.testing.assert_array_equal(reg.load_model("v0001").coef, load_model(str(base / "model")).coef)

    # arrival 1: a good day; the candidate (the newest 2 partitions but the held-out one) is promoted
    arrive(stream, 22, X[6000:10000], y[6000:10000])
    arrive(stream, 23, X[10000:12500], y[10000:12500])
    _, out = retrain(job, "--scheduler", scheduler)
    assert (out["status"], out["version"], out["current"]) == ("promoted", "v0002", "v0002")
    assert out["holdout"] == ["date=2026-11-23/part-00000.parquet"]
    assert out["train"] == ["date=2026-11-21/part-00000.parquet", "date=2026-11-22/part-00000.parquet"]
    rec = reg.record("v0002")
    assert rec["decision"] == "promoted" and rec["incumbent_version"] == "v0001"
    assert rec["candidate"]["partial_auc"] >= rec["incumbent"]["partial_auc"] - TOLERANCE
    assert rec["candidate"]["n_rows"] == rec["incumbent"]["n_rows"] == 2500
    assert reg.manifest("v0002")["pending"] == ["date=2026-11-23/part-00000.parquet"]

    # arrival 2: a corrupted day (labels flipped) trains a worse candidate, which is refused
    arrive(stream, 24, X[12500:17500], -y[12500:17500])
    arrive(stream, 25, X[17500:], y[17500:])
    _, out = retrain(job, "--scheduler", scheduler)
    assert (out["status"], out["version"], out["current"]) == ("refused", "v0003", "v0002")
    assert out["train"] == ["date=2026-11-23/part-00000.parquet", "date=2026-11-24/part-00000.parquet"]
    rec = reg.record("v0003")
    assert rec["decision"] == "refused"
    assert rec["candidate"]["partial_auc"] < rec["incumbent"]["partial_auc"] - TOLERANCE
    assert reg.versions() == ["v0001", "v0002", "v0003"] and reg.current() == "v0002"
    assert json.loads((registry / "CURRENT").read_text())["model"] == "v0002/model"
    for version in reg.versions():
        assert {p.name for p in (registry / version).iterdir()} == {"model", "manifest.json", "metrics.json",
                                                                  "run.log"}
    assert "refused" in (registry / "v0003" / "run.log").read_text()

    # a rerun with no new data changes nothing on disk
    before = snapshot(registry, stream)
    result, out = retrain(job, "--scheduler", scheduler)
    assert result.returncode == 0 and out["status"] == "no_new_data" and out["current"] == "v0002"
    assert "no new partitions" in result.stderr
    assert snapshot(registry, stream) == before


def test_lock_blocks_a_concurrent_run_then_first_run_promotes(scheduler, letter, tmp_path):
    X, y = letter
    stream, registry = tmp_path / "stream", tmp_path / "registry"
    for day, start in zip((1, 2, 3), (0, 4000, 8000)):
        arrive(stream, day, X[start:start + 4000], y[start:start + 4000])
    job = write_job(tmp_path / "retrain.yaml", stream, registry)
    with Registry(str(registry)).lock(stale_after=3600):
        before = snapshot(registry, stream)
        result, out = retrain(job, "--scheduler", scheduler)
        assert result.returncode == EXIT_LOCKED and out["status"] == "locked"
        assert f"pid {os.getpid()}" in result.stderr and "another retrain run" in result.stderr
        assert snapshot(registry, stream) == before
    assert not (registry / "LOCK").exists()

    # the lock released, the first run trains from scratch and promotes v0001
    _, out = retrain(job, "--scheduler", scheduler)
    assert (out["status"], out["version"], out["current"]) == ("promoted", "v0001", "v0001")
    assert out["incumbent_version"] is None and out["message"].startswith("first version")
    assert out["holdout"] == ["date=2026-11-03/part-00000.parquet"]
    assert not (registry / "LOCK").exists()


def test_a_scheduled_run_sent_sigterm_releases_the_lock_and_promotes_nothing(scheduler, letter, tmp_path):
    """``python -m pipelines.retrain`` (what a scheduler runs) sent SIGTERM while it holds the registry's lock
    and trains: it exits 143 saying so, releases the lock (the process used to die on the signal, -15, with
    the lock held: a run on this host breaks such a lock, its pid gone, but one on another host is refused
    until it goes stale), writes a ``terminated`` summary and promotes nothing; the next run then trains and
    promotes v0001."""
    import signal

    X, y = letter
    stream, registry = tmp_path / "stream", tmp_path / "registry"
    for day, start in zip((1, 2, 3), (0, 4000, 8000)):
        arrive(stream, day, X[start:start + 4000], y[start:start + 4000])
    job = write_job(tmp_path / "retrain.yaml", stream, registry)
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.retrain", str(job), "--scheduler", scheduler,
                             "--summary", str(tmp_path / "summary.json")], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (registry / "LOCK").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be stopped"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "nsdist retrain: terminated (SIGTERM): the lock released, nothing promoted" in stderr
    assert not (registry / "LOCK").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "terminated"
    assert Registry(str(registry)).current() is None
    _, out = retrain(job, "--scheduler", scheduler)
    assert (out["status"], out["version"]) == ("promoted", "v0001")


# ------------------------------------------------------------- pure parts
def _ident(n: int) -> dict:
    return {"size": n, "tag": "t"}


LISTING = {f"date=2026-11-{d:02d}/part-0.parquet": _ident(d) for d in range(1, 7)}
NAMES = list(LISTING)


def test_plan_new_data_only_trains_on_pending_and_new():
    spec = RetrainSpec()
    first = plan(dict(list(LISTING.items())[:3]), {}, spec)
    assert (first.new, first.holdout, first.train) == (NAMES[:3], NAMES[2:3], NAMES[:2])
    second = plan(LISTING, first.manifest, spec)
    assert (second.new, second.holdout, second.train) == (NAMES[3:], NAMES[5:], NAMES[2:5])
    assert second.manifest == {"seen": LISTING, "pending": NAMES[5:]}
    assert plan(LISTING, second.manifest, spec).new == []


def test_plan_rewritten_partition_is_new_and_removed_ones_are_forgotten_for_training():
    state = plan(LISTING, {}, RetrainSpec()).manifest
    listing = {**{k: v for k, v in LISTING.items() if k != NAMES[5]}, NAMES[0]: _ident(99)}
    p = plan(listing, state, RetrainSpec())
    # the rewritten partition is new and trained on, but never the exam: no fresh one, so no exam
    assert (p.new, p.holdout, p.train) == ([NAMES[0]], [], [NAMES[0]])


def test_plan_never_holds_out_a_partition_the_incumbent_may_have_trained_on():
    """Issue 14 item 5: a rewritten (or touched) partition is not the exam, even when it sorts last."""
    state = plan(dict(list(LISTING.items())[2:]), {}, RetrainSpec()).manifest   # days 3-6 seen, day 6 pending
    trained_on = NAMES[2:5]
    touched = {**LISTING, NAMES[4]: _ident(77)}                                 # day 5 rewritten, days 1-2 late
    p = plan(touched, state, RetrainSpec())
    assert p.new == [NAMES[0], NAMES[1], NAMES[4]]
    assert p.holdout == [NAMES[1]] and not set(p.holdout) & set(trained_on)
    assert p.train == [NAMES[0], NAMES[4], NAMES[5]]                            # pending day 6 is trained on now
    # a rewritten pending partition (held out before: trained on by no model) may still be the exam
    again = plan({**LISTING, NAMES[5]: _ident(66)}, state, RetrainSpec())
    assert again.new == [NAMES[0], NAMES[1], NAMES[5]] and again.holdout == [NAMES[5]]


def test_a_run_with_only_rewritten_partitions_waits_and_writes_nothing(scheduler, letter, tmp_path):
    X, y = letter
    stream, registry = tmp_path / "stream", tmp_path / "registry"
    for day, start in zip((1, 2, 3), (0, 3000, 6000)):
        arrive(stream, day, X[start:start + 3000], y[start:start + 3000])
    job = write_job(tmp_path / "retrain.yaml", stream, registry, warm_start=False)
    rjob = load_retrain_job(str(job), [f"cluster.scheduler={scheduler}"])
    assert run_retrain(rjob)["status"] == "promoted"                # v0001 trained on days 1-2, exam day 3
    day2 = stream / "date=2026-11-02" / "part-00000.parquet"
    os.utime(day2, ns=(day2.stat().st_atime_ns, day2.stat().st_mtime_ns + 10**9))   # touched only
    files = lambda: {k: v for k, v in snapshot(registry).items() if v[0] >= 0}  # noqa: E731 (the lock touches the dir)
    before = files()
    out = run_retrain(rjob)
    assert out["status"] == "no_new_data" and "none is fresh" in out["message"]
    assert files() == before
    arrive(stream, 4, X[9000:12000], y[9000:12000])
    out = run_retrain(rjob)
    assert out["status"] in ("promoted", "refused")
    assert out["holdout"] == ["date=2026-11-04/part-00000.parquet"]
    assert "date=2026-11-02/part-00000.parquet" in out["train"]


def test_retrain_candidate_is_the_model_nsdist_train_builds(scheduler, tmp_path):
    """Issue 14 item 1: same job, same partitions -> the same model as ``nsdist train`` (standardised)."""
    from nsdist.jobs import load_job
    from nsdist.run import run_train

    rows = np.loadtxt(LETTER, delimiter=",", dtype=str)
    X = rows[:, 1:].astype(np.float64) * 10.0 + 3.0              # raw, unscaled features
    y = np.where(rows[:, 0] == "N", 1, -1).astype(np.int8)
    stream, registry, copy = tmp_path / "stream", tmp_path / "registry", tmp_path / "copy"
    for day, start in zip((1, 2, 3), (0, 5000, 10000)):
        arrive(stream, day, X[start:start + 5000], y[start:start + 5000])
    job = write_job(tmp_path / "retrain.yaml", stream, registry)
    out = run_retrain(load_retrain_job(str(job), [f"cluster.scheduler={scheduler}"]))
    assert out["status"] == "promoted" and out["holdout"] == ["date=2026-11-03/part-00000.parquet"]
    for name in out["train"]:                                    # the candidate's partitions, nothing else
        (copy / name).parent.mkdir(parents=True)
        (copy / name).write_bytes((stream / name).read_bytes())
    raw = yaml.safe_load(job.read_text())
    del raw["retrain"]
    raw["dataset"]["url"], raw["output"]["dir"] = str(copy), str(tmp_path / "train-run")
    train_job = tmp_path / "train.yaml"
    train_job.write_text(yaml.safe_dump(raw))
    built = run_train(load_job(str(train_job), [f"cluster.scheduler={scheduler}"]), progress=False).model
    candidate = Registry(str(registry)).load_model(out["version"])
    assert candidate.params["standardize"] is True and built.params["standardize"] is True
    np.testing.assert_array_equal(candidate.coef, built.coef)
    assert candidate.intercept == built.intercept


def test_retrain_job_yaml_goes_through_the_guarded_loader(tmp_path):
    """Issue 14 item 12: anchors/aliases and non-UTF-8 are refused in retrain jobs as in train jobs."""
    job = tmp_path / "alias.yaml"
    job.write_text("dataset: &d {url: s}\noutput: {dir: r}\nretrain: {tolerance: 0.1}\nx: *d\n")
    with pytest.raises(JobError, match="anchors and aliases"):
        load_retrain_job(str(job))
    job.write_bytes(b"dataset: {url: \xff}\n")
    with pytest.raises(JobError, match="not UTF-8"):
        load_retrain_job(str(job))


def test_scheduling_doc_lists_exactly_the_retrain_keys():
    """Issue 14 item 12: the retrain keys in docs/scheduling.md are the schema's."""
    import re

    text = (REPO / "docs" / "scheduling.md").read_text()
    documented = re.findall(r"^\| `retrain\.(\w+)` \| ([^|]+) \|", text, flags=re.M)
    assert [k for k, _ in documented] == list(RetrainSpec.model_fields)
    for key, default in documented:
        stated = yaml.safe_load(default.strip().strip("`"))
        assert stated == RetrainSpec.model_fields[key].default, key


def test_plan_windows():
    state = plan(dict(list(LISTING.items())[:4]), {}, RetrainSpec()).manifest
    by_count = plan(LISTING, state, RetrainSpec(window_partitions=3, holdout_partitions=2))
    assert (by_count.holdout, by_count.train) == (NAMES[4:], NAMES[1:4])
    by_days = plan(LISTING, state, RetrainSpec(window_days=2))
    assert (by_days.holdout, by_days.train) == (NAMES[5:], NAMES[3:5])
    with pytest.raises(ValueError, match="no date=YYYY-MM-DD"):
        plan({"part-0.parquet": _ident(1), "part-1.parquet": _ident(2)}, {}, RetrainSpec(window_days=2))
    with pytest.raises(ValueError, match="not both"):
        RetrainSpec(window_days=2, window_partitions=2)


def test_lock_is_exclusive_and_names_its_holder(tmp_path):
    reg = Registry(str(tmp_path / "reg"))
    with reg.lock(stale_after=3600):
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            reg.lock(stale_after=3600).acquire()
        holder = json.loads((tmp_path / "reg" / "LOCK").read_text())
        assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
    assert not (tmp_path / "reg" / "LOCK").exists()


def test_a_lock_interrupted_as_it_is_taken_is_released(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM (raised as an exception in the main thread) landing after ``LOCK`` was written but
    before the ``with`` began: the lock is removed on the way out (it was left, and a run on another host was
    refused until it went stale: CI saw a SIGTERMed run exit 143 with its lock in place), and one interrupted
    while it is written is not left empty; a lock another run holds is left alone."""
    from nsdist.registry import RegistryLock

    reg = Registry(str(tmp_path / "reg"))
    create = RegistryLock._create

    def interrupted(self, path, data):
        assert create(self, path, data)
        raise KeyboardInterrupt

    monkeypatch.setattr(RegistryLock, "_create", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with reg.lock(stale_after=3600):
            pass
    assert not (tmp_path / "reg" / "LOCK").exists()
    monkeypatch.setattr(RegistryLock, "_create", create)
    with reg.lock(stale_after=3600):
        monkeypatch.setattr(RegistryLock, "acquire", lambda self: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            with reg.lock(stale_after=3600):
                pass
        assert (tmp_path / "reg" / "LOCK").exists()          # the first lock's: not the interrupted one's
        monkeypatch.undo()
    assert not (tmp_path / "reg" / "LOCK").exists()
    import nsdist.data.fs as fs_module                       # ... and while LOCK is being written: not left empty

    def fdopen(fd, mode):            # created, nothing written yet
        raise KeyboardInterrupt

    monkeypatch.setattr(fs_module.os, "fdopen", fdopen)
    with pytest.raises(KeyboardInterrupt):
        with reg.lock(stale_after=3600):
            pass
    monkeypatch.undo()
    assert not (tmp_path / "reg" / "LOCK").exists()
    with reg.lock(stale_after=3600):
        assert json.loads((tmp_path / "reg" / "LOCK").read_text())["pid"] == os.getpid()


def test_stale_locks_are_broken_fresh_foreign_ones_are_not(tmp_path):
    path = tmp_path / "LOCK"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    lock_of = {"pid": int(dead), "host": socket.gethostname(), "created_ts": time.time(), "token": "x"}
    reg = Registry(str(tmp_path))
    for holder, stale in [(lock_of, True),                                               # process gone
                          ({**lock_of, "host": "elsewhere", "created_ts": time.time() - 7200}, True),  # too old
                          ({**lock_of, "host": "elsewhere"}, False)]:                    # may be alive
        path.write_text(json.dumps(holder))
        lock = reg.lock(stale_after=3600)
        if stale:
            lock.acquire()
            assert json.loads(path.read_text())["token"] == lock.token
            lock.release()
        else:
            with pytest.raises(LockHeld, match="elsewhere"):
                lock.acquire()
            assert json.loads(path.read_text()) == holder
    assert not (tmp_path / "LOCK.break").exists()


def test_registry_on_an_object_store_commits_versions_and_moves_current():
    reg = Registry(f"memory://nsdist-test-{os.getpid()}/versions")
    model = LinearModel(coef=np.arange(3.0), intercept=0.5, measure="pauc")
    assert (reg.versions(), reg.latest(), reg.current(), reg.next_version()) == ([], None, None, "v0001")
    reg.commit("v0001", model, {"seen": {}, "pending": []}, {"decision": "promoted", "candidate": {"auc": 1.0}})
    reg.promote("v0001", reg.record("v0001"))
    reg.fs.makedirs(reg.root + "/v0002")                 # a run that died before committing
    reg.commit("v0003", model, {"seen": {}, "pending": []}, {"decision": "refused"})
    assert (reg.versions(), reg.latest(), reg.current(), reg.next_version()) == (
        ["v0001", "v0003"], "v0003", "v0001", "v0004")
    np.testing.assert_array_equal(reg.load_model(reg.current()).coef, model.coef)
    assert json.loads(reg.fs.cat_file(reg.root + "/CURRENT"))["metrics"] == {"auc": 1.0}


def test_lock_on_an_object_store_is_advisory_but_works_sequentially():
    reg = Registry(f"memory://nsdist-test-{os.getpid()}/registry")
    with reg.lock(stale_after=None) as held:
        with pytest.raises(LockHeld):
            reg.lock(stale_after=None).acquire()
        assert isinstance(held, RegistryLock) and not held.local
    assert not reg.fs.exists(reg.root + "/LOCK")


def test_an_empty_dataset_directory_is_no_new_data_a_missing_one_an_error(tmp_path):
    (tmp_path / "stream").mkdir()
    out = run_retrain(load_retrain_job(str(write_job(tmp_path / "a.yaml", tmp_path / "stream", tmp_path / "reg"))))
    assert out["status"] == "no_new_data" and not (tmp_path / "reg").exists()
    job = write_job(tmp_path / "b.yaml", tmp_path / "nowhere", tmp_path / "reg")
    with pytest.raises(ValueError, match="directory into which partitions arrive"):
        run_retrain(load_retrain_job(str(job)))


def test_bad_job_file_is_one_line_per_problem_and_exit_2(tmp_path, capsys):
    job = write_job(tmp_path / "bad.yaml", tmp_path / "s", tmp_path / "r", tolerence=0.1)
    assert cli_main(["retrain", str(job), "--set", "retrain.holdout_partitions=0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert any("retrain.tolerence: unknown key" in line for line in err)
    assert any("retrain.holdout_partitions" in line for line in err)
