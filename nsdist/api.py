"""The Python entry points of a job: ``ingest``, ``train``, ``evaluate``, ``load_model`` (SPEC §6).

``train`` and ``evaluate`` run on a Dask cluster: an embedded ``LocalCluster``
when ``client`` is None, a scheduler address, or a ``distributed.Client``.
The estimator's parameters (``measure``, ``solver``, ``eta`` ...) mean the same
here as in :class:`nsdist.NonDecomposableClassifier`; they are validated by it.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np
from dask.base import tokenize

from .data import Dataset, ingest
from .engine.chain import ChainConfig, ChainProgress, PartitionChain
from .engine.checkpoint import Checkpoint, Checkpointer
from .engine.cluster import connect
from .engine.evaluate import check_both_classes, cut_intercept_dataset, evaluate_dataset
from .engine.scaling import Scaling, feature_scaling
from .estimator import NonDecomposableClassifier
from .model import LinearModel, load_model
from .solvers.kernel import SGDState

__all__ = ["ingest", "train", "evaluate", "load_model", "open_dataset"]

log = logging.getLogger("nsdist")

_STREAMING = ("1pmb", "2pmb")


def open_dataset(dataset: str | Dataset, *, label_column: str = "label", feature_columns=None,
                 storage_options: dict | None = None) -> Dataset:
    """A :class:`~nsdist.data.Dataset` from a URL (or the dataset itself)."""
    if isinstance(dataset, Dataset):
        return dataset
    return Dataset.open(dataset, label_column=label_column, feature_columns=feature_columns,
                        storage_options=storage_options)


def train(dataset: str | Dataset, *, client=None, label_column: str = "label", feature_columns=None,
          storage_options: dict | None = None, prefetch: int = 2, checkpoint: str | None = None,
          checkpoint_every: int = 10, checkpoint_seconds: float = 60.0, resume: bool = False,
          validation: tuple[np.ndarray, np.ndarray] | None = None,
          on_step: Callable[[ChainProgress], None] | None = None, dtype: str = "float64",
          init_model: LinearModel | None = None, standardize: bool = False, **params) -> LinearModel:
    """Train on a Parquet dataset, streaming its partitions through Dask.

    Parameters
    ----------
    dataset : str or Dataset
        Parquet dataset URL (directory, glob, ``file://``, ``s3://``, ``memory://`` ...).
    client : None, str or distributed.Client
        Where to run (see :func:`nsdist.engine.cluster.connect`).
    label_column, feature_columns, storage_options :
        How to read the dataset (``feature_columns=None``: every other column).
    prefetch : int
        Partitions loaded ahead of the chain (memory bound).
    checkpoint : str, optional
        URL of the driver checkpoint, written every ``checkpoint_every`` partitions
        or ``checkpoint_seconds`` seconds; ``resume=True`` continues from it.
    validation : (X, y), optional
        In-memory validation rows; the measure of the averaged model on them is
        recorded after every partition (the learning curve).
    on_step : callable, optional
        Called with a :class:`~nsdist.engine.chain.ChainProgress` after each partition.
    init_model : LinearModel, optional
        Warm start (1PMB/2PMB): the first iterate is this model's weights (and
        intercept, for F1) instead of zero; the step schedule ``eta / sqrt(e)``
        and the average start afresh.  Its features must match the dataset's.
    standardize : bool
        Scale every feature to zero mean and unit variance on the fly (one
        extra pass computes the moments); the returned model is folded back
        onto the raw features.  The solvers' defaults are chosen on
        standardised features.
    dtype : {"float64", "float32"}
        Precision of the feature buffers on the workers (float32 halves memory
        and bandwidth; the estimator on float32 arrays gives the same model).
    **params
        :class:`~nsdist.NonDecomposableClassifier` parameters (``measure``,
        ``solver``, ``beta``, ``k``, ``buffer_size``, ``eta``, ...).  ``1pmb`` and
        ``2pmb`` stream out of core; ``ftrl``, ``psg`` and ``cp`` are in-memory
        baselines and load the whole dataset on the driver.

    Returns
    -------
    LinearModel
        With ``history`` holding the summary and the per-partition curve.
    """
    ds = open_dataset(dataset, label_column=label_column, feature_columns=feature_columns,
                      storage_options=storage_options)
    est = NonDecomposableClassifier(**params)
    setup = est._sgd_setup(ds.n_features, ds.num_rows)
    if init_model is not None:
        if est.solver not in _STREAMING:
            raise ValueError(f"init_model (warm start) needs a streaming solver ('1pmb' or '2pmb'), not {est.solver!r}")
        init_model.check_features(ds.feature_names, where=f"dataset {ds.url}")
    with connect(client) as c:
        if est.solver == "1pmb":     # 2PMB's reservoir pass checks the classes itself
            check_both_classes(c, ds)
        scaling = feature_scaling(c, ds) if standardize else None
        if est.solver not in _STREAMING:
            model = _train_in_memory(est, ds, scaling)
        else:
            cfg = ChainConfig(loss=setup.loss, buffer_size=est.buffer_size, eta=setup.eta, radius=setup.radius,
                              fit_intercept=setup.fit_intercept, n_passes=est.n_passes, shuffle=est.shuffle,
                              random_state=est.random_state, two_pass=est.solver == "2pmb", dtype=dtype,
                              scaling=scaling)
            model = _stream(c, ds, est, setup, cfg, init_model=init_model, prefetch=prefetch, checkpoint=checkpoint,
                            checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds,
                            resume=resume, validation=validation, on_step=on_step,
                            storage_options=storage_options)
    model.params.update(standardize=standardize, dtype=dtype)
    return model


def _stream(c, ds: Dataset, est: NonDecomposableClassifier, setup, cfg: ChainConfig, *, init_model, prefetch, checkpoint,
            checkpoint_every, checkpoint_seconds, resume, validation, on_step, storage_options) -> LinearModel:
    """1PMB / 2PMB over the partition chain, with checkpoints, curve and the final cut."""
    scaling = cfg.scaling
    job = cfg.token() if init_model is None else tokenize(cfg.token(), init_model.coef, init_model.intercept)
    start, state, reservoir, prior, offset = 0, None, None, [], 0.0
    if init_model is not None:   # the raw-feature model, expressed on the (scaled) training features
        w0 = init_model.coef if scaling is None else init_model.coef * scaling.scale
        b0 = init_model.intercept + (0.0 if scaling is None else float(init_model.coef @ scaling.mean))
        state = SGDState(w=w0.copy(), b=b0 if setup.fit_intercept else 0.0)
    if resume:
        if not checkpoint:
            raise ValueError("resume=True needs the checkpoint URL of the interrupted job")
        ck = Checkpoint.load(checkpoint, job=job, dataset_fingerprint=ds.fingerprint, dtype=cfg.dtype)
        start, state, reservoir, prior, offset = ck.position, ck.state, ck.reservoir, [ck.stats], ck.elapsed
        log.info("resuming from %s at partition step %d of %d", checkpoint, start, ck.n_steps)

    def raw_model(st: SGDState) -> tuple[np.ndarray, float]:
        w, b = st.averaged() if est.average else (st.w, st.b)
        return (w, b) if scaling is None else scaling.fold(w, b)

    curve: list[dict] = []
    t0 = time.perf_counter()
    chain = PartitionChain(c, ds, cfg, prefetch=prefetch)
    chain.stats.extend(prior)
    saver = Checkpointer(checkpoint, job, ds.fingerprint, checkpoint_every, checkpoint_seconds,
                         storage_options) if checkpoint else None

    def after_step(p: ChainProgress) -> None:
        point = {"time": offset + p.elapsed, "rows_seen": p.rows_seen, "pass": p.pass_index,
                 "partition": p.partition, "loss": p.loss}
        if validation is not None:
            w, b = raw_model(p.state)
            point["measure"] = est._measure_of(validation[1], validation[0] @ w + b)
        curve.append(point)
        if saver is not None and (saver.due(p.step) or p.step == p.n_steps):
            saver.write(Checkpoint(job, ds.fingerprint, p.step, p.n_steps, p.state, chain.reservoir,
                                   chain.epoch_stats(), offset + p.elapsed))
        if on_step is not None:
            on_step(p)

    chain.on_step = after_step
    state = chain.run(state=state, start=start, reservoir=reservoir)
    w, b = raw_model(state)
    if not setup.fit_intercept and est.fit_intercept:   # a ranking model's cut, as the estimator's
        b = cut_intercept_dataset(c, ds, w, est.measure, k=setup.loss.params().get("k"), dtype=cfg.dtype)
    stats = chain.epoch_stats()
    done = stats[~stats["skipped"]] if stats.size else stats
    seconds = offset + time.perf_counter() - t0
    history = {
        "epochs": int(state.epoch), "skipped_epochs": int(state.skipped), "rows_seen": int(state.rows_seen),
        "partitions": len(ds.partitions), "passes": est.n_passes, "seconds": seconds,
        "rows_per_second": state.rows_seen / seconds if seconds > 0 else None,
        "final_loss": float(done["loss"][-min(len(done), 20):].mean()) if len(done) else None,
        "curve": curve,
    }
    return LinearModel(coef=w, intercept=b, measure=est.measure, params={**est._model_params(), "eta": setup.eta},
                       feature_names=list(ds.feature_names), dataset_fingerprint=ds.fingerprint, history=history)


def _train_in_memory(est: NonDecomposableClassifier, ds: Dataset, scaling: Scaling | None) -> LinearModel:
    """The in-memory baselines (FTRL, PSG, CP) on a dataset that fits on the driver."""
    blocks = [ds.read_partition(p.index) for p in ds.partitions]
    X = np.concatenate([b[0] for b in blocks])
    y = np.concatenate([b[1] for b in blocks])
    if scaling is not None:
        X = scaling.apply(X)
    t0 = time.perf_counter()
    est.fit(X, y)
    w, b = est.coef_.ravel(), float(np.ravel(est.intercept_)[0])
    if scaling is not None:
        w, b = scaling.fold(w, b)
    history = {"rows_seen": int(X.shape[0]), "seconds": time.perf_counter() - t0, "solver": est.solver}
    return LinearModel(coef=w, intercept=b, measure=est.measure, params=est._model_params(),
                       feature_names=list(ds.feature_names), dataset_fingerprint=ds.fingerprint, history=history)


def evaluate(model: LinearModel | str, dataset: str | Dataset, *, client=None, label_column: str = "label",
             feature_columns=None, storage_options: dict | None = None, threshold: float = 0.0) -> dict:
    """Every SPEC §2 measure of ``model`` on ``dataset``, exact and out of core.

    Returns a dict with ``auc``, ``partial_auc`` (at the model's ``beta``, else
    0.1), ``precision_at_k`` (at the model's ``k``, else the positive rate),
    ``prbep``, ``f1_score`` (scores above ``threshold``), plus row counts.
    """
    if isinstance(model, str):
        model = load_model(model)
    ds = open_dataset(dataset, label_column=label_column, feature_columns=feature_columns,
                      storage_options=storage_options)
    model.check_features(ds.feature_names, where=f"dataset {ds.url}")
    beta = model.params.get("beta") if model.measure in ("pauc",) else None
    k = model.params.get("k") if model.measure == "prec@k" else None
    with connect(client) as c:
        return evaluate_dataset(c, ds, model.coef, model.intercept, beta=beta or 0.1, k=k, threshold=threshold)
