"""The ring: the chain's states handed from worker to worker (docs/engine.md §The ring).

Real Dask: a ``LocalCluster`` of worker processes, and ``dask scheduler`` / ``dask worker``
processes started here for the SIGKILL.  Real Parquet files of the Letter data set.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time

import dask
import numpy as np
import pytest
from distributed import Client, Future, LocalCluster

import nsdist
from nsdist._faults import WorkLost
from nsdist.api import train
from nsdist.engine import chain
from nsdist.engine.chain import CACHE_KEY
from nsdist.engine.ring import RING_KEY, TIMINGS, Mailbox, ring_slots
from test_engine import letter_arrays, letter_by_negatives, letter_by_rows


@pytest.fixture(scope="module")
def letter():
    return letter_arrays()


@pytest.fixture(scope="module")
def files(tmp_path_factory, letter):
    """Per solver, eight Parquet files of Letter whose epochs of 500 never straddle a file: for 1PMB files of
    2000 rows, for 2PMB files of exactly 1000 negatives (it streams them)."""
    return {"1pmb": letter_by_rows(tmp_path_factory.mktemp("ring"), letter, 2000),
            "2pmb": letter_by_negatives(tmp_path_factory.mktemp("ring2"), letter, 8, 1000)}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        yield client


def fit(url, client, **params):
    """``train``, and each step's ring timings (None: the step was a dependent task)."""
    timings: list = []
    model = train(url, client=client, standardize=False, on_step=lambda p: timings.append(p.timings), **params)
    return model, timings


@pytest.mark.parametrize("solver, measure, n_passes, wide", [("1pmb", "pauc", 1, False), ("2pmb", "prbep", 1, False),
                                                              ("1pmb", "f1", 2, False), ("2pmb", "pauc", 2, False),
                                                              ("1pmb", "pauc", 1, True), ("2pmb", "prbep", 2, True)])
def test_the_ring_gives_the_estimators_model_and_that_of_dependent_steps(cluster, files, monkeypatch,
                                                                          solver, measure, n_passes, wide):
    """Each step a task of its own, its state sent by the step before: the in-memory solver's model on the same
    rows in the same order, bit for bit, and the model of the chain whose steps take their states as
    dependencies.  Two passes with the partition cache off: the ring then spans the pass's end too.  ``wide``:
    every state handled as a wide one (``GATHER_BYTES = 0``: it stays on the workers, and the driver fetches
    each step's summary), as at d = 2^20 -- the same ring, the same model."""
    from distributed import get_task_stream

    url, X, y = files[solver]
    params = dict(measure=measure, solver=solver, buffer_size=500, eta=0.05, n_passes=n_passes, shuffle=False,
                  random_state=3)
    if wide:
        monkeypatch.setattr(chain, "GATHER_BYTES", 0)
    with dask.config.set({CACHE_KEY: False}):
        with get_task_stream(cluster) as stream:
            ringed, timings = fit(url, cluster, **params)
        with dask.config.set({RING_KEY: False}):
            dependent, untimed = fit(url, cluster, **params)
    est = nsdist.NonDecomposableClassifier(**params, standardize=False).fit(X, y)
    np.testing.assert_array_equal(ringed.coef, est.coef_.ravel())
    assert ringed.intercept == float(np.ravel(est.intercept_)[0])
    np.testing.assert_array_equal(ringed.coef, dependent.coef)
    assert ringed.intercept == dependent.intercept and ringed.history["epochs"] == dependent.history["epochs"]
    assert len(timings) == 8 * n_passes and untimed == [None] * len(timings)
    ring = [t for t in timings if t is not None]
    assert len(ring) == len(timings)
    keys = [str(t["key"]) for t in stream.data]
    assert sorted(int(k.rsplit("-", 1)[1]) for k in keys if k.startswith("nsdist-ring-")) == list(range(len(ring)))
    assert not [k for k in keys if k.startswith(("nsdist-step-", "nsdist-load-"))]
    assert any(k.startswith("nsdist-summary-") for k in keys) == wide
    for t in ring:                                 # load, then the state, then the step
        t = dict(zip(TIMINGS, t))
        assert t["load_start"] <= t["load_end"] <= t["step_start"] <= t["step_end"]
        assert t["state_arrived"] <= t["step_start"]
    # each step starts after the step before it ended: its state came from there
    ends = [t[TIMINGS.index("step_end")] for t in ring]
    starts = [t[TIMINGS.index("step_start")] for t in ring]
    assert all(s >= e for s, e in zip(starts[1:], ends[:-1]))


