"""The epoch kernel: one 1PMB/2PMB step per buffer for a population of models, written once.

Algorithm 1 of the seed (1PMB), line 5, for epoch ``e = 1, 2, ...``::

    w_{e+1} = Proj_W( w_e - (eta / sqrt(e)) * grad l(buffer_e, w_e) )

and the returned model is the average of the iterates ``w_1 .. w_e``.  A
population's candidates with a smooth surrogate step a constant ``eta`` instead
(averaged SGD with a constant step, Bach & Moulines 2013; :class:`Population`).
:func:`run_epochs` applies that step to every epoch buffer of one block of
rows, for ``M`` candidate models at once (a :class:`Population`: each column
of ``W`` has its own surrogate ``l_m`` and step scale ``eta_m``).  Per buffer
it costs one ``S = X @ W`` and one ``G = X.T @ dS`` (``W`` of shape
``d x M``), so a population reads its data once.  The in-memory solvers call
it on the (shuffled) training rows, the Dask engine on each Parquet partition
in turn, handing the :class:`SGDState` from partition to partition; nothing
else updates a model.  ``X`` may be a dense array or a ``scipy.sparse`` CSR
matrix: only ``X @ W`` and ``X.T @ dS`` touch it.  Dense blocks are stepped on
in Fortran order, whoever calls (:func:`aligned`): with one candidate the
products are BLAS matrix-vector products, whose sums run in another order on
the other layout, and the engine must compute the in-memory solvers' model to
the bit.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..losses.base import Loss, weight_gradient
from .batch import BatchState
from .blocks import put_columns, take_columns
from .lazy import LazyWeights, row_slice, use_lazy

__all__ = ["Population", "SGDState", "StateChange", "EPOCH_STATS", "run_epochs", "end_pass", "epoch_slices",
           "project_l2", "mix_states", "stack_rows", "aligned"]

#: dtype of the per-epoch statistics returned by :func:`run_epochs` (``loss``: the mean over live candidates)
EPOCH_STATS = np.dtype(
    [("epoch", "i8"), ("rows", "i8"), ("loss", "f8"), ("skipped", "?"), ("seconds", "f8")]
)


@dataclass(frozen=True)
class Population:
    """The candidates trained together: per column ``m`` of ``W``, a loss, a step, an intercept flag.

    Attributes
    ----------
    losses : tuple of Loss
        ``l_m``, the surrogate of candidate ``m``.
    etas : tuple of float
        ``eta_m``: candidate ``m``'s step scale.
    learn_b : tuple of bool
        Candidate ``m`` learns an intercept (F1's own surrogate).
    constant : tuple of bool
        Candidate ``m`` steps ``eta_m`` at every epoch; the others step
        ``eta_m / sqrt(e)`` (Algorithm 1).  With a smooth loss the average of
        constant-step iterates converges at rate O(1/e) (Bach & Moulines 2013),
        where the decaying step of a non-smooth surrogate's analysis leaves the
        average dominated by its early iterates.
    batch : tuple of bool, optional
        Candidate ``m`` is a full-batch candidate (:mod:`nsdist.solvers.batch`):
        it does not step per buffer; its pass's gradient is summed and it makes
        one L-BFGS iteration at each pass end (:func:`end_pass`).  Default: none.
    """

    losses: tuple[Loss, ...]
    etas: tuple[float, ...]
    learn_b: tuple[bool, ...]
    constant: tuple[bool, ...]
    batch: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if not self.batch:
            object.__setattr__(self, "batch", (False,) * len(self.losses))

    @property
    def batch_cols(self) -> np.ndarray:
        """The full-batch candidates' columns."""
        return np.flatnonzero(np.asarray(self.batch, dtype=bool))

    def only_batch(self, alive: np.ndarray) -> bool:
        """Only full-batch candidates are alive (and some are): a pass visits the rows in file order
        (:mod:`nsdist.solvers.plan`)."""
        batch = np.asarray(self.batch, dtype=bool)
        return bool((alive & batch).any() and not (alive & ~batch).any())

    @classmethod
    def single(cls, loss: Loss, eta: float, fit_intercept: bool = False) -> "Population":
        """A population of one (explicit parameters: the paper's model, ``eta / sqrt(e)`` steps)."""
        return cls((loss,), (float(eta),), (bool(fit_intercept),), (False,))

    def __len__(self) -> int:
        return len(self.losses)

    def token(self) -> tuple:
        """Plain data that identifies the population (for task keys and checkpoints)."""
        return tuple((type(l).__name__, tuple(sorted(l.params().items())), e, b, c, f)
                     for l, e, b, c, f in zip(self.losses, self.etas, self.learn_b, self.constant, self.batch))


@dataclass
class SGDState:
    """Everything the chain hands from one block of rows to the next.

    Attributes
    ----------
    W : ndarray of shape (d, M)
        Current iterates ``w_e`` of the ``M`` candidates (one per column).
    b : ndarray of shape (M,)
        Current intercepts (unregularised, not projected; 0 unless learned).
    W_sum, b_sum :
        Sums of the iterates after each step, for the averaged models.
    alive : ndarray of bool, shape (M,)
        Candidates still trained; the others are frozen (dropped by the selection).
    epoch : int
        Steps taken so far (``e``); skipped epochs do not count.
    skipped : int
        Epochs skipped because their buffer lacked a class (docs/surrogates.md).
    rows_seen : int
        Rows streamed so far (reservoir rows of 2PMB not included).
    batch : BatchState or None
        The full-batch candidates' sums and L-BFGS memory (None: the population has none, or no
        block was run yet).
    """

    W: np.ndarray
    b: np.ndarray = field(default=None)  # type: ignore[assignment]
    W_sum: np.ndarray = field(default=None)  # type: ignore[assignment]
    b_sum: np.ndarray = field(default=None)  # type: ignore[assignment]
    alive: np.ndarray = field(default=None)  # type: ignore[assignment]
    epoch: int = 0
    skipped: int = 0
    rows_seen: int = 0
    batch: BatchState | None = None

    def __post_init__(self) -> None:
        W = np.asarray(self.W, dtype=np.float64)
        self.W = W.reshape(-1, 1) if W.ndim == 1 else W
        m = self.W.shape[1]
        self.b = np.zeros(m) if self.b is None else np.asarray(self.b, dtype=np.float64).reshape(m)
        self.W_sum = np.zeros_like(self.W) if self.W_sum is None else np.asarray(self.W_sum, np.float64).reshape(self.W.shape)
        self.b_sum = np.zeros(m) if self.b_sum is None else np.asarray(self.b_sum, dtype=np.float64).reshape(m)
        self.alive = np.ones(m, dtype=bool) if self.alive is None else np.asarray(self.alive, dtype=bool).reshape(m)

    @classmethod
    def zeros(cls, d: int, m: int = 1) -> "SGDState":
        """The starting state ``w_0 = 0`` of Algorithms 1 and 2, for ``m`` candidates."""
        return cls(W=np.zeros((d, m)))

    @classmethod
    def at(cls, w: np.ndarray, b: float, learn_b: Sequence[bool]) -> "SGDState":
        """A warm start: every candidate at ``w_0 = w`` (``b_0 = b`` where it learns an intercept, else 0)."""
        learn = np.asarray(learn_b, dtype=bool)
        return cls(W=np.repeat(np.asarray(w, dtype=np.float64)[:, None], learn.size, axis=1),
                   b=np.where(learn, b, 0.0))

    @property
    def n_candidates(self) -> int:
        return self.W.shape[1]

    def models(self, average: bool, cols: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)`` of candidates ``cols`` (default: every one) as new arrays, ``W`` row-major of shape
        ``(d, len(cols))``: the averaged iterates ``(mean of W_1..W_e, mean of b_1..b_e)`` (the current
        ones if no step was taken) or the last ones; a full-batch candidate's last accepted point either
        way.  Only the columns asked for are read (at ``d = 2^20`` a population's ``W`` is 260 MB)."""
        cols = np.arange(self.n_candidates) if cols is None else np.asarray(cols, dtype=np.intp)
        if average and self.epoch > 0:
            W, b = take_columns(self.W_sum, cols), self.b_sum[cols] / self.epoch
            W /= self.epoch
        else:
            W, b = take_columns(self.W, cols), self.b[cols].copy()
        if self.batch is not None:
            Wb, bb = self.batch.models()
            for k, c in enumerate(self.batch.cols):
                for j in np.flatnonzero(cols == c):
                    W[:, j], b[j] = Wb[:, k], bb[k]
        return W, b

    def model(self, m: int, average: bool) -> tuple[np.ndarray, float]:
        """``(w, b)`` of candidate ``m`` (:meth:`models`)."""
        if self.batch is not None and m in self.batch.cols:
            W, b = self.batch.models()
            k = int(np.flatnonzero(self.batch.cols == m)[0])
            return W[:, k], float(b[k])
        if average and self.epoch > 0:
            return self.W_sum[:, m] / self.epoch, float(self.b_sum[m] / self.epoch)
        return self.W[:, m].copy(), float(self.b[m])

    def copy(self, deep_batch: bool = True) -> "SGDState":
        """A copy (``deep_batch=False``: sharing the full-batch candidates' L-BFGS memory,
        :meth:`BatchState.copy`)."""
        return replace(self, W=self.W.copy(), b=self.b.copy(), W_sum=self.W_sum.copy(),
                       b_sum=self.b_sum.copy(), alive=self.alive.copy(),
                       batch=None if self.batch is None else self.batch.copy(deep=deep_batch))

    def narrowed(self, cols: np.ndarray, weights: bool = True) -> "SGDState":
        """The state of candidates ``cols`` (sorted, holding every full-batch column) alone: their columns,
        row-major, the full-batch memory's columns renumbered.  Once the selection has frozen most candidates
        the engine steps this one, so that a step copies ``d x len(cols)`` floats, not ``d x M``
        (:meth:`widened` puts it back); the kernel computes each candidate's column as it does in the whole.
        ``weights=False``: ``W`` and ``W_sum`` left out (no rows), for a driver that only applies a change of
        every column to it (:meth:`changed`), its worker holding the weights (two strided copies of
        ``d x len(cols)`` floats spared: 31-40 ms a check at ``d = 2^20``)."""
        cols = np.asarray(cols, dtype=np.intp)
        if cols.size == self.n_candidates:
            return self
        batch = None if self.batch is None else replace(self.batch, cols=np.searchsorted(cols, self.batch.cols))
        W, W_sum = (take_columns(self.W, cols), take_columns(self.W_sum, cols)) if weights else \
            (np.zeros((0, cols.size)), np.zeros((0, cols.size)))
        return replace(self, W=W, b=self.b[cols], W_sum=W_sum, b_sum=self.b_sum[cols], alive=self.alive[cols],
                       batch=batch)

    def widened(self, narrow: "SGDState", cols: np.ndarray, in_place: bool = False) -> "SGDState":
        """This state with candidates ``cols`` and the counters taken from ``narrow`` (:meth:`narrowed`).
        ``in_place``: written into this state's ``W`` and ``W_sum``, which the result then shares (this
        state's own columns ``cols`` are overwritten), instead of into copies: 520 MB at d = 2^20 x 31."""
        cols = np.asarray(cols, dtype=np.intp)
        if cols.size == self.n_candidates:
            return narrow
        W, W_sum = self._put(cols, narrow.W, narrow.W_sum, in_place)
        b, b_sum, alive = self.b.copy(), self.b_sum.copy(), self.alive.copy()
        b[cols], b_sum[cols], alive[cols] = narrow.b, narrow.b_sum, narrow.alive
        batch = None if narrow.batch is None else replace(narrow.batch, cols=cols[narrow.batch.cols])
        return replace(narrow, W=W, b=b, W_sum=W_sum, b_sum=b_sum, alive=alive, batch=batch)

    def change(self, alive: np.ndarray, clock: tuple[int, np.ndarray] | None) -> "StateChange":
        """What blocks run from a state with live candidates ``alive`` and full-batch memory at ``clock``
        (:meth:`BatchState.clock`; None: none yet) can have changed to give this state (:class:`StateChange`)."""
        cols = np.flatnonzero(alive)
        if self.batch is not None:
            cols = np.union1d(cols, self.batch.cols)
        batch, sums, pairs = self.batch, None, None
        if batch is not None and clock is not None:
            if clock[0] == batch.evaluations:             # no pass ended: only its sums moved
                batch, sums = None, (batch.grad, batch.value, batch.rows)
            else:                                         # the L-BFGS memory's new pairs, not all of it
                rows = [batch.pair_rows(k, since) for k, since in enumerate(clock[1])]
                pairs = (rows, [batch.S[k, r] for k, r in enumerate(rows)], [batch.Y[k, r] for k, r in enumerate(rows)])
                batch = replace(batch, S=batch.S[:, :0], Y=batch.Y[:, :0])
        return StateChange(cols, take_columns(self.W, cols), take_columns(self.W_sum, cols),
                           replace(self, W=np.zeros((0, self.n_candidates)), W_sum=np.zeros((0, self.n_candidates)),
                                   batch=batch), sums, pairs)

    def changed(self, change: "StateChange", in_place: bool = False) -> "SGDState":
        """This state with ``change`` applied: the state ``change`` was taken from, bit for bit, when this
        is the state its blocks were run from (the alive mask and clock given to :meth:`change`).
        ``in_place``: the L-BFGS memory's new pairs are written into this state's ``S`` and ``Y`` (and any
        state sharing them), which the result then shares, instead of into copies: two copies of
        ``MEMORY x (d + 1)`` floats a pass end otherwise, 168 MB at d = 2^20 (1.2 s of a 23 s default job)."""
        W, W_sum = self._put(change.cols, change.W, change.W_sum)
        batch = change.rest.batch
        if change.sums is not None:
            grad, value, rows = change.sums
            batch = replace(self.batch, grad=grad, value=value, rows=rows)
        elif change.pairs is not None:
            S, Y = (self.batch.S, self.batch.Y) if in_place else (self.batch.S.copy(), self.batch.Y.copy())
            for k, (rows, s, y) in enumerate(zip(*change.pairs)):
                S[k, rows], Y[k, rows] = s, y
            batch = replace(batch, S=S, Y=Y)
        return replace(change.rest, W=W, W_sum=W_sum, batch=batch)

    def _put(self, cols: np.ndarray, W: np.ndarray, W_sum: np.ndarray, in_place: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
        """``self.W`` and ``self.W_sum`` (or copies of them) with their columns ``cols`` set to ``W``, ``W_sum``
        (every column: ``W`` and ``W_sum`` themselves, unless ``in_place``)."""
        if not in_place and np.array_equal(cols, np.arange(self.n_candidates)):
            return W, W_sum
        out = (self.W, self.W_sum) if in_place else (self.W.copy(), self.W_sum.copy())
        put_columns(out[0], cols, W)
        put_columns(out[1], cols, W_sum)
        return out

    def to_dict(self) -> dict:
        """Plain data (lists and numbers) for checkpoints; floats round-trip exactly through JSON."""
        return {
            "W": self.W.tolist(), "b": self.b.tolist(), "W_sum": self.W_sum.tolist(), "b_sum": self.b_sum.tolist(),
            "alive": self.alive.tolist(), "epoch": self.epoch, "skipped": self.skipped, "rows_seen": self.rows_seen,
            "batch": None if self.batch is None else self.batch.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SGDState":
        batch = d.get("batch")
        return cls(W=np.asarray(d["W"], dtype=np.float64), b=d["b"], W_sum=np.asarray(d["W_sum"], np.float64),
                   b_sum=d["b_sum"], alive=d["alive"], epoch=int(d["epoch"]), skipped=int(d["skipped"]),
                   rows_seen=int(d["rows_seen"]), batch=None if batch is None else BatchState.from_dict(batch))


@dataclass
class StateChange:
    """What running blocks can change in a state (:meth:`SGDState.change`): what the engine's driver fetches
    at a segment's end instead of the whole state, 60 to 700 MB for a population at ``d = 2^20``.

    The kernel leaves a frozen candidate's columns of ``W`` and ``W_sum`` as they were (:func:`run_epochs`,
    :func:`mix_states`); :func:`end_pass` moves the full-batch candidates' columns and their L-BFGS memory.

    Attributes
    ----------
    cols : ndarray of int
        The columns that may have changed: the candidates alive at the start and the full-batch ones.
    W, W_sum : ndarray of shape (d, len(cols))
        Those columns, row-major.
    rest : SGDState
        The intercepts, mask and counters; its ``W`` and ``W_sum`` empty; its ``batch`` the full-batch
        memory when a pass ended (an L-BFGS iteration) but for the pairs ``S, Y``, else None.
    sums : (grad, value, rows) or None
        When no pass ended: the full-batch pass's sums, the only part of that memory a block changes.
    pairs : (rows, S rows, Y rows) or None
        When a pass ended: per full-batch candidate, the rows of ``S`` and ``Y`` written since
        (:meth:`BatchState.pair_rows`; 2 x (d + 1) floats a pass, of the 2 x 10 x (d + 1) held).
    """

    cols: np.ndarray
    W: np.ndarray
    W_sum: np.ndarray
    rest: SGDState
    sums: tuple[np.ndarray, np.ndarray, int] | None
    pairs: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] | None = None


def project_l2(w: np.ndarray, radius: float | None) -> np.ndarray:
    """``Proj_W`` for ``W = {w : ||w||_2 <= radius}``, column by column (identity for ``radius=None``)."""
    if radius is None:
        return w
    norm = np.sqrt(np.einsum("ij,ij->j", w, w)) if w.ndim == 2 else float(np.sqrt(w @ w))
    return w * np.where(norm > radius, radius / np.where(norm > 0, norm, 1.0), 1.0)


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


def stack_rows(blocks: Sequence, order: str = "F"):
    """Row blocks one after the other (CSR blocks stay CSR; a single block is returned as it is).

    Dense blocks are copied into one new array of memory order ``order``: ``"F"``,
    the layout of every dense block the kernel steps on (:func:`aligned`; 2PMB's
    epoch buffer, the reservoir followed by the epoch's rows), or ``"C"``.
    """
    if len(blocks) == 1:
        return blocks[0]
    if any(hasattr(b, "tocsr") for b in blocks):
        import scipy.sparse as sp
        return sp.vstack(list(blocks), format="csr")
    out = np.empty((sum(b.shape[0] for b in blocks), blocks[0].shape[1]), dtype=np.result_type(*blocks),
                   order=order)
    return np.concatenate(blocks, out=out)


def aligned(X, order: str = "F"):
    """``X`` itself, or a copy of a dense block that is not in memory order ``order`` and aligned.

    Every dense block the kernel steps on is Fortran-ordered (``order="F"``: each
    feature's values contiguous), wherever it comes from: the engine's blocks
    are made so (:func:`nsdist.solvers.blocks.gather_block`, no copy here), the
    in-memory solvers gather theirs so (:func:`nsdist.solvers.blocks.take_rows`), and
    anything else is copied.  A product with a single column ``w`` (one
    candidate: BLAS's matrix-vector product) sums in another order on the two
    layouts, so the model would otherwise depend on the caller's layout.  A row
    slice ``X[a:b]`` of a Fortran-ordered block is multiplied by BLAS as it lies.
    A block that crossed the network (Dask's deserialisation) can start at an
    address that is no multiple of 8 bytes; numpy multiplies such an array
    without BLAS, summing in another order, and the model would then depend on
    which worker ran the step.  Sparse blocks are multiplied by scipy's own
    loops, whose order does not depend on the layout or the address.
    ``order="C"``: the same for a C-ordered scorer (the engine's sample, scored
    as the estimator scores its C-ordered rows).
    """
    if hasattr(X, "tocsr"):
        return X
    return np.require(X, requirements=[order, "A"])


def run_epochs(state: SGDState, X, y: np.ndarray, population: Population, *, buffer_size: int,
               radius: float | None = None,
               reservoir: tuple[object, np.ndarray] | None = None) -> tuple[SGDState, np.ndarray]:
    """Run the 1PMB/2PMB step on every epoch buffer of one block of rows, for every live candidate.

    Parameters
    ----------
    state : SGDState
        Models handed in; not modified (a new state is returned).
    X : ndarray or scipy.sparse CSR matrix of shape (n, d), float32 or float64
        The block's rows, in stream order.
    y : ndarray of shape (n,)
        Labels in ``{-1, +1}``.
    population : Population
        Each candidate's surrogate ``l_m``, step scale ``eta_m`` and intercept flag.
    buffer_size : int
        Epoch length ``s``.
    radius : float or None
        Radius of the L2 ball ``W`` (None: no projection).
    reservoir : (X_r, y_r) or None
        2PMB: the rare-class reservoir, joined in front of every epoch buffer.

    Returns
    -------
    state : SGDState
        The models after the block.
    stats : ndarray of dtype :data:`EPOCH_STATS`, one row per epoch
        Mean loss over the live candidates before the step (NaN when they train different
        surrogates, whose values are not on one scale), buffer rows, skip flag, seconds.
    """
    st = state.copy(deep_batch=False)
    X, reservoir = aligned(X), None if reservoir is None else (aligned(reservoir[0]), reservoir[1])
    batch = population.batch_cols
    if batch.size:                    # their points are fixed for the whole pass: one product pair a block
        if st.batch is None:
            st.batch = BatchState.start(batch, st.W, st.b)
        st.batch.accumulate(X, y, st.W, st.b, [population.losses[c] for c in batch], st.alive)
    cols = np.flatnonzero(st.alive & ~np.asarray(population.batch, dtype=bool))
    if cols.size == 0:                # only full-batch candidates train: no epochs
        st.rows_seen += X.shape[0]
        return st, np.zeros(0, dtype=EPOCH_STATS)
    losses: Sequence[Loss] = [population.losses[c] for c in cols]
    etas = np.asarray(population.etas, dtype=np.float64)[cols]
    learn_b = np.asarray(population.learn_b, dtype=bool)[cols]
    constant = np.asarray(population.constant, dtype=bool)[cols]
    slices = epoch_slices(X.shape[0], buffer_size)
    stats = np.zeros(len(slices), dtype=EPOCH_STATS)
    # dense updates cost O(d M) an epoch, lazy ones O(nnz M) (nsdist/solvers/lazy.py)
    lazy = use_lazy(X, cols.size, buffer_size, radius)
    weights = (LazyWeights if lazy else _DenseWeights)(st, cols, radius)
    with np.errstate(over="ignore", invalid="ignore"):   # a diverging candidate goes non-finite: the
        b = _epochs(st, X, y, slices, stats, weights, st.b[cols], losses, etas, learn_b, constant, cols,
                    reservoir)
        weights.finish()                                  # selection drops it at its next check
    st.b[cols] = b
    return st, stats


class _DenseWeights:
    """``W`` of the live candidates, updated whole at every step (dense rows, or a projection).

    The live columns of ``W`` and ``W_sum`` are copied out once per block and written back by
    :meth:`finish`, so a step updates two contiguous arrays, not a fancy-indexed slice of the state.
    """

    def __init__(self, st: SGDState, cols: np.ndarray, radius: float | None) -> None:
        self.st, self.cols, self.radius = st, cols, radius
        self.W, self.W_sum = take_columns(st.W, cols), take_columns(st.W_sum, cols)

    rows = staticmethod(row_slice)

    def scores(self, Xe) -> np.ndarray:
        return np.asarray(Xe @ self.W.astype(Xe.dtype, copy=False), dtype=np.float64)

    def step(self, Xe, dS: np.ndarray, step: np.ndarray) -> None:
        G = weight_gradient(Xe, dS)
        G *= step
        self.W = project_l2(self.W - G, self.radius)
        self.W_sum += self.W

    def finish(self) -> None:
        put_columns(self.st.W, self.cols, self.W)
        put_columns(self.st.W_sum, self.cols, self.W_sum)


def _loss_groups(losses: Sequence[Loss]) -> list[tuple[Loss, np.ndarray]]:
    """The live candidates grouped by surrogate (same class and parameters), in order of first appearance.

    A group's scores go to one :meth:`~nsdist.losses.base.Loss.value_and_dscore_many`
    call, which gives each column bit for bit what ``value_and_dscore`` gives it.
    """
    groups: dict[tuple, list[int]] = {}
    first: dict[tuple, Loss] = {}
    for j, loss in enumerate(losses):
        key = (type(loss), tuple(sorted(loss.params().items())))
        groups.setdefault(key, []).append(j)
        first.setdefault(key, loss)
    return [(first[key], np.asarray(idx, dtype=np.intp)) for key, idx in groups.items()]


def _epochs(st, X, y, slices, stats, weights, b, losses, etas, learn_b, constant, cols, reservoir):
    """The loop of :func:`run_epochs`; returns the intercepts.

    What does not change from epoch to epoch is worked out once per block: the
    buffers' positive counts (one running count of the block's labels), the steps
    of constant-step candidates, which intercepts move, and the intercepts' sum
    (written back at the end); every epoch then does the same floating-point
    operations as the plain update, in the same order.
    """
    groups = _loss_groups(losses)
    one_scale = len(groups) == 1          # the candidates' losses can be averaged: one surrogate
    positives = np.concatenate(([0], np.cumsum(y > 0)))
    if reservoir is not None:
        res_rows, res_pos = reservoir[1].shape[0], int(np.count_nonzero(reservoir[1] > 0))
    else:
        res_rows, res_pos = 0, 0
    decaying, some_b, all_b = bool((~constant).any()), bool(learn_b.any()), bool(learn_b.all())
    step = etas
    b_sum = st.b_sum[cols]
    for i, sl in enumerate(slices):
        t0 = time.perf_counter()
        if reservoir is None:
            Xe, ye = weights.rows(X, sl), y[sl]
        else:
            Xe, ye = stack_rows((reservoir[0], row_slice(X, sl))), np.concatenate([reservoir[1], y[sl]])
        st.rows_seen += sl.stop - sl.start
        n_pos = res_pos + int(positives[sl.stop] - positives[sl.start])
        if n_pos == 0 or n_pos == res_rows + sl.stop - sl.start:
            st.skipped += 1
            stats[i] = (st.epoch, ye.shape[0], 0.0, True, time.perf_counter() - t0)
            continue
        S = weights.scores(Xe)
        S += b
        dS = np.empty_like(S)
        values = np.empty(cols.size)
        for loss, idx in groups:                          # one call per surrogate, not per candidate
            if idx.size == 1:
                values[idx[0]], dS[:, idx[0]] = loss.value_and_dscore(S[:, idx[0]], ye)
            else:
                values[idx], dS[:, idx] = loss.value_and_dscore_many(S[:, idx], ye)
        st.epoch += 1
        if decaying:                                      # eta_m / sqrt(e), or eta_m for a constant step
            step = np.where(constant, etas, etas / np.sqrt(st.epoch))
        if some_b:
            db = step * dS.sum(axis=0)
            b = b - (db if all_b else np.where(learn_b, db, 0.0))
        weights.step(Xe, dS, step)
        b_sum += b
        mean = float(values.sum() / values.size) if one_scale else math.nan
        stats[i] = (st.epoch, ye.shape[0], mean, False, time.perf_counter() - t0)
    st.b_sum[cols] = b_sum
    return b


def end_pass(state: SGDState, population: Population) -> SGDState:
    """The pass is over: each full-batch candidate makes its L-BFGS iteration and moves to the point the
    next pass evaluates (:meth:`BatchState.end_pass`).  ``state`` is not modified."""
    if state.batch is None:
        return state
    st = state.copy()
    cols = st.batch.cols
    nxt = st.batch.end_pass(np.asarray(population.learn_b, dtype=bool)[cols], np.asarray(population.etas)[cols])
    st.W[:, cols], st.b[cols] = nxt[:, :-1].T, nxt[:, -1]
    return st


def mix_states(start: SGDState, states: Sequence[SGDState]) -> SGDState:
    """Iterative parameter mixing (McDonald, Hall & Mann 2010): the average of ``K`` chains' states.

    Every chain ran from ``start`` on its own blocks.  The mixture averages the
    iterates ``W, b`` and the running sums ``W_sum, b_sum`` in chain order (so
    the averaged model is the mean of the chains' averaged models when they
    took equally many steps; a frozen candidate's stay ``start``'s), takes
    the step counter ``e`` of the chain that stepped most (the next steps are
    ``eta / sqrt(e)``), and adds up the rows seen and the epochs skipped.  A
    pure function: the same chains give the same mixture bit for bit.
    """
    k = len(states)
    mixed = start.copy(deep_batch=False)
    mixed.W = sum(st.W for st in states) / k
    mixed.b = sum(st.b for st in states) / k
    mixed.W_sum = sum(st.W_sum for st in states) / k
    mixed.b_sum = sum(st.b_sum for st in states) / k
    mixed.epoch = max(st.epoch for st in states)
    mixed.rows_seen = start.rows_seen + sum(st.rows_seen - start.rows_seen for st in states)
    mixed.skipped = start.skipped + sum(st.skipped - start.skipped for st in states)
    frozen = ~start.alive             # as they were, not the mean of K equal columns (K = 3 rounds it)
    mixed.W[:, frozen], mixed.W_sum[:, frozen] = start.W[:, frozen], start.W_sum[:, frozen]
    mixed.b[frozen], mixed.b_sum[frozen] = start.b[frozen], start.b_sum[frozen]
    if states[0].batch is not None:   # full-batch candidates: their points unchanged, their sums added up
        base = start.batch or BatchState.start(states[0].batch.cols, start.W, start.b)
        mixed.batch = BatchState.mix(base, [st.batch for st in states])
        mixed.W[:, base.cols], mixed.b[base.cols] = start.W[:, base.cols], start.b[base.cols]
    return mixed
