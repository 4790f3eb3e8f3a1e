"""The stream plan: which rows are held out, which rows form which buffer, when the selection looks.

One plan serves the three drivers -- :meth:`NonDecomposableClassifier.fit`
(the training set is block 0), ``partial_fit`` (call ``j`` is block ``j``) and
the Dask engine (Parquet partition ``j`` is block ``j``, with its global row
offset) -- so they give the same model bit for bit on the same rows in the
same order (``docs/engine.md``).

**Holdout.**  Row ``i`` (its global position in file order) has the key
``holdout_keys(seed, i)``.  Of the ``n_c`` rows of class ``c``, the ``v_c``
with the smallest keys are validation rows and are never trained on:
``v_c = round(validation_fraction * n_c)``, at least 1 and at most ``n_c - 1``
when ``n_c >= 2`` (so the rare class is represented), scaled down together
when ``v_+ + v_-`` exceeds ``validation_max_rows``.  Membership is a
threshold on the key, so any process decides it for any row.

**Folds.**  K-fold selection (the estimator's ``validation_folds = K``)
ranks each class's rows by the same keys and puts the row of rank ``r`` in
fold ``r mod K``: every fold holds ``floor(n_c / K)`` or ``ceil(n_c / K)``
rows of class ``c`` (:func:`fold_ids`).

**Buffers.**  In pass ``p`` a block's training rows (not held out; for 2PMB,
only the streamed class) are visited in ``row_order(seed, p, j)`` and cut into
``epoch_slices`` -- an epoch never spans two blocks.  The blocks of a pass are
visited in ``block_order(seed, p)``.

A pass in which only full-batch candidates train (:mod:`nsdist.solvers.batch`:
their gradient does not depend on the order) visits each block's training rows
in file order: the in-memory drivers then gather them once, not every pass.

**Rounds.**  With ``n_chains = K > 1`` (the engine's data-parallel mode) the
blocks of each pass are taken ``K`` at a time: the ``K`` blocks of a round
each run from the same state on their own chain, and the states are averaged
(:func:`~nsdist.solvers.kernel.mix_states`) before the next round.  A round
never spans two passes, and the checks fall on round ends (:func:`rounds`).

**Checks.**  The selection scores the candidates after every ``check_rows``
streamed rows, at block boundaries: when a pass is shorter than that, after
every ``ceil(check_rows / rows_per_pass)`` passes; otherwise inside the pass
too, at the first block boundary past each multiple; always after the last step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .order import block_order, holdout_keys, row_order

__all__ = ["Holdout", "holdout_sizes", "fold_ids", "smallest_keys", "training_rows", "stream_order", "block_rows",
           "Step", "Steps", "schedule", "rounds", "ends_pass"]

_NONE = np.uint64(0)


def holdout_sizes(n_pos: int, n_neg: int, fraction: float, max_rows: int) -> tuple[int, int]:
    """``(v_+, v_-)``: validation rows per class (module doc)."""
    def size(n: int) -> int:
        if n < 2 or fraction <= 0:
            return 0
        return int(min(n - 1, max(1, round(fraction * n))))

    v = [size(n_pos), size(n_neg)]
    total = v[0] + v[1]
    if total > max_rows:
        v = [max(1, int(x * max_rows // total)) if x else 0 for x in v]
    return v[0], v[1]


def fold_ids(y: np.ndarray, row_ids: np.ndarray, random_state: int, k: int) -> np.ndarray:
    """The fold in ``0 .. k-1`` of each row (module doc, Folds): stratified, by seed and row position."""
    keys = holdout_keys(random_state, np.asarray(row_ids))
    folds = np.empty(keys.shape[0], dtype=np.intp)
    for cls in (np.asarray(y) > 0, np.asarray(y) <= 0):
        rows = np.flatnonzero(cls)
        folds[rows[np.argsort(keys[rows], kind="stable")]] = np.arange(rows.shape[0]) % k
    return folds


def smallest_keys(keys: np.ndarray, v: int) -> np.ndarray:
    """The ``v`` smallest of ``keys`` (uint64), sorted."""
    if v <= 0:
        return np.empty(0, dtype=np.uint64)
    if v < keys.shape[0]:
        keys = np.partition(keys, v - 1)[:v]
    return np.sort(keys)


@dataclass(frozen=True)
class Holdout:
    """The validation rows: class ``c``'s rows whose key is below ``cut[c]``.

    Attributes
    ----------
    random_state : int
        Seed of :func:`~nsdist.solvers.order.holdout_keys`.
    cut_pos, cut_neg : int
        Key thresholds (exclusive) for the positives and the negatives.
    n_pos, n_neg : int
        Validation rows of each class.
    """

    random_state: int
    cut_pos: int
    cut_neg: int
    n_pos: int
    n_neg: int

    @classmethod
    def from_keys(cls, random_state: int, pos_keys: np.ndarray, neg_keys: np.ndarray,
                  v_pos: int, v_neg: int) -> "Holdout":
        """The holdout of ``v_c`` rows per class, given (at least) each class's ``v_c`` smallest keys."""
        def cut(keys: np.ndarray, v: int) -> int:
            return 0 if v == 0 else int(smallest_keys(keys, v)[-1]) + 1
        return cls(int(random_state), cut(pos_keys, v_pos), cut(neg_keys, v_neg), int(v_pos), int(v_neg))

    @classmethod
    def draw(cls, y: np.ndarray, row_ids: np.ndarray, random_state: int, fraction: float,
             max_rows: int) -> "Holdout":
        """The holdout of rows held in memory (labels ``y`` in {-1, +1}, global ids ``row_ids``)."""
        keys = holdout_keys(random_state, row_ids)
        pos = y > 0
        v_pos, v_neg = holdout_sizes(int(pos.sum()), int((~pos).sum()), fraction, max_rows)
        return cls.from_keys(random_state, keys[pos], keys[~pos], v_pos, v_neg)

    @property
    def n_rows(self) -> int:
        return self.n_pos + self.n_neg

    def mask(self, y: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
        """True for the validation rows among ``(y, row_ids)``."""
        if self.n_rows == 0:
            return np.zeros(np.shape(y)[0], dtype=bool)
        keys = holdout_keys(self.random_state, row_ids)
        cut = np.where(np.asarray(y) > 0, np.uint64(self.cut_pos), np.uint64(self.cut_neg))
        return keys < cut

    def to_dict(self) -> dict:
        return {"random_state": self.random_state, "cut_pos": str(self.cut_pos), "cut_neg": str(self.cut_neg),
                "n_pos": self.n_pos, "n_neg": self.n_neg}


def training_rows(y: np.ndarray, row_ids: np.ndarray, *, holdout: Holdout | None = None,
                  stream_label: int | None = None) -> np.ndarray:
    """Indices of a block's training rows, in file order (the same in every pass).

    Parameters
    ----------
    y : ndarray of shape (n,)
        The block's labels in {-1, +1}.
    row_ids : ndarray of shape (n,)
        Their global positions in file order.
    holdout : Holdout, optional
        Rows it holds out are left out.
    stream_label : int, optional
        2PMB: only rows of this class are streamed.
    """
    keep = np.ones(y.shape[0], dtype=bool)
    if holdout is not None:
        keep &= ~holdout.mask(y, row_ids)
    if stream_label is not None:
        keep &= y == stream_label
    return np.flatnonzero(keep)


def stream_order(rows: np.ndarray, *, pass_index: int, block: int, random_state: int, shuffle: bool) -> np.ndarray:
    """A block's :func:`training_rows` in the stream order of pass ``pass_index``."""
    return rows[row_order(random_state, pass_index, block, rows.shape[0], shuffle)]


def block_rows(y: np.ndarray, row_ids: np.ndarray, *, pass_index: int, block: int, random_state: int,
               shuffle: bool, holdout: Holdout | None = None, stream_label: int | None = None) -> np.ndarray:
    """Indices of a block's training rows, in the stream order of pass ``pass_index``.

    :func:`stream_order` of :func:`training_rows` (a driver that visits a block
    in many passes computes the training rows once).
    """
    return stream_order(training_rows(y, row_ids, holdout=holdout, stream_label=stream_label),
                        pass_index=pass_index, block=block, random_state=random_state, shuffle=shuffle)


@dataclass(frozen=True)
class Step:
    """One unit of the stream: block ``block`` in pass ``pass_index``."""

    pass_index: int
    block: int


class Steps(Sequence):
    """The steps of ``n_passes`` passes, made when read (a pass budget can run to thousands of passes).

    ``steps[i]`` is :class:`Step` ``(i // n_blocks, block_order(seed, p, n_blocks)[i % n_blocks])``;
    an early-stopped run reads a few passes of it, not the budget.
    """

    def __init__(self, n_blocks: int, n_passes: int, random_state: int, shuffle: bool) -> None:
        self.n_blocks, self.n_passes, self.random_state, self.shuffle = n_blocks, n_passes, random_state, shuffle
        self._last: tuple[int, np.ndarray] | None = None       # the last pass read and its block order

    def __len__(self) -> int:
        return self.n_blocks * self.n_passes

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"step {i} of {len(self)}")
        p, j = divmod(i, self.n_blocks)
        if self._last is None or self._last[0] != p:
            self._last = (p, block_order(self.random_state, p, self.n_blocks, self.shuffle))
        return Step(p, int(self._last[1][j]))


