"""The partition chain: 1PMB / 2PMB over a Parquet dataset on Dask (docs/engine.md).

Each Parquet partition is a run of epoch buffers.  For step ``i`` of the
stream plan (pass ``p``, partition ``j``; :func:`nsdist.solvers.plan.schedule`)::

    block_i = load(j, p)                   # on some worker; rows: plan.block_rows(seed, p, j)
    state_i = run_epochs(state_{i-1}, block_i)   # where block_i lives; only the models move

(A dataset read in several passes that fits the workers' memory is read once, and each
load gathers its rows from the partition kept: :attr:`PartitionChain.cache`.  When its
partitions are small, one task gathers and steps several of them in a row on one worker:
:attr:`PartitionChain.fused`, :func:`step_group`.)

The driver submits the load and the step of the next ``prefetch`` partitions
ahead of the chain, so the chain never waits for a round trip to the driver,
and at most ``prefetch + 1`` partitions are in memory at once, however large
the dataset is.  It runs the plan segment by segment (:meth:`PartitionChain.run`,
``steps[first:stop]``): between two segments the selection scores the
candidates (:func:`nsdist.solvers.sgd.drive`).  It gathers each ``state_i``
(``d x M`` floats and the per-epoch statistics) as it completes, for the
history, the progress bar and the checkpoints -- for a wide state (at least
:data:`GATHER_BYTES`) only the statistics, and at the segment's end what the
segment changed (:func:`segment_change`), the whole state only when asked for;
a lost or failed step is redone from the last gathered state, which gives the
same model because every step is a pure function of its inputs.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable

import dask
import numpy as np
from dask.base import tokenize
from dask.sizeof import sizeof
from distributed import Client, Future, secede

from .._faults import MAX_RESTARTS, WorkLost, cancel_quietly, is_transient
from .._sparse import issparse
from .._threads import on_one_blas_thread
from ..data import Dataset
from ..solvers.config import TrainConfig
from ..solvers.blocks import take_rows
from ..solvers.kernel import EPOCH_STATS, SGDState, StateChange, end_pass, mix_states, run_epochs
from ..solvers.plan import Holdout, Step, block_rows, ends_pass
from .cluster import direct_to_workers, fetch, settle
from .reservoir import Reservoir
from .ring import RING_KEY, RingMailbox, ring_slots, send_state, take_state
from .scaling import Scaling

__all__ = ["ChainConfig", "PartitionChain", "ChainProgress", "load_block", "load_task", "read_cached", "step_block",
           "step_group", "ring_step", "mix_round", "state_bytes", "with_alive", "segment_change", "zero_state",
           "cache_fits", "fused_rows", "CACHE_SHARE", "CACHE_KEY", "FUSE_KEY", "FUSE_PARTITION_BYTES", "FUSE_GROUP_BYTES"]

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

    def narrowed(self, cols: np.ndarray) -> "ChainConfig":
        """The config of a narrowed state's segment (:meth:`SGDState.narrowed`): the candidates ``cols``."""
        if cols.size == len(self.config.candidates):
            return self
        return replace(self, config=replace(self.config, candidates=tuple(self.config.candidates[c] for c in cols)))

    def token(self) -> str:
        scaling = None if self.scaling is None else (self.scaling.mean, self.scaling.scale)
        holdout = None if self.holdout is None else self.holdout.to_dict()
        return tokenize(self.config.describe(), self.config.population.token(), holdout, self.stream_label,
                        self.dtype, scaling, self.n_chains)


def load_block(dataset: Dataset, partition: int, pass_index: int, cfg: ChainConfig, after: object = None,
               file_order: bool = False, cached: tuple[np.ndarray, np.ndarray] | None = None):
    """Read one partition and keep its training rows in the pass's stream order, scaled (runs on a worker).

    ``after`` is not used: a result the load must wait for (:meth:`PartitionChain.run`'s gate).
    ``file_order``: only full-batch candidates train, and the rows stay in file order (:mod:`nsdist.solvers.plan`).
    ``cached``: the partition's rows as :func:`read_cached` made them (the chain's cache): only the pass's
    rows are gathered from them, instead of reading the file.

    One gathering copy (:meth:`Dataset.read_block`): the same values, to the bit, as
    ``read_partition``, ``X[rows]`` and ``cfg.scaling.apply``, in the kernel's (Fortran) order.
    """
    c, offset = cfg.config, dataset.partitions[partition].row_offset

    def order(y: np.ndarray) -> np.ndarray:
        return block_rows(y, offset + np.arange(y.shape[0]), pass_index=pass_index, block=partition,
                          random_state=c.random_state, shuffle=c.shuffle and not file_order, holdout=cfg.holdout,
                          stream_label=cfg.stream_label)

    if cached is None:
        return dataset.read_block(partition, dtype=cfg.dtype, order=order, scaling=cfg.scaling)
    X, y = cached
    rows = order(y)
    return (X[rows] if issparse(X) else take_rows(X, rows)), y[rows]


def load_task(dataset: Dataset, partition: int, pass_index: int, cfg: ChainConfig, after: object = None,
              file_order: bool = False, cached: tuple[np.ndarray, np.ndarray] | None = None):
    """:func:`load_block` as the sequential chain's load task.  A gather from the partition cache (``cached``)
    first leaves the worker's thread pool (``distributed.secede``), so that a step whose state and block are
    ready on this worker starts at once instead of waiting for the gather to end (docs/engine.md §Partition
    chain); a read of the file keeps its slot (it decodes on Arrow's threads as well: beside a step on two
    cores it slowed the one-pass jobs).  The chain bounds how many loads run (its prefetch and its gate);
    :func:`step_group` calls :func:`load_block` itself, in its own slot, and data-parallel rounds submit
    :func:`load_block`."""
    if cached is not None:
        secede()
    return load_block(dataset, partition, pass_index, cfg, after, file_order, cached)


def read_cached(dataset: Dataset, partition: int, cfg: ChainConfig) -> tuple[np.ndarray, np.ndarray]:
    """Every row of one partition, read, checked and scaled (dense: in the kernel's Fortran order; sparse:
    CSR): what the chain's cache keeps on a worker across passes (runs on a worker).  Scaling is elementwise,
    so gathering a pass's rows from it (:func:`load_block`) gives the values :meth:`Dataset.read_block`
    gives, to the bit."""
    return dataset.read_block(partition, dtype=cfg.dtype, scaling=cfg.scaling)


Handed = (SGDState | tuple[SGDState, np.ndarray] | tuple[SGDState, np.ndarray, np.ndarray]
          | list[tuple[SGDState, np.ndarray]])