@pytest.mark.parametrize("wide", [False, True], ids=["state-gathered", "state-left-on-cluster"])
def test_blocks_kept_for_the_cut_are_stepped_in_the_ring_where_they_were_loaded(cluster, shared_data, tmp_path,
                                                                               monkeypatch, wide):
    """A fixed 1PMB run on sparse data (LIBSVM's w8a, 8 partitions) keeps the blocks of its last steps for its
    cut (docs/engine.md §Holdout and sample).  Those steps are in the ring too: each block is loaded by a task
    of its own on its ring step's worker, behind that worker's step before, and stepped there; the cut scores
    the blocks where they lie and reads no file again.  The model, intercept included, is that of the chain of
    dependent steps, bit for bit.  ``wide``: the state left on the workers (``GATHER_BYTES = 0``)."""
    from distributed import get_task_stream

    from nsdist import ingest

    ds = ingest(shared_data / "w8a" / "w8a.xz", tmp_path / "w8a", layout="sparse", rows_per_partition=6250,
                client=cluster)
    assert len(ds.partitions) == 8
    params = dict(measure="prec@k", k=0.02, solver="1pmb", buffer_size=500, eta=0.5, n_passes=1, random_state=4,
                  validation_max_rows=12_500)
    if wide:
        monkeypatch.setattr(chain, "GATHER_BYTES", 0)
    with get_task_stream(cluster) as stream:
        ringed, timings = fit(ds.url, cluster, **params)
    with dask.config.set({RING_KEY: False}):
        dependent, _ = fit(ds.url, cluster, **params)
    np.testing.assert_array_equal(ringed.coef, dependent.coef)
    assert ringed.intercept == dependent.intercept and ringed.history["epochs"] == dependent.history["epochs"]
    assert len(timings) == 8 and all(t is not None for t in timings)
    where = {str(t["key"]): t["worker"] for t in stream.data}
    order = {str(t["key"]): t["startstops"][-1]["start"] for t in stream.data}
    steps = {int(k.rsplit("-", 1)[1]): k for k in where if k.startswith("nsdist-ring-")}
    kept = {int(k.rsplit("-", 1)[1]): k for k in where if k.startswith("nsdist-load-")}
    assert sorted(steps) == list(range(8)) and sorted(kept) == [6, 7]          # 2 x 6250 rows <= 12,500
    for i, load in kept.items():
        assert where[load] == where[steps[i]]                                  # loaded where it is stepped
        assert order[steps[i - 2]] < order[load] < order[steps[i]]             # behind that worker's step before
    assert not [k for k in where if k.startswith(("_read-", "nsdist-step-"))]
    assert sum(k.startswith("_block_scores") for k in where) == 2
    assert any(k.startswith("nsdist-summary-") for k in where) == wide


def test_ring_slots_deal_one_slot_a_thread_in_turn_and_need_two():
    workers = {"tcp://b:1": {"nthreads": 2}, "tcp://a:1": {"nthreads": 1}, "tcp://c:1": {"nthreads": 2}}
    assert ring_slots(workers, 10) == ["tcp://a:1", "tcp://b:1", "tcp://c:1", "tcp://b:1", "tcp://c:1"]
    assert ring_slots(workers, 3) == ["tcp://a:1", "tcp://b:1", "tcp://c:1"]
    assert ring_slots({"tcp://a:1": {"nthreads": 2}}, 3) == ["tcp://a:1", "tcp://a:1"]
    assert ring_slots({"tcp://a:1": {"nthreads": 1}}, 3) == []
    assert ring_slots(workers, 1) == [] and ring_slots({}, 3) == []


