"""The Python entry points of a job: ``ingest``, ``train``, ``evaluate``, ``load_model`` (docs/engine.md §Public surface).

``train`` and ``evaluate`` run on a Dask cluster: an embedded ``LocalCluster``
when ``client`` is None, a scheduler address, or a ``distributed.Client``.
The estimator's parameters (``measure``, ``solver``, ``eta`` ...) mean the same
here as in :class:`nsdist.NonDecomposableClassifier`; they are validated by it.
"""
from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa
from dask.base import tokenize
from distributed import Future

from ._threads import on_one_blas_thread
from ._validation import as_pm1_labels
from ._lazy import lazy_exports
from ._sparse import issparse, scipy_sparse, writeable
from .data import Dataset
from .engine.chain import ChainConfig, ChainProgress, PartitionChain, cache_fits, fused_rows
from .engine.checkpoint import Checkpoint, Checkpointer
from .engine.cluster import check_partitions_fit, connect, fetch, heap_for_blocks
from .engine.evaluate import evaluate_dataset
from .engine.folds import fold_tasks
from .engine.holdout import (WorkerSample, check_classes, class_counts, gather_validation, last_partitions,
                             plan_holdout, sample_partitions)
from .engine.reservoir import sample_reservoir, scaled_reservoir
from .data.scoring import csv_names, file_input_format
from .engine.scores import evaluate_sparse_input, evaluate_table_input
from .model import LinearModel, load_model
from .solvers.config import AUTO_FOLDS, FEW_POSITIVES, TrainConfig, mean_sq_norm
from .solvers.kernel import SGDState
from .solvers.measure import get_measure, measure_function, value_on
from .solvers.plan import holdout_sizes, rounds, schedule
from .solvers.select import Selection, WinnerWatch
from .solvers.sgd import drive

__all__ = ["ingest", "train", "evaluate", "predict", "load_model", "open_dataset"]

if TYPE_CHECKING:
    from .data.ingestion import ingest

# ``ingest`` is loaded on first use: a job on Parquet never needs the text readers behind it, nor a job on
# dense rows ``scipy.sparse`` (nsdist._sparse); ``import nsdist.api`` 0.58 -> 0.50 s in a fresh process
__getattr__ = lazy_exports(globals(), {"ingest": "nsdist.data.ingestion"})

log = logging.getLogger("nsdist")


def open_dataset(dataset: str | Dataset, *, label_column: str = "label", feature_columns=None,
                 storage_options: dict | None = None, positive=None, drop=()) -> Dataset:
    """A :class:`~nsdist.data.Dataset` from a URL (or the dataset itself; ``positive`` or ``drop``, if given,
    must then be what it was opened with).  ``drop``: columns that are neither features nor the label (an id,
    a timestamp), left out of every other column (:meth:`~nsdist.data.columns.FeatureSchema.infer`)."""
    if isinstance(dataset, Dataset):
        if positive is not None and dataset.schema.positive != Dataset.positive_values(positive):
            raise ValueError(f"{dataset.url}: opened with positive={dataset.schema.positive}, not "
                             f"positive={positive!r}: pass the URL, or open it with that positive=")
        kept = [c for c in drop if c in dataset.schema.read_columns]
        if kept:
            raise ValueError(f"{dataset.url}: opened with {kept[0]!r} as a column it reads, not dropped: pass the "
                             "URL, or open it with drop=")
        return dataset
    return Dataset.open(dataset, label_column=label_column, feature_columns=feature_columns,
                        storage_options=storage_options, positive=positive, drop=drop)