def _state_of(handed: Handed) -> SGDState:
    """The state a step hands on: a segment's starting state, a step's ``(state, stats)`` (a ring step's
    ``(state, stats, timings)``, :func:`ring_step`) or the last of a group's (:func:`step_group`)."""
    if isinstance(handed, list):
        handed = handed[-1]
    return handed[0] if isinstance(handed, tuple) else handed


@on_one_blas_thread
def step_block(handed: Handed, block, cfg: ChainConfig,
               reservoir: Reservoir | None, last_of_pass: bool = False) -> tuple[SGDState, np.ndarray]:
    """Apply the epoch kernel to one loaded block (runs where the block lives).

    ``handed`` is the segment's starting state or the previous step's result
    ``(state, stats)`` (or a group's, :func:`step_group`), so a step depends
    directly on the one before it.  ``last_of_pass``: the block ends its pass
    (the full-batch candidates' iteration follows, :func:`~nsdist.solvers.kernel.end_pass`).
    """
    state = _state_of(handed)
    X, y = block
    state, stats = run_epochs(state, X, y, cfg.config.population, buffer_size=cfg.config.buffer_size,
                              radius=cfg.config.radius,
                              reservoir=None if reservoir is None else (reservoir.X, reservoir.y))
    return (end_pass(state, cfg.config.population) if last_of_pass else state), stats


def step_group(handed: Handed, dataset: Dataset, cfg: ChainConfig, reservoir: Reservoir | None,
               plan: tuple[tuple[int, int, bool], ...], file_order: bool, *cached: tuple[np.ndarray, np.ndarray]
               ) -> list[tuple[SGDState, np.ndarray]]:
    """Several consecutive steps in one task (runs on the worker that holds their partitions' cached rows):
    for each ``(partition, pass_index, last_of_pass)`` of ``plan``, with its partition's rows in ``cached``,
    :func:`load_block` from them and :func:`step_block` -- the very calls of a load task and a step task, so
    the same states to the bit.  ``file_order``: ``cached`` holds the blocks themselves (the chain keeps a
    file-order block once only full-batch candidates train).  Returns every step's ``(state, stats)``: the
    driver reports each step as if it had run alone (checkpoints and the learning curve read the states)."""
    out: list[tuple[SGDState, np.ndarray]] = []
    for (partition, pass_index, last), rows in zip(plan, cached):
        block = rows if file_order else load_block(dataset, partition, pass_index, cfg, None, file_order, rows)
        out.append(step_block(out[-1] if out else handed, block, cfg, reservoir, last))
    return out


def ring_step(start: SGDState | None, ring: str, step: int, following: str | None, dataset: Dataset,
              cfg: ChainConfig, reservoir: Reservoir | None, partition: int, pass_index: int, last_of_pass: bool,
              file_order: bool, block=None) -> tuple[SGDState, np.ndarray, np.ndarray]:
    """Step ``step`` of the chain in the ring (runs on its slot's worker; :mod:`nsdist.engine.ring`):
    :func:`load_block` (or ``block``, loaded by a task of its own on this worker: a block kept for the cut),
    then the state -- ``start``, or the one the step before sent to this worker's mailbox --,
    :func:`step_block`, and the new state sent to the worker of the step that follows (``following``; None:
    the ring's last step, whose result the next task takes as a dependency).  The very calls of a load task and
    a step task, so the same states to the bit.  Returns ``(state, stats, timings)``
    (:data:`~nsdist.engine.ring.TIMINGS`)."""
    t0 = time.time()
    if block is None:
        block = load_block(dataset, partition, pass_index, cfg, None, file_order)
    t1 = time.time()
    start, arrived = (start, t1) if start is not None else take_state(ring, step)
    t2 = time.time()
    state, stats = step_block(start, block, cfg, reservoir, last_of_pass)
    t3 = time.time()
    del block
    if following is not None:
        send_state(following, ring, step + 1, state)
    return state, stats, np.array([t0, t1, arrived, t2, t3])


def with_alive(handed: Handed, alive: np.ndarray, keep: np.ndarray) -> SGDState:
    """``handed``'s state narrowed to its candidates ``keep`` (:meth:`SGDState.narrowed`), with the candidates
    ``alive`` (runs on the worker that holds it): what a check between two segments hands on, made without
    sending the state back from the driver."""
    state = _state_of(handed)
    return replace(state.narrowed(keep), alive=np.array(alive, dtype=bool))


def _alive_only(before: SGDState, after: SGDState) -> bool:
    """``after`` is ``before`` but for which candidates live: its arrays views of the very same memory (the
    state's constructor makes new views of them), its full-batch memory the same object, its counters equal."""
    def same(a: np.ndarray, b: np.ndarray) -> bool:
        return a.__array_interface__ == b.__array_interface__         # address, shape, strides, dtype

    return (all(same(getattr(after, f), getattr(before, f)) for f in ("W", "W_sum", "b", "b_sum"))
            and after.batch is before.batch
            and (after.epoch, after.skipped, after.rows_seen) == (before.epoch, before.skipped, before.rows_seen))


def step_summary(result: tuple) -> tuple:
    """What the driver reports of a step whose state it does not fetch: its epoch statistics and rows seen (and a
    ring step's timings, :func:`ring_step`)."""
    state, stats, *timings = result
    return (stats, state.rows_seen, *timings)


def segment_change(result: tuple[SGDState, np.ndarray], alive: np.ndarray, clock: tuple[int, np.ndarray] | None
                   ) -> tuple[StateChange, np.ndarray]:
    """What the driver fetches at the end of a segment of a wide state (runs where the state lives): what the
    segment changed in the state it started from (live candidates ``alive``, full-batch memory at ``clock``;
    :meth:`SGDState.change`), and the last step's epoch statistics (and a ring step's timings)."""
    state, stats, *timings = result
    return (state.change(alive, clock), stats, *timings)


def step_model(handed: Handed, cfg: ChainConfig) -> tuple[np.ndarray, Scaling | None]:
    """``(w, scaling)`` of candidate 0 of ``handed``'s state (runs where the state lives): the model
    :meth:`SGDState.model` gives the driver from the same state, to the bit."""
    return _state_of(handed).model(0, cfg.config.average)[0], cfg.scaling


def zero_state(d: int, alive: np.ndarray) -> SGDState:
    """``w_0 = 0`` for the candidates ``alive``, made on the worker that steps first instead of sent there."""
    return replace(SGDState.zeros(d, alive.shape[0]), alive=np.array(alive, dtype=bool))


