"""The stream plan's holdout over a Parquet dataset: class counts, cuts and validation rows.

Two passes over the label column only (cheap: one byte a row) and one over the
validation rows' features:

1. each partition's class counts -- a dataset lacking a class fails here,
   before any training;
2. each partition's ``v_c`` smallest :func:`~nsdist.solvers.order.holdout_keys`
   per class; merged, they fix the cuts of :class:`~nsdist.solvers.plan.Holdout`
   -- exactly the holdout :meth:`Holdout.draw` computes on the same rows in memory;
3. the validation rows themselves, gathered on the driver in file order,
   with the column moments of every row (the standardisation's) and, for
   2PMB, the reservoir of the training rows (:mod:`nsdist.engine.reservoir`).

A run without a holdout (``eta`` and ``n_passes`` set, or validation rows
given) checks the classes from the footers' label statistics when they tell
(:func:`check_classes`) and reads a *sample* instead: whole partitions, drawn
by seed, up to ``max_rows`` rows, in file order (:func:`sample_partitions`),
kept on a worker (:class:`WorkerSample`).  It gives the standardisation
moments and the place of a ranking model's cut without a pass over the whole
dataset and without moving its rows; on a dataset of at most ``max_rows`` rows
it is the whole dataset, and both are exact.  Moments are taken without a
float64 copy of the rows (:func:`moments_of`; of a partition's columns without
assembling it, :func:`column_moments`), to the same bits.
"""
from __future__ import annotations

import contextlib
import logging
import zlib

import numpy as np
from distributed import Client, Future, fire_and_forget

from .._faults import MAX_RESTARTS, is_transient, redo_lost
from .._threads import on_one_blas_thread
from ..data import Dataset
from ..solvers.order import holdout_keys
from ..solvers.kernel import aligned, stack_rows
from ..solvers.plan import Holdout, holdout_sizes, smallest_keys
from ..solvers.scaling import chunked_moments, merge_moments, moments_of, row_moments
from .cluster import fetch
from .reservoir import partition_reservoirs, rare_reservoir, read_rows_of

log = logging.getLogger("nsdist.engine")

__all__ = ["class_counts", "check_classes", "plan_holdout", "gather_validation", "sample_partitions",
           "WorkerSample", "column_moments"]


def _counts(dataset: Dataset, partition: int) -> tuple[int, int]:
    y = dataset.read_labels(partition)
    n_pos = int(np.count_nonzero(y > 0))
    return n_pos, y.shape[0] - n_pos


def class_counts(client: Client, dataset: Dataset) -> tuple[int, int]:
    """``(n+, n-)`` from the label column; a ``ValueError`` naming the dataset if a class is absent."""
    parts = client.gather(client.map(_counts, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), pure=False))
    n_pos, n_neg = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if n_pos == 0 or n_neg == 0:
        found = "negative" if n_pos == 0 else "positive"
        raise ValueError(f"dataset {dataset.url!r} has only {found} rows ({n_pos + n_neg} rows, "
                         f"{'no positive' if n_pos == 0 else 'no negative'} row); training needs both classes")
    return n_pos, n_neg


def _smallest(dataset: Dataset, partition: int, random_state: int, v_pos: int, v_neg: int):
    y = dataset.read_labels(partition)
    ids = dataset.partitions[partition].row_offset + np.arange(y.shape[0])
    keys = holdout_keys(random_state, ids)
    return smallest_keys(keys[y > 0], v_pos), smallest_keys(keys[y < 0], v_neg)


def plan_holdout(client: Client, dataset: Dataset, counts: tuple[int, int], *, random_state: int,
                 fraction: float, max_rows: int) -> Holdout:
    """The holdout of ``dataset`` (the same rows as :meth:`Holdout.draw` on its rows in file order)."""
    v_pos, v_neg = holdout_sizes(counts[0], counts[1], fraction, max_rows)
    parts = client.gather(client.map(_smallest, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), random_state=random_state,
                                     v_pos=v_pos, v_neg=v_neg, pure=False))
    pos = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.uint64)
    neg = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.uint64)
    return Holdout.from_keys(random_state, pos, neg, v_pos, v_neg)


