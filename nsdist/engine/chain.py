"""The partition chain: 1PMB / 2PMB over a Parquet dataset on Dask (SPEC §5).

Each Parquet partition is a run of epoch buffers.  For step ``i`` of the
schedule (pass ``p``, partition ``j``)::

    block_i = load(j, p)                   # on some worker; rows in row_order(seed, p, j)
    state_i = run_epochs(state_{i-1}, block_i)   # where block_i lives; only the model moves

The driver submits the load and the step of the next ``prefetch`` partitions
ahead of the chain, so the chain never waits for a round trip to the driver,
and at most ``prefetch + 1`` partitions are in memory at once, however large
the dataset is.  It gathers each ``state_i`` (``d`` floats and the per-epoch
statistics) as it completes, for the history, the progress bar and the
checkpoints; a lost or failed step is redone from the last gathered state,
which gives the same model because every step is a pure function of its
inputs (orders come from :mod:`nsdist.solvers.order`).
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
from ..losses.base import Loss
from ..solvers.kernel import EPOCH_STATS, SGDState, run_epochs
from ..solvers.order import block_order, row_order
from .reservoir import Reservoir, sample_reservoir
from .scaling import Scaling

__all__ = ["ChainConfig", "Step", "PartitionChain", "load_block", "step_block"]

log = logging.getLogger("nsdist.engine")


@dataclass(frozen=True)
class ChainConfig:
    """What every step of the chain needs to know (hashable into task keys)."""

    loss: Loss
    buffer_size: int
    eta: float
    radius: float | None
    fit_intercept: bool
    n_passes: int
    shuffle: bool
    random_state: int
    two_pass: bool = False
    dtype: str = "float64"
    scaling: Scaling | None = None

    def token(self) -> str:
        scaling = None if self.scaling is None else (self.scaling.mean, self.scaling.scale)
        return tokenize(type(self.loss).__name__, self.loss.params(), self.buffer_size, self.eta,
                        self.radius, self.fit_intercept, self.n_passes, self.shuffle,
                        self.random_state, self.two_pass, self.dtype, scaling)


@dataclass(frozen=True)
class Step:
    """One link of the chain: partition ``partition`` in pass ``pass_index``."""

    pass_index: int
    partition: int


def load_block(dataset: Dataset, partition: int, pass_index: int, cfg: ChainConfig,
               keep_label: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Read one partition and put its rows in the pass's stream order (runs on a worker).

    ``keep_label`` (2PMB, pass 2) keeps only the rows of the streamed class.
    """
    X, y = dataset.read_partition(partition, dtype=cfg.dtype)
    if cfg.scaling is not None:
        X = cfg.scaling.apply(X)
    if keep_label is not None:
        keep = y == keep_label
        X, y = X[keep], y[keep]
    if cfg.shuffle:
        order = row_order(cfg.random_state, pass_index, partition, y.shape[0])
        X, y = X[order], y[order]
    return X, y


