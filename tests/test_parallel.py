"""Data-parallel mode (``n_chains``, docs/engine.md §Data-parallel): K chains per round, states mixed.

Real Dask only: a ``LocalCluster`` and real ``dask scheduler`` / ``dask worker`` processes.
"""
from __future__ import annotations

import json
import logging
import shutil
import signal

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream
from test_engine import letter_arrays, write_parquet
from test_faults import assert_same_model, next_step_worker, sigkill_worker

from nsdist.api import open_dataset, train
from nsdist.solvers.kernel import Population, SGDState, mix_states, run_epochs
from nsdist.solvers.measure import cut_intercept, make_loss
from nsdist.solvers.order import block_order
from nsdist.solvers.plan import block_rows

PARAMS = dict(measure="pauc", solver="1pmb", eta=0.05, n_passes=2, buffer_size=250, random_state=4)


@pytest.fixture(scope="module")
def letter_12(tmp_path_factory):
    X, y = letter_arrays()
    X, y = X[:12000], y[:12000]
    return write_parquet(tmp_path_factory.mktemp("letter12"), X, y, rows_per_file=1000), X, y


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        yield client


def reference(X, y, n_blocks: int, k: int, *, eta, n_passes, buffer_size, random_state, **_) -> tuple:
    """The plan computed in memory: per pass, the blocks in seeded order, K at a time from one state, mixed."""
    loss = make_loss("pauc")
    population = Population.single(loss, eta)
    size = X.shape[0] // n_blocks
    state = SGDState.zeros(X.shape[1])
    for p in range(n_passes):
        order = list(block_order(random_state, p, n_blocks))
        for r in range(0, n_blocks, k):
            start, chains = state, []
            for j in order[r:r + k]:
                Xj, yj = X[j * size:(j + 1) * size], y[j * size:(j + 1) * size]
                rows = block_rows(yj, j * size + np.arange(size), pass_index=p, block=int(j),
                                  random_state=random_state, shuffle=True)
                chains.append(run_epochs(start, Xj[rows], yj[rows], population, buffer_size=buffer_size)[0])
            state = mix_states(start, chains) if len(chains) > 1 else chains[0]
    w, _ = state.model(0, True)
    return w, cut_intercept("pauc", y, X @ w)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_k_chains_equal_the_in_memory_reference_of_the_same_plan(cluster, letter_12, k):
    url, X, y = letter_12
    model = train(url, client=cluster, standardize=False, n_chains=k, **PARAMS)
    w, b = reference(X, y, 12, k, **PARAMS)
    np.testing.assert_array_equal(model.coef, w)
    assert model.intercept == b
    assert model.params["n_chains"] == k
    one = train(url, client=cluster, standardize=False, **PARAMS)
    assert not np.array_equal(one.coef, model.coef)               # mixing is not the sequence


def test_k_chains_are_the_same_model_on_any_cluster(cluster, dask_processes, letter_12):
    url, _, _ = letter_12
    params = dict(measure="prbep", n_chains=4, random_state=2, max_passes=20)   # the selection as well
    local = train(url, client=cluster, **params)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as lc, Client(lc) as one:
        single = train(url, client=one, **params)
    with dask_processes(3) as procs, procs.client() as client:
        remote = train(url, client=client, **params)
    assert_same_model(local, single)
    assert_same_model(local, remote)


def test_k_chains_of_a_wide_state_narrowed_to_the_candidates_that_train_give_the_same_model(cluster, letter_12,
                                                                                            monkeypatch):
    """``GATHER_BYTES = 0``: every state is handled as a wide one -- each segment steps the state narrowed to the
    alive and full-batch candidates, 3 chains a round mix it, and the driver applies what each segment changed.
    The same selection and model as the chain that gathers every state."""
    import nsdist.engine.chain as chain

    url, _, _ = letter_12
    params = dict(measure="prbep", n_chains=3, random_state=2, max_passes=20)
    gathered = train(url, client=cluster, **params)
    monkeypatch.setattr(chain, "GATHER_BYTES", 0)
    seen = []              # the states handed to on_step stay what they were (the chain widens its own in place)
    wide = train(url, client=cluster, on_step=lambda p: seen.append((p.state, p.state.W.copy())), **params)
    assert_same_model(gathered, wide)
    assert wide.history["selection"] == gathered.history["selection"]
    assert sum(r["dropped_at_check"] is not None for r in wide.history["selection"]) > 1   # some were frozen
    assert len(seen) > 10 and all(np.array_equal(state.W, W) for state, W in seen)


