"""What the ``nsdist`` commands run: a training job end to end, and scoring a file.

:func:`run_train` runs a :class:`~nsdist.jobs.TrainJob` (connect, ingest on
first use, train with progress, checkpoints and a run log, evaluate, write
the run directory); :func:`predict_file` scores a Parquet or CSV file.  The
command line (:mod:`nsdist.cli`) parses arguments and calls these; so do
``pipelines.demo`` and ``deploy/slurm``.
"""
from __future__ import annotations

import io
import logging
import math
import os
import time
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

from . import __version__
from ._validation import ceil9
from .estimator import NonDecomposableClassifier
from .jobs import DatasetSpec, TrainJob
from .model import LinearModel, atomic_write_bytes
from .report import MEASURE_KEYS, RunDir, RunLog, curve_png, measure_label

if TYPE_CHECKING:  # importing them loads Dask, which reads its logging settings (see cli._setup_logging)
    from .data import Dataset
    from .engine.chain import ChainProgress

__all__ = ["run_train", "TrainRun", "predict_file", "load_rows", "holdout_split", "model_dir", "announce",
           "RUN_LOG_ONLY", "train_options"]

log = logging.getLogger("nsdist")

#: ``extra=`` of records for the run log only (the console shows the error line instead)
RUN_LOG_ONLY = {"run_log_only": True}

# ------------------------------------------------------------- training run
class TrainRun(NamedTuple):
    """What :func:`run_train` returns."""

    model: LinearModel
    metrics: dict
    """the contents of ``metrics.json``"""
    train: Dataset
    test: Dataset
    """the evaluation data (the training data when the job has none)"""


def run_train(job: TrainJob, *, resume: bool = False, progress: bool = True) -> TrainRun:
    """Run a training job end to end and fill its run directory.

    Connects to the job's cluster (or starts the embedded one), ingests the
    raw files of ``dataset.ingest`` / ``dataset.test_ingest`` whose datasets
    are missing, trains with a progress bar and checkpoints, evaluates on the
    test data (``test_url`` or the holdout partitions; else the training
    data), and writes ``model/``, ``job.yaml``, ``metrics.json``,
    ``learning_curve.png`` and ``run.log`` (see :mod:`nsdist.report`).

    Parameters
    ----------
    job : TrainJob
    resume : bool
        Continue from ``<output.dir>/checkpoint.json``.
    progress : bool
        Draw the progress bar (only on a terminal).
    """
    from . import api
    from .engine.cluster import connect

    run = RunDir(job.output.dir)
    runlog = run.log(append=resume)
    level = log.level
    log.setLevel(min(log.getEffectiveLevel(), logging.INFO))  # the run log records INFO
    log.addHandler(runlog)
    try:
        log.info("nsdist %s: %s training job, run directory %s", __version__,
                 "resuming a" if resume else "starting a", run.url)
        if not resume:   # a resumed run keeps the job it continues (a refused resume must not replace it)
            run.write_yaml("job.yaml", job.model_dump(mode="json"))
        cluster = job.cluster
        with connect(cluster.scheduler, n_workers=cluster.n_workers, memory_limit=cluster.memory_limit) as client, \
                client.as_current():  # workaround: the 2PMB reservoir needs a current client
            where = announce(client)
            log.info("cluster: %s", where)
            train, test, role = _datasets(job.dataset, client)
            model = _fit(job, client, train, test, role, run, runlog, resume=resume, progress=progress)
            model.save(run.model)
            log.info("model saved to %s", run.model)
            measures = api.evaluate(model, test, client=client, threshold=job.measure.threshold)
        metrics = _write_outputs(job, run, model, train, test, role, measures, where)
        return TrainRun(model, metrics, train, test)
    except BaseException as exc:
        log.error("failed: %s: %s", type(exc).__name__, " ".join(str(exc).split()), extra=RUN_LOG_ONLY)
        raise
    finally:
        runlog.save()
        log.removeHandler(runlog)
        log.setLevel(level)