def test_a_mailbox_hands_each_state_to_its_step_and_gives_up_when_the_task_is_no_longer_wanted():
    box = Mailbox()
    box.put("r", 3, "state 3")
    assert box.take("r", 3, lambda: True)[0] == "state 3"
    threading.Timer(0.2, box.put, ("r", 4, "state 4")).start()
    state, arrived = box.take("r", 4, lambda: True)        # waits for it
    assert state == "state 4" and arrived <= time.time()
    box.put("r", 6, "for a step not yet run")
    box.put("other", 5, "another ring's")
    with pytest.raises(WorkLost, match="ring step 6 cancelled"):
        box.take("r", 5, lambda: False)
    assert box.take("other", 5, lambda: True)[0] == "another ring's"        # kept: another ring's
    with pytest.raises(WorkLost):                                            # dropped with its ring
        box.take("r", 6, lambda: False)


def test_a_failed_ring_leaves_no_step_waiting_and_the_next_job_trains(cluster, files):
    """A job that fails mid-ring (here: its progress callback raises) cancels its steps: those waiting for a
    state give up, the workers are idle again, and the same job then trains to the model it gives alone."""
    url, _, _ = files["1pmb"]
    params = dict(measure="pauc", solver="1pmb", buffer_size=500, eta=0.05, n_passes=1, random_state=5)
    alone, _ = fit(url, cluster, **params)

    def stop_at(p) -> None:
        if p.step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(url, client=cluster, standardize=False, on_step=stop_at, **params)
    deadline = time.monotonic() + 30
    while any(cluster.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(cluster.processing().values())
    again, timings = fit(url, cluster, **params)
    np.testing.assert_array_equal(again.coef, alone.coef)
    assert again.intercept == alone.intercept and timings[0] is not None


def test_a_ring_step_cancelled_before_the_driver_fetches_it_is_redone_to_the_identical_model(cluster, files, caplog):
    """The scheduler cancels a task submitted after one of its dependencies was lost with a worker ("lost
    dependencies").  Here the progress callback cancels the next ring step after step 3 is reported: the
    driver takes it as work lost, says so, and redoes the steps from the last one reported, to the undisturbed
    run's model."""
    url, _, _ = files["1pmb"]
    params = dict(measure="pauc", solver="1pmb", buffer_size=500, eta=0.05, n_passes=1, random_state=9)
    alone, _ = fit(url, cluster, **params)
    cancelled: list[str] = []

    def cancel_next(p) -> None:
        if p.step == 3 and not cancelled:
            ring = {int(str(k).rsplit("-", 1)[1]): k for k in cluster.futures if str(k).startswith("nsdist-ring-")}
            key = ring[min(i for i in ring if i > p.step)]
            cluster.cancel([Future(key, cluster)], reason="the test cancels it")
            cancelled.append(key)

    caplog.set_level(logging.WARNING, logger="nsdist")
    again = train(url, client=cluster, standardize=False, on_step=cancel_next, **params)
    assert len(cancelled) == 1
    assert f"FutureCancelledError: {cancelled[0]} cancelled for reason: the test cancels it" in caplog.text
    assert "redoing it from the last model (restart 1/" in caplog.text
    np.testing.assert_array_equal(again.coef, alone.coef)
    assert again.intercept == alone.intercept and again.history["rows_seen"] == alone.history["rows_seen"]


def test_two_jobs_sharing_one_cluster_both_finish_with_their_own_models(cluster, files):
    """Two rings on the same two one-thread workers: a step waiting for its state holds its worker's only thread,
    so each ring could wait on the other's; a step that waits past ``STALL_SECONDS`` leaves the thread pool."""
    jobs = [(files["1pmb"][0], dict(measure="pauc", solver="1pmb", eta=0.05, n_passes=1, random_state=1)),
            (files["2pmb"][0], dict(measure="prbep", solver="2pmb", eta=0.05, n_passes=1, random_state=2))]
    alone = [fit(url, cluster, **params)[0] for url, params in jobs]
    together: list = [None, None]

    def run(k: int) -> None:
        url, params = jobs[k]
        together[k] = fit(url, cluster, **params)[0]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a.coef, b.coef)
        assert a.intercept == b.intercept