def step_block(handed: SGDState | tuple[SGDState, np.ndarray], block: tuple[np.ndarray, np.ndarray],
               cfg: ChainConfig, reservoir: Reservoir | None) -> tuple[SGDState, np.ndarray]:
    """Apply the epoch kernel to one loaded block (runs where the block lives).

    ``handed`` is the chain's starting state or the previous step's result
    ``(state, stats)``, so a step depends directly on the one before it.
    """
    state = handed[0] if isinstance(handed, tuple) else handed
    X, y = block
    return run_epochs(state, X, y, cfg.loss, buffer_size=cfg.buffer_size, eta=cfg.eta,
                      radius=cfg.radius, fit_intercept=cfg.fit_intercept,
                      reservoir=None if reservoir is None else (reservoir.X, reservoir.y))


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
    """Drive 1PMB / 2PMB over ``dataset`` on ``client``.

    Parameters
    ----------
    client : distributed.Client
    dataset : nsdist.data.Dataset
    cfg : ChainConfig
    prefetch : int
        Partitions loaded ahead of the chain (the memory bound: at most
        ``prefetch + 1`` partitions are held by the workers at once).
    on_step : callable, optional
        Called with a :class:`ChainProgress` after each completed step, in order
        (progress bars, validation curves, checkpoints).
    max_restarts : int
        How many times a failed step (lost worker, ...) is redone from the last
        gathered state before the error is raised.
    """

    client: Client
    dataset: Dataset
    cfg: ChainConfig
    prefetch: int = 2
    on_step: Callable[[ChainProgress], None] | None = None
    max_restarts: int = 3
    stats: list[np.ndarray] = field(default_factory=list)
    reservoir: Reservoir | None = None

    def schedule(self) -> list[Step]:
        """Passes over the partitions (empty files are dropped by ``Dataset.open``), each in its seeded order."""
        n = len(self.dataset.partitions)
        return [Step(p, int(j)) for p in range(self.cfg.n_passes)
                for j in block_order(self.cfg.random_state, p, n, self.cfg.shuffle)]

    def run(self, state: SGDState | None = None, start: int = 0,
            reservoir: Reservoir | None = None) -> SGDState:
        """Run the chain from step ``start`` (resume) with ``state``; return the final state.

        2PMB first draws the reservoir (unless a resumed job hands it in) and
        keeps it in :attr:`reservoir`.
        """
        if self.cfg.two_pass and reservoir is None:
            reservoir = sample_reservoir(self.client, self.dataset, self.cfg.buffer_size,
                                         self.cfg.random_state, self.cfg.dtype, self.cfg.scaling)
            log.info("2PMB reservoir: %d rows of the rare class %+d (of %d); streaming the other class",
                     reservoir.y.shape[0], reservoir.label, reservoir.n_rare)
        self.reservoir = reservoir
        state = state or SGDState.zeros(self.dataset.n_features)
        steps = self.schedule()
        self._t0 = time.perf_counter()
        restarts, failed_at = 0, None
        self._pos, self._state = start, state
        res_future = self.client.scatter(reservoir, broadcast=True) if reservoir is not None else None
        while self._pos < len(steps):
            try:
                self._run_from(steps, res_future, reservoir)
            except Exception as exc:  # a lost worker, a cancelled future, a dropped connection
                if failed_at != self._pos:      # a step that has not failed before: its own count
                    restarts, failed_at = 0, self._pos
                if not _is_transient(exc) or restarts >= self.max_restarts:
                    raise
                restarts += 1
                log.warning("step %d of %d failed (%s: %s); redoing it from the last model (restart %d/%d)",
                            self._pos + 1, len(steps), type(exc).__name__, exc, restarts, self.max_restarts)
                if reservoir is not None:
                    res_future = self.client.scatter(reservoir, broadcast=True)
        return self._state

    def _run_from(self, steps: list[Step], res_future, reservoir: Reservoir | None) -> None:
        cfg, client = self.cfg, self.client
        # the fingerprint does not say where the files are: two copies, or two datasets whose
        # files have the same names and sizes, must not share task keys (and so results)
        token = tokenize(self.dataset.url, [p.path for p in self.dataset.partitions], self.dataset.fingerprint,
                         cfg.token(), self._state.to_dict(), self._pos)
        keep = None if reservoir is None else -reservoir.label
        inflight: deque[tuple[int, Future]] = deque()
        prev: Future | SGDState = self._state
        nxt = self._pos
        try:
            while self._pos < len(steps):
                while nxt < len(steps) and len(inflight) <= self.prefetch:
                    s = steps[nxt]
                    block = client.submit(load_block, self.dataset, s.partition, s.pass_index, cfg, keep,
                                          key=f"nsdist-load-{token}-{nxt}", retries=2)
                    prev = client.submit(step_block, prev, block, cfg, res_future,
                                         key=f"nsdist-step-{token}-{nxt}", priority=1)
                    del block               # the step holds it on the cluster; the driver need not
                    inflight.append((nxt, prev))
                    nxt += 1
                i, fut = inflight[0]
                state, stats = fut.result()
                inflight.popleft()
                self._accept(i, steps, state, stats)
        except BaseException:
            # The traceback keeps this attempt's futures alive: release the partitions loaded ahead
            # and the failed step now, so that they neither stay in the workers' memory nor answer
            # a later job that asks for the same keys.  (The cluster may be gone: the error is
            # the one to report, not the cancel's.)
            with contextlib.suppress(Exception):
                client.cancel([f for _, f in inflight])
            raise

    def _accept(self, i: int, steps: list[Step], state: SGDState, stats: np.ndarray) -> None:
        self.stats.append(stats)
        self._state, self._pos = state, i + 1
        if self.on_step is not None:
            done = stats[~stats["skipped"]]
            self.on_step(ChainProgress(
                step=i + 1, n_steps=len(steps), pass_index=steps[i].pass_index,
                partition=steps[i].partition, rows_seen=state.rows_seen,
                loss=float(done["loss"].mean()) if done.size else float("nan"),
                elapsed=time.perf_counter() - self._t0, state=state))

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