def _datasets(spec: DatasetSpec, client) -> tuple[Dataset, Dataset, str]:
    """The training data, the evaluation data and its role (``test``, ``holdout`` or ``training``)."""
    from . import api

    for url, raw in ((spec.url, spec.ingest), (spec.test_url, spec.test_ingest)):
        if raw is not None and not _exists(url, spec.storage_options):
            log.info("ingesting %s into %s", raw.src, url)
            t0 = time.perf_counter()
            api.ingest(raw.src, url, **raw.options(), storage_options=spec.storage_options, client=client)
            log.info("ingested %s in %.1f s", url, time.perf_counter() - t0)
    how = dict(label_column=spec.label_column, feature_columns=spec.feature_columns,
               storage_options=spec.storage_options)
    train = api.open_dataset(spec.url, **how)
    if spec.test_url is not None:
        test, role = api.open_dataset(spec.test_url, **how), "test"
    elif spec.holdout is not None:
        (train, test), role = holdout_split(train, spec.holdout), "holdout"
    else:
        test, role = train, "training"
        log.warning("no test data (dataset.test_url or dataset.holdout): metrics.json reports the training data")
    for name, ds in dict.fromkeys([("training", train), (role, test)]):
        log.info("%s data: %s, %d rows, %d features, %d partitions, fingerprint %s", name, ds.url, ds.num_rows,
                 ds.n_features, len(ds.partitions), ds.fingerprint[:12])
    return train, test, role


