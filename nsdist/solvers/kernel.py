"""The epoch kernel: one 1PMB/2PMB step per buffer, written once (SPEC §4, §5).

Algorithm 1 of the seed (1PMB), line 5, for epoch ``e = 1, 2, ...``::

    w_{e+1} = Proj_W( w_e - (eta / sqrt(e)) * grad l(buffer_e, w_e) )

and the returned model is the average of the iterates ``w_1 .. w_e``.
:func:`run_epochs` applies that step to every epoch buffer of one block of
rows.  The in-memory solvers call it on the whole (shuffled) training set, the
Dask engine on each Parquet partition in turn, handing the :class:`SGDState`
from partition to partition; nothing else updates a model.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..losses.base import Loss, weight_gradient

__all__ = ["SGDState", "EPOCH_STATS", "run_epochs", "epoch_slices", "project_l2"]

#: dtype of the per-epoch statistics returned by :func:`run_epochs`
EPOCH_STATS = np.dtype(
    [("epoch", "i8"), ("rows", "i8"), ("loss", "f8"), ("skipped", "?"), ("seconds", "f8")]
)


@dataclass
class SGDState:
    """Everything the chain hands from one block of rows to the next.

    Attributes
    ----------
    w : ndarray of shape (d,)
        Current iterate ``w_e``.
    b : float
        Current intercept (unregularised, not projected).
    w_sum, b_sum :
        Sums of the iterates after each step, for the averaged model.
    epoch : int
        Steps taken so far (``e``); skipped epochs do not count.
    skipped : int
        Epochs skipped because their buffer lacked a class (SPEC §3).
    rows_seen : int
        Rows streamed so far (reservoir rows of 2PMB not included).
    """

    w: np.ndarray
    b: float = 0.0
    w_sum: np.ndarray = field(default=None)  # type: ignore[assignment]
    b_sum: float = 0.0
    epoch: int = 0
    skipped: int = 0
    rows_seen: int = 0

    def __post_init__(self) -> None:
        self.w = np.asarray(self.w, dtype=np.float64)
        if self.w_sum is None:
            self.w_sum = np.zeros_like(self.w)

    @classmethod
    def zeros(cls, d: int) -> "SGDState":
        """The starting state ``w_0 = 0`` of Algorithms 1 and 2."""
        return cls(w=np.zeros(d))

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(mean of w_1..w_e, mean of b_1..b_e)``; the current iterate if no step was taken."""
        if self.epoch == 0:
            return self.w.copy(), self.b
        return self.w_sum / self.epoch, self.b_sum / self.epoch

    def copy(self) -> "SGDState":
        return replace(self, w=self.w.copy(), w_sum=self.w_sum.copy())

    def to_dict(self) -> dict:
        """Plain data (lists and numbers) for checkpoints."""
        return {
            "w": self.w.tolist(), "b": self.b, "w_sum": self.w_sum.tolist(), "b_sum": self.b_sum,
            "epoch": self.epoch, "skipped": self.skipped, "rows_seen": self.rows_seen,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SGDState":
        return cls(
            w=np.asarray(d["w"], dtype=np.float64), b=float(d["b"]),
            w_sum=np.asarray(d["w_sum"], dtype=np.float64), b_sum=float(d["b_sum"]),
            epoch=int(d["epoch"]), skipped=int(d["skipped"]), rows_seen=int(d["rows_seen"]),
        )


def project_l2(w: np.ndarray, radius: float | None) -> np.ndarray:
    """``Proj_W(w)`` for ``W = {w : ||w||_2 <= radius}`` (identity for ``radius=None``)."""
    if radius is None:
        return w
    norm = float(np.sqrt(w @ w))
    return w * (radius / norm) if norm > radius else w


def epoch_slices(n: int, buffer_size: int) -> list[slice]:
    """Split ``n`` rows into ``ceil(n / buffer_size)`` near-equal consecutive epochs.

    An epoch never spans two blocks (partitions): a block of ``n`` rows always
    gives the same epochs, wherever it is processed.
    """
    if n <= 0:
        return []
    n_epochs = -(-n // buffer_size)
    bounds = (np.arange(n_epochs + 1) * n) // n_epochs
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def run_epochs(
    state: SGDState,
    X: np.ndarray,
    y: np.ndarray,
    loss: Loss,
    *,
    buffer_size: int,
    eta: float,
    radius: float | None = None,
    fit_intercept: bool = True,
    reservoir: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[SGDState, np.ndarray]:
    """Run the 1PMB/2PMB step on every epoch buffer of one block of rows.

    Parameters
    ----------
    state : SGDState
        Model handed in; not modified (a new state is returned).
    X : ndarray of shape (n, d), float32 or float64
        The block's rows, in stream order.
    y : ndarray of shape (n,)
        Labels in ``{-1, +1}``.
    loss : Loss
        The surrogate ``l``.
    buffer_size : int
        Epoch length ``s``.
    eta : float
        Step-length scale; epoch ``e`` steps ``eta / sqrt(e)``.
    radius : float or None
        Radius of the L2 ball ``W`` (None: no projection).
    fit_intercept : bool
        Learn the intercept ``b`` (score ``w.x + b``) alongside ``w``.
    reservoir : (X_r, y_r) or None
        2PMB: the rare-class reservoir, joined to every epoch buffer.

    Returns
    -------
    state : SGDState
        The model after the block.
    stats : ndarray of dtype :data:`EPOCH_STATS`, one row per epoch
        Loss before the step, buffer rows, skip flag and compute seconds.
    """
    st = state.copy()
    slices = epoch_slices(X.shape[0], buffer_size)
    stats = np.zeros(len(slices), dtype=EPOCH_STATS)
    if reservoir is not None:
        X_r, y_r = reservoir
    for i, sl in enumerate(slices):
        t0 = time.perf_counter()
        Xe, ye = X[sl], y[sl]
        if reservoir is not None:
            Xe, ye = np.concatenate([X_r, Xe]), np.concatenate([y_r, ye])
        st.rows_seen += sl.stop - sl.start
        n_pos = int(np.count_nonzero(ye > 0))
        if n_pos == 0 or n_pos == ye.shape[0]:
            st.skipped += 1
            stats[i] = (st.epoch, ye.shape[0], 0.0, True, time.perf_counter() - t0)
            continue
        s = Xe @ st.w.astype(Xe.dtype, copy=False)
        if fit_intercept:
            s = s + Xe.dtype.type(st.b)
        value, dscore = loss.value_and_dscore(s, ye)
        st.epoch += 1
        step = eta / np.sqrt(st.epoch)
        grad = weight_gradient(Xe, dscore)
        st.w = project_l2(st.w - step * grad, radius)
        if fit_intercept:
            st.b -= step * float(dscore.sum())
        st.w_sum += st.w
        st.b_sum += st.b
        stats[i] = (st.epoch, ye.shape[0], value, False, time.perf_counter() - t0)
    return st, stats
