"""1PMB and 2PMB (seed, Algorithms 1 and 2) on in-memory data, and the check loop every driver runs.

Every update is :func:`~nsdist.solvers.kernel.run_epochs` (Algorithm 1, line 5)::

    w_{e+1} = Proj_W( w_e - (eta / sqrt(e)) * grad l(buffer_e, w_e) ),   W = {||w|| <= radius}

for each candidate of the population, and the model is the average of the
iterates ``w_1 .. w_e`` (``average=False``: the last iterate).  Which rows form
which buffer, in which order, is :mod:`nsdist.solvers.plan`'s: the training set
is block 0 (``partial_fit``: call ``j`` is block ``j``), and the engine runs the
same plan partition by partition, so both give the same model bit for bit.

* **2PMB.** The rare class is the class with fewer training rows (a tie: the
  positives).  Pass 1 of Algorithm 2 draws the reservoir: the ``buffer_size``
  rare-class training rows with the largest ``reservoir_keys(random_state, i)``,
  ``i`` the row's global position, by decreasing key -- a uniform sample
  without replacement.  Each stream pass visits the other class's rows, and
  every epoch buffer is the reservoir followed by the epoch's rows.
  ``rows_seen`` counts the streamed rows only.
* **The state runs on across passes**: the epoch counter ``e`` (and so the step
  ``eta / sqrt(e)``) and the iterate sums are never reset.

A buffer lacking a class is skipped by the kernel and counted in
``state.skipped`` (docs/surrogates.md); the history has no record for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..losses.base import Loss
from .history import History, Recorder, Validate
from .blocks import take_rows
from .kernel import Population, SGDState, aligned, epoch_slices, run_epochs
from .order import reservoir_keys, top_k_indices
from .plan import Step, ends_pass, schedule, stream_order, training_rows

__all__ = ["SGDResult", "Reservoir", "rare_label", "one_pass_mb", "two_pass_mb", "run_block", "drive",
           "Segment"]


@dataclass
class Reservoir:
    """2PMB's sample of the rare class: the rows with the largest keys offered so far.

    Attributes
    ----------
    label : int
        The rare class, +1 or -1.
    X : ndarray or CSR matrix of shape (m, d)
        The sampled rows, by decreasing key (``m <= size``).
    keys : ndarray of shape (m,)
        Their :func:`~nsdist.solvers.order.reservoir_keys`.
    size : int
        Capacity (the buffer size ``s``).
    n_rare : int
        Rows of the rare class offered so far.
    """

    label: int
    X: object
    keys: np.ndarray
    size: int
    n_rare: int = 0

    @classmethod
    def empty(cls, label: int, size: int, n_features: int, dtype=np.float64, sparse: bool = False) -> "Reservoir":
        if sparse:
            import scipy.sparse as sp
            X = sp.csr_matrix((0, n_features), dtype=dtype)
        else:
            X = np.empty((0, n_features), dtype=dtype)
        return cls(label, X, np.empty(0), size)

    @property
    def y(self) -> np.ndarray:
        return np.full(self.X.shape[0], self.label, dtype=np.int8)

    def _union(self, X_new, keys_new: np.ndarray, n_new: int) -> "Reservoir":
        keys = np.concatenate([self.keys, keys_new])
        if hasattr(self.X, "tocsr"):
            import scipy.sparse as sp
            rows = sp.vstack([self.X, X_new.astype(self.X.dtype)], format="csr")
        else:
            rows = np.concatenate([self.X, X_new.astype(self.X.dtype, copy=False)])
        top = top_k_indices(keys, self.size)
        return Reservoir(self.label, rows[top], keys[top], self.size, self.n_rare + n_new)

    def offer(self, X, y: np.ndarray, row_ids: np.ndarray, random_state: int) -> "Reservoir":
        """The sample after the rows ``X`` (global ids ``row_ids``) went by; ``self`` is unchanged.

        Keeps the ``size`` largest keys of the union, so offering the rows in
        any grouping gives the same sample (the engine's per-partition tops).
        """
        rare = np.flatnonzero(y == self.label)
        return self._union(X[rare], reservoir_keys(random_state, np.asarray(row_ids)[rare]), rare.size)

    def merge(self, other: "Reservoir") -> "Reservoir":
        """The sample of the union of the two streams (``self``'s rows first on tied keys)."""
        return self._union(other.X, other.keys, other.n_rare)

    def to_dict(self) -> dict:
        """Plain data (lists and numbers) for checkpoints; floats round-trip exactly through JSON."""
        X = self.X.toarray() if hasattr(self.X, "toarray") else self.X
        return {"label": self.label, "X": X.tolist(), "keys": self.keys.tolist(), "size": self.size,
                "n_rare": self.n_rare, "sparse": hasattr(self.X, "toarray")}

    @classmethod
    def from_dict(cls, d: dict, dtype: str = "float64") -> "Reservoir":
        X = np.asarray(d["X"], dtype=dtype).reshape(len(d["keys"]), -1)
        if d.get("sparse"):
            import scipy.sparse as sp
            X = sp.csr_matrix(X)
        return cls(int(d["label"]), X, np.asarray(d["keys"], dtype=np.float64), int(d["size"]), int(d["n_rare"]))


@dataclass
class SGDResult:
    """What :func:`one_pass_mb` and :func:`two_pass_mb` return.

    Attributes
    ----------
    coef : ndarray of shape (d,)
    intercept : float
        The returned model (averaged or last iterate).
    state : SGDState
        The kernel state, to continue training from.
    history : History
        One record per taken step: ``loss`` is ``l(buffer_e, w_e)``, the
        buffer's loss at the iterate before the step (the mean over the live
        candidates of a population).
    reservoir : Reservoir or None
        2PMB's rare-class sample.
    """

    coef: np.ndarray
    intercept: float
    state: SGDState
    history: History
    reservoir: Reservoir | None = None


def rare_label(y: np.ndarray) -> int:
    """The class with fewer rows, +1 or -1 (a tie: +1)."""
    n_pos = int(np.count_nonzero(y > 0))
    return 1 if n_pos <= y.shape[0] - n_pos else -1


def run_block(state: SGDState, X, y: np.ndarray, rows: np.ndarray, population: Population, *,
              buffer_size: int, radius: float | None, recorder: Recorder | None = None,
              model: Callable[[SGDState], tuple[np.ndarray, float]] | None = None,
              reservoir: Reservoir | None = None,
              gather: Callable[[np.ndarray], Any] | None = None) -> tuple[SGDState, np.ndarray]:
    """Stream the rows ``X[rows]`` (in that order) as one block: one kernel call, as the engine makes for a partition.

    ``gather(idx)``: a fresh copy of the rows ``idx`` as the kernel takes them (default ``X[idx]``, dense rows
    in Fortran order); a fold fit gathers and scales its rows of the unscaled ``X`` (docs/solvers.md §Selection).

    With a ``recorder``, every taken epoch is recorded from the kernel's
    statistics (its loss, stream rows and seconds).  A recorder that validates
    needs each epoch's model (``model(state)``): the kernel is then called once
    per epoch slice -- the same steps and iterates; only the lazy sparse
    update's iterate sums, completed per call, round differently
    (docs/solvers.md §Sparse rows).

    Returns
    -------
    state : SGDState
    stats : ndarray of dtype EPOCH_STATS, one row per epoch of the block
    """
    buffer_r = None if reservoir is None else (aligned(reservoir.X), reservoir.y)     # copied once, not per call
    dense = not hasattr(X, "tocsr")
    per_epoch = recorder is not None and recorder.validate is not None
    parts = [rows[sl] for sl in epoch_slices(rows.shape[0], buffer_size)] if per_epoch else [rows]
    all_stats = []
    for idx in parts:
        rows_before, t_before = state.rows_seen, None if recorder is None else recorder.elapsed()
        if gather is not None:
            block = gather(idx)
        else:
            block = take_rows(X, idx) if dense else X[idx]   # dense: in the kernel's (Fortran) order, one copy
        state, stats = run_epochs(state, block, y[idx], population, buffer_size=buffer_size, radius=radius,
                                  reservoir=buffer_r)
        all_stats.append(stats)
        if recorder is None:
            continue
        if per_epoch:
            if not stats["skipped"][0]:
                st = state
                recorder.record(st.epoch, st.rows_seen, stats["loss"][0], lambda: model(st))
            continue
        ends = rows_before + np.cumsum([sl.stop - sl.start for sl in epoch_slices(idx.shape[0], buffer_size)])
        times = t_before + np.cumsum(stats["seconds"])
        for e in np.flatnonzero(~stats["skipped"]):
            recorder.record(int(stats["epoch"][e]), int(ends[e]), float(stats["loss"][e]), at=float(times[e]))
    return state, np.concatenate(all_stats)


#: ``run(state, first, stop) -> state``: the steps ``steps[first:stop]`` of a plan
Segment = Callable[[SGDState, int, int], SGDState]


def drive(steps: list[Step], checks: list[int], run: Segment, state: SGDState, *, start: int = 0,
          check: Callable[[SGDState, int], tuple[SGDState, bool]] | None = None,
          population: Population | None = None) -> tuple[SGDState, int]:
    """Run a plan's steps from ``start``, stopping at each check (the one loop of every driver).

    Parameters
    ----------
    steps, checks :
        From :func:`~nsdist.solvers.plan.schedule`.
    run : callable ``(state, first, stop) -> state``
        Runs ``steps[first:stop]`` (in memory, or on the Dask chain).
    check : callable ``(state, position) -> (state, stop)``, optional
        The selection (:meth:`~nsdist.solvers.select.Selection.check`); it may
        freeze candidates and ask to stop early.
    population : Population, optional
        The candidates: once only full-batch ones train (:meth:`Population.only_batch`),
        whose models move only at the end of a pass, the checks inside a pass are
        skipped -- each would score the models the check before it scored, and the
        full-batch rule counts passes, not checks (docs/solvers.md §Selection) --
        so a job no longer stops at every partition to learn nothing.

    Returns
    -------
    state : SGDState
    position : int
        Steps done (``len(steps)`` unless stopped early).
    """
    pos = start
    for c in checks:
        if c < pos or (population is not None and not ends_pass(steps, c) and population.only_batch(state.alive)):
            continue
        state = run(state, pos, c + 1)
        pos = c + 1
        if check is not None:
            state, stop = check(state, pos)
            if stop:
                break
    return state, pos


def _fixed(X, y: np.ndarray, loss: Loss, *, two_pass: bool, buffer_size: int, eta: float,
           radius: float | None, n_passes: int, shuffle: bool, random_state: int, fit_intercept: bool,
           average: bool, state: SGDState | None, validate: Validate | None) -> SGDResult:
    """One candidate, ``n_passes`` passes over every row: the paper's 1PMB / 2PMB."""
    population = Population.single(loss, eta, fit_intercept)
    ids = np.arange(X.shape[0])
    reservoir, stream = None, None
    if two_pass:
        stream = -rare_label(y)
        reservoir = Reservoir.empty(-stream, buffer_size, X.shape[1], X.dtype, hasattr(X, "tocsr")).offer(
            X, y, ids, random_state)
    # one block: block 0 every pass, shuffled or not (stream_order shuffles the rows)
    steps, checks = schedule([X.shape[0]], n_passes, random_state=random_state, shuffle=False, check_rows=None)
    recorder = Recorder(validate)
    streamed = training_rows(y, ids, stream_label=stream)

    def run(st: SGDState, first: int, stop: int) -> SGDState:
        for s in steps[first:stop]:
            rows = stream_order(streamed, pass_index=s.pass_index, block=0, random_state=random_state,
                                shuffle=shuffle)
            st, _ = run_block(st, X, y, rows, population, buffer_size=buffer_size, radius=radius,
                              recorder=recorder, model=lambda z: z.model(0, average), reservoir=reservoir)
        return st

    state, _ = drive(steps, checks, run, SGDState.zeros(X.shape[1]) if state is None else state)
    w, b = state.model(0, average)
    return SGDResult(w, b, state, recorder.history, reservoir)


def one_pass_mb(X, y: np.ndarray, loss: Loss, *, buffer_size: int, eta: float,
                radius: float | None = None, n_passes: int = 1, shuffle: bool = True,
                random_state: int = 0, fit_intercept: bool = False, average: bool = True,
                state: SGDState | None = None, validate: Validate | None = None) -> SGDResult:
    """1PMB (Algorithm 1) with one fixed candidate: epochs of ``buffer_size`` rows of the shuffled stream.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n, d), float32 or float64
    y : ndarray of shape (n,), labels in {-1, +1}
    loss : Loss
        The surrogate ``l``.
    buffer_size : int
        Epoch length ``s``.
    eta : float
        Step-length scale: epoch ``e`` steps ``eta / sqrt(e)``.
    radius : float or None
        Radius of the L2 ball ``W`` (None: no projection).
    n_passes : int
        Passes over the rows (the state runs on across passes).
    shuffle : bool
        Random row order per pass (the error bound of Thm. 6 assumes it); False: file order.
    random_state : int
        Seed of the orders; same seed and inputs give the same model bit for bit.
    fit_intercept : bool
        Learn ``b`` (see :func:`~nsdist.solvers.measure.learns_intercept`).
    average : bool
        Return the averaged iterate (Algorithm 1, last line) or the last one.
    state : SGDState, optional
        Continue from this state (default: ``w_0 = 0``).
    validate : callable ``(w, b) -> float``, optional
        Validation measure, recorded after every epoch.
    """
    return _fixed(X, y, loss, two_pass=False, buffer_size=buffer_size, eta=eta, radius=radius,
                  n_passes=n_passes, shuffle=shuffle, random_state=random_state, fit_intercept=fit_intercept,
                  average=average, state=state, validate=validate)


def two_pass_mb(X, y: np.ndarray, loss: Loss, *, buffer_size: int, eta: float,
                radius: float | None = None, n_passes: int = 1, shuffle: bool = True,
                random_state: int = 0, fit_intercept: bool = False, average: bool = True,
                state: SGDState | None = None, validate: Validate | None = None) -> SGDResult:
    """2PMB (Algorithm 2) with one fixed candidate: a reservoir of the rare class joined to epochs of the other.

    Parameters are those of :func:`one_pass_mb`; ``n_passes`` counts the
    streaming passes over the other class (Algorithm 2's pass 2, repeated),
    the reservoir being drawn once.  Each buffer holds up to ``2 * buffer_size``
    rows.  The module docstring fixes which rows, in which order.
    """
    return _fixed(X, y, loss, two_pass=True, buffer_size=buffer_size, eta=eta, radius=radius,
                  n_passes=n_passes, shuffle=shuffle, random_state=random_state, fit_intercept=fit_intercept,
                  average=average, state=state, validate=validate)
