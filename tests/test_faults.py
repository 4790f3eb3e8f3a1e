"""Faults injected for real: SIGKILLed Dask workers, a SIGKILLed driver, writes killed midway.

Every process here is a real OS process started by the test (``dask
scheduler`` / ``dask worker`` on 127.0.0.1, the ``nsdist`` command line, a
Python writer) and every fault is a ``SIGKILL``: nothing gets to clean up.
The claim checked each time is docs/solvers.md §Determinism's: same seed and inputs give the same
model bit for bit, so a job that survives a fault must end with exactly the
model of an undisturbed run.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import numpy as np
import pytest
from test_engine import letter_arrays, write_parquet

from nsdist.api import train
from nsdist.engine import chain
from nsdist.engine.checkpoint import Checkpoint
from nsdist.model import load_model

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def letter_20(tmp_path_factory) -> str:
    """The Letter data set (20 000 rows, positive class ``N``) as 20 Parquet files of 1000 rows."""
    X, y = letter_arrays()
    return write_parquet(tmp_path_factory.mktemp("letter20"), X, y, rows_per_file=1000)


def next_step_worker(client) -> str:
    """The worker running the chain's next step, else the one holding most prefetched partitions."""
    for address, keys in client.processing().items():
        if any(str(k).startswith(("nsdist-step", "nsdist-group")) for k in keys):
            return address
    held = client.has_what()
    return max(held, key=lambda a: sum(str(k).startswith("nsdist-load") for k in held[a]))


def sigkill_worker(cluster, client, address: str) -> int:
    """SIGKILL the ``dask worker`` process (no nanny) serving ``address``; return its exit status."""
    pid = client.run(os.getpid, workers=[address])[address]
    (proc,) = [p for p in cluster.workers if p.pid == pid]
    os.kill(pid, signal.SIGKILL)
    return proc.wait(timeout=30)


def assert_same_model(a, b) -> None:
    """Bit for bit: coefficients, intercept, and the epochs and rows that made them."""
    np.testing.assert_array_equal(a.coef, b.coef)
    assert a.intercept == b.intercept
    for key in ("epochs", "skipped_epochs", "rows_seen"):
        assert a.history[key] == b.history[key], key


# ------------------------------------------------------------------------ workers
@pytest.mark.parametrize("solver, gather_bytes, buffer_size",
                         [("1pmb", None, 500), ("2pmb", None, 500), ("1pmb", 0, 500), ("1pmb", 0, 50)],
                         ids=["1pmb", "2pmb", "1pmb-state-left-on-cluster", "1pmb-state-left-on-cluster-checks"])
def test_workers_sigkilled_mid_training_give_the_identical_model(dask_processes, letter_20, solver, gather_bytes,
                                                                 buffer_size, reliability, monkeypatch):
    """Two of three workers are SIGKILLed during training (the one running the next step each
    time); the job finishes on the last worker with the undisturbed run's model, bit for bit.
    ``gather_bytes=0``: the driver fetches only the steps' statistics, as it does for a wide model
    (nsdist.engine.chain.GATHER_BYTES), and a failure redoes the segment from its start; with
    ``buffer_size=50`` a check comes every ten or so steps, and each segment after one starts from the
    state that the worker holding the last segment's end makes (``with_alive``); a kill may take that one.
    The narrow-state cases fuse their steps (docs/engine.md §Fused steps): the kill takes the worker running
    the next group, and the group submitted ahead of a check with it."""
    from distributed import get_task_stream

    params = dict(measure="pauc", solver=solver, n_passes=2, random_state=7, validation_folds=1,   # streamed
                  buffer_size=buffer_size)
    with dask_processes(3) as cluster, cluster.client() as client:
        reference = train(letter_20, client=client, **params)
        if gather_bytes is not None:
            monkeypatch.setattr(chain, "GATHER_BYTES", gather_bytes)
        kills: list[tuple[int, str, int]] = []

        def kill_at(p) -> None:
            if p.step in (7, 23):
                victim = next_step_worker(client)
                kills.append((p.step, victim, sigkill_worker(cluster, client, victim)))

        with get_task_stream(client) as stream:
            survived = train(letter_20, client=client, on_step=kill_at, **params)
        carried = [t for t in stream.data if t["key"].startswith("nsdist-alive")]
        assert bool(carried) == (buffer_size == 50)
        reliability("fault", f"SIGKILL 2 of 3 workers mid-training ({solver.upper()}, 40 partition steps"
                    + (", checks every ~10 steps" if buffer_size == 50 else "") + ")",
                    injected=len(kills), survivors=len(client.scheduler_info()["workers"]))
        assert [(step, status) for step, _, status in kills] == [(7, -signal.SIGKILL), (23, -signal.SIGKILL)]
        assert kills[0][1] != kills[1][1]
        assert len(client.scheduler_info()["workers"]) == 1
        assert_same_model(survived, reference)