@pytest.mark.parametrize("wide", [False, True], ids=["state-gathered", "state-left-on-cluster"])
def test_a_ring_worker_sigkilled_mid_pass_gives_the_identical_model(dask_processes, files, reliability, tmp_path,
                                                                    monkeypatch, wide):
    """``dask worker`` processes: the worker holding the ring's next steps is SIGKILLed after step 3 is
    reported; the steps pinned to it never run, the driver sees the worker go and redoes the steps from the
    last one reported (a ring on the two workers left), to the undisturbed run's model.  ``wide``: every
    state handled as a wide one (``GATHER_BYTES = 0``): the driver has fetched no step's state, and the redo
    starts from the segment's start.

    The ring's steps after step 3 wait, on their workers, for a file the driver writes once the worker is
    killed: Letter's steps take milliseconds, and the ring could otherwise finish before step 3 is reported
    (one CI run found no ring step left to kill there)."""
    url, _, _ = files["1pmb"]
    params = dict(measure="pauc", solver="1pmb", buffer_size=500, eta=0.05, n_passes=1, random_state=7)
    gate = str(tmp_path / "killed")

    def hold_steps_after(last: int) -> None:
        """(In each worker.)  A ring step after ``last`` takes its state only once ``gate`` exists (60 s at
        most), so that it is still running -- its block loaded -- when the driver reports step ``last``.  It
        waits out of the worker's thread pool, as a long wait for a state does (``Mailbox.take``): a wide
        state's step is reported by a summary task that its worker runs after its next ring step."""
        from distributed import rejoin, secede

        from nsdist.engine import chain as on_worker

        take = on_worker.take_state

        def gated(ring, step):
            if step > last and not os.path.exists(gate):
                secede()
                deadline = time.monotonic() + 60
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.005)
                rejoin()
            return take(ring, step)
        on_worker.take_state = gated

    if wide:
        monkeypatch.setattr(chain, "GATHER_BYTES", 0)
    with dask_processes(3) as procs, procs.client() as client:
        reference, _ = fit(url, client, **params)
        client.run(hold_steps_after, 3)
        kills: list[int] = []

        def kill_at(p) -> None:
            if p.step == 3 and not kills:
                waiting = [a for a, keys in client.processing().items()
                           if any(str(k).startswith("nsdist-ring-") for k in keys)]
                pid = client.run(os.getpid, workers=[waiting[0]])[waiting[0]]
                (proc,) = [w for w in procs.workers if w.pid == pid]
                os.kill(pid, signal.SIGKILL)
                kills.append(proc.wait(timeout=30))
                open(gate, "w").close()

        survived = train(url, client=client, standardize=False, on_step=kill_at, **params)
        reliability("fault", "SIGKILL a worker of the chain's ring mid-pass (1PMB, one pass, 8 steps"
                    + (", the state left on the workers)" if wide else ")"),
                    injected=len(kills), survivors=len(client.scheduler_info()["workers"]))
        assert kills == [-signal.SIGKILL] and len(client.scheduler_info()["workers"]) == 2
        np.testing.assert_array_equal(survived.coef, reference.coef)
        assert survived.intercept == reference.intercept
        assert survived.history["rows_seen"] == reference.history["rows_seen"]