def test_a_wide_state_steps_ahead_of_a_check_that_keeps_the_candidates(cluster, letter_12, monkeypatch):
    """docs/engine.md §Partition chain: a wide state's segment end also submits the next segment's first step,
    keyed as that segment keys it if the check between them keeps the live candidates (``GATHER_BYTES = 0``
    handles every state as a wide one).  The checks after one that kept them find it submitted -- the workers
    step while the driver checks -- every step is computed once but for those a check that froze candidates
    or stopped made obsolete, and the model and selection are the chain's that gathers every state."""
    import nsdist.engine.chain as chain
    from nsdist.solvers import select

    url, _, _ = letter_12
    params = dict(measure="prbep", random_state=2, max_passes=20, validation_folds=1)      # streamed
    gathered = train(url, client=cluster, **params)
    monkeypatch.setattr(chain, "GATHER_BYTES", 0)
    position, seen = [0], []
    check = select.Selection.check

    def watched(self, *args, **kwargs):      # at each check: the next step's index, the steps submitted
        seen.append((position[0], {int(str(k).rsplit("-", 1)[1]) for k in list(cluster.futures)
                                   if str(k).startswith("nsdist-step-")}))
        return check(self, *args, **kwargs)

    monkeypatch.setattr(select.Selection, "check", watched)
    with get_task_stream(cluster) as stream:
        wide = train(url, client=cluster, on_step=lambda p: position.__setitem__(0, p.step), **params)
    assert_same_model(gathered, wide)
    assert wide.history["selection"] == gathered.history["selection"]
    froze = {r["dropped_at_check"] for r in wide.history["selection"] if r["dropped_at_check"] is not None}
    n_steps = len(wide.history["curve"])
    # check k (from 1) finds the next step submitted exactly when check k - 1 kept the candidates
    bets = [(pos in submitted, k > 1 and k - 1 not in froze) for k, (pos, submitted) in enumerate(seen, start=1)
            if pos < n_steps]
    assert len(seen) > 5 and any(made for made, _ in bets) and all(made == steady for made, steady in bets)
    computed = [t["key"] for t in stream.data if str(t["key"]).startswith("nsdist-step-")]
    assert 0 <= len(computed) - n_steps <= len(froze) + 1


def test_mixed_checks_are_fifty_steps_apart_as_in_the_sequence(cluster, letter_12, caplog):
    """A check judges averages of >= 50 iterates: with K chains a round advances the mixed step counter by one
    block's epochs, so the checks are K times as many rows apart (here 4 x 50 x 500 rows: every 9 passes of 12 000
    rows, 6 mixed steps each), and one more check ends the pass budget.  The holdout holds fewer than 100
    positives, where one chain would select by K-fold: K chains stream the holdout, and the log says so."""
    url, _, _ = letter_12
    caplog.set_level(logging.INFO, logger="nsdist")
    model = train(url, client=cluster, measure="pauc", n_chains=4, random_state=3, max_passes=20)
    v_pos = model.history["validation_positives"]
    assert v_pos < 100 and model.history.get("folds") is None
    assert (f"with {v_pos} validation positives, K-fold selection (validation_folds=5, n_chains=1) would choose on "
            "every positive") in caplog.text and "n_chains=4 streams one holdout" in caplog.text
    epochs = [p["epoch"] for p in model.history["validation_curve"]]
    assert len(epochs) == 3 and epochs[-1] == 20 * 6          # (checks 25 000 rows apart made 7, 18 steps apart)
    assert all(b - a >= 50 for a, b in zip([0] + epochs[:-2], epochs[:-1]))
    assert model.history["passes"] == 20


def test_a_worker_sigkilled_during_a_round_gives_the_identical_model(dask_processes, letter_12):
    url, _, _ = letter_12
    params = dict(PARAMS, n_chains=2, standardize=False)
    with dask_processes(3) as procs, procs.client() as client:
        undisturbed = train(url, client=client, **params)
        kills = []

        def kill_at(p) -> None:
            if p.step == 6 and not kills:
                victim = next_step_worker(client)
                kills.append(sigkill_worker(procs, client, victim))

        survived = train(url, client=client, on_step=kill_at, **params)
    assert kills == [-signal.SIGKILL]
    assert_same_model(survived, undisturbed)


def test_resume_between_rounds_gives_the_identical_model(cluster, letter_12, tmp_path):
    url, _, _ = letter_12
    params = dict(measure="pauc", solver="2pmb", n_chains=3, random_state=1)
    full = train(url, client=cluster, **params)
    ckpt, mid = tmp_path / "ck.json", tmp_path / "mid.json"
    seen = []

    def keep(p) -> None:
        seen.append(p.step)
        if p.step == 9:
            shutil.copy(ckpt, mid)

    train(url, client=cluster, checkpoint=str(ckpt), checkpoint_every=1, on_step=keep, **params)
    assert all(s % 3 == 0 for s in seen)                           # progress (and checkpoints) per round
    assert json.loads(mid.read_text())["position"] == 9
    shutil.copy(mid, ckpt)
    resumed = train(url, client=cluster, checkpoint=str(ckpt), resume=True, **params)
    assert_same_model(resumed, full)
    assert open_dataset(url).num_rows == 12000
