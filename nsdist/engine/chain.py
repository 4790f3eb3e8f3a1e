"""The partition chain: 1PMB / 2PMB over a Parquet dataset on Dask (docs/engine.md).

Each Parquet partition is a run of epoch buffers.  For step ``i`` of the
stream plan (pass ``p``, partition ``j``; :func:`nsdist.solvers.plan.schedule`)::

    block_i = load(j, p)                   # on some worker; rows: plan.block_rows(seed, p, j)
    state_i = run_epochs(state_{i-1}, block_i)   # where block_i lives; only the models move

The driver submits the load and the step of the next ``prefetch`` partitions
ahead of the chain, so the chain never waits for a round trip to the driver,
and at most ``prefetch + 1`` partitions are in memory at once, however large
the dataset is.  It runs the plan segment by segment (:meth:`PartitionChain.run`,
``steps[first:stop]``): between two segments the selection scores the
candidates (:func:`nsdist.solvers.sgd.drive`).  It gathers each ``state_i``
(``d x M`` floats and the per-epoch statistics) as it completes, for the
history, the progress bar and the checkpoints; a lost or failed step is redone
from the last gathered state, which gives the same model because every step is
a pure function of its inputs.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from dask.base import tokenize
from distributed import Client, Future

from ..data import Dataset
from ..solvers.config import TrainConfig
from ..solvers.kernel import EPOCH_STATS, SGDState, mix_states, run_epochs
from ..solvers.plan import Holdout, Step, block_rows
from .reservoir import Reservoir
from .scaling import Scaling

__all__ = ["ChainConfig", "PartitionChain", "ChainProgress", "load_block", "step_block", "mix_round"]

log = logging.getLogger("nsdist.engine")


@dataclass(frozen=True)
class ChainConfig:
    """What every step of the chain needs to know: the resolved config and the plan's data facts."""

    config: TrainConfig
    holdout: Holdout | None = None
    stream_label: int | None = None
    dtype: str = "float64"
    scaling: Scaling | None = None
    n_chains: int = 1

    def token(self) -> str:
        scaling = None if self.scaling is None else (self.scaling.mean, self.scaling.scale)
        holdout = None if self.holdout is None else self.holdout.to_dict()
        return tokenize(self.config.describe(), self.config.population.token(), holdout, self.stream_label,
                        self.dtype, scaling, self.n_chains)


def load_block(dataset: Dataset, partition: int, pass_index: int, cfg: ChainConfig):
    """Read one partition and keep its training rows in the pass's stream order, scaled (runs on a worker).

    One gathering copy (:meth:`Dataset.read_block`): the same block, to the bit, as
    ``read_partition``, ``X[rows]`` and ``cfg.scaling.apply``.
    """
    c, offset = cfg.config, dataset.partitions[partition].row_offset

    def order(y: np.ndarray) -> np.ndarray:
        return block_rows(y, offset + np.arange(y.shape[0]), pass_index=pass_index, block=partition,
                          random_state=c.random_state, shuffle=c.shuffle, holdout=cfg.holdout,
                          stream_label=cfg.stream_label)

    return dataset.read_block(partition, dtype=cfg.dtype, order=order, scaling=cfg.scaling)


def step_block(handed: SGDState | tuple[SGDState, np.ndarray], block, cfg: ChainConfig,
               reservoir: Reservoir | None) -> tuple[SGDState, np.ndarray]:
    """Apply the epoch kernel to one loaded block (runs where the block lives).

    ``handed`` is the segment's starting state or the previous step's result
    ``(state, stats)``, so a step depends directly on the one before it.
    """
    state = handed[0] if isinstance(handed, tuple) else handed
    X, y = block
    return run_epochs(state, X, y, cfg.config.population, buffer_size=cfg.config.buffer_size,
                      radius=cfg.config.radius, reservoir=None if reservoir is None else (reservoir.X, reservoir.y))


def mix_round(handed: SGDState | tuple[SGDState, np.ndarray], *results: tuple[SGDState, np.ndarray]
              ) -> tuple[SGDState, np.ndarray]:
    """The data-parallel round's end: the chains' states mixed, their epoch statistics in chain order."""
    start = handed[0] if isinstance(handed, tuple) else handed
    return mix_states(start, [r[0] for r in results]), np.concatenate([r[1] for r in results])


@dataclass
class ChainProgress:
    """What the driver reports after each completed step."""

    step: int
    n_steps: int
    pass_index: int
    partition: int
    rows_seen: int
    loss: float
    elapsed: float
    state: SGDState