def column_moments(blocks: list[list[np.ndarray]], chunk: int = 4096) -> tuple[int, np.ndarray, np.ndarray]:
    """:func:`moments_of` of row blocks given by their columns, one block after the other, to the bit, without
    making them: ``blocks[b][j]`` is column ``j`` of block ``b`` (1-D; what
    :meth:`~nsdist.data.Dataset.read_columns` returns is enough).

    Each column's sums run over its own values only, so the moments of a few of
    a matrix's columns (at least 2) are those columns' moments of the whole.  In
    a worker this costs about half of assembling a C-ordered partition and taking
    :func:`moments_of` of it (45 against 54 + 24 ms at 125k x 100 float32: two
    fresh 50 MB arrays page-fault).
    """
    n = sum(values[0].shape[0] for values in blocks if values)
    d = len(blocks[0]) if blocks else 0
    if d < 2 or n == 0:
        return row_moments(np.concatenate([np.column_stack(values) for values in blocks]).astype(np.float64))

    def columns_of(values: list[np.ndarray]):
        def fill(a: int, rows: np.ndarray) -> None:
            for j, v in enumerate(values):
                rows[:, j] = v[a:a + rows.shape[0]]
        return values[0].shape[0], fill

    return chunked_moments([columns_of(values) for values in blocks], n, d, chunk)


def _validation_rows(dataset: Dataset, partition: int, holdout: Holdout, dtype: str,
                     reservoir: tuple[int, int] | None = None):
    """The partition's validation rows (C-ordered, as read), their labels, the moments of all its rows, and,
    given ``reservoir = (size, random_state)``, both classes' reservoirs of its training rows (raw rows,
    :func:`~nsdist.engine.reservoir.partition_reservoirs`; else None).

    A partition of one column per feature is not assembled: its validation rows
    (and reservoir rows) are gathered from the columns and the moments taken from
    them (:func:`column_moments`) -- the same numbers as from the whole matrix.
    """
    y, take, read = read_rows_of(dataset, partition, dtype)
    moments = column_moments([read]) if isinstance(read, list) else moments_of(read)
    ids = dataset.partitions[partition].row_offset + np.arange(y.shape[0])
    held = holdout.mask(y, ids)
    rows = np.flatnonzero(held)
    samples = None if reservoir is None else partition_reservoirs(y, ids, np.flatnonzero(~held), *reservoir, take)
    return take(rows), y[rows], moments, samples


def gather_validation(client: Client, dataset: Dataset, holdout: Holdout, *, dtype: str,
                      reservoir: tuple[int, int] | None = None):
    """The validation rows (raw features), in file order, on the driver; the moments of every row; and, given
    ``reservoir = (size, random_state)``, 2PMB's rare-class sample of the training rows (raw rows; else None).

    The pass reads every partition anyway (the validation rows are spread
    over all of them), so it also returns the column moments ``(n, mean, m2)``
    of all rows, merged in file order: standardisation costs no pass of its own,
    and neither does 2PMB's reservoir (its rows are scaled by
    :func:`~nsdist.engine.reservoir.scaled_reservoir` once the moments give the scaling).
    """
    parts = fetch(client, client.map(_validation_rows, [dataset] * len(dataset.partitions),
                                     range(len(dataset.partitions)), holdout=holdout, dtype=dtype,
                                     reservoir=reservoir, pure=False))
    X, y = _stack(parts)
    sample = None if reservoir is None else rare_reservoir(dataset, [p[3] for p in parts])
    return (X, y), merge_moments([p[2] for p in parts]), sample


def _stack(parts: list) -> tuple:
    """``(X, y)`` blocks concatenated in order (CSR blocks stay CSR; dense ones C-ordered, as they are read)."""
    return stack_rows([p[0] for p in parts], order="C"), np.concatenate([p[1] for p in parts])


def sample_partitions(dataset: Dataset, random_state: int, max_rows: int) -> list[int]:
    """Partitions drawn by seed while they hold at most ``max_rows`` rows (at least one; all of them if the
    dataset has no more), in file order."""
    order = np.random.default_rng([random_state, 0x5A3D1E]).permutation(len(dataset.partitions))
    chosen, rows = [], 0
    for j in order:
        n = dataset.partitions[j].num_rows
        if chosen and rows + n > max_rows:
            break
        chosen.append(int(j))
        rows += n
    return sorted(chosen)