def _is_zero(state: SGDState) -> bool:
    """``state`` is :func:`zero_state`'s: no step taken, every iterate and sum 0."""
    return (state.epoch == state.skipped == state.rows_seen == 0 and state.batch is None
            and not any(a.any() for a in (state.W, state.W_sum, state.b, state.b_sum)))


@on_one_blas_thread
def mix_round(handed: Handed, *results: tuple[SGDState, np.ndarray],
              last_of_pass: ChainConfig | None = None) -> tuple[SGDState, np.ndarray]:
    """The data-parallel round's end: the chains' states mixed, their epoch statistics in chain order.

    ``last_of_pass``: the chain's config when the round ends its pass (the full-batch candidates' iteration
    follows the mixing, :func:`~nsdist.solvers.kernel.end_pass`).
    """
    start = _state_of(handed)
    mixed = mix_states(start, [r[0] for r in results])
    if last_of_pass is not None:
        mixed = end_pass(mixed, last_of_pass.config.population)
    return mixed, np.concatenate([r[1] for r in results])


class ChainProgress:
    """What the driver reports after each completed step.

    Attributes: ``step`` (1-based), ``n_steps``, ``pass_index``, ``partition``,
    ``rows_seen``, ``loss`` (mean over the step's epochs; NaN when the candidates
    train different surrogates), ``elapsed`` and ``state`` (the :class:`SGDState`
    after the step); a selecting job (:func:`nsdist.train`) also sets ``best``, the
    best validation value of the last check (None before the first), and ``alive``,
    the candidates training.  A wide model's state
    (:data:`GATHER_BYTES`) stays on the cluster until ``state`` is read, and is
    fetched (or, at a segment's end, copied) then: read it during the callback.
    ``timings``: for a step run in the ring (:mod:`nsdist.engine.ring`), the wall-clock times of its
    :data:`~nsdist.engine.ring.TIMINGS` (its load's start and end, its state's arrival, its step's start and
    end), else None.
    ``unit`` is ``"partition"``; K-fold selection, which streams no partition,
    reports each check of its folds' lockstep with ``unit="check"`` (``step``: the
    check, ``n_steps``: the checks planned -- early stopping ends sooner --,
    ``best``: the best mean validation value, ``alive``; no partition or state).
    """

    __slots__ = ("step", "n_steps", "pass_index", "partition", "rows_seen", "loss", "elapsed", "unit", "best",
                 "alive", "timings", "_state", "_fetch")

    def __init__(self, step: int, n_steps: int, pass_index: int, partition: int, rows_seen: int, loss: float,
                 elapsed: float, state: SGDState | None = None, fetch: Callable[[], SGDState] | None = None,
                 unit: str = "partition", timings: np.ndarray | None = None) -> None:
        self.step, self.n_steps, self.pass_index, self.partition = step, n_steps, pass_index, partition
        self.timings = timings
        self.rows_seen, self.loss, self.elapsed, self.unit = rows_seen, loss, elapsed, unit
        self.best: float | None = None
        self.alive: int | None = None
        self._state, self._fetch = state, fetch

    @property
    def has_state(self) -> bool:
        """The state is at hand: reading :attr:`state` fetches nothing from the cluster."""
        return self._state is not None

    @property
    def state(self) -> SGDState | None:
        if self._state is None and self._fetch is not None:
            self._state = self._fetch()
        return self._state

    def __repr__(self) -> str:
        return (f"ChainProgress(step={self.step}, n_steps={self.n_steps}, pass_index={self.pass_index}, "
                f"partition={self.partition}, rows_seen={self.rows_seen}, loss={self.loss}, elapsed={self.elapsed}, "
                f"unit={self.unit!r})")


@sizeof.register(SGDState)
def state_bytes(state: SGDState) -> int:
    """The bytes of a state's arrays, as Dask's placement and memory accounting must see them.

    Dask runs a task where moving its inputs costs least, judged by ``sizeof``, whose default for an
    object it does not know is ``sys.getsizeof``: a few dozen bytes.  A wide population's state (at
    ``d = 2^20`` and 31 candidates, 520 MB of iterates and sums) then looked lighter than the block
    it steps, and moved to every other block's worker instead of the block to it.
    """
    arrays = [state.W, state.W_sum, state.b, state.b_sum, state.alive]
    if state.batch is not None:
        arrays += [v for v in vars(state.batch).values() if isinstance(v, np.ndarray)]
    return int(sum(a.nbytes for a in arrays))


#: a state of at least this many bytes (iterates and their sums) is not fetched by the driver after every
#: step, only its statistics: at d = 2^20 the 16 MB fetch cost the workers about 8% of a one-pass job
#: (bench/results/sparse.md).  At a segment's end the driver fetches what the segment changed
#: (:func:`segment_change`), the whole state for a checkpoint and when an on_step callback reads
#: ``ChainProgress.state``.
GATHER_BYTES = 1 << 20


#: the chain keeps the dataset's partitions on the workers (:attr:`PartitionChain.cache`) when their bytes are at
#: most this share of the workers' memory limits summed: a pass's loaded blocks, the states and Arrow's buffers
#: need the rest, and Dask places the reads unevenly (docs/engine.md §Partition cache)
CACHE_SHARE = 0.25
#: the Dask configuration key that turns the cache off (``dask.config.set({CACHE_KEY: False})``)
CACHE_KEY = "nsdist.partition-cache"


def cache_fits(client: Client, nbytes: int) -> bool:
    """Whether ``nbytes`` of read partitions may stay on ``client``'s workers for a job: at most
    :data:`CACHE_SHARE` of their memory limits summed (none unlimited), unless :data:`CACHE_KEY` is False."""
    if not dask.config.get(CACHE_KEY, True):
        return False
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
    return bool(limits) and all(limits) and nbytes <= CACHE_SHARE * sum(limits)


#: ring steps (:func:`ring_step`) run before the chain's other tasks on their worker, and in step order: their
#: priority is this plus the steps left in the ring
RING_PRIORITY = 4
#: how often the driver, waiting for a ring step, looks whether the ring's workers are all still there
RING_WATCH_SECONDS = 0.5