def holdout_split(ds: Dataset, fraction: float) -> tuple[Dataset, Dataset]:
    """Split a dataset into ``(train, held out)`` by partition.

    ``ceil(fraction * n)`` of the ``n`` partitions, evenly spaced over the
    dataset (so a dataset written in sorted order is still split fairly; an
    ingested dataset is shuffled anyway), are held out.
    """
    n = len(ds.partitions)
    m = ceil9(fraction * n)
    if n < 2 or m >= n:
        raise ValueError(f"dataset.holdout={fraction} needs more partitions than {ds.url} has ({n}); "
                         "ingest it with a smaller rows_per_partition, or give dataset.test_url")
    held = {int(i) for i in (np.arange(m) + 0.5) * n // m}
    return (ds.select([i for i in range(n) if i not in held], "train"),
            ds.select(sorted(held), "holdout"))


def _exists(url: str, storage_options: dict) -> bool:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    return fs.exists(path)


def load_rows(ds: Dataset, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a dataset in partition order, in memory: ``(X, y)``; at most ``max_rows`` of them.

    ``X`` is a ``scipy.sparse.csr_matrix`` for a sparse dataset, else an ndarray."""
    limit = ds.num_rows if max_rows is None else max_rows
    X, y, n = [], [], 0
    for part in ds.partitions:
        if n >= limit:
            break
        Xp, yp = ds.read_partition(part.index)
        X.append(Xp[:limit - n])
        y.append(yp[:limit - n])
        n += y[-1].shape[0]
    if ds.is_sparse:
        import scipy.sparse as sp

        return sp.vstack(X, format="csr"), np.concatenate(y)
    return np.concatenate(X), np.concatenate(y)


def _fit(job: TrainJob, client, train: Dataset, test: Dataset, role: str, run: RunDir, runlog: RunLog, *,
         resume: bool, progress: bool) -> LinearModel:
    """Train with the progress bar, the learning curve, checkpoints and pass-by-pass log lines."""
    from . import api
    from .progress import TrainingBar

    params = job.estimator_params()
    n_passes = NonDecomposableClassifier(**params).n_passes
    if not resume and _exists(run.checkpoint, {}):
        log.info("replacing the checkpoint of an earlier run (--resume would have continued it)")
    validation = load_rows(test, job.output.curve_rows) if job.output.curve_rows else None
    if validation is not None:
        log.info("learning curve: the measure on %d rows of the %s data after each partition",
                 validation[1].shape[0], role)
    log.info("training: %s", ", ".join(f"{k}={v}" for k, v in params.items()))
    log.info("checkpoints: %s every %d partitions or %.0f s", run.checkpoint, job.output.checkpoint_every,
             job.output.checkpoint_seconds)
    previous, saved = None, time.monotonic()

    def pass_done(p: ChainProgress) -> None:
        log.info("pass %d/%d done at %.1f s: %d rows seen, loss %.4g on its last partition",
                 p.pass_index + 1, n_passes, p.elapsed, p.rows_seen, p.loss)

    def on_step(p: ChainProgress) -> None:
        nonlocal previous, saved
        bar(p)
        if previous is not None and previous.pass_index != p.pass_index:
            pass_done(previous)
        if p.step == p.n_steps:
            pass_done(p)
        previous = p
        if time.monotonic() - saved > 10:  # a killed run keeps its log up to here
            runlog.save()
            saved = time.monotonic()

    with TrainingBar(n_passes, enabled=None if progress else False) as bar:
        model = api.train(train, client=client, checkpoint=run.checkpoint,
                          checkpoint_every=job.output.checkpoint_every,
                          checkpoint_seconds=job.output.checkpoint_seconds, resume=resume,
                          validation=validation, on_step=on_step, **train_options(job))
    h = model.history
    log.info("trained in %.1f s: %s rows, %s epochs (%s skipped), %s passes, %.0f rows/s, final loss %.4g",
             h.get("seconds", 0.0), h.get("rows_seen"), h.get("epochs"), h.get("skipped_epochs"),
             h.get("passes"), h.get("rows_per_second") or 0.0, h.get("final_loss") or math.nan)
    return model


def train_options(job: TrainJob) -> dict:
    """The keyword arguments of :func:`nsdist.train` that a job fixes: the model it asks for.

    ``nsdist train`` and ``nsdist retrain`` both train with these (plus the
    data, the client and, for ``train``, checkpoints and progress), so a
    retrain candidate is the model ``nsdist train`` builds from the same job
    on the same partitions.
    """
    return {"prefetch": job.cluster.prefetch, "standardize": job.dataset.standardize, **job.estimator_params()}


def _write_outputs(job: TrainJob, run: RunDir, model: LinearModel, train: Dataset, test: Dataset, role: str,
                   measures: dict, where: str) -> dict:
    """Write ``metrics.json`` and ``learning_curve.png``; return the metrics."""
    h = model.history
    key = MEASURE_KEYS[model.measure]
    metrics = {
        "measure": {"name": model.measure, "key": key, "value": measures[key]},
        "evaluation": {"data": role, "url": test.url, **measures},
        "training": {k: h.get(k) for k in ("seconds", "rows_seen", "rows_per_second", "epochs", "skipped_epochs",
                                          "passes", "partitions", "final_loss")},
        "dataset": {"url": train.url, "rows": train.num_rows, "features": train.n_features,
                    "partitions": len(train.partitions), "fingerprint": train.fingerprint,
                    "label_column": job.dataset.label_column},
        "model": {"dir": run.model, "measure": model.measure, "params": model.params,
                  "n_features": model.n_features, "version": model.version, "created": model.created},
        "cluster": where,
    }
    run.write_json("metrics.json", metrics)
    log.info("metrics on the %s data: %s", role, ", ".join(f"{k}={measures[k]:.4f}" for k in MEASURE_KEYS.values()))
    if h.get("curve"):
        label = measure_label(key, beta=measures["beta"], k=measures["k"])
        title = (f"{os.path.basename(run.url)}: {model.params['solver'].upper()} for {label}, "
                 f"{train.num_rows:,} training rows")
        run.write_bytes("learning_curve.png", curve_png(h, measure=f"{label} on the {role} data", title=title))
        log.info("learning curve: %s (%d points)", run.path("learning_curve.png"), len(h["curve"]))
    else:
        log.info("no learning curve: the %s solver does not stream partitions", model.params["solver"])
    return metrics


# ------------------------------------------------------------- predict I/O
_OUTPUT_COLUMNS = ("score", "prediction")


def predict_file(model: LinearModel, src: str, dst: str, *, label_column: str = "label",
                 keep: Sequence[str] = (), threshold: float = 0.0) -> int:
    """Score every row of a Parquet or CSV input and write ``score`` and ``prediction`` to ``dst``.

    Sparse inputs -- an svmlight/LIBSVM file or a Parquet dataset in the sparse
    layout -- are scored as CSR rows by :func:`nsdist.data.scoring.score_sparse`
    (the label, and ``keep`` columns of a Parquet input, are copied).

    The input's columns must be the model's features plus the label column
    (optional) and the ``keep`` columns, which are copied to the output.  The
    input is read in record batches; the output (Parquet or CSV by its
    extension) is written atomically.  Returns the number of rows.

    Raises
    ------
    ValueError
        If the input's feature columns differ from the model's (naming the
        difference), a feature column is not numeric, or a ``keep`` column is
        missing.
    """
    import fsspec
    import pyarrow as pa
    import pyarrow.dataset as pads

    fs, path = fsspec.core.url_to_fs(src)
    if not fs.exists(path):
        raise FileNotFoundError(2, "No such file or directory", src)
    from .data.scoring import score_sparse, sparse_input_format

    if sparse_input_format(src):   # svmlight text or a sparse Parquet dataset: CSR rows
        table = score_sparse(model, src, label_column=label_column, keep=keep, threshold=threshold)
        atomic_write_bytes(dst, _table_bytes(table, _table_format(dst)))
        return table.num_rows
    data = pads.dataset(path, filesystem=fs, format=_table_format(src))
    names = data.schema.names
    absent = [c for c in keep if c not in names]
    if absent:
        raise ValueError(f"--keep column(s) {', '.join(map(repr, absent))} not in {src} "
                         f"(columns: {', '.join(names)})")
    copied = [c for c in names if c == label_column or c in keep]
    clash = [c for c in _OUTPUT_COLUMNS if c in copied]
    if clash:
        raise ValueError(f"{src} has a column {clash[0]!r}, which the output uses for the model's {clash[0]}s")
    try:
        model.check_features([c for c in names if c not in copied], where=f"input {src}")
    except ValueError as exc:
        raise ValueError(f"{exc} (a column that is not a feature can be copied with --keep)") from None
    for name in model.feature_names:
        kind = data.schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise ValueError(f"column {name!r} of {src} is {kind}, not numeric")
    parts = [pa.table({c: pa.array([], data.schema.field(c).type) for c in copied}
                      | {"score": pa.array([], pa.float64()), "prediction": pa.array([], pa.int8())})]
    for batch in data.to_batches(columns=copied + model.feature_names):
        X = np.column_stack([batch.column(c).to_numpy(zero_copy_only=False) for c in model.feature_names])
        scores = model.decision_function(X.astype(np.float64)) if batch.num_rows else np.zeros(0)
        parts.append(pa.table({**{c: batch.column(c) for c in copied}, "score": scores,
                               "prediction": np.where(scores > threshold, 1, -1).astype(np.int8)}))
    table = pa.concat_tables(parts)
    atomic_write_bytes(dst, _table_bytes(table, _table_format(dst)))
    return table.num_rows


def _table_format(url: str) -> str:
    """``csv`` for ``.csv`` names (optionally compressed), else ``parquet``."""
    name = url.lower().rstrip("/")
    for ext in (".gz", ".bz2", ".xz", ".zst"):
        name = name.removesuffix(ext)
    return "csv" if name.endswith(".csv") else "parquet"


def _table_bytes(table, fmt: str) -> bytes:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    if fmt == "csv":
        pacsv.write_csv(table, buf)
    else:
        pq.write_table(table, buf)
    return buf.getvalue()


# ------------------------------------------------------------------ helpers
def model_dir(path: str) -> str:
    """``path`` itself, or ``path/model`` when ``path`` is a run directory."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    if not fs.exists(f"{root}/model.json") and fs.exists(f"{root}/model/model.json"):
        return path.rstrip("/") + "/model"
    return path


def announce(client) -> str:
    """Print where the job runs (the dashboard link included) on stdout; return it as one line."""
    from distributed import LocalCluster

    workers = len(client.scheduler_info().get("workers", {}))
    kind = "embedded LocalCluster" if isinstance(client.cluster, LocalCluster) else \
        f"Dask scheduler {client.scheduler.address}"
    where = f"{kind}, {workers} workers; dashboard: {client.dashboard_link}"
    print(f"nsdist: {where}", flush=True)
    return where