def last_partitions(dataset: Dataset, steps: list, max_rows: int) -> dict[int, int]:
    """The partitions the plan's last steps load, ``{step: partition}``, while they hold at most ``max_rows``
    rows (at least one) and none repeats: a fixed run's sample for its cut, on the workers when the chain
    ends (:meth:`WorkerSample.adopt`)."""
    chosen: dict[int, int] = {}
    rows = 0
    for i in range(len(steps) - 1, -1, -1):
        j, n = steps[i].block, dataset.partitions[steps[i].block].num_rows
        if j in chosen.values() or (chosen and rows + n > max_rows):
            break
        chosen[i] = j
        rows += n
    return chosen


def _read(dataset: Dataset, partition: int, dtype: str):
    return dataset.read_partition(partition, dtype=dtype)


def check_classes(client: Client, dataset: Dataset) -> None:
    """Fail unless both classes are present: from the footers' statistics when they tell, else :func:`class_counts`."""
    if not dataset.has_both_classes():
        class_counts(client, dataset)


def _sample_moments(*blocks) -> tuple[int, np.ndarray, np.ndarray]:
    """The moments of the blocks' concatenation (:func:`moments_of`: not made for dense rows)."""
    return moments_of([b[0] for b in blocks])


def _group_moments(dataset: Dataset, partitions: list[int], features: list[int],
                   dtype: str) -> tuple[int, np.ndarray, np.ndarray]:
    """The moments of the columns ``features`` over the rows of ``partitions``, one after the other (only those
    columns are read)."""
    return column_moments([dataset.read_columns(p, dtype=dtype, features=features)[0] for p in partitions])


@on_one_blas_thread
def _sample_cut(w: np.ndarray, scaling, measure: str, k, *blocks) -> float:
    """The measure's cut of ``w`` on the dense ``blocks``' rows stacked and scaled (:func:`_scaled_stack`),
    scored in one product as the estimator scores its rows: a matrix-vector product is not the same to the
    bit on the rows split in two."""
    from ..solvers.measure import cut_intercept

    X, y = _scaled_stack(blocks, scaling)
    return cut_intercept(measure, y, _scores(X, w, None), k=k)


def _scaled_stack(blocks, scaling) -> tuple[np.ndarray, np.ndarray]:
    """The dense blocks' rows one after the other in one new C-ordered array, each block scaled as it is
    copied in, and their labels: the numbers of scaling a copy of the stacked rows (element by element), in one
    copy of the sample instead of two (at 200,000 x 1000 float32 rows, 800 MB less on the worker and about a
    second less).  A single block that needs no scaling is used as it is (C-ordered, aligned)."""
    if scaling is None and len(blocks) == 1:
        return aligned(blocks[0][0], order="C"), blocks[0][1]
    X = np.empty((sum(b[0].shape[0] for b in blocks), blocks[0][0].shape[1]),
                 dtype=np.result_type(*(b[0] for b in blocks)))
    a = 0
    for rows, _ in blocks:
        part = X[a:a + rows.shape[0]]
        part[...] = rows
        if scaling is not None:
            scaling.apply(part)
        a += rows.shape[0]
    return X, np.concatenate([b[1] for b in blocks])


def _scores(X, w: np.ndarray, scaling) -> np.ndarray:
    # C-ordered, as read and as the estimator scores its rows (a matrix-vector product sums in another order on
    # a Fortran-ordered block); a copy that crossed the network may be unaligned (kernel.aligned)
    X = aligned(X, order="C")
    Xs = X if scaling is None else scaling.apply(X.copy())
    return np.asarray(Xs @ w.astype(Xs.dtype), dtype=np.float64)


@on_one_blas_thread
def _block_scores(block, model: tuple) -> tuple[np.ndarray, np.ndarray]:
    """A CSR block's labels and scores under ``model = (w, scaling)``: row by row the same numbers as in
    the product over the rows stacked (a CSR product sums each row's entries on their own, in index order)."""
    w, scaling = model
    return block[1], _scores(block[0], w, scaling)