def ends_pass(steps: Sequence[Step], i: int) -> bool:
    """Step ``i`` is the last of its pass (the full-batch candidates iterate after it)."""
    return i + 1 == len(steps) or steps[i + 1].pass_index != steps[i].pass_index


def schedule(block_sizes: list[int], n_passes: int, *, random_state: int, shuffle: bool,
             check_rows: int | None) -> tuple[Steps, list[int]]:
    """The steps of ``n_passes`` passes and the steps after which the selection looks.

    Parameters
    ----------
    block_sizes : list of int
        Rows of each block (before the holdout): the check clock counts these.
    check_rows : int or None
        Rows between checks (module doc); None: one check, after the last step.

    Returns
    -------
    steps : Steps
        The sequence of :class:`Step`.
    checks : list of int
        Increasing step indices ``i``: a check follows ``steps[i]``.
    """
    n_blocks = len(block_sizes)
    steps = Steps(n_blocks, n_passes, random_state, shuffle)
    if check_rows is None or not steps:
        return steps, [len(steps) - 1] if steps else []
    per_pass = max(1, sum(block_sizes))
    checks: list[int] = []
    if per_pass <= check_rows:
        every = -(-check_rows // per_pass)
        checks = [(p + 1) * n_blocks - 1 for p in range(n_passes) if (p + 1) % every == 0]
    else:
        acc = 0
        for i, s in enumerate(steps):
            acc += block_sizes[s.block]
            end_of_pass = (i + 1) % n_blocks == 0
            if acc >= check_rows or end_of_pass:
                checks.append(i)
                acc = 0
    if not checks or checks[-1] != len(steps) - 1:
        checks.append(len(steps) - 1)
    return steps, checks


def rounds(steps: Sequence[Step], checks: list[int], n_blocks: int, n_chains: int) -> tuple[list[int], list[int]]:
    """Round ends for ``n_chains`` chains, and the checks moved to the end of their round.

    Returns
    -------
    ends : list of int
        Step index that ends each round (rounds of ``n_chains`` consecutive
        steps, cut at every pass end).
    checks : list of int
        Each check moved forward to the end of the round it falls in.
    """
    ends = []
    for i in range(len(steps)):
        in_pass = i % n_blocks
        if (in_pass + 1) % n_chains == 0 or in_pass == n_blocks - 1:
            ends.append(i)
    moved = sorted({ends[int(np.searchsorted(ends, c))] for c in checks})
    return ends, moved
