"""1PMB and 2PMB (seed, Algorithms 1 and 2) on in-memory data, as :func:`run_epochs` over blocks.

Every update is :func:`~nsdist.solvers.kernel.run_epochs` (Algorithm 1, line 5)::

    w_{e+1} = Proj_W( w_e - (eta / sqrt(e)) * grad l(buffer_e, w_e) ),   W = {||w|| <= radius}

and the model returned is the average of the iterates ``w_1 .. w_e``
(``average=False``: the last iterate).  These drivers only decide which rows
form which buffer, with the conventions the Dask engine follows partition by
partition, so both give the same model bit for bit:

* **Blocks and passes.** The training set is the single block 0.  Pass
  ``p = 0, 1, ..., n_passes - 1`` visits its rows in the order
  ``row_order(random_state, p, 0, n, shuffle)``.
* **Epochs.** A pass over ``n`` rows is cut by ``epoch_slices(n, buffer_size)``
  into ``ceil(n / buffer_size)`` near-equal consecutive epochs.  The state runs
  on across passes: the epoch counter ``e`` (and so the step ``eta / sqrt(e)``)
  and the iterate sums for the average are never reset.
* **2PMB.** The rare class is the class with fewer rows (a tie: the
  positives).  Pass 1 of Algorithm 2 draws the reservoir: the ``buffer_size``
  rare-class rows with the largest ``reservoir_keys(random_state, i)``, ``i``
  the row's index in ``X`` (its global position in file order), ordered by
  decreasing key (``top_k_indices``) -- a uniform sample without replacement.
  Stream pass ``p`` then visits the rows of the *other* class: taken in file
  order, permuted by ``row_order(random_state, p, 0, n_other, shuffle)``, cut
  into epochs as above, and every epoch buffer is the reservoir followed by the
  epoch's rows (``run_epochs(..., reservoir=...)``).  ``rows_seen`` counts the
  streamed rows only.

A buffer lacking a class is skipped by the kernel and counted in
``state.skipped`` (SPEC §3); the history has no record for it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..losses.base import Loss
from .history import History, Recorder, Validate
from .kernel import SGDState, epoch_slices, run_epochs
from .order import reservoir_keys, row_order, top_k_indices

__all__ = ["SGDResult", "Reservoir", "rare_label", "one_pass_mb", "two_pass_mb", "run_pass", "model_of"]


@dataclass
class Reservoir:
    """2PMB's sample of the rare class: the rows with the largest keys offered so far.

    Attributes
    ----------
    label : int
        The rare class, +1 or -1.
    X : ndarray of shape (m, d)
        The sampled rows, by decreasing key (``m <= size``).
    keys : ndarray of shape (m,)
        Their :func:`~nsdist.solvers.order.reservoir_keys`.
    size : int
        Capacity (the buffer size ``s``).
    n_rare : int
        Rows of the rare class offered so far.
    """

    label: int
    X: np.ndarray
    keys: np.ndarray
    size: int
    n_rare: int = 0

    @classmethod
    def empty(cls, label: int, size: int, n_features: int, dtype=np.float64) -> "Reservoir":
        return cls(label, np.empty((0, n_features), dtype=dtype), np.empty(0), size)

    @property
    def y(self) -> np.ndarray:
        return np.full(self.X.shape[0], self.label, dtype=np.int8)

    def offer(self, X: np.ndarray, y: np.ndarray, row_ids: np.ndarray, random_state: int) -> "Reservoir":
        """The sample after the rows ``X`` (global ids ``row_ids``) went by; ``self`` is unchanged.

        Keeps the ``size`` largest keys of the union, so offering the rows in
        any grouping gives the same sample (the engine's per-partition tops).
        """
        rare = np.flatnonzero(y == self.label)
        keys = np.concatenate([self.keys, reservoir_keys(random_state, np.asarray(row_ids)[rare])])
        rows = np.concatenate([self.X, X[rare].astype(self.X.dtype, copy=False)])
        top = top_k_indices(keys, self.size)
        return Reservoir(self.label, rows[top], keys[top], self.size, self.n_rare + rare.size)

    def merge(self, other: "Reservoir") -> "Reservoir":
        """The sample of the union of the two streams (``self``'s rows first on tied keys).

        The engine draws a reservoir per partition and merges them in file
        order: the result is the reservoir of the whole stream.
        """
        keys = np.concatenate([self.keys, other.keys])
        rows = np.concatenate([self.X, other.X.astype(self.X.dtype, copy=False)])
        top = top_k_indices(keys, self.size)
        return Reservoir(self.label, rows[top], keys[top], self.size, self.n_rare + other.n_rare)

    def to_dict(self) -> dict:
        """Plain data (lists and numbers) for checkpoints; floats round-trip exactly through JSON."""
        return {"label": self.label, "X": self.X.tolist(), "keys": self.keys.tolist(), "size": self.size,
                "n_rare": self.n_rare}

    @classmethod
    def from_dict(cls, d: dict, dtype: str = "float64") -> "Reservoir":
        X = np.asarray(d["X"], dtype=dtype).reshape(len(d["keys"]), -1)
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
        buffer's loss at the iterate before the step.
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


def model_of(state: SGDState, average: bool) -> tuple[np.ndarray, float]:
    """``(w, b)`` returned from ``state``: the averaged iterate, or the last one."""
    return state.averaged() if average else (state.w.copy(), state.b)


def run_pass(state: SGDState, X: np.ndarray, y: np.ndarray, rows: np.ndarray, loss: Loss, *,
             buffer_size: int, eta: float, radius: float | None, fit_intercept: bool, average: bool,
             recorder: Recorder, reservoir: Reservoir | None = None) -> SGDState:
    """Stream the rows ``X[rows]`` (in that order) as one block, one kernel call per epoch.

    Calling :func:`run_epochs` once per slice of ``epoch_slices(len(rows),
    buffer_size)`` takes exactly the steps of one call on the whole block, and
    lets the history record every epoch.
    """
    buffer_r = None if reservoir is None else (reservoir.X, reservoir.y)
    for sl in epoch_slices(rows.shape[0], buffer_size):
        idx = rows[sl]
        state, stats = run_epochs(state, X[idx], y[idx], loss, buffer_size=buffer_size, eta=eta,
                                  radius=radius, fit_intercept=fit_intercept, reservoir=buffer_r)
        if not stats["skipped"][0]:
            recorder.record(state.epoch, state.rows_seen, stats["loss"][0], lambda: model_of(state, average))
    return state


def _passes(X: np.ndarray, y: np.ndarray, rows: np.ndarray, loss: Loss, *, buffer_size: int, eta: float,
            radius: float | None, n_passes: int, shuffle: bool, random_state: int, fit_intercept: bool,
            average: bool, state: SGDState | None, validate: Validate | None,
            reservoir: Reservoir | None) -> SGDResult:
    """``n_passes`` passes over ``X[rows]``, pass ``p`` in ``rows[row_order(random_state, p, 0, ...)]``."""
    state = SGDState.zeros(X.shape[1]) if state is None else state
    recorder = Recorder(validate)
    for p in range(n_passes):
        order = rows[row_order(random_state, p, 0, rows.shape[0], shuffle)]
        state = run_pass(state, X, y, order, loss, buffer_size=buffer_size, eta=eta, radius=radius,
                         fit_intercept=fit_intercept, average=average, recorder=recorder,
                         reservoir=reservoir)
    w, b = model_of(state, average)
    return SGDResult(w, b, state, recorder.history, reservoir)


def one_pass_mb(X: np.ndarray, y: np.ndarray, loss: Loss, *, buffer_size: int, eta: float,
                radius: float | None = None, n_passes: int = 1, shuffle: bool = True,
                random_state: int = 0, fit_intercept: bool = False, average: bool = True,
                state: SGDState | None = None, validate: Validate | None = None) -> SGDResult:
    """1PMB (Algorithm 1): epochs of ``buffer_size`` rows of the shuffled stream.

    Parameters
    ----------
    X : ndarray of shape (n, d), float32 or float64
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
        Passes over the rows (module doc: the state runs on across passes).
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
    return _passes(X, y, np.arange(X.shape[0]), loss, buffer_size=buffer_size, eta=eta, radius=radius,
                   n_passes=n_passes, shuffle=shuffle, random_state=random_state,
                   fit_intercept=fit_intercept, average=average, state=state, validate=validate,
                   reservoir=None)


def two_pass_mb(X: np.ndarray, y: np.ndarray, loss: Loss, *, buffer_size: int, eta: float,
                radius: float | None = None, n_passes: int = 1, shuffle: bool = True,
                random_state: int = 0, fit_intercept: bool = False, average: bool = True,
                state: SGDState | None = None, validate: Validate | None = None) -> SGDResult:
    """2PMB (Algorithm 2): a reservoir of the rare class joined to epochs of the other class.

    Parameters are those of :func:`one_pass_mb`; ``n_passes`` counts the
    streaming passes over the other class (Algorithm 2's pass 2, repeated),
    the reservoir being drawn once.  Each buffer holds up to ``2 * buffer_size``
    rows.  The module docstring fixes which rows, in which order.
    """
    label = rare_label(y)
    reservoir = Reservoir.empty(label, buffer_size, X.shape[1], X.dtype).offer(
        X, y, np.arange(X.shape[0]), random_state)
    return _passes(X, y, np.flatnonzero(y != label), loss, buffer_size=buffer_size, eta=eta,
                   radius=radius, n_passes=n_passes, shuffle=shuffle, random_state=random_state,
                   fit_intercept=fit_intercept, average=average, state=state, validate=validate,
                   reservoir=reservoir)