@on_one_blas_thread
def train(dataset: str | Dataset, *, client=None, label_column: str = "label", feature_columns=None,
          drop=(), positive=None, storage_options: dict | None = None, prefetch: int = 2, checkpoint: str | None = None,
          checkpoint_options: dict | None = None,
          checkpoint_every: int = 10, checkpoint_seconds: float = 60.0, resume: bool = False,
          validation: tuple[np.ndarray, np.ndarray] | None = None,
          monitor: tuple[np.ndarray, np.ndarray] | None = None,
          on_step: Callable[[ChainProgress], None] | None = None, dtype: str | None = None,
          init_model: LinearModel | None = None, standardize: bool = True, n_chains: int = 1,
          **params) -> LinearModel:
    """Train on a Parquet dataset, streaming its partitions through Dask.

    The model is the one :class:`~nsdist.NonDecomposableClassifier` fits on the
    same rows in the same order (``docs/engine.md``): with the defaults, a
    validation part is held out, a population of candidates is trained in the
    same passes, and the best on the validation rows is returned.

    Parameters
    ----------
    dataset : str or Dataset
        Parquet dataset URL (directory, glob, ``file://``, ``s3://``, ``memory://`` ...).
    client : None, str or distributed.Client
        Where to run (see :func:`nsdist.engine.cluster.connect`).
    label_column, feature_columns, drop, storage_options :
        How to read the dataset (``feature_columns=None``: every other column, but the ``drop`` columns: an
        id, a timestamp, neither features nor the label).
    positive : str, number, sequence of them, optional
        The label value(s) of the positive class as stored in the label
        column (class names: ``positive="fraud"``); every other label is
        negative.  Default: the labels are ``{-1, +1}``, ``{0, 1}`` or bool.
    prefetch : int
        Partitions loaded ahead of the chain (memory bound).
    checkpoint : str, optional
        URL of the driver checkpoint, written every ``checkpoint_every`` partitions
        or ``checkpoint_seconds`` seconds; ``resume=True`` continues from it (a
        streamed job only: an in-memory fit -- K-fold selection, FTRL, PSG, CP --
        writes none, and ``resume=True`` is refused for it).
    checkpoint_options : dict, optional
        fsspec options of the checkpoint's URL (default: ``storage_options``).
    validation : (X, y), optional
        Validation rows (raw features; labels as the dataset's are read:
        ``{-1, +1}``, ``{0, 1}``, bool, or the values ``positive`` names):
        the selection scores the candidates on them instead of holding out
        part of the dataset.
    monitor : (X, y), optional
        Rows the learning curve measures the model on as it trains -- the
        paper's figures: the measure against training time on test rows (raw
        features; labels as ``validation``'s; both classes).  A streamed job
        scores the model it would return if it stopped there: one candidate's
        iterate (up to :data:`MONITOR_POINTS` times a run), a population's best
        snapshot at every check, the returned model at the last point; the baselines (FTRL, PSG, CP) their model
        after every round or iteration.  They are never trained or selected on;
        the points go to ``history["curve"]`` (key ``"monitor"``).  K-fold
        selection measures each fold's winner so far at each of its checks
        (``history["validation_curve"]``, keys ``"monitor"`` and the fold's
        training ``"time"``) and the returned model (``history["monitor_returned"]``).
    on_step : callable, optional
        Called with a :class:`~nsdist.engine.chain.ChainProgress` after each partition
        step (K-fold selection: after each check of the folds' lockstep, ``unit="check"``).
    init_model : LinearModel, optional
        Warm start (1PMB/2PMB): every candidate's first iterate is this model's
        weights (and intercept, where learned) instead of zero; the step
        schedule ``eta / sqrt(e)`` and the average start afresh.  Its features
        must match the dataset's.
    standardize : bool, default True
        Scale every feature on the fly (dense: zero mean and unit variance;
        sparse: a column whose root mean square exceeds 1 is divided by it,
        the others train as stored; a fixed sparse run trains as stored),
        with the moments of every row
        taken in the pass that gathers the validation rows (a fixed run: of a
        sample of whole partitions); the returned model is folded back onto
        the raw features.  Any scaling is a valid preconditioner.
    dtype : {"float64", "float32"}, default None
        Precision of the feature buffers on the workers; None: the files'
        own (float32 files train in float32 -- half the memory and bandwidth --
        others in float64).  The estimator on arrays of that dtype gives the
        same model; the model itself is always float64.
    n_chains : int, default 1
        Data-parallel mode: ``K`` chains each take one partition of a round
        from the same model, and their states are averaged after every round
        (iterative parameter mixing; ``docs/engine.md`` §Data-parallel).
        1 is the exact sequence of the paper's solvers.  Deterministic for
        any ``K`` and any number of workers.  A round moves the model by one
        partition's steps, so the selection's checks and the default pass
        budget count those mixed steps: with ``K`` chains they span ``K``
        times the rows, and small data takes about ``K`` times the passes.
        It is faster only where a partition's step costs more than its load
        (2PMB, a population of candidates); where loads bound the job, the
        sequential chain already keeps every worker busy.
    **params
        :class:`~nsdist.NonDecomposableClassifier` parameters (``measure``,
        ``solver``, ``beta``, ``k``, ``buffer_size``, ``eta``, ``n_passes``,
        ``validation_fraction`` ...).  ``1pmb`` and ``2pmb`` stream out of
        core, but K-fold selection (``validation_folds > 1``; by default
        where a holdout would hold fewer than 100 positives and the rows
        number at most ``validation_max_rows``) reads the rows onto the
        driver; ``ftrl``, ``psg`` and ``cp`` are in-memory baselines and load
        the whole dataset on the driver.

    Returns
    -------
    LinearModel
        With ``history`` holding the summary, the per-partition curve, the
        per-check validation curve, every candidate (``selection``) and the
        seconds of each phase.
    """
    cfg = TrainConfig.from_params(standardize=standardize, **params)   # all checked before a cluster starts
    if isinstance(n_chains, bool) or not isinstance(n_chains, int) or n_chains < 1:
        raise ValueError(f"n_chains must be an int >= 1, got {n_chains!r}")
    if cfg.k_fold and (validation is not None or n_chains > 1 or init_model is not None):
        raise ValueError("validation_folds > 1 (K-fold selection) reads the data onto the driver and selects on "
                         "its own folds: not with validation=, n_chains > 1 or init_model=")
    ds = open_dataset(dataset, label_column=label_column, feature_columns=feature_columns,
                      storage_options=storage_options, positive=positive, drop=drop)
    if monitor is not None:
        monitor = _monitor_rows(monitor, ds, cfg)
    if init_model is not None:
        if not cfg.streaming:
            raise ValueError(f"init_model (warm start) needs a streaming solver ('1pmb' or '2pmb'), not {cfg.solver!r}")
        init_model.check_features(ds.feature_names, where=f"dataset {ds.url}")
    dtype = ds.native_dtype if dtype is None else dtype
    phases: dict[str, float] = {}
    with connect(client) as c, heap_for_blocks(c):     # the workers' allocator: docs/engine.md §Cluster
        check_partitions_fit(c, ds, dtype)
        t = time.perf_counter()
        # only a holdout needs the class counts; otherwise the footers' label statistics usually
        # show both classes without reading a row (else the label column is read)
        counts = None
        if cfg.streaming and validation is None and cfg.selects and cfg.validation_fraction > 0:
            counts = class_counts(c, ds)
        else:
            check_classes(c, ds)
        folds = cfg.folds(*(counts or (0, 0)), holdout=counts is not None and n_chains == 1 and init_model is None)
        if counts is not None and cfg.validation_folds == "auto":
            v_pos = holdout_sizes(*counts, cfg.validation_fraction, cfg.validation_max_rows)[0]
            if folds > 1:
                log.info("K-fold selection (validation_folds='auto'): a holdout of the %d rows would hold %d "
                         "positives (fewer than %d), so %d folds choose on every positive",
                         sum(counts), v_pos, FEW_POSITIVES, folds)
            elif v_pos < FEW_POSITIVES and sum(counts) > cfg.validation_max_rows:
                log.info("validation_folds='auto' keeps one holdout (%d positives): K-fold selection reads every "
                         "row onto the driver, and the %d rows exceed validation_max_rows=%d (raise it to select "
                         "by K-fold)", v_pos, sum(counts), cfg.validation_max_rows)
        phases["class_check"] = time.perf_counter() - t
        if not cfg.streaming or folds > 1:
            if resume:      # an in-memory fit writes no checkpoint: a "resumed" one would silently start over
                how = f"K-fold selection ({folds} folds)" if folds > 1 else f"solver {cfg.solver!r}"
                raise ValueError(f"resume=True: nothing to resume -- this job fits by {how} on rows read onto "
                                 "the driver, which writes no checkpoint; run it again without resume")
            model = _train_in_memory(c, cfg.with_folds(folds), ds, dtype, on_step, monitor)
        else:
            model = _stream(c, ds, cfg, counts, dtype=dtype, n_chains=n_chains,
                            init_model=init_model,
                            prefetch=prefetch, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                            checkpoint_seconds=checkpoint_seconds, resume=resume, validation=validation,
                            monitor=monitor, on_step=on_step, phases=phases,
                            storage_options=storage_options if checkpoint_options is None else checkpoint_options)
    model.params.update(standardize=standardize, dtype=dtype, n_chains=n_chains, validation_folds=cfg.validation_folds)
    return model