@dataclass
class PartitionChain:
    """Drive the stream plan's steps over ``dataset`` on ``client``.

    Parameters
    ----------
    client : distributed.Client
    dataset : nsdist.data.Dataset
    cfg : ChainConfig
    steps : list of Step
        The plan (:func:`nsdist.solvers.plan.schedule`).
    round_ends : list of int, optional
        Data-parallel mode (``cfg.n_chains > 1``): the step that ends each round
        (:func:`nsdist.solvers.plan.rounds`); the steps of a round run side by
        side from the same state and are mixed.  Default: every step is a round.
    reservoir : Reservoir or None
        2PMB's sample, joined to every buffer (scattered to the workers once).
    prefetch : int
        Partitions loaded ahead of the chain (the memory bound: at most
        ``prefetch + 1`` partitions are held by the workers at once; in
        data-parallel mode, the rounds of ``max(1, prefetch // K) + 1`` rounds).
    on_step : callable, optional
        Called with a :class:`ChainProgress` after each completed step, in order
        (progress bars, checkpoints).
    max_restarts : int
        How many times a failed step (lost worker, ...) is redone from the last
        gathered state before the error is raised.
    """

    client: Client
    dataset: Dataset
    cfg: ChainConfig
    steps: list[Step]
    round_ends: list[int] | None = None
    reservoir: Reservoir | None = None
    prefetch: int = 2
    on_step: Callable[["ChainProgress"], None] | None = None
    max_restarts: int = 3
    stats: list[np.ndarray] = field(default_factory=list)
    elapsed_offset: float = 0.0

    def __post_init__(self) -> None:
        self._t0 = time.perf_counter()
        self._res_future = None
        self._spec = None
        ends = list(range(len(self.steps))) if self.round_ends is None else list(self.round_ends)
        self._round_end = dict(zip([0] + [e + 1 for e in ends[:-1]], ends))    # round start -> end

    def run(self, state: SGDState, first: int, stop: int) -> SGDState:
        """Run ``steps[first:stop]`` from ``state``; return the state after the last one."""
        restarts, failed_at = 0, None
        self._pos, self._state, self._stop = first, state, stop
        if self.reservoir is not None and self._res_future is None:
            self._res_future = self.client.scatter(self.reservoir, broadcast=True)
        while self._pos < stop:
            try:
                self._run_from()
            except Exception as exc:  # a lost worker, a cancelled future, a dropped connection
                if failed_at != self._pos:      # a step that has not failed before: its own count
                    restarts, failed_at = 0, self._pos
                if not _is_transient(exc) or restarts >= self.max_restarts:
                    raise
                restarts += 1
                log.warning("step %d of %d failed (%s: %s); redoing it from the last model (restart %d/%d)",
                            self._pos + 1, len(self.steps), type(exc).__name__, exc, restarts, self.max_restarts)
                self._spec = None                    # a lost worker may have held the scattered config
                if self.reservoir is not None:
                    self._res_future = self.client.scatter(self.reservoir, broadcast=True)
        return self._state

    def _run_from(self) -> None:
        cfg, client, steps = self.cfg, self.client, self.steps
        # the fingerprint does not say where the files are: two copies, or two datasets whose
        # files have the same names and sizes, must not share task keys (and so results)
        # (the state by its arrays, which dask hashes as buffers: its to_dict() lists took seconds at d = 2^20)
        st = self._state
        token = tokenize(self.dataset.url, [p.path for p in self.dataset.partitions], self.dataset.fingerprint,
                         cfg.token(), (st.W, st.b, st.W_sum, st.b_sum, st.alive, st.epoch, st.skipped, st.rows_seen),
                         self._pos)
        if self._spec is None:     # the config (its scaling: 2 d floats) and the dataset (paths, schema)
            # travel once, not in every task
            self._spec = client.scatter(cfg, broadcast=True, hash=False)
            self._ds = client.scatter(self.dataset, broadcast=True, hash=False)
        spec, ds = self._spec, self._ds
        inflight: deque[tuple[int, Future, list[Future]]] = deque()
        prev: Future | SGDState = self._state
        nxt = self._pos
        per_round = max(1, cfg.n_chains)
        try:
            while self._pos < self._stop:
                # ``prefetch`` partitions ahead, and always the next round's loads beside the running one
                while nxt < self._stop and len(inflight) <= max(1, self.prefetch // per_round):
                    end = self._round_end[nxt]
                    results = []
                    for i in range(nxt, end + 1):
                        s = steps[i]
                        block = client.submit(load_block, ds, s.block, s.pass_index, spec,
                                              key=f"nsdist-load-{token}-{i}", retries=2)
                        results.append(client.submit(step_block, prev, block, spec, self._res_future,
                                                     key=f"nsdist-step-{token}-{i}", priority=1))
                        del block           # the step holds it on the cluster; the driver need not
                    if len(results) > 1:
                        prev = client.submit(mix_round, prev, *results, key=f"nsdist-mix-{token}-{end}", priority=2)
                    else:
                        prev = results[0]
                    inflight.append((end, prev, results))
                    nxt = end + 1
                i, fut, _ = inflight[0]
                state, stats = fut.result()
                inflight.popleft()
                self._accept(i, state, stats)
        except BaseException:
            # The traceback keeps this attempt's futures alive: release the partitions loaded ahead
            # and the failed step now, so that they neither stay in the workers' memory nor answer
            # a later job that asks for the same keys.  (The cluster may be gone: the error is
            # the one to report, not the cancel's.)
            with contextlib.suppress(Exception):
                client.cancel([g for _, f, parts in inflight for g in (f, *parts)])
            raise

    def _accept(self, i: int, state: SGDState, stats: np.ndarray) -> None:
        self.stats.append(stats)
        self._state, self._pos = state, i + 1
        if self.on_step is not None:
            done = stats[~stats["skipped"]]
            self.on_step(ChainProgress(
                step=i + 1, n_steps=len(self.steps), pass_index=self.steps[i].pass_index,
                partition=self.steps[i].block, rows_seen=state.rows_seen,
                loss=float(done["loss"].mean()) if done.size else float("nan"),
                elapsed=self.elapsed(), state=state))

    def elapsed(self) -> float:
        """Seconds of this job so far (a resumed job adds the interrupted run's)."""
        return self.elapsed_offset + time.perf_counter() - self._t0

    def epoch_stats(self) -> np.ndarray:
        """All per-epoch statistics gathered so far, in stream order."""
        return np.concatenate(self.stats) if self.stats else np.zeros(0, dtype=EPOCH_STATS)


def _is_transient(exc: BaseException) -> bool:
    """Failures of the cluster (not of the data or the math) that a redo can cure."""
    from asyncio import CancelledError, TimeoutError as AsyncTimeout

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (KilledWorker, CancelledError, FutureCancelledError, CommClosedError,
                            AsyncTimeout, ConnectionError)) or "lost dependencies" in str(exc)