#: seconds :meth:`PartitionChain.release` waits for a fused group submitted ahead of a check that stopped the job
RELEASE_WAIT = 60.0
#: the Dask configuration key that turns fused steps off (``dask.config.set({FUSE_KEY: False})``)
FUSE_KEY = "nsdist.fused-steps"
#: a cached dataset's steps are fused (:func:`step_group`) when its partitions hold at most this many bytes on
#: average: gathering a pass's rows from such a partition (about 2-4 GB/s) then costs less than handing a state
#: from one Dask task to the next (about 6-7 ms here, bench/results/scale.md), so one worker gathering and
#: stepping in a row beats two workers handing the state back and forth (docs/engine.md §Fused steps)
FUSE_PARTITION_BYTES = 16 << 20
#: a fused task gathers and steps partitions of about this many bytes in all: dozens of milliseconds of work,
#: against a few milliseconds of a task's scheduling
FUSE_GROUP_BYTES = 128 << 20


def fused_rows(client: Client, nbytes: int, n_rows: int, n_partitions: int) -> int:
    """How many rows a fused task of the chain gathers and steps (:attr:`PartitionChain.fused`), 0 for none:
    fused when the dataset's ``nbytes`` (as cached) fit :data:`CACHE_SHARE` of every worker's memory limit (one
    worker comes to hold them all) and its partitions average at most :data:`FUSE_PARTITION_BYTES`, unless
    :data:`FUSE_KEY` is False."""
    if not dask.config.get(FUSE_KEY, True) or n_rows == 0 or n_partitions == 0:
        return 0
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
    if not (limits and all(limits) and nbytes <= CACHE_SHARE * min(limits)
            and nbytes <= FUSE_PARTITION_BYTES * n_partitions):
        return 0
    return max(1, int(FUSE_GROUP_BYTES * n_rows // max(nbytes, 1)))


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
        Load ``j`` of the sequential chain also waits for step
        ``j - min(prefetch + 1, worker threads)`` (docs/engine.md §Partition chain).
    on_step : callable, optional
        Called with a :class:`ChainProgress` after each completed step, in order
        (progress bars, checkpoints).
    max_restarts : int
        How many times a failed step (lost worker, ...) is redone from the last
        gathered state before the error is raised.
    on_loads_done : callable, optional
        Called once, when the last partition of the plan has been submitted, with
        the future of that last step's result: work that can fill the workers'
        idle time during the last steps, or follow the last step on the workers
        without waiting for the driver (a fixed run's cut: the sample read,
        :meth:`~nsdist.engine.holdout.WorkerSample.prefetch`, or the kept blocks
        scored by the model of :meth:`model_of`).
    keep_loads : set of int
        Steps whose loaded blocks are kept after their step, in :attr:`kept`
        (step -> future of its ``(X, y)`` block) until the caller releases them:
        rows already on the workers for a fixed run's cut
        (:meth:`~nsdist.engine.holdout.WorkerSample.adopt`).
    gather_bytes : int, optional
        States whose ``W`` and ``W_sum`` take at least this many bytes (default
        :data:`GATHER_BYTES`) are fetched by the driver only at the end of a
        segment (and when ``ChainProgress.state`` is read); after the other
        steps only their statistics come back, and a failure redoes the
        segment's steps from its start (the same numbers).
    cache : bool
        Keep each partition on the workers as first read and scaled (:func:`read_cached`)
        and gather every pass's block from it instead of reading the file again
        (docs/engine.md §Partition cache; :func:`cache_fits` says when the data
        fits).  The same blocks to the bit; released by :meth:`drop_cache`.
    fused : int
        With the cache and one chain: each task gathers and steps consecutive
        steps of a segment, their partitions holding about this many rows in
        all (at least one step), on one worker (:func:`step_group`;
        :func:`fused_rows` says when); 0: a load task and a step task per step.
        The same states to the bit, every step reported.  Not with a wide state
        (:attr:`gather_bytes`) or ``keep_loads``.
    checks : sequence of int
        The steps after which the driver checks (:func:`~nsdist.solvers.sgd.drive`'s).
        With fused steps, the next segment's first group is submitted behind a
        segment's last, from its result, before the check: a check that leaves
        the state as it was (which candidates live included) finds it running or
        done; one that changes it cancels it.
    """

    client: Client
    dataset: Dataset
    cfg: ChainConfig
    steps: list[Step]
    round_ends: list[int] | None = None
    reservoir: Reservoir | None = None
    prefetch: int = 2
    on_step: Callable[["ChainProgress"], None] | None = None
    max_restarts: int = MAX_RESTARTS
    gather_bytes: int | None = None
    on_loads_done: Callable[[Future], None] | None = None
    keep_loads: frozenset[int] = frozenset()
    stats: list[np.ndarray] = field(default_factory=list)
    elapsed_offset: float = 0.0
    cache: bool = False
    fused: int = 0
    checks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self._t0 = time.perf_counter()
        self.kept: dict[int, Future] = {}
        self._cached: dict[int, Future] = {}     # partition -> its rows as read and scaled (the cache)
        self._ordered: dict[int, Future] = {}    # partition -> its file-order block (the cache, once only
        #                                          full-batch candidates train: the same block every pass)
        self._cache_reads = 0                    # how many times the cache was dropped: a new cache, new keys
        self._res_future = None
        self._spec, self._spec_cols = None, None
        self._ahead: list[Future] = []       # the next segment's first loads, submitted before its check
        self._stepped: list[Future] = []     # ... and a wide state's first step on them (:meth:`_step_ahead`)
        self._steady = False                 # the last check left the live candidates as they were
        self._gates: tuple[int | None, list[Future]] = (None, [])     # (the step they lead into, the gates)
        # a wide state's last segment end: its future (the narrowed state stays on the cluster), the state as
        # the driver holds it, the columns it was narrowed to
        self._tail: tuple[Future, SGDState, np.ndarray] | None = None
        # a fused group submitted ahead of a check: (its future, its last step, its first step)
        self._next: tuple[Future, int, int] | None = None
        self._state: SGDState | None = None
        self._job: str | None = None     # the job's token: the dataset and the config (fixed for the chain)
        self._rings = 0                  # rings started (each attempt's keys and mailbox entries its own)
        self._mailboxes = False          # the workers have their ring mailboxes (RingMailbox registered)
        ends = list(range(len(self.steps))) if self.round_ends is None else list(self.round_ends)
        self._round_end = dict(zip([0] + [e + 1 for e in ends[:-1]], ends))    # round start -> end

    def run(self, state: SGDState, first: int, stop: int) -> SGDState:
        """Run ``steps[first:stop]`` from ``state``; return the state after the last one.

        The loads of the ``prefetch`` steps after ``stop`` start while this
        segment's last steps run, so that the next segment does not wait for
        a load after the check between them; :meth:`release` drops them when
        no segment follows.
        """
        restarts, failed_at = 0, None
        ahead = self._next         # a fused group submitted before the check: kept if the check kept the state
        if ahead is not None and not (ahead[2] == first and self._state is not None and _alive_only(self._state, state)
                                      and np.array_equal(self._state.alive, state.alive)):
            cancel_quietly(self.client, [ahead[0]])
            self._next = None
        # the check before this segment left the live candidates as they were: so will the next, likely
        # (:meth:`_step_ahead` bets on it; the first checks of a population halve it)
        self._steady = self._state is not None and np.array_equal(self._state.alive, state.alive)
        self._pos, self._state, self._stop = first, state, stop
        self._reported = first               # steps reported (statistics kept, on_step called) so far
        limit = GATHER_BYTES if self.gather_bytes is None else self.gather_bytes
        self._gather = state.W.nbytes + state.W_sum.nbytes < limit
        while self._pos < stop:
            try:
                # scattered under a fresh key (hash=False): the same reservoir scattered again while the last
                # job's future of it is being forgotten hung the scatter (a resumed 2PMB job, once in a test
                # run; Dask's content-hashed keys race with their release, dask/distributed#8576); and inside
                # the redo: after a failure, a scatter to a worker being restarted can fail too
                if self.reservoir is not None and self._res_future is None:
                    self._res_future = self.client.scatter(self.reservoir, broadcast=True, hash=False)
                self._run_from()
            except Exception as exc:  # a lost worker, a cancelled future, a dropped connection
                if failed_at != self._reported:     # progress since the last failure: a count of its own
                    restarts, failed_at = 0, self._reported
                if not is_transient(exc) or restarts >= self.max_restarts:
                    raise
                restarts += 1
                log.warning("step %d of %d failed (%s: %s); redoing it from the last model (restart %d/%d)",
                            self._pos + 1, len(self.steps), type(exc).__name__, exc, restarts, self.max_restarts)
                self._spec = None                    # a lost worker may have held the scattered config
                self._tail = None                    # ... or the segment's starting state: send the fetched one
                self.drop_cache()                    # ... and the cached reads depend on the dataset's future
                self._res_future = None              # ... and the reservoir: scattered again before the redo
        return self._state

    def release(self) -> None:
        """Drop the loads submitted ahead for a segment that will not run (the job stopped early)."""
        ahead, self._ahead, stepped, self._stepped = self._ahead, [], self._stepped, []
        # the next segment's group or step, likely running: let it end first (a cancelled task runs on, and a
        # cluster closed under it logs a CancelledError warning to the user)
        running = ([self._next[0]] if self._next is not None else []) + stepped[-1:]
        settle(running, RELEASE_WAIT)
        ahead += running + stepped[:-1]
        self._gates = (None, [])
        self._tail = None
        self._next = None
        cancel_quietly(self.client, ahead)

    def drop_cache(self) -> None:
        """Let the cached partitions go (the job is over: after the blocks kept for the cut, which were made
        from them, are used); a later read, and the loads from it, are keyed anew (a cancelled key submitted
        again at once can find the scheduler still forgetting it, with its old dependencies)."""
        cached = list(self._cached.values()) + list(self._ordered.values())
        self._cached, self._ordered = {}, {}
        if cached:
            self._cache_reads += 1
        cancel_quietly(self.client, cached)

    def _run_from(self) -> None:
        cfg, client, steps = self.cfg, self.client, self.steps
        # the fingerprint does not say where the files are: two copies, or two datasets whose
        # files have the same names and sizes, must not share task keys (and so results)
        # (the state by its arrays, which dask hashes as buffers: its to_dict() lists took seconds at d = 2^20;
        # a wide state made from the last segment's end by the key of that end and the mask: hashing 520 MB
        # took 0.3 s a segment)
        st = self._state
        if self._job is None:       # once a chain: 4 ms a segment, 0.4 s of a 100-check job
            self._job = tokenize(self.dataset.url, [p.path for p in self.dataset.partitions],
                                 self.dataset.fingerprint, cfg.token())
        job = self._job
        # After a check the state differs from the one the last segment ended with only in which candidates
        # live (Selection.check): the worker holding that one makes it from the mask, and the fetched copy
        # (520 MB at d = 2^20 x 31 candidates) is not sent back.
        tail, self._tail = self._tail, None
        # A wide state's segment steps only the candidates that train, alive or full-batch (a frozen one's
        # columns would be copied at every step: 520 MB at d = 2^20 x 31), narrowed (SGDState.narrowed).
        cols = np.arange(st.n_candidates) if self._gather else \
            np.union1d(np.flatnonzero(st.alive), cfg.config.population.batch_cols)
        holders = () if self._gather or tail is None or not _alive_only(tail[1], st) \
            or not np.isin(cols, tail[2]).all() else client.who_has([tail[0]]).get(tail[0].key, ())
        # its weights are sent only when no worker holds them (the segment's change replaces every column)
        start = st.narrowed(cols, weights=not holders)
        zero = not holders and _is_zero(st)        # a job's start
        if holders:
            token = tokenize(job, tail[0].key, st.alive, self._pos)
        elif zero:          # by its shape: hashing the zeros took 25 ms before the first task at d = 2^20
            token = tokenize(job, "zero", st.W.shape, st.alive, self._pos)
        else:
            token = tokenize(job, (st.W, st.b, st.W_sum, st.b_sum, st.alive, st.epoch, st.skipped, st.rows_seen),
                             None if st.batch is None else (st.batch.x, st.batch.grad, st.batch.p, st.batch.t,
                                                            st.batch.fx, st.batch.rows, st.batch.evaluations),
                             self._pos)
        file_order = cfg.config.population.only_batch(st.alive)
        clock = None if st.batch is None else st.batch.clock()
        # a load's key names what it reads -- not the state -- so that the loads submitted ahead of a check
        # (``_ahead``) are the ones the next segment asks for; a check that changes the row order changes the key
        load_token = tokenize(job, file_order)
        # held until this segment has asked for them (the step ahead of the check: the very task this segment
        # submits first if the check left the live candidates as they were -- the same key -- else let go)
        ahead, self._ahead, self._stepped = self._ahead + self._stepped, [], []
        if self._spec is None or not np.array_equal(self._spec_cols, cols):
            # the config (its scaling: 2 d floats) and the dataset (paths, schema) travel once, not in every
            # task; the config again when the candidates trained change
            if self._spec is None:
                self._ds = client.scatter(self.dataset, broadcast=True, hash=False)
            self._spec, self._spec_cols = client.scatter(cfg.narrowed(cols), broadcast=True, hash=False), cols
        spec, ds = self._spec, self._ds
        inflight: deque[tuple[int, Future, list[Future], Future | None]] = deque()
        direct = direct_to_workers(client)      # the states and changes fetched straight from the workers?
        # A wide starting state goes to the cluster by itself, not inside the first step's graph (16 MB at
        # d = 2^20: that step reached its worker late, and the worker had started a later load), and to the
        # worker that loads the first block, so that the step is ready the moment its block is.
        prev: Future | SGDState = self._state
        first_load: dict = {}
        if not self._gather:
            home = next(iter(holders or client.scheduler_info()["workers"]), None)
            if holders:
                prev = client.submit(with_alive, tail[0], start.alive, np.searchsorted(tail[2], cols),
                                     key=f"nsdist-alive-{token}", priority=1)
            elif home is not None and zero:       # a job's start: 520 MB of zeros took 2.5 s to send
                prev = client.submit(zero_state, st.W.shape[0], start.alive, key=f"nsdist-zero-{token}",
                                     workers=[home], allow_other_workers=True, priority=1)
            elif home is not None:
                prev = client.scatter(start, workers=[home], hash=False)
            if home is not None:
                first_load = dict(workers=[home], allow_other_workers=True)
        nxt = self._pos
        per_round = max(1, cfg.n_chains)
        depth = max(1, self.prefetch // per_round)
        # The sequential chain's gate: load j waits for step j - g, g = min(prefetch + 1, worker threads) (its
        # small state, or a wide state's small summary -- never the wide state, which would travel to the load:
        # the load then goes to the least busy worker, usually the one that just stepped).  With
        # two one-thread workers each then loads, steps the block it holds, loads the next ...; ungated, a
        # worker had started its next load when its block's step became ready, and the step waited behind it
        # (a whole load: 100-250 ms at 125k x 100 float32) while the other worker idled.
        workers = client.scheduler_info()["workers"]
        threads = sum(w.get("nthreads", 1) for w in workers.values())
        # fused steps (a narrow state, one chain): each task gathers and steps several cached partitions on one
        # worker, which comes to hold them all (the reads spread over the workers; each is sent there once)
        fused = self.fused if self.cache and self._gather and per_round == 1 and not self.keep_loads else 0
        on_home = dict(workers=[min(workers)], allow_other_workers=True) if fused and workers else {}
        # the ring (one chain, no cache): each step a task pinned to its slot, which the step before sends the
        # state to (nsdist.engine.ring).  Its steps load their own blocks (a block kept for the cut: a load task
        # pinned to the slot, behind the slot's step before), so it runs a segment that ends the plan and has no
        # loads submitted ahead for it (a segment after a check starts on those: dependent steps keep it from
        # stalling on a load).  A wide state's ring starts on the worker that holds the segment's first state.
        ringed = per_round == 1 and not self.cache and not ahead and self._stop - self._pos >= 2 \
            and self._stop == len(steps)
        slots = self._ring_slots(workers, depth + 1) if ringed else []
        if slots and first_load.get("workers", [None])[0] in slots:
            k = slots.index(first_load["workers"][0])
            slots = slots[k:] + slots[:k]
        ring_start, ring_stop = self._pos, self._stop if slots else self._pos
        # a wide state's step reports through its summary task, which its worker runs after its next ring step
        # (the summary is sent there once the step is done): two more steps in flight keep the slots busy
        ring_window = max(depth, 2 * len(slots) - 1 + (0 if self._gather else 2))
        ring = f"{token}-{self._rings}"
        ringed_steps: deque[Future] = deque(maxlen=max(1, len(slots)))     # each slot's last step
        self._rings += 1

        def group(first: int, stop: int, after: Future | SGDState) -> tuple[int, Future]:
            end = self._group_end(first, stop, fused)
            todo = range(first, end + 1)
            return end, client.submit(step_group, after, ds, spec, self._res_future,
                                      tuple((steps[i].block, steps[i].pass_index, ends_pass(steps, i)) for i in todo),
                                      file_order, *[self._cached_rows(ds, spec, steps[i].block, file_order)
                                                    for i in todo],
                                      key=f"nsdist-group-{tokenize(token, self._cache_reads)}-{end}", priority=1,
                                      **on_home)

        def fused_step(end: int, fut: Future) -> None:
            """The group ending at step ``end`` is submitted: in flight, and after the segment's last group, the
            next segment's first, behind it (it runs while the driver checks)."""
            inflight.append((end, fut, [fut], None))
            following = [c + 1 for c in self.checks if c > end]
            if end + 1 == self._stop and following:
                last, ahead = group(end + 1, min(following), fut)
                self._next = (ahead, last, end + 1)
            self._submitted(end + 1, fut)

        adopted, self._next = self._next, None
        if adopted is not None:         # the group submitted before the check, which kept the state (run)
            prev, nxt = adopted[0], adopted[1] + 1
            fused_step(adopted[1], prev)

        # (carried over from the segment before, whose loads ahead were gated the same way)
        gates: deque[Future] = deque(self._gates[1] if self._gates[0] == self._pos else (),
                                     maxlen=min(depth + 1, threads or depth + 1))
        self._gates = (None, [])

        def loads_ahead() -> None:
            """The next segment's first loads, each behind the gate it would have (and a wide state's first step)."""
            gated = list(gates) if len(gates) == gates.maxlen else []
            self._gates = (nxt, list(gates))
            self._ahead = [self._load(ds, spec, j, gated[k] if k < len(gated) else None, file_order, load_token)
                           for k, j in enumerate(range(nxt, min(nxt + depth * per_round, len(steps))))]
            if not self._gather and per_round == 1 and self._ahead and self._steady:
                self._step_ahead(prev, st, start, cols, job, spec)

        try:
            while self._pos < self._stop:
                # ``prefetch`` partitions ahead, and always the next round's loads beside the running one
                while nxt < self._stop and len(inflight) <= (depth if nxt >= ring_stop else ring_window):
                    if nxt < ring_stop:     # no dependency on the step before: its state comes by message
                        k, final = nxt - ring_start, nxt + 1 == self._stop
                        slot, priority = dict(workers=[slots[k % len(slots)]], allow_other_workers=False), \
                            RING_PRIORITY + ring_stop - nxt
                        block = None
                        if nxt in self.keep_loads:      # (keyed by the ring: a dependent load's gate is another)
                            block = self.kept[nxt] = self._load(
                                ds, spec, nxt, ringed_steps[0] if len(ringed_steps) == len(slots) else None,
                                file_order, ring, priority=priority, **slot)
                        prev = client.submit(ring_step, prev if nxt == ring_start else None, ring, nxt,
                                             None if final else slots[(k + 1) % len(slots)], ds, spec,
                                             self._res_future, steps[nxt].block, steps[nxt].pass_index,
                                             ends_pass(steps, nxt), file_order, block, key=f"nsdist-ring-{ring}-{nxt}",
                                             priority=priority, **slot)
                        summary = None
                        # as a dependent step's (below), keyed by the ring as its steps are: a redo's summary under
                        # the old key could find the old one, waiting on a step pinned to a worker that left
                        if not self._gather:
                            summary = client.submit(segment_change, prev, start.alive, clock,
                                                    key=f"nsdist-change-{ring}-{nxt}", priority=priority) if final \
                                else client.submit(step_summary, prev, key=f"nsdist-summary-{ring}-{nxt}",
                                                   priority=priority)
                        inflight.append((nxt, prev, [prev], summary))
                        ringed_steps.append(prev)
                        nxt += 1
                        self._submitted(nxt, prev)
                        if nxt == self._stop:
                            loads_ahead()
                        continue
                    if fused:
                        end, prev = group(nxt, self._stop, prev)
                        fused_step(end, prev)
                        nxt = end + 1
                        continue
                    end = self._round_end[nxt]
                    gate = gates[0] if len(gates) == gates.maxlen else None
                    results = []
                    for i in range(nxt, end + 1):
                        block = self._load(ds, spec, i, gate, file_order, load_token,
                                           **(first_load if i == self._pos else {}))
                        if i in self.keep_loads:
                            self.kept[i] = block
                        results.append(client.submit(step_block, prev, block, spec, self._res_future,
                                                     end == nxt and ends_pass(steps, i),
                                                     key=f"nsdist-step-{token}-{i}", priority=1))
                        del block           # the step holds it on the cluster; the driver need not
                    if len(results) > 1:
                        prev = client.submit(mix_round, prev, *results, key=f"nsdist-mix-{token}-{end}", priority=2,
                                             last_of_pass=spec if ends_pass(steps, end) else None)
                    else:
                        prev = results[0]
                    summary = None
                    if not self._gather and end + 1 < self._stop:   # a wide state stays on the cluster
                        summary = client.submit(step_summary, prev, key=f"nsdist-summary-{token}-{end}",
                                                priority=3)
                    elif not self._gather:     # ... and at the segment's end only what the segment changed comes
                        summary = client.submit(segment_change, prev, start.alive, clock,
                                                key=f"nsdist-change-{token}-{end}", priority=3)
                    inflight.append((end, prev, results, summary))
                    if per_round == 1:      # the gate (above): a narrow state itself, a wide one's summary
                        if self._gather:
                            new_gate = prev
                        elif end + 1 < self._stop:
                            new_gate = summary
                        else:               # (the segment's last summary is its change: a small one of its own)
                            new_gate = client.submit(step_summary, prev, key=f"nsdist-summary-{token}-{end}",
                                                     priority=3)
                        gates.append(new_gate)
                    nxt = end + 1
                    self._submitted(nxt, prev)
                    if nxt == self._stop:
                        loads_ahead()
                ahead = []          # the steps that use them hold them now (a held block counts against prefetch)
                i, fut, _, summary = inflight[0]
                if summary is None or i + 1 == self._stop:
                    if summary is None:
                        done = self._fetch_ring(fut, slots, direct) if i < ring_stop else fetch(client, fut, direct)
                        if isinstance(done, list):      # a fused group's steps: all but its last reported here
                            for k, (state, stats) in enumerate(done[:-1], start=i + 1 - len(done)):
                                self._report(k, stats, state.rows_seen, state, None)
                            done = done[-1]
                        state, stats, *timings = done       # (a ring step's timings too)
                    else:           # the state the segment started from, with what the segment changed;
                        # applied to that state's arrays (its L-BFGS memory's too): the chain holds it, and what
                        # it handed out is not kept (the checks and checkpoints copy what they keep; on_step is
                        # handed a copy)
                        change, stats, *timings = (self._fetch_ring(summary, slots, direct) if i < ring_stop
                                                   else fetch(client, summary, direct))
                        state = st.widened(start.changed(change, in_place=True), cols, in_place=True)
                    inflight.popleft()
                    self._state, self._pos = state, i + 1
                    if not self._gather and i + 1 == self._stop:
                        self._tail = (fut, state, cols)
                        self._report(i, stats, state.rows_seen, None, state.copy, *timings)  # the next one widens it
                    else:
                        self._report(i, stats, state.rows_seen, state, None, *timings)
                else:
                    stats, rows_seen, *timings = (self._fetch_ring(summary, slots, direct) if i < ring_stop
                                                  else summary.result())
                    inflight.popleft()
                    self._report(i, stats, rows_seen, None,
                                 lambda f=fut: st.widened(fetch(client, f, direct)[0], cols), *timings)
        except BaseException:
            # The traceback keeps this attempt's futures alive: release the partitions loaded ahead
            # and the failed step now, so that they neither stay in the workers' memory nor answer
            # a later job that asks for the same keys.
            self._gates = (None, [])
            ahead, self._next = ([self._next[0]] if self._next else []) + ahead + self._stepped, None
            self._stepped = []
            cancel_quietly(client, [g for _, f, parts, summary in inflight for g in (f, *parts, summary)] + ahead)
            raise

    def _ring_slots(self, workers: dict[str, dict], n: int) -> list[str]:
        """The ring's slots on ``workers`` (:func:`~nsdist.engine.ring.ring_slots`, at most ``n``), their
        mailboxes set up once a chain; none when :data:`~nsdist.engine.ring.RING_KEY` is False or the
        workers cannot take the plugin."""
        slots = ring_slots(workers, n) if dask.config.get(RING_KEY, True) else []
        if slots and not self._mailboxes:
            try:
                self.client.register_plugin(RingMailbox(), name=RingMailbox.name)
            except Exception as exc:  # (a cluster that refuses plugins: hand the states on as dependent tasks)
                log.info("the chain's ring is off: its workers' mailboxes could not be set up (%s)", exc)
                return []
            self._mailboxes = True
        return slots

    def _fetch_ring(self, fut: Future, slots: list[str], direct: bool) -> tuple[SGDState, np.ndarray, np.ndarray]:
        """A ring step's result.  :class:`~nsdist._faults.WorkLost` if a slot's worker left meanwhile: the
        steps pinned to it would never run, and the steps after them wait for their states (the redo starts
        from the last step reported, on the workers there are)."""
        while True:
            try:        # (a step done on a worker that dies before its result is fetched is lost with it too)
                return fetch(self.client, fut, direct, timeout=RING_WATCH_SECONDS)
            except TimeoutError:
                gone = sorted(set(slots) - set(self.client.scheduler_info()["workers"]))
                if gone:
                    raise WorkLost(f"worker {gone[0]} of the chain's ring left") from None

    def _step_ahead(self, last: Future, st: SGDState, start: SGDState, cols: np.ndarray, job: str,
                    spec: Future) -> None:
        """A wide state's segment ends with step ``last`` (a future): the next segment's first step, on its
        load ahead (:attr:`_ahead`), submitted now as that segment will submit it if the check between them
        leaves the live candidates as they are -- from ``last`` made the segment's start on its worker
        (:func:`with_alive`), under the same keys.  That segment then finds it running or done, and the
        check's fetch and scoring overlap it; a check that freezes candidates keys its steps anew, and this
        one is let go (docs/engine.md §Partition chain)."""
        i = self._stop
        token = tokenize(job, last.key, st.alive, i)
        state = self.client.submit(with_alive, last, start.alive, np.arange(cols.size), key=f"nsdist-alive-{token}",
                                   priority=1)
        self._stepped = [state, self.client.submit(step_block, state, self._ahead[0], spec, self._res_future,
                                                   ends_pass(self.steps, i), key=f"nsdist-step-{token}-{i}",
                                                   priority=1)]

    def _submitted(self, nxt: int, last: Future) -> None:
        """The steps before ``nxt`` are submitted, the last of them ``last``: once all are, :attr:`on_loads_done`."""
        if nxt == len(self.steps) and self.on_loads_done is not None:
            self.on_loads_done(last)
            self.on_loads_done = None

    def model_of(self, step: Future) -> Future:
        """The future of ``(w, scaling)``: candidate 0's model (averaged or last, as the run returns it) in the
        state of ``step``'s result, made where that state lies, with the chain's scaling -- what
        :func:`~nsdist.engine.holdout.WorkerSample.adopt` scores the kept blocks by."""
        return self.client.submit(step_model, step, self._spec, key=f"nsdist-model-{step.key}", priority=1)

    def _load(self, ds: Future, spec: Future, i: int, gate: Future | None, file_order: bool, token: str,
              **where) -> Future:
        """Submit step ``i``'s load (or find the one submitted ahead of a check: the same key); with the
        cache, gathered from the partition's kept rows, read once (their key names the files, the dtype and
        the scaling: not the candidates, which a check narrows)."""
        s, cached, key = self.steps[i], None, f"nsdist-load-{token}-{i}"
        if self.cache and file_order:       # the block itself, made once (not a load a pass)
            return self._cached_rows(ds, spec, s.block, file_order=True, **where)
        if self.cache:
            cached = self._cached_rows(ds, spec, s.block, **where)
            key = f"nsdist-load-{tokenize(token, self._cache_reads)}-{i}"
        return self.client.submit(self._load_fn, ds, s.block, s.pass_index, spec, gate, file_order, cached,
                                  key=key, retries=2, **where)

    @property
    def _load_fn(self) -> Callable:
        """The load task: :func:`load_task` in the sequential chain, :func:`load_block` in data-parallel rounds,
        which step on every worker at once -- a load that left the pool there took a core from a step."""
        return load_task if self.cfg.n_chains == 1 else load_block

    def _cached_rows(self, ds: Future, spec: Future, partition: int, file_order: bool = False, **where) -> Future:
        """The cache's future of ``partition``'s rows, read on first use.  ``file_order``: of its block when only
        full-batch candidates train -- its training rows in file order, the same every pass
        (:mod:`nsdist.solvers.plan`) -- made once from the rows kept, which it then replaces (which candidates
        train only narrows, so the rows are not gathered again; if they are, they are read again)."""
        if file_order:
            block = self._ordered.get(partition)
            if block is None:
                rows = self._cached_rows(ds, spec, partition, **where)
                block = self._ordered[partition] = self.client.submit(
                    self._load_fn, ds, partition, 0, spec, None, True, rows, retries=2, **where,
                    key=f"nsdist-ordered-{tokenize(self._job, partition, self._cache_reads)}")
                del self._cached[partition]     # released once the tasks that need it are done (not cancelled)
            return block
        cached = self._cached.get(partition)
        if cached is None:
            scaling = None if self.cfg.scaling is None else (self.cfg.scaling.mean, self.cfg.scaling.scale)
            name = tokenize(self.dataset.url, [p.path for p in self.dataset.partitions], self.dataset.fingerprint,
                            self.cfg.dtype, scaling, partition, self._cache_reads)
            cached = self._cached[partition] = self.client.submit(read_cached, ds, partition, spec,
                                                                  key=f"nsdist-cached-{name}", retries=2, **where)
        return cached

    def _group_end(self, first: int, stop: int, rows: int) -> int:
        """The last step of the fused group that starts at step ``first``: the steps after it while their
        partitions' rows add up to at most ``rows``, before ``stop`` (the segment's end)."""
        end, n = first, self.dataset.partitions[self.steps[first].block].num_rows
        while end + 1 < stop:
            n += self.dataset.partitions[self.steps[end + 1].block].num_rows
            if n > rows:
                break
            end += 1
        return end

    def _report(self, i: int, stats: np.ndarray, rows_seen: int, state: SGDState | None,
                fetch: Callable[[], SGDState] | None, timings: np.ndarray | None = None) -> None:
        """Step ``i`` is done: keep its statistics and call ``on_step`` (once: a step redone after a failure
        is not reported again -- it computes the same numbers).  ``timings``: a ring step's."""
        if i < self._reported:
            return
        self.stats.append(stats)
        self._reported = i + 1
        if self.on_step is not None:
            done = stats[~stats["skipped"]]
            self.on_step(ChainProgress(
                step=i + 1, n_steps=len(self.steps), pass_index=self.steps[i].pass_index,
                partition=self.steps[i].block, rows_seen=rows_seen,
                loss=float(done["loss"].mean()) if done.size else float("nan"),
                elapsed=self.elapsed(), state=state, fetch=fetch, timings=timings))

    def elapsed(self) -> float:
        """Seconds of this job so far (a resumed job adds the interrupted run's)."""
        return self.elapsed_offset + time.perf_counter() - self._t0

    def epoch_stats(self) -> np.ndarray:
        """All per-epoch statistics gathered so far, in stream order."""
        return np.concatenate(self.stats) if self.stats else np.zeros(0, dtype=EPOCH_STATS)