def _stream(c, ds: Dataset, cfg: TrainConfig, counts: tuple[int, int], *, dtype: str,
            n_chains: int,
            init_model, prefetch, checkpoint, checkpoint_every, checkpoint_seconds, resume, validation, monitor,
            on_step, phases: dict, storage_options) -> LinearModel:
    """1PMB / 2PMB over the partition chain: holdout or sample, reservoir, segments and checks, the cut.

    No phase but the chain and the validation gather reads the whole dataset:
    the class check and the holdout read the label column; the gather returns
    the validation rows, every row's moments and 2PMB's reservoir (a 2PMB run
    without a holdout draws it in a pass of its own); a run without a holdout reads
    a sample of whole partitions for its moments and its ranking cut (a fixed
    1PMB run over CSR data: no read -- the partitions its chain loads last).
    """
    t = time.perf_counter()
    holdout, sample, val, moments, reservoir = None, None, None, None, None
    if validation is not None:
        val = (np.asarray(validation[0], dtype=dtype).copy(), _labels(validation[1], ds, "validation y"))
    elif cfg.selects and cfg.validation_fraction > 0:
        holdout = plan_holdout(c, ds, counts, random_state=cfg.random_state, fraction=cfg.validation_fraction,
                               max_rows=cfg.validation_max_rows)
        # 2PMB's reservoir is drawn in the same pass (raw rows, scaled below): no pass of its own
        draw = (cfg.buffer_size, cfg.random_state) if cfg.solver == "2pmb" else None
        val, moments, reservoir = gather_validation(c, ds, holdout, dtype=dtype, reservoir=draw)
        log.info("validation: %d rows held out (%d positive), never trained on", holdout.n_rows, holdout.n_pos)
    n_val = 0 if val is None else val[0].shape[0]
    v_pos = 0 if val is None else int(np.count_nonzero(val[1] > 0))
    if cfg.selects and v_pos:
        _log_resolution(v_pos, n_chains=n_chains)
    # a fixed ranking run's cut, or the selected F1 model's threshold: placed on a sample of the data's rows
    need_cut = cfg.fit_intercept and ((cfg.selects and n_val > 0 and cfg.plug_in) or (
        not (cfg.selects and n_val > 0) and not get_measure(cfg.measure).thresholded))
    need_moments = moments is None and cfg.scales(ds.is_sparse)
    # a fixed 1PMB run over CSR blocks holds every row of a partition in its block: the chain's last blocks are
    # the sample of its cut, scored where they lie, not read a second time (chosen once the plan is known)
    cut_on_blocks = need_cut and ds.is_sparse and not cfg.selects and cfg.solver == "1pmb"
    if need_moments or (need_cut and not cut_on_blocks):  # a sample read gives the moments (and a fixed run's cut)
        parts = sample_partitions(ds, cfg.random_state, cfg.validation_max_rows)
        sample = WorkerSample(c, ds, parts, dtype=dtype)      # the rows stay on a worker
        if need_moments:
            moments = sample.moments()
        log.info("sample: %d rows of %d partition(s) for the %s", sample.n_rows, len(parts),
                 " and ".join(w for w, need in (("moments", need_moments), ("cut", need_cut)) if need))
    phases["validation_sample"] = time.perf_counter() - t
    scaling = cfg.scaling_of(moments, sparse=ds.is_sparse)
    if scaling is not None and val is not None:     # in place: the rows are this call's own (80 MB at 200k x 100)
        val = (scaling.apply(writeable(val[0])), val[1])
    if reservoir is not None:
        reservoir = scaled_reservoir(reservoir, scaling)
    n_val = 0 if val is None else val[0].shape[0]
    cfg = cfg.resolve(n_features=ds.n_features, n_rows=ds.num_rows - (holdout.n_rows if holdout else 0),
                      mean_sq_norm=mean_sq_norm(val[0]) if n_val else None, n_validation=n_val, n_chains=n_chains)
    log.info("training %d candidate(s) %s; up to %d passes%s", len(cfg.candidates),
             ", ".join(cand.name for cand in cfg.candidates[:6]) + (" ..." if len(cfg.candidates) > 6 else ""),
             cfg.passes, ", early stopping on the validation measure" if cfg.early_stopping else "")
    t = time.perf_counter()
    stream, ck = None, None
    job = tokenize(ChainConfig(cfg, holdout, None, dtype, scaling, n_chains).token(),
                   None if init_model is None else (init_model.coef, init_model.intercept))
    if resume:
        if not checkpoint:
            raise ValueError("resume=True needs the checkpoint URL of the interrupted job")
        ck = Checkpoint.load(checkpoint, job=job, dataset_fingerprint=ds.fingerprint, dtype=dtype,
                             storage_options=storage_options)
        reservoir = ck.reservoir
        log.info("resuming from %s at partition step %d of %d", checkpoint, ck.position, ck.n_steps)
    if cfg.solver == "2pmb" and reservoir is None:
        reservoir = sample_reservoir(c, ds, cfg.buffer_size, cfg.random_state, dtype, scaling, holdout)
    if reservoir is not None:
        log.info("2PMB reservoir: %d rows of the rare class %+d (of %d); streaming the other class",
                 reservoir.y.shape[0], reservoir.label, reservoir.n_rare)
        stream = -reservoir.label
    phases["reservoir"] = time.perf_counter() - t
    chain_cfg = ChainConfig(cfg, holdout, stream, dtype, scaling, n_chains)
    if checkpoint:
        log.info("checkpoints: %s every %d partitions or %.0f s", checkpoint, checkpoint_every, checkpoint_seconds)
    steps, checks = schedule([p.num_rows for p in ds.partitions], cfg.passes, random_state=cfg.random_state,
                             shuffle=cfg.shuffle, check_rows=cfg.check_rows)
    round_ends, checks = rounds(steps, checks, len(ds.partitions), n_chains)
    keep: dict[int, int] = {}
    if cut_on_blocks:
        keep = last_partitions(ds, steps, cfg.validation_max_rows)
        sample = WorkerSample(c, ds, sorted(keep.values()), dtype=dtype)
        log.info("sample: the %d rows of the last %d partition(s) the chain loads, kept for the cut", sample.n_rows,
                 len(keep))
    check_set = set(checks)
    M = len(cfg.candidates)
    selecting = cfg.selects and n_val > 0
    selection = Selection.start(ds.n_features, M) if selecting else None
    state = SGDState.zeros(ds.n_features, M)
    start, offset, prior = 0, 0.0, []
    if init_model is not None:   # the raw-feature model, expressed on the (scaled) training features
        w0, b0 = init_model.coef, init_model.intercept
        state = SGDState.at(*((w0, b0) if scaling is None else scaling.unfold(w0, b0)), cfg.population.learn_b)
    curve: list[dict] = []          # one point per step: the interrupted run's, then this one's
    if ck is not None:
        start, state, prior, offset = ck.position, ck.state, [ck.stats], ck.elapsed
        if selecting and ck.selection is not None:
            selection = Selection.from_dict(ck.selection)
        if ck.curve is not None:
            curve = [dict(p) for p in ck.curve]
        elif start:
            log.info("the checkpoint holds no learning curve (written by an older nsdist): the curve starts at "
                     "step %d", start)

    def raw(w: np.ndarray, b: float) -> tuple[np.ndarray, float]:
        return (w, b) if scaling is None else scaling.fold(w, b)

    watch = None if monitor is None else _Monitor(monitor, cfg, raw, len(steps))
    winner = None if watch is None or selection is None else WinnerWatch(watch.value)
    if watch is not None:
        log.info("learning curve: the measure on %d monitor rows as the model trains (never trained or selected on)",
                 watch.y.shape[0])

    # a dataset read more than once whose rows fit in a quarter of the workers' memory is read once and kept
    held = ds.rows_bytes(dtype)
    cache = len({s.pass_index for s in steps[start:]}) > 1 and cache_fits(c, held)
    if cache:
        log.info("partition cache: the %d partitions (%.0f MB as %s) are read once and kept on the workers "
                 "for the job's passes", len(ds.partitions), held / 1e6, dtype)
    # ... and small partitions of it are gathered and stepped several to a task, on one worker
    fused = fused_rows(c, held, ds.num_rows, len(ds.partitions)) if cache and n_chains == 1 and not keep else 0
    if fused:
        log.info("fused steps: the partitions average %.1f MB, so each task gathers and steps up to %d rows of "
                 "them on one worker", held / len(ds.partitions) / 1e6, fused)
    def loads_done(last: Future) -> None:
        """The last step is submitted: the blocks kept for the cut are scored by its model as soon as it
        exists, on their workers (not after the driver has fetched the state and sent the model back); or
        the sample for the cut is read, behind the last steps."""
        if not keep:
            sample.prefetch()
        elif all(i in chain.kept for i in keep):    # (a resumed run may not have loaded them: read instead)
            sample.adopt([chain.kept[i] for i in keep], model=chain.model_of(last))

    chain = PartitionChain(c, ds, chain_cfg, steps, round_ends=round_ends, reservoir=reservoir, prefetch=prefetch,
                           elapsed_offset=offset, keep_loads=frozenset(keep), cache=cache, fused=fused,
                           checks=tuple(checks), on_loads_done=None if sample is None else loads_done)
    chain.stats.extend(prior)
    saver = Checkpointer(checkpoint, job, ds.fingerprint, checkpoint_every, checkpoint_seconds,
                         storage_options) if checkpoint else None

    def save(step: int, st: SGDState) -> None:
        saver.write(Checkpoint(job, ds.fingerprint, step, len(steps), st, reservoir, chain.epoch_stats(),
                               chain.elapsed(), None if selection is None else selection.to_dict(), curve))

    alive = [int(state.alive.sum())]      # the candidates alive after the last check (a resumed job: its own)

    def after_step(p: ChainProgress) -> None:
        curve.append({"time": p.elapsed, "rows_seen": p.rows_seen, "pass": p.pass_index,
                      "partition": p.partition, "loss": p.loss})
        if selection is not None:
            p.best, p.alive = (selection.best if selection.checks else None), alive[0]
        elif watch is not None and watch.due(p):       # one candidate: the iterate the job would return now
            curve[-1]["monitor"] = watch.value(*p.state.model(0, cfg.average))
        # a step that ends a segment is saved after its check (which may change the state)
        if saver is not None and (p.step - 1) not in check_set and saver.due(p.step):
            save(p.step, p.state)
        if on_step is not None:
            on_step(p)

    def check(st: SGDState, position: int) -> tuple[SGDState, bool]:
        stop = False
        if selection is not None:
            st, stop = selection.check(cfg, st, *val)
            alive[0] = int(st.alive.sum())
            if curve:
                curve[-1]["measure"], curve[-1]["alive"] = selection.best, alive[0]
                if winner is not None:      # the best snapshot so far
                    curve[-1]["monitor"] = winner(selection)
            log.info("check %d after %d steps: best %s %.4f, %d candidate(s) alive%s", selection.checks,
                     st.epoch, cfg.measure, selection.best, alive[0], "; stopping early" if stop else "")
        if saver is not None and (saver.due(position) or stop or position == len(steps)):
            save(position, st)
        return st, stop

    chain.on_step = after_step
    t = time.perf_counter()
    try:
        try:
            state, done = drive(steps, checks, chain.run, state, start=start, check=check,
                                population=cfg.population)
        finally:
            chain.release()
        phases["chain"] = time.perf_counter() - t
        t = time.perf_counter()
        chain.kept.clear()
        if selection is not None:
            w, b = selection.model(cfg, *val)
            if cfg.plug_in:     # the winner's F1-optimal threshold on the sample's rows, as the estimator on its rows
                b = sample.cut(w, scaling, cfg.measure, None)
            w, b = raw(w, b)
        else:       # a ranking model's cut on the sample, in the scaled space as the estimator places it
            w, b = state.model(0, cfg.average)
            if not get_measure(cfg.measure).thresholded:
                b = 0.0
                if cfg.fit_intercept:
                    b = sample.cut(w, scaling, cfg.measure, cfg.k if cfg.train_k is None else cfg.train_k)
            w, b = raw(w, b)
        if sample is not None:
            sample.release()
    finally:
        chain.drop_cache()      # after the cut: the blocks it adopted were gathered from the cache
    phases["cut"] = time.perf_counter() - t
    if watch is not None and curve:     # the last point: the returned model (F1: at its threshold, placed last)
        curve[-1]["monitor"] = watch.value(w, b, folded=True)
    stats = chain.epoch_stats()
    done_stats = stats[~stats["skipped"]] if stats.size else stats
    seconds = chain.elapsed()
    n_blocks = max(1, len(ds.partitions))
    history = {
        "epochs": int(state.epoch), "skipped_epochs": int(state.skipped), "rows_seen": int(state.rows_seen),
        "partitions": len(ds.partitions), "passes": -(-done // n_blocks), "max_passes": cfg.passes,
        "seconds": seconds, "rows_per_second": state.rows_seen / seconds if seconds > 0 else None,
        "final_loss": _final_loss(done_stats),
        "curve": curve, "phases": phases,
        "validation_rows": n_val, "validation_positives": v_pos,
    }
    if watch is not None:
        history["monitor"] = _rows_summary(watch.y)
    params = {**cfg.params(), "eta": cfg.candidates[0].eta if M == 1 else None}
    if selection is not None:
        report = selection.report(cfg)
        win = next(r for r in report if r["selected"])
        params.update(eta=win["eta"], surrogate=win.get("surrogate"), selected=win["name"])
        history.update(selection=report, validation_curve=selection.curve, selected=win["name"])
    return LinearModel(coef=w, intercept=b, measure=cfg.measure, params=params,
                       feature_names=ds.feature_names, dataset_fingerprint=ds.fingerprint, history=history)


#: at most this many learning-curve points of one candidate's run on ``monitor=`` rows (a population's: one a check)
MONITOR_POINTS = 100


def _labels(y, ds: Dataset, name: str) -> np.ndarray:
    """Labels of rows given with the dataset (``validation=``, ``monitor=``) in {-1, +1}, read as the dataset's
    label column is (:meth:`FeatureSchema.codes <nsdist.data.columns.FeatureSchema.codes>`)."""
    y = np.asarray(y)
    if ds.schema.positive is None:
        return as_pm1_labels(y, name=name)       # (1-D and the encodings checked, naming y[i])
    return ds.schema.codes(pa.array(y.ravel()), lambda i: f"{name}[{i}]", name=name)


def _rows_summary(y: np.ndarray) -> dict:
    """``history["monitor"]``: how many monitor rows, how many positive."""
    return {"rows": int(y.shape[0]), "positives": int(np.count_nonzero(y > 0))}


def _monitor_rows(rows: tuple, ds: Dataset, cfg: TrainConfig) -> tuple:
    """``monitor=`` checked: float64 rows of the dataset's features (dense or CSR) and their labels in {-1, +1},
    on which the measure can be taken (both classes; Prec@k: at least ``k`` rows) -- refused now, not after
    training has started."""
    X, y = rows
    d = ds.n_features
    X = X.tocsr().astype(np.float64) if issparse(X) else np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"monitor rows must have the dataset's {d} features, got shape {X.shape}")
    y = _labels(y, ds, "monitor y")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"monitor has {X.shape[0]} rows but {y.shape[0]} labels")
    problem = monitor_problem(y, cfg.measure, beta=cfg.beta, k=cfg.k)
    if problem:
        read = f" (labels read with positive={ds.schema.positive!r})" if ds.schema.positive is not None else ""
        raise ValueError(f"monitor rows: {problem}{read}")
    return X, y