def _model_digest(model: tuple) -> tuple:
    """A checksum of ``model = (w, scaling)``'s bits (CRC-32: 2 ms at 2^20 features, where a cryptographic
    hash takes 9): whether scores made ahead are the ones ``w`` gives -- a guard against a slip, not an
    adversary."""
    w, scaling = model
    arrays = [w] if scaling is None else [w, scaling.mean, scaling.scale, np.array([scaling.centered])]
    return tuple((a.shape, a.dtype.str, zlib.crc32(np.ascontiguousarray(a).view(np.uint8))) for a in arrays)


def _warm() -> None:
    """Import what the chain's tasks need (a fresh worker pays for it once, here rather than in the chain)."""
    import nsdist.engine.chain  # noqa: F401


class WorkerSample:
    """The sample of :func:`sample_partitions`, read on the workers and kept there.

    Its partitions are read side by side (a task each) when it is first needed
    (the moments before training) or, if only a ranking model's cut needs them,
    while the chain's last steps run (:meth:`prefetch`), so that the reads do
    not compete with the chain's first loads.  Moments and cut are computed where the rows are: the same numbers
    as on the driver (the same functions on the same rows).  The moments come
    from the blocks as if concatenated (:func:`moments_of`), or, for a dataset
    of one column per feature, from groups of columns read side by side
    (:meth:`_column_moments`; the rows are then read for the cut).  For the cut, dense
    blocks are stacked on one worker, scaled as they are copied in, and scored in one
    product (a matrix-vector product is not the same to the bit on the rows split in two);
    CSR blocks are scored each where it lies (a CSR product is: each row's sum
    on its own) and only their scores and labels come to the driver.  Nothing
    else comes back.  It holds ``max_rows`` rows (or one partition) on the
    workers until :meth:`release`.  Every worker also imports the chain's
    modules now, not in the chain's first steps.
    """

    def __init__(self, client: Client, dataset: Dataset, partitions: list[int], *, dtype: str,
                 max_restarts: int = MAX_RESTARTS) -> None:
        self.client, self.dataset, self.partitions, self.dtype = client, dataset, partitions, dtype
        self.max_restarts = max_restarts
        self.n_rows = sum(dataset.partitions[p].num_rows for p in partitions)
        self.blocks: list = []
        self._scored: tuple[Future, Future, list[Future]] | None = None   # (model, digest, scores): adopt
        with contextlib.suppress(Exception):     # best effort: a worker that is not warmed up imports later
            for w in client.scheduler_info()["workers"]:
                fire_and_forget(client.submit(_warm, pure=False, workers=[w], allow_other_workers=False))

    @property
    def futures(self) -> list:
        """The futures holding the sample on the workers (none before it is first needed)."""
        return list(self.blocks)

    def _load(self, priority: int = 0) -> None:
        self.release()
        self.blocks = self.client.map(_read, [self.dataset] * len(self.partitions), self.partitions,
                                      dtype=self.dtype, pure=False, priority=priority)

    def prefetch(self) -> None:
        """Start reading the sample now, behind every other task (:attr:`PartitionChain.on_loads_done`:
        the reads fill the workers' idle time during the chain's last steps instead of following them)."""
        if not self.blocks:
            self._load(priority=-1)

    def adopt(self, blocks: list, model: Future | None = None) -> None:
        """Take the sample's rows from blocks already on the workers instead of reading them: the chain's
        loads of the same partitions (:attr:`PartitionChain.kept`), every row of each in its stream order.

        Only for a CSR dataset's ranking cut, which is the same on the rows in any
        order: each row's score is its own sum, and :func:`cut_intercept` sorts
        the scores.  A block lost with its worker is read again (:meth:`_on_sample`).

        ``model``: the future of the ``(w, scaling)`` the cut will be asked for
        (:meth:`PartitionChain.model_of` the chain's last step): the blocks are
        scored by it as soon as it exists, where they lie, while the driver is
        still fetching the chain's last state.  :meth:`cut` takes those scores if
        its ``w`` has the same bits (a digest made beside them), else scores afresh.
        """
        if not self.dataset.is_sparse:
            raise ValueError("WorkerSample.adopt takes CSR blocks only (a dense product's bits depend on the row order)")
        self.release()
        self.blocks = list(blocks)
        if model is not None:       # (held with them: a scattered model is forgotten once its last holder lets go)
            self._scored = (model, self.client.submit(_model_digest, model, pure=False),
                            self.client.map(_block_scores, self.blocks, model=model, pure=False))

    def _on_sample(self, fn):
        """``fn()`` (which submits tasks on the sample and gathers their result); a sample lost with its
        worker is read again."""
        if not self.blocks:
            self._load()

        def lost(exc: BaseException, restart: int) -> None:
            log.warning("the sample was lost (%s: %s); reading it again", type(exc).__name__, exc)
            self._load()

        return redo_lost(lambda restart: fn(), lost, max_restarts=self.max_restarts)

    def moments(self) -> tuple[int, np.ndarray, np.ndarray]:
        """Row count, column means and squared deviations of the sample's rows (float64)."""
        if self.dataset.schema.layout == "columns" and self.dataset.n_features >= 4:
            return self._column_moments()
        return self._on_sample(lambda: self.client.submit(_sample_moments, *self.blocks, pure=False).result())

    def _column_moments(self) -> tuple[int, np.ndarray, np.ndarray]:
        """:meth:`moments` of a partition of one column per feature, by groups of columns side by side.

        One group (of at least 2 columns) per worker thread, each reading its
        columns of the sample's partitions (:func:`_group_moments`): a column's
        moments are its own sums, the numbers of the whole sample's, and every
        worker works on them, where the rows read for the moments kept one busy
        and the others idle before the chain's first load.  The rows themselves
        are read when the cut needs them (:meth:`prefetch`).  A task lost with
        its worker is run again by Dask.
        """
        d = self.dataset.n_features
        threads = sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values())
        groups = [g.tolist() for g in np.array_split(np.arange(d), max(1, min(threads, d // 2)))]
        parts = self.client.gather(self.client.map(
            _group_moments, [self.dataset] * len(groups), [self.partitions] * len(groups), groups, dtype=self.dtype,
            pure=False))
        return parts[0][0], np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])

    def cut(self, w: np.ndarray, scaling, measure: str, k) -> float:
        """The measure's cut intercept of ``w`` on the (scaled) sample, as the estimator places it."""
        from ..solvers.measure import cut_intercept

        def dense() -> float:
            return self.client.submit(_sample_cut, w, scaling, measure, k, *self.blocks, pure=False).result()

        def sparse() -> float:
            parts = self._scored_by(w, scaling)
            if parts is None:
                [model] = self.client.scatter([(w, scaling)], hash=False)     # once, not in every task (8 MB at 2^20)
                parts = fetch(self.client, self.client.map(_block_scores, self.blocks, model=model, pure=False))
                model.release()
            return cut_intercept(measure, np.concatenate([p[0] for p in parts]),
                                 np.concatenate([p[1] for p in parts]), k=k)

        by_block = self.dataset.is_sparse and (len(self.partitions) > 1 or self._scored is not None)
        return self._on_sample(sparse if by_block else dense)

    def _scored_by(self, w: np.ndarray, scaling) -> list | None:
        """The blocks' ``(labels, scores)`` made ahead (:meth:`adopt`'s ``model``), if that model is ``(w,
        scaling)`` to the bit and they were not lost; else None (used once: the next cut scores afresh)."""
        scored, self._scored = self._scored, None
        if scored is None:
            return None
        model, digest, parts = scored
        try:
            if digest.result() != _model_digest((w, scaling)):
                log.debug("the cut's scores made ahead are of another model: scoring again")
                return None
            return fetch(self.client, parts)
        except BaseException as exc:    # lost with a worker, or cancelled: score the blocks (or read them) afresh
            if not is_transient(exc):
                raise
            log.debug("the cut's scores made ahead were lost (%s: %s): scoring again", type(exc).__name__, exc)
            return None
        finally:
            self.client.cancel([model, digest, *parts])

    def release(self) -> None:
        for f in self.futures + ([] if self._scored is None else [*self._scored[:2], *self._scored[2]]):
            f.release()
        self.blocks, self._scored = [], None