def test_a_worker_sigkilled_while_scoring_a_dataset_gives_the_same_scores(dask_processes, letter_20, tmp_path,
                                                                          reliability):
    """``nsdist.predict`` to a directory on three workers; after the third part the worker scoring a part is
    SIGKILLed: Dask runs its parts again on the others (a part is written whole or written again under its
    name), and the directory holds the one-process output's table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import nsdist
    from nsdist.data.scoring import write_scores
    from nsdist.model import LinearModel

    names = [f"f{j}" for j in range(16)]
    model = LinearModel(np.random.default_rng(5).normal(size=16), 0.2, "pauc", feature_names=names)
    write_scores(model, letter_20, str(tmp_path / "reference.parquet"))
    with dask_processes(3) as cluster, cluster.client() as client:
        kills: list[int] = []

        def kill_at(done: int, total: int, rows: int) -> None:
            if done == 3 and not kills:
                busy = [a for a, keys in client.processing().items()
                        if any(str(k).startswith("nsdist-predict") for k in keys)]
                kills.append(sigkill_worker(cluster, client, busy[0]))

        result = nsdist.predict(model, letter_20, str(tmp_path / "scores"), client=client, on_file=kill_at)
        reliability("fault", "SIGKILL 1 of 3 workers while scoring 20 files into a directory",
                    injected=len(kills), survivors=len(client.scheduler_info()["workers"]))
        assert kills == [-signal.SIGKILL] and len(client.scheduler_info()["workers"]) == 2
    assert result["rows"] == 20000 and result["files"] == 20
    parts = sorted((tmp_path / "scores").glob("part-*.parquet"))
    assert len(parts) == 20
    assert pa.concat_tables([pq.read_table(p) for p in parts]).equals(pq.read_table(tmp_path / "reference.parquet"))


@pytest.mark.parametrize("fused", [False, True])
def test_every_worker_killed_four_times_job_redoes_and_finishes(dask_processes, letter_20, caplog, reliability,
                                                                monkeypatch, fused):
    """All workers are SIGKILLed at four points of a 2PMB run (their nannies restart them): each
    time every result and the scattered reservoir are lost, the chain redoes the step from the last
    gathered model — more often in one job than ``max_restarts`` (which bounds retries of one step).
    With a load task and a step task per step, and with fused steps (docs/engine.md §Fused steps; two
    1000-row partitions a group, so that the four kills fall in four groups): the cached partitions
    and the group submitted ahead of a check die with the workers too."""
    params = dict(measure="prbep", solver="2pmb", n_passes=2, random_state=3, validation_folds=1)
    monkeypatch.setattr(chain, "FUSE_GROUP_BYTES", 40_000)      # 1000 rows x 16 float64: 128 kB a partition
    with dask_processes(2, nanny=True) as cluster, cluster.client() as client, \
            dask.config.set({chain.FUSE_KEY: fused}):
        reference = train(letter_20, client=client, **params)
        killed: list[int] = []

        def kill_all_at(p) -> None:
            if p.step in (5, 15, 25, 35):
                client.wait_for_workers(2, timeout=60)     # both restarted since the last kill
                pids = client.run(os.getpid)
                for pid in pids.values():
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids.values())

        with caplog.at_level(logging.INFO, logger="nsdist"):
            survived = train(letter_20, client=client, on_step=kill_all_at, **params)
        assert ("fused steps: the partitions average" in caplog.text) == fused
        redone = [r.getMessage() for r in caplog.records if "redoing it from the last model" in r.getMessage()]
        reliability("fault", "SIGKILL every worker at 4 points of a 2PMB run (nanny restarts them)"
                    + (", steps fused" if fused else ""), injected=len(killed), redone_steps=len(redone))
        assert len(killed) == 8 and len(set(killed)) == 8          # fresh worker processes each time
        assert len(redone) >= 4
        assert all("(restart 1/3)" in m or "(restart 2/3)" in m for m in redone)
        assert_same_model(survived, reference)


def test_a_reservoir_scatter_that_fails_is_redone_to_the_identical_model(dask_processes, letter_20, caplog,
                                                                         monkeypatch):
    """A 2PMB chain scatters its reservoir to every worker at its start and again after a failure, when a worker
    may be restarting: the SIGKILL test above once failed there, the re-scatter raising ``CommClosedError`` out of
    the redo.  The scatter is now part of the redo, so its failure is one more failure redone.  Injected here
    deterministically (the reservoir's first scatter fails as it did) on real worker processes; the model is
    the undisturbed run's, bit for bit."""
    from distributed.comm.core import CommClosedError

    from nsdist.solvers.sgd import Reservoir

    params = dict(measure="prbep", solver="2pmb", eta=0.5, n_passes=1, random_state=3)
    with dask_processes(2) as cluster, cluster.client() as client:
        reference = train(letter_20, client=client, **params)
        scatter, failed = client.scatter, []

        def failing_once(data, *args, **kwargs):
            if isinstance(data, Reservoir) and not failed:
                failed.append(data)
                raise CommClosedError("in <TCP (closed) ConnectionPool.scatter>: Stream is closed")
            return scatter(data, *args, **kwargs)

        monkeypatch.setattr(client, "scatter", failing_once)
        with caplog.at_level(logging.WARNING, logger="nsdist"):
            survived = train(letter_20, client=client, **params)
    assert len(failed) == 1
    assert "failed (CommClosedError" in caplog.text and "(restart 1/3)" in caplog.text
    assert_same_model(survived, reference)


# ------------------------------------------------------- K-fold selection's fold fits
def test_k_fold_fits_lost_with_the_scattered_rows_are_redone_to_the_identical_model(
        dask_processes, letter_20, caplog, reliability, monkeypatch):
    """The default selects by 5 folds on Letter (a holdout would hold 55 positives); its fold fits run as Dask
    tasks on rows the driver scattered.  The worker holding the scattered rows ``X`` is SIGKILLed right after the
    scatter, before any other worker copied it: every fold fit is cancelled for lost dependencies, the driver
    scatters its rows again and redoes them, and the model is the undisturbed run's, bit for bit."""
    from distributed import Client

    params = dict(measure="prbep", random_state=5)
    with dask_processes(3) as cluster, cluster.client() as client:
        reference = train(letter_20, client=client, **params)
        assert reference.history["folds"] == 5
        kills: list[int] = []
        scatter = Client.scatter

        def scatter_then_kill_the_holder(self, data, **kw):
            futures = scatter(self, data, **kw)
            rows = [key for key in data if str(key).startswith("nsdist-fold-rows-")] if isinstance(data, dict) else []
            if rows and not kills:
                (x,) = [futures[key] for key in rows if key.endswith("-X")]
                (holder,) = self.who_has(x)[x.key]
                kills.append(sigkill_worker(cluster, client, holder))
            return futures

        monkeypatch.setattr(Client, "scatter", scatter_then_kill_the_holder)
        with caplog.at_level(logging.WARNING, logger="nsdist.engine"):
            survived = train(letter_20, client=client, **params)
        redone = [r.getMessage() for r in caplog.records if "scattering the rows again" in r.getMessage()]
        reliability("fault", "SIGKILL the worker holding K-fold selection's scattered rows",
                    injected=len(kills), redone=len(redone))
        assert kills == [-signal.SIGKILL] and len(client.scheduler_info()["workers"]) == 2
        assert len(redone) == 1 and "(restart 1/3)" in redone[0]
        np.testing.assert_array_equal(survived.coef, reference.coef)
        assert survived.intercept == reference.intercept
        assert survived.history["selection"] == reference.history["selection"]


def test_k_fold_fit_lost_with_its_worker_mid_fit_gives_the_identical_model(dask_processes, letter_20,
                                                                          reliability):
    """A worker is SIGKILLed while it runs one of the 5 fold fits (found on the scheduler as it runs); the
    other workers finish the job with the undisturbed run's model, bit for bit."""
    import threading

    params = dict(measure="f1", random_state=6)
    with dask_processes(3) as cluster, cluster.client() as client:
        reference = train(letter_20, client=client, **params)
        kills: list[tuple[str, int]] = []
        stop = threading.Event()

        def kill_a_fold_fit() -> None:
            while not stop.is_set() and not kills:
                for address, keys in client.processing().items():
                    if any(str(k).startswith("nsdist-fold-") for k in keys):
                        kills.append((address, sigkill_worker(cluster, client, address)))
                        return
                time.sleep(0.002)

        watcher = threading.Thread(target=kill_a_fold_fit, daemon=True)
        watcher.start()
        try:
            survived = train(letter_20, client=client, **params)
        finally:
            stop.set()
            watcher.join(timeout=30)
        reliability("fault", "SIGKILL a worker running a K-fold fit", injected=len(kills),
                    survivors=len(client.scheduler_info()["workers"]))
        assert [status for _, status in kills] == [-signal.SIGKILL]
        np.testing.assert_array_equal(survived.coef, reference.coef)
        assert survived.intercept == reference.intercept


def test_k_fold_fit_lost_mid_lockstep_is_found_out_of_step_and_all_are_restarted(dask_processes, letter_20,
                                                                                  caplog, reliability):
    """A worker holding fold fits is SIGKILLed after the folds' third check, the scattered rows first copied to
    every worker with Dask's memory manager stopped (where the scatter put them is Dask's choice; a lost only copy
    is the driver's to scatter again, another path): the scheduler recomputes those fits from their start on a survivor, so their next answer
    is for the wrong check; the driver finds them out of step, restarts every fold's fit and the model is the
    undisturbed run's, bit for bit."""
    from distributed import Future

    params = dict(measure="pauc", random_state=4)
    with dask_processes(3) as cluster, cluster.client() as client:
        client.amm.stop()      # the memory manager drops replicas no task waits for (every 2 s): keep the copies
        reference = train(letter_20, client=client, **params)
        kills: list[int] = []

        def kill_a_fit_holder(p) -> None:
            if p.step == 3 and not kills:
                rows = {k for keys in client.has_what().values() for k in keys if "-rows-" in str(k)}
                client.replicate([Future(k, client=client) for k in rows])
                held = client.has_what()
                assert all(rows <= set(keys) for keys in held.values()), held
                victims = [a for a, keys in sorted(held.items()) if any("-start-" in str(k) for k in keys)]
                assert victims, held
                kills.append(sigkill_worker(cluster, client, victims[0]))

        with caplog.at_level(logging.WARNING, logger="nsdist.engine"):
            survived = train(letter_20, client=client, on_step=kill_a_fit_holder, **params)
        restarted = [r.getMessage() for r in caplog.records if "restarting all 5" in r.getMessage()]
        reliability("fault", "SIGKILL a worker holding a K-fold fit mid-lockstep", injected=len(kills),
                    restarted=len(restarted))
        assert kills == [-signal.SIGKILL] and len(restarted) == 1, restarted
        assert "WorkLost" in restarted[0], restarted
        np.testing.assert_array_equal(survived.coef, reference.coef)
        assert survived.intercept == reference.intercept
        assert survived.history["selection"] == reference.history["selection"]


# ------------------------------------------------------------------------- ingest
@pytest.mark.parametrize("phase", [0, 1, 2], ids=["scan", "chunks", "partitions"])
def test_ingest_with_a_worker_sigkilled_mid_phase_writes_the_identical_dataset(dask_processes, repo_data, tmp_path,
                                                                              caplog, reliability, phase):
    """``nsdist.ingest`` of the bundled Letter CSV on 3 real workers, one SIGKILLed while it runs the first
    call of a phase (the scan of the text blocks, the chunks' encoding, the partitions' assembly): the lost
    call is redone (its text block scattered again, or by Dask) and the dataset is byte for byte the
    undisturbed one."""
    import threading

    from nsdist.data.ingestion import ingest

    src = repo_data / "letter" / "letter-recognition.data"
    options = dict(format="csv", label_column=0, positive="N", chunk_rows=2000,
                   rows_per_partition=2000)              # 10 calls a phase to catch in flight
    with dask_processes(3) as cluster, cluster.client() as client:
        reference = ingest(src, tmp_path / "reference", client=client, **options)
        kills: list[int] = []
        stop = threading.Event()

        def kill_in_phase() -> None:
            tokens: list[str] = []           # the phases' keys: nsdist-ingest-<token>-<call>, a token a phase
            while not stop.is_set() and not kills:
                for address, keys in client.processing().items():
                    for key in map(str, keys):
                        if key.startswith("nsdist-ingest-") and key.split("-")[2] not in tokens:
                            tokens.append(key.split("-")[2])
                    if len(tokens) > phase and any(str(k).startswith(f"nsdist-ingest-{tokens[phase]}-")
                                                   for k in keys):
                        kills.append(sigkill_worker(cluster, client, address))
                        return
                time.sleep(0.001)

        watcher = threading.Thread(target=kill_in_phase, daemon=True)
        watcher.start()
        try:
            with caplog.at_level(logging.WARNING, logger="nsdist.data"):
                survived = ingest(src, tmp_path / "survived", client=client, **options)
        finally:
            stop.set()
            watcher.join(timeout=30)
        redone = [r.getMessage() for r in caplog.records if r.name == "nsdist.data"]
        reliability("fault", f"SIGKILL a worker during ingest ({['scan', 'chunks', 'partitions'][phase]})",
                    injected=len(kills), redone=len(redone))
        assert kills == [-signal.SIGKILL] and len(client.scheduler_info()["workers"]) == 2
        # a call whose text block died with the worker is redone by ingest (logged); one that only lost its
        # worker (the partitions' assembly reads files) is rerun by Dask
        assert all("restart 1/3" in m for m in redone)
        assert survived.metadata["content_sha256"] == reference.metadata["content_sha256"]
        for a, b in zip(reference.partitions, survived.partitions):
            assert Path(a.path).read_bytes() == Path(b.path).read_bytes()


# ------------------------------------------------------------------------- driver
def nsdist_cli(*args, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m nsdist ARGS`` with ``env`` added to the environment."""
    return subprocess.run([sys.executable, "-m", "nsdist", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env})


def one_line_error(proc: subprocess.CompletedProcess, code: int) -> str:
    """The one error line (``nsdist COMMAND: ...``) of a failed command; log warnings may precede it."""
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith(f"nsdist {proc.args[3]}: ")]
    return line


TRAIN = ["--measure", "pauc", "--solver", "2pmb", "--n-passes", 4, "--random-state", 5, "--checkpoint-every", 1,
         "--no-progress", "--set", "solver.validation_folds=1"]          # streamed: one holdout


@pytest.fixture(scope="module")
def shared_cluster(dask_processes) -> dict:
    """The environment of a command using a scheduler and two workers started here."""
    return {"DASK_SCHEDULER_ADDRESS": dask_processes(2).address}


@pytest.fixture(scope="module")
def uninterrupted(shared_cluster, letter_20, tmp_path_factory) -> Path:
    """The run directory of ``nsdist train`` left alone."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    proc = nsdist_cli("train", letter_20, *TRAIN, "--out", out, env=shared_cluster)
    assert proc.returncode == 0, proc.stderr
    return out


def read_checkpoint(path: Path) -> dict | None:
    """The checkpoint's JSON, or None while there is none."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None


def stopped_run(letter_20: str, env: dict, out: Path, how: signal.Signals) -> tuple[int, str]:
    """Run ``nsdist train`` into ``out`` and send it ``how`` once its checkpoint has passed partition step 8;
    its exit status and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "nsdist", "train", letter_20, *map(str, TRAIN), "--out", str(out)],
                            cwd=REPO, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 240
    while (ck := read_checkpoint(out / "checkpoint.json")) is None or ck["position"] < 8:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be stopped"
        time.sleep(0.005)
    proc.send_signal(how)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


def assert_resumes_to(out: Path, uninterrupted: Path, env: dict) -> None:
    """``nsdist train <out>/job.yaml --resume`` writes the uninterrupted run's model, bit for bit."""
    proc = nsdist_cli("train", out / "job.yaml", "--resume", env=env)
    assert proc.returncode == 0, proc.stderr
    resumed, full = load_model(str(out / "model")), load_model(str(uninterrupted / "model"))
    np.testing.assert_array_equal(resumed.coef, full.coef)
    assert resumed.intercept == full.intercept


@pytest.fixture(scope="module")
def killed_run(shared_cluster, letter_20, tmp_path_factory) -> dict:
    """``nsdist train`` SIGKILLed once its checkpoint has passed partition step 8."""
    out = tmp_path_factory.mktemp("killed") / "run"
    status, _ = stopped_run(letter_20, shared_cluster, out, signal.SIGKILL)
    snapshot = out.parent / "checkpoint-at-kill.json"
    shutil.copy(out / "checkpoint.json", snapshot)
    return {"out": out, "status": status, "checkpoint": read_checkpoint(snapshot), "snapshot": snapshot}


def test_driver_sigkilled_mid_run_resumes_to_the_identical_model(killed_run, uninterrupted, shared_cluster,
                                                                 reliability):
    """``nsdist train`` is SIGKILLed mid-run; ``nsdist train <run>/job.yaml --resume`` continues from
    its last checkpoint and writes the model of the uninterrupted run, bit for bit."""
    out, ck = killed_run["out"], killed_run["checkpoint"]
    reliability("fault", "SIGKILL the `nsdist train` driver mid-run, then `--resume`", injected=1,
                killed_at_step=ck["position"], of_steps=ck["n_steps"])
    assert killed_run["status"] == -signal.SIGKILL
    assert 8 <= ck["position"] < ck["n_steps"] == 80
    assert not (out / "model").exists() and not (out / "metrics.json").exists()
    assert_resumes_to(out, uninterrupted, shared_cluster)
    assert _sha(out) == _sha(uninterrupted)
    done, expected = (json.loads((d / "metrics.json").read_text()) for d in (out, uninterrupted))
    assert done["evaluation"] == expected["evaluation"]
    assert done["training"]["rows_seen"] == expected["training"]["rows_seen"]
    assert f"resuming from {out / 'checkpoint.json'} at partition step {ck['position']} of 80" \
        in (out / "run.log").read_text()


@pytest.fixture(scope="module")
def terminated_run(shared_cluster, letter_20, tmp_path_factory) -> dict:
    """``nsdist train`` sent SIGTERM (a scheduler's time limit, a container stopping) once its checkpoint has
    passed partition step 8."""
    out = tmp_path_factory.mktemp("terminated") / "run"
    status, stderr = stopped_run(letter_20, shared_cluster, out, signal.SIGTERM)
    return {"out": out, "status": status, "stderr": stderr, "checkpoint": read_checkpoint(out / "checkpoint.json")}


def test_driver_sent_sigterm_mid_run_exits_143_and_resumes_to_the_identical_model(terminated_run, uninterrupted,
                                                                                   shared_cluster):
    """SIGTERM unwinds the run as Ctrl-C does: exit 143 with one line saying so (not death by the signal, -15),
    no model or metrics written, the checkpoint kept; ``--resume`` then writes the uninterrupted run's model,
    bit for bit."""
    out, ck = terminated_run["out"], terminated_run["checkpoint"]
    assert terminated_run["status"] == 143, terminated_run["stderr"]
    assert "nsdist: terminated (SIGTERM); nothing half-written is left" in terminated_run["stderr"]
    assert "Traceback" not in terminated_run["stderr"]
    assert 8 <= ck["position"] < ck["n_steps"] == 80
    assert not (out / "model").exists() and not (out / "metrics.json").exists()
    assert_resumes_to(out, uninterrupted, shared_cluster)


def test_ingest_sent_sigterm_midway_leaves_the_previous_dataset_and_no_staging_directory(tmp_path):
    """``nsdist ingest --overwrite`` of a 1.2-million-row CSV over a dataset, sent SIGTERM once its hidden
    staging directory exists: it exits 143, removes the staging directory on the way out (the process used to
    die on the signal and leave it), and the previous dataset is byte for byte as it was.  What a SIGKILL
    would leave (a staging directory, a moved-aside previous output) is named by the next run, and kept."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(3)
    n = 1_200_000
    columns = {f"f{j}": rng.normal(size=n).round(6) for j in range(8)}
    pacsv.write_csv(pa.table({"label": np.where(rng.random(n) < 0.05, 1, -1), **columns}), tmp_path / "big.csv")
    small = tmp_path / "small.csv"
    small.write_text("label,f0,f1,f2,f3,f4,f5,f6,f7\n" + "".join(f"{1 if i % 3 == 0 else -1},{i},1,2,3,4,5,6,7\n"
                                                               for i in range(300)))
    dst = tmp_path / "data"
    ingest = [sys.executable, "-m", "nsdist", "ingest"]
    first = subprocess.run([*ingest, str(small), str(dst), "--no-progress"], cwd=REPO, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    before = {p.relative_to(dst): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    proc = subprocess.Popen([*ingest, str(tmp_path / "big.csv"), str(dst), "--overwrite", "--no-progress"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob(".data.tmp-*")):
        assert proc.poll() is None and time.monotonic() < deadline, "the ingest ended before it could be stopped"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "nsdist: terminated (SIGTERM)" in stderr and "Traceback" not in stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert {p.relative_to(dst): p.read_bytes() for p in dst.rglob("*") if p.is_file()} == before
    # what SIGKILL leaves (no unwinding) is named by the next run into the same place, and left alone
    (tmp_path / ".data.tmp-0123456789ab").mkdir()
    (tmp_path / ".data.old-0123456789ab").mkdir()            # killed between its two renames
    again = subprocess.run([*ingest, str(small), str(dst), "--overwrite", "--no-progress"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "left beside it by a killed run, which could not clean up: .data.tmp-0123456789ab" in again.stderr
    assert "the previous output, moved aside by a run killed while replacing it: .data.old-0123456789ab" \
        in again.stderr
    assert (tmp_path / ".data.tmp-0123456789ab").is_dir() and (tmp_path / ".data.old-0123456789ab").is_dir()


def _sha(run: Path) -> str:
    """The weights checksum recorded in a run's model.json."""
    return json.loads((run / "model" / "model.json").read_text())["weights"]["sha256"]


@pytest.mark.parametrize("change", ["other parameters", "other dataset"])
def test_resume_refuses_a_checkpoint_of_another_job(killed_run, shared_cluster, letter_20, tmp_path, change,
                                                    reliability):
    """A checkpoint is refused, with the reason, by a job with other training parameters or on
    other data (the same files and one more); the checkpoint is left as it was."""
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(killed_run["snapshot"], out / "checkpoint.json")
    data, train_args = letter_20, list(TRAIN)
    if change == "other parameters":
        train_args[train_args.index("--random-state") + 1] = 6
        needle = "was written by a job with other training parameters; refusing to resume"
    else:
        data = shutil.copytree(letter_20, tmp_path / "other-data")
        X, y = letter_arrays()
        write_parquet(Path(data) / "tail", X[:999], y[:999], rows_per_file=999)   # one more partition
        needle = "was written for another dataset"
    line = one_line_error(nsdist_cli("train", data, *train_args, "--out", out, "--resume", env=shared_cluster), 1)
    reliability("bad input", f"`--resume` with a checkpoint of a job with {change}", exit_code=1, message=line)
    assert needle in line and str(out / "checkpoint.json") in line
    assert (out / "checkpoint.json").read_bytes() == killed_run["snapshot"].read_bytes()
    assert not (out / "model").exists()


# -------------------------------------------------------------------------- writes
#: A single-threaded supervisor that imports nsdist once, then for each line ``FIRST`` on stdin forks
#: a writer saving rounds ``FIRST, FIRST+1, ...`` of a model, metrics.json, a checkpoint and a large
#: learning_curve.png (most of the round's disk writes: the kills that land mid-write) until it is
#: killed; it reports ``pid N``, each finished round, and ``exit STATUS`` on stdout.
WRITER = """
import itertools, os, sys, threading
import numpy as np
from nsdist.engine.checkpoint import Checkpoint, Checkpointer
from nsdist.model import LinearModel
from nsdist.report import RunDir
from nsdist.solvers.kernel import EPOCH_STATS, SGDState

def write_rounds(run, first, d):
    saver = Checkpointer(run.checkpoint, job="job", dataset_fingerprint="data")
    for v in itertools.count(first):
        LinearModel(coef=np.full(d, float(v)), intercept=float(v), measure="pauc",
                    history={"round": v}).save(run.model)
        run.write_json("metrics.json", {"round": v, "values": [v] * d})
        saver.write(Checkpoint("job", "data", v, v, SGDState(W=np.full(d, float(v))), None,
                               np.zeros(1, EPOCH_STATS), 0.0))
        run.write_bytes("learning_curve.png", bytes([v % 251]) * BLOB)
        os.write(1, f"{v}\\n".encode())

run, d, BLOB = RunDir(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for line in sys.stdin:
    assert threading.active_count() == 1
    pid = os.fork()
    if pid == 0:
        try:
            write_rounds(run, int(line), d)
        finally:
            os._exit(1)
    os.write(1, f"pid {pid}\\n".encode())
    os.write(1, f"exit {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}\\n".encode())
"""


def test_writes_killed_midway_leave_the_previous_files_intact(tmp_path, reliability):
    """A process saving a model (20 000 weights), metrics.json, a checkpoint and a 96 MB
    learning_curve.png in a loop is SIGKILLed 20 times: at a random moment, or (every other
    time) as soon as a write is seen in progress.  After every kill each file loads and verifies
    (checksum, JSON, length), holds one whole round (weights, intercept and metadata of the same
    save), and is no older than the last round the writer finished."""
    run, d, blob = tmp_path / "run", 20_000, 96 * 2**20
    supervisor = subprocess.Popen([sys.executable, "-c", WRITER, str(run), str(d), str(blob)], cwd=REPO, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    rng = np.random.default_rng(2024)
    kills, finished, mid_write = 20, None, 0   # the last round reported complete; kills that cut a write
    attempted: set[int] = set()                # every round a writer began
    try:
        for i in range(kills):
            first = (i + 1) * 1000
            supervisor.stdin.write(f"{first}\n")
            supervisor.stdin.flush()
            lines = [supervisor.stdout.readline().split()]
            while lines[-1][0] != "pid":
                lines.append(supervisor.stdout.readline().split())
            time.sleep(rng.uniform(0.05, 1.0))
            deadline = time.monotonic() + 10
            while i % 2 and not list(run.rglob("*.tmp-*")) and time.monotonic() < deadline:
                time.sleep(0.001)
            os.kill(int(lines[-1][1]), signal.SIGKILL)
            while lines[-1][0] != "exit":
                lines.append(supervisor.stdout.readline().split())
            assert int(lines[-1][1]) == -signal.SIGKILL
            rounds = [int(line[0]) for line in lines if line[0].isdigit()]
            finished = rounds[-1] if rounds else finished
            started = rounds[-1] + 1 if rounds else first
            attempted.update([*rounds, started])
            leftovers = list(run.rglob("*.tmp-*"))      # what a killed write leaves: never read, removed here
            mid_write += bool(leftovers)
            for path in leftovers:
                path.unlink()
            if finished is None:        # killed before its first round was complete
                continue
            model = load_model(str(run / "model"))
            v = model.history["round"]
            assert finished <= v <= started
            assert model.intercept == v and np.all(model.coef == v) and model.coef.shape == (d,)
            metrics = json.loads((run / "metrics.json").read_text())
            assert finished <= metrics["round"] <= started and set(metrics["values"]) == {metrics["round"]}
            ck = Checkpoint.load(str(run / "checkpoint.json"), job="job", dataset_fingerprint="data")
            assert finished <= ck.position <= started and np.all(ck.state.W == ck.position)
            png = np.fromfile(run / "learning_curve.png", dtype=np.uint8)
            assert png.shape == (blob,) and np.all(png == png[0])
            assert png[0] in {r % 251 for r in attempted if finished <= r <= started}
    finally:
        supervisor.stdin.close()
        supervisor.wait(timeout=30)
    reliability("fault", "SIGKILL a process saving model, metrics.json, checkpoint and plot in a loop",
                injected=kills, kills_mid_write=mid_write)
    assert finished is not None and finished >= 1000
    assert mid_write >= kills // 4