def monitor_problem(y: np.ndarray, measure: str, *, beta: float = 0.1, k: int | float | None = None) -> str | None:
    """Why ``measure`` cannot be taken on monitor rows labelled ``y`` (in {-1, +1}), or None: one class only,
    or fewer rows than Prec@k's ``k``."""
    n_pos = int(np.count_nonzero(y > 0))
    if n_pos in (0, y.shape[0]):
        return f"only {'negative' if n_pos == 0 else 'positive'} labels in {y.shape[0]} rows; the measure needs both classes"
    try:
        measure_function(measure, beta=beta, k=k)(y, np.zeros(y.shape[0]))
    except ValueError as exc:
        return str(exc)
    return None


class _Monitor:
    """The measure of a model on the ``monitor=`` rows of :func:`train` (the learning curve's test line)."""

    def __init__(self, rows: tuple, cfg: TrainConfig, raw: Callable, n_steps: int) -> None:
        self.X, self.y = rows
        self.measure = measure_function(cfg.measure, beta=cfg.beta, k=cfg.k)
        self.raw, self.every = raw, max(1, -(-n_steps // MONITOR_POINTS))

    def due(self, p: ChainProgress) -> bool:
        """A point at every ``every``-th step and the last; a wide state (left on the cluster) at the last only."""
        return (p.step == p.n_steps) or (p.step % self.every == 0 and p.has_state)

    def value(self, w: np.ndarray, b: float, folded: bool = False) -> float | None:
        """The measure of ``(w, b)`` on the rows: a model on the training features, as the chain holds it
        (``folded``: already on the raw ones)."""
        if not folded:
            w, b = self.raw(w, b)
        return value_on(self.measure, self.X, self.y, w, b)


def _log_resolution(v_pos: int, folds: int = 1, n_chains: int = 1) -> None:
    log.info("the selection resolves about one validation positive: 1/%d = %.3g of the measure "
             "(docs/solvers.md, 'What the holdout resolves')", v_pos, 1.0 / v_pos)
    if folds == 1 and v_pos < FEW_POSITIVES:     # coarser than a point of the measure: the choice is partly luck
        log.info("with %d validation positives, K-fold selection (validation_folds=%d%s) would choose on every "
                 "positive, for about %d times the fit, reading every row onto the driver (docs/solvers.md, "
                 "'K-fold selection')%s", v_pos, AUTO_FOLDS, ", n_chains=1" if n_chains > 1 else "", AUTO_FOLDS,
                 f"; n_chains={n_chains} streams one holdout, as validation_folds='auto' does with more than one "
                 "chain" if n_chains > 1 else "")


def _final_loss(stats: np.ndarray) -> float | None:
    """The mean surrogate loss of the last 20 epochs; None without epochs or when the candidates trained
    different surrogates (their mean is on no scale: the kernel records NaN)."""
    value = float(stats["loss"][-min(len(stats), 20):].mean()) if len(stats) else math.nan
    return value if math.isfinite(value) else None


def _train_in_memory(c, cfg: TrainConfig, ds: Dataset, dtype: str, on_step=None, monitor=None) -> LinearModel:
    """The in-memory fits on a dataset that fits on the driver: the baselines (FTRL, PSG, CP) and K-fold
    selection (``validation_folds > 1``, its fold fits held on the workers in lockstep, each check reported
    to ``on_step``: :class:`~nsdist.engine.chain.ChainProgress` with ``unit="check"``), by the estimator on
    every row in file order (it scales), in ``dtype`` as the estimator keeps it.  The partitions are read on
    the workers, side by side, and gathered in order.  A baseline's ``monitor`` rows are its ``X_val``, which
    it only records the measure on (its intercept is cut on the training rows): its curve, one point per round
    or iteration."""
    from .estimator import (NonDecomposableClassifier, advance_folds, fit_folds_in_lockstep,  # scikit-learn:
                            fold_plans, fold_results, start_folds)       # ~1 s to import, only these fits need it
    blocks = fetch(c, c.map(ds.read_partition, [p.index for p in ds.partitions], dtype=dtype, pure=False))
    parts = [b[0] for b in blocks]
    X = scipy_sparse().vstack(parts, format="csr") if ds.is_sparse else np.concatenate(parts)
    y = np.concatenate([b[1] for b in blocks])
    if cfg.validation_folds > 1:
        log.info("K-fold selection: %d rows read onto the driver, %d fold fits held on the workers and advanced "
                 "in lockstep (not checkpointed: fits lost with a worker are restarted)", X.shape[0],
                 cfg.validation_folds)
    t0 = time.perf_counter()

    def on_check(check: int, n_checks: int, best: float, alive: int) -> None:
        log.info("K-fold selection: check %d: best mean %s %.4f over %d folds, %d candidate(s) alive", check,
                 cfg.measure, best, cfg.validation_folds, alive)
        if on_step is not None:
            p = ChainProgress(check, n_checks, 0, 0, 0, math.nan, time.perf_counter() - t0, unit="check")
            p.best, p.alive = best, alive
            on_step(p)

    watched = monitor if monitor is not None and not cfg.streaming else ()
    if monitor is not None:
        log.info("learning curve: %s", f"the measure on {watched[1].shape[0]} monitor rows at each {cfg.solver} "
                 f"{'round' if cfg.solver == 'ftrl' else 'iteration'} (never trained on)" if watched else
                 f"each fold's winner so far on {monitor[1].shape[0]} monitor rows at each of its checks, and the "
                 "returned model (never trained or selected on)")
    map_folds = fold_tasks(c, start_folds, advance_folds, fold_plans, fold_results, fit_folds_in_lockstep,
                           on_check, monitor=monitor if cfg.validation_folds > 1 else None)
    est = NonDecomposableClassifier(**cfg.params()).fit(X, y, *watched, map_folds=map_folds)
    history = {"rows_seen": int(X.shape[0]), "seconds": time.perf_counter() - t0, "solver": cfg.solver,
               "folds": est.folds_}
    if watched:
        history["curve"] = [{"time": r.time, "rows_seen": r.rows_seen, "pass": 0, "step": r.step, "loss": r.loss,
                             "monitor": r.measure} for r in est.history_]
    if monitor is not None:
        history["monitor"] = _rows_summary(monitor[1])
    if est.selection_ is not None:
        checks = est.validation_curve_
        if est.folds_:      # a fold's checks and its history records are one to one: each check's training time
            checks = [{**p, "time": r.time} for p, r in zip(checks, est.history_)]
            if monitor is not None:     # and the returned model (the mean of the folds' models) on the rows
                history["monitor_returned"] = value_on(measure_function(cfg.measure, beta=cfg.beta, k=cfg.k),
                                                       *monitor, est.coef_.ravel(), float(est.intercept_[0]))
        history.update(selection=est.selection_, selected=next(r["name"] for r in est.selection_ if r["selected"]),
                       validation_curve=checks, validation_positives=est.validation_positives_)
        _log_resolution(est.validation_positives_, est.folds_)
    return LinearModel(coef=est.coef_.ravel(), intercept=float(np.ravel(est.intercept_)[0]), measure=cfg.measure,
                       params={**cfg.params(), "eta": est.eta_}, feature_names=ds.feature_names,
                       dataset_fingerprint=ds.fingerprint, history=history)


def evaluate(model: LinearModel | str, dataset: str | Dataset, *, client=None, label_column: str = "label",
             feature_columns=None, drop=(), storage_options: dict | None = None, threshold: float = 0.0,
             positive=None, format: str | None = None) -> dict:
    """Every measure of docs/measures.md of ``model`` on ``dataset``, exact and out of core.

    ``dataset``: a Parquet dataset (streamed through the cluster), or an svmlight file or a CSV file of raw
    rows (``.csv``, optionally compressed), scored in this process (a CSV's columns as ``nsdist predict``
    reads them, docs/engine.md §Evaluation).  ``format``: ``"svmlight"``, ``"csv"`` or ``"parquet"`` for a
    name that does not tell it (None: from the name, as ingest tells it).  ``positive``: the label value(s) of
    the positive class, ``drop``: columns that are neither features nor the label, as in :func:`train`.

    Returns a dict with ``auc``, ``partial_auc`` (at the model's ``beta``, else
    0.1), ``precision_at_k`` (at the model's ``k``, else the positive rate),
    ``prbep``, ``f1_score`` (scores above ``threshold``), plus row counts.
    """
    if isinstance(model, str):
        model = load_model(model, storage_options)
    beta = model.params.get("beta") if model.measure in ("pauc",) else None
    k = model.params.get("k") if model.measure == "prec@k" else None
    if format not in (None, "svmlight", "csv", "parquet"):
        raise ValueError(f"format must be 'svmlight', 'csv', 'parquet' or None, got {format!r}")
    kind = file_input_format(dataset, storage_options, format) if isinstance(dataset, str) else None
    if kind == "csv":
        label_column, _, drop = csv_names(dataset, storage_options, label_column, (), drop)
    if kind is not None:        # a file scored here (a Parquet dataset is opened once, below)
        score = evaluate_sparse_input if kind == "svmlight" else evaluate_table_input
        return score(model, dataset, beta=beta or 0.1, k=k, threshold=threshold, label_column=label_column,
                     storage_options=storage_options, positive=positive, format=format, drop=drop)
    ds = open_dataset(dataset, label_column=label_column, feature_columns=feature_columns,
                      storage_options=storage_options, positive=positive, drop=drop)
    model.check_features(ds.feature_names, where=f"dataset {ds.url}")
    with connect(client) as c:
        check_partitions_fit(c, ds, np.float64)
        return evaluate_dataset(c, ds, model.coef, model.intercept, beta=beta or 0.1, k=k, threshold=threshold)


def predict(model: LinearModel | str, src: str | Dataset, dst: str, *, client=None, label_column: str | None = None,
            keep=(), drop=(), threshold: float = 0.0, storage_options: dict | None = None, format: str | None = None,
            on_file: Callable[[int, int, int], None] | None = None) -> dict:
    """Score every row of ``src`` with ``model`` and write ``score`` and ``prediction`` (+1 where the score is
    above ``threshold``) with the copied columns (the label column when present, and ``keep``).

    ``label_column``: not a feature, copied when present (default: a Dataset's own label column, else
    ``"label"``).  A :class:`~nsdist.data.Dataset` opened with ``feature_columns`` is read for those columns
    only (its other columns are left out, or copied by ``keep``); any other input's columns must be the
    model's features, the label column, ``keep`` and ``drop`` (columns left out: neither features nor copied,
    never read); another column is refused, naming it (a column added upstream is not silently ignored).

    ``dst`` a file (``.parquet`` / ``.parq`` / ``.pq``, or ``.csv``, optionally compressed): ``src`` -- a
    Parquet file or dataset (dense, raw one-hot columns, or the sparse layout), a CSV file or an svmlight
    file (``format`` for a name that does not tell it), or a :class:`~nsdist.data.Dataset` (a selection of
    partitions: those rows) -- is scored in this process, batch by batch, into that one file, published whole.
    ``dst`` any other name (a directory): ``src`` must be Parquet (a URL or a Dataset), and each of its files (a
    file of more than 128 MiB: each run of its row groups, as training reads it) is scored on the cluster (``client``: a
    ``distributed.Client`` or a scheduler address; default an embedded ``LocalCluster``) into
    ``dst/part-NNNNN.parquet``, in the input's sorted order, the rows of each in their order; the directory is
    published whole, with the manifest ``_nsdist.json`` (:func:`nsdist.engine.predict.predict_files`,
    docs/engine.md §Scoring on the cluster).  The scores are the same either way.  ``on_file(done, total,
    rows)``: called as each part is written (directory output).

    Returns ``{"rows": ..., "files": ..., "output": dst, "seconds": ...}`` (``files``: None for a file output).

    Raises
    ------
    ValueError
        The input's columns are not the model's (naming the difference), a row is bad (naming its file,
        row and column), or the output directory is refused (it overlaps the input, or exists and holds
        something other than scores).
    """
    from .data.scoring import output_format, write_scores
    from .engine.predict import predict_files

    if isinstance(model, str):
        model = load_model(model, storage_options)
    if format not in (None, "svmlight", "csv", "parquet"):
        raise ValueError(f"format must be 'svmlight', 'csv', 'parquet' or None, got {format!r}")
    if label_column is None:
        label_column = src.schema.label if isinstance(src, Dataset) else "label"
    kind = None if isinstance(src, Dataset) else file_input_format(src, storage_options, format)
    if kind == "csv":
        label_column, keep, drop = csv_names(src, storage_options, label_column, keep, drop)
    how = dict(label_column=label_column, keep=list(keep), drop=list(drop), threshold=float(threshold),
               storage_options=storage_options)
    t0 = time.perf_counter()
    if output_format(dst) is not None:
        rows = write_scores(model, src, dst, format=format, **how)
        return {"rows": rows, "files": None, "output": dst, "seconds": time.perf_counter() - t0}
    if kind is not None:
        raise ValueError(f"{src} is a {kind} file, scored in this process into one file: name a .parquet or .csv "
                         f"output instead of the directory {dst}")
    with connect(client) as c:
        return predict_files(c, model, src, dst, on_file=on_file, **how)
