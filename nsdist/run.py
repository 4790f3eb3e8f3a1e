"""What the ``nsdist`` commands run: a training job end to end.

:func:`run_train` runs a :class:`~nsdist.jobs.TrainJob` (connect, ingest on
first use, train with progress, checkpoints and a run log, evaluate, write
the run directory); scoring is :func:`nsdist.predict`.  The
command line (:mod:`nsdist.cli`) parses arguments and calls these; so do
``pipelines.demo`` and ``deploy/slurm``.
"""
from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

from . import __version__
from ._connect import dashboard_link
from ._validation import ceil9
from .jobs import DatasetSpec, TrainJob
from .data.fs import is_there, resolve
from .model import LinearModel
from .report import MEASURE_KEYS, RunDir, RunLog, curve_png, folds_curve_png, measure_label

if TYPE_CHECKING:  # importing them loads Dask, which reads its logging settings (see cli._setup_logging)
    from .data import Dataset
    from .engine.chain import ChainProgress

__all__ = ["run_train", "TrainRun", "run_evaluate", "run_predict", "load_rows", "holdout_split", "model_dir",
           "announce", "RUN_LOG_ONLY", "train_options", "separating_features", "warn_separating_features"]

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

    from .estimator import NonDecomposableClassifier

    NonDecomposableClassifier(**job.estimator_params()).config()   # every check before a cluster starts:
    opened = _open_datasets(job.dataset, job.data_options())       # the parameters, then the data
    run = RunDir(job.output.dir, job.output_options() or None)
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
            train, test, role = opened or _datasets(job.dataset, client, job.data_options())
            _log_datasets(train, test, role)
            warn_separating_features(train)
            model = _fit(job, client, train, test, role, run, runlog, resume=resume, progress=progress)
            model.save(run.model, run.storage_options)
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


def _datasets(spec: DatasetSpec, client, options: dict | None = None) -> tuple[Dataset, Dataset, str]:
    """The training data, the evaluation data and its role (``test``, ``holdout`` or ``training``).

    ``options``: the storage options of the data (default ``spec.storage_options``).  A test set ingested
    with one-hot columns (``test_ingest.categorical``) is encoded with the training set's categories, so that
    it has the training set's features (a value the training set never had: all zeros).
    """
    from . import api
    from .data.fs import incomplete

    options = spec.storage_options if options is None else options
    for url, raw in ((spec.url, spec.ingest), (spec.test_url, spec.test_ingest)):
        if raw is not None and not _exists(url, options):
            fs, path = resolve(url, options)
            redo = is_there(fs, path) and incomplete(fs, path)   # an ingest that died: its files are replaced
            log.info("ingesting %s into %s%s", raw.src, url, " (replacing an unfinished ingest)" if redo else "")
            how = raw.options()
            trained = api.open_dataset(spec.url, **spec.read_options(), storage_options=options).metadata.get(
                "categories") if url == spec.test_url and raw.categorical else None
            if trained:
                how["categorical"] = trained
                log.info("one-hot columns of %s encoded with the categories of %s", url, spec.url)
            t0 = time.perf_counter()
            api.ingest(raw.src, url, **how, storage_options=options, client=client, overwrite=redo)
            log.info("ingested %s in %.1f s", url, time.perf_counter() - t0)
    return _split(spec, options)


def _open_datasets(spec: DatasetSpec, options: dict) -> tuple[Dataset, Dataset, str] | None:
    """:func:`_datasets` without a cluster: the datasets when they all exist, else None.

    A dataset still to be ingested has its source and options checked (what
    ``ingest`` checks before it starts); any other problem (a missing
    dataset, a bad label column, too few partitions to hold out) raises here,
    before a cluster starts or the run directory is touched.
    """
    missing = False
    for url, raw in ((spec.url, spec.ingest), (spec.test_url, spec.test_ingest)):
        if raw is not None and not _exists(url, options):
            _check_source(raw.src, raw.options(), options or None)
            missing = True
    return None if missing else _split(spec, options)


def _split(spec: DatasetSpec, options: dict) -> tuple[Dataset, Dataset, str]:
    """Open the training data and the evaluation data; the latter's role: ``test``, ``holdout`` or ``training``."""
    from . import api

    how = dict(spec.read_options(), storage_options=options)
    train = api.open_dataset(spec.url, **how)
    if spec.test_url is not None:
        return train, api.open_dataset(spec.test_url, **how), "test"
    if spec.holdout is not None:
        return (*holdout_split(train, spec.holdout), "holdout")
    return train, train, "training"


def inferred_features(ds: Dataset) -> list[str] | None:
    """The feature columns of Parquet a user brought if they were inferred -- every column but the label and
    ``drop`` -- in the layout of one column per feature (what a user checks for an id or a timestamp taken for a
    feature); ``None`` when the job named them, for a dataset ``nsdist ingest`` wrote (it chose the columns, and
    its provenance says which), or for a vector or sparse layout."""
    schema = ds.schema
    inferred = schema.layout == "columns" and schema.all_columns is not None and "ingest" not in ds.metadata
    return list(schema.names) if inferred else None


def _log_datasets(train: Dataset, test: Dataset, role: str) -> None:
    from .data.dataset import SPLIT_BYTES
    from .report import name_list

    if role == "training":
        log.warning("no test data (dataset.test_url or dataset.holdout): metrics.json reports the training data")
    for name, ds in dict.fromkeys([("training", train), (role, test)]):
        split = len({p.path for p in ds.partitions if p.row_groups is not None})
        log.info("%s data: %s, %d rows, %d features, %d partitions%s, fingerprint %s", name, ds.url, ds.num_rows,
                 ds.n_features, len(ds.partitions),
                 f" ({split} file(s) over {SPLIT_BYTES // 2**20} MiB read as runs of row groups)" if split else "",
                 ds.fingerprint[:12])
    inferred = inferred_features(train)
    if inferred:
        log.info("features (every column but the label and drop): %s", name_list(inferred))


#: training rows read to look for a feature that separates the classes by itself
SEPARATION_ROWS = 100_000


def separating_features(X: np.ndarray, y: np.ndarray) -> list[int]:
    """The columns of ``X`` whose values alone split the rows into the two classes (a threshold does it)."""
    pos, neg = y > 0, y <= 0
    if not pos.any() or not neg.any():
        return []
    with np.errstate(invalid="ignore"):
        lo_p, hi_p = X[pos].min(axis=0), X[pos].max(axis=0)
        lo_n, hi_n = X[neg].min(axis=0), X[neg].max(axis=0)
    return [int(j) for j in np.flatnonzero((hi_n < lo_p) | (hi_p < lo_n))]


def warn_separating_features(ds: Dataset, max_rows: int = SEPARATION_ROWS) -> list[str]:
    """Warn loudly when one feature alone separates the training classes (on up to ``max_rows`` rows).

    That is almost always a label leak: the label, or something computed from
    it, read as a feature (a wrong ``--label-column``).  Returns the names.
    """
    try:
        X, y = load_rows(ds, max_rows)
        if hasattr(X, "toarray"):
            X = X.toarray()
    except (ValueError, TypeError, MemoryError):   # a layout this check cannot read in memory: skip it
        return []
    names = [ds.feature_names[j] for j in separating_features(np.asarray(X, dtype=np.float64), y)]
    if names:
        shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
        log.warning("WARNING: feature%s %s alone separate%s the %d training rows read into the two classes "
                    "perfectly: is the label, or something computed from it, a feature? (check --label-column "
                    "/ dataset.label_column and dataset.feature_columns; the label recorded at ingest is %r)",
                    "s" if len(names) > 1 else "", shown, "" if len(names) > 1 else "s", len(y),
                    ds.metadata.get("label_column"))
    return names


def holdout_split(ds: Dataset, fraction: float) -> tuple[Dataset, Dataset]:
    """Split a dataset into ``(train, held out)`` by partition.

    ``ceil(fraction * n)`` of the ``n`` partitions, evenly spaced over the
    dataset (so a dataset written in sorted order is still split fairly; an
    ingested dataset is shuffled anyway), are held out.
    """
    n = len(ds.partitions)
    m = ceil9(fraction * n)
    if n < 2 or m >= n:
        enough = next((k for k in range(10, ds.num_rows + 1) if ceil9(fraction * k) < k), None)
        how = f" ({-(-ds.num_rows // enough)} makes {enough} partitions of its {ds.num_rows} rows)" if enough else ""
        raise ValueError(f"dataset.holdout={fraction} needs more partitions than {ds.url} has ({n}); ingest it "
                         f"again with a smaller rows_per_partition{how}, or give dataset.test_url")
    held = {int(i) for i in (np.arange(m) + 0.5) * n // m}
    return (ds.select([i for i in range(n) if i not in held], "train"),
            ds.select(sorted(held), "holdout"))


def _exists(url: str, storage_options: dict | None) -> bool:
    """Whether something complete is at ``url`` (not a dataset whose ingest died half way)."""
    from .data.fs import incomplete

    fs, path = resolve(url, storage_options)
    return is_there(fs, path) and not (fs.isdir(path) and incomplete(fs, path))


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


def curve_rows(ds: Dataset, max_rows: int, random_state: int, params: dict) -> tuple | None:
    """Up to ``max_rows`` rows of ``ds`` for the learning curve (``nsdist.train``'s ``monitor=``): whole
    partitions drawn by seed, read here; their labels as stored, which ``train`` reads as the dataset's label
    column is (``positive=``).  None for 0 rows, or when the job's measure (``params``) cannot be taken on
    them (:func:`nsdist.api.monitor_problem`: logged)."""
    if max_rows <= 0:
        return None
    from .api import monitor_problem
    from .engine.holdout import sample_partitions
    from .solvers.config import TrainConfig

    rows = ds.select(sample_partitions(ds, random_state, max_rows), "curve")
    X, y = load_rows(rows, max_rows)
    cfg = TrainConfig.from_params(**params)
    problem = monitor_problem(y, cfg.measure, beta=cfg.beta, k=cfg.k)
    if problem:
        log.info("learning curve: no line on the %d rows drawn for it (output.curve_rows): %s", y.shape[0], problem)
        return None
    if ds.schema.positive is not None:
        y = np.concatenate([rows.read_label_values(p.index) for p in rows.partitions])[:y.shape[0]]
    return X, y


def _fit(job: TrainJob, client, train: Dataset, test: Dataset, role: str, run: RunDir, runlog: RunLog, *,
         resume: bool, progress: bool) -> LinearModel:
    """Train with the progress bar, the learning curve, checkpoints and pass-by-pass log lines."""
    from . import api
    from .progress import TrainingBar, progress_text

    params = job.estimator_params()
    n_passes = params.get("n_passes") or params.get("max_passes")    # None: chosen in the fit
    if not resume and _exists(run.checkpoint, run.storage_options):
        log.info("replacing the checkpoint of an earlier run (--resume would have continued it)")
    # The evaluation data is never passed as `validation=`: the fit chooses its candidates on those rows,
    # so the reported measures would not be held out, and the model would not be the one `nsdist retrain`
    # (or `nsdist.train` on the same job) builds.  The fit holds out its own validation rows.
    log.info("training: %s", ", ".join(f"{k}={v}" for k, v in params.items()))
    previous, saved = None, time.monotonic()

    def pass_done(p: ChainProgress) -> None:
        # a population's loss averages different surrogates: its checks' lines (nsdist.train's) say how it stands
        log.info("pass %d%s done at %.1f s: %d rows seen%s", p.pass_index + 1, f"/{n_passes}" if n_passes else "",
                 p.elapsed, p.rows_seen, "" if p.alive is not None else f", {progress_text(p)} on its last partition")

    def on_step(p: ChainProgress) -> None:
        nonlocal previous, saved
        bar(p)
        if p.unit == "partition":           # (K-fold selection's checks are logged by nsdist.train)
            if previous is not None and previous.pass_index != p.pass_index:
                pass_done(previous)
            if p.step == p.n_steps:
                pass_done(p)
            previous = p
        if time.monotonic() - saved > 10:  # a killed run keeps its log up to here
            runlog.save()
            saved = time.monotonic()

    monitor = curve_rows(test, job.output.curve_rows, params.get("random_state") or 0, params)
    with TrainingBar(n_passes or "?", enabled=None if progress else False) as bar:
        model = api.train(train, client=client, checkpoint=run.checkpoint, checkpoint_options=run.storage_options,
                          checkpoint_every=job.output.checkpoint_every,
                          checkpoint_seconds=job.output.checkpoint_seconds, resume=resume,
                          on_step=on_step, monitor=monitor, **train_options(job))
    h = model.history
    if h.get("epochs") is None:       # an in-memory fit (K-fold selection, FTRL, PSG, CP): no partition chain
        log.info("trained in %.1f s: %s rows in memory on the driver%s", h.get("seconds", 0.0), h.get("rows_seen"),
                 f", {h['folds']} fold fits in lockstep on the workers" if h.get("folds") else "")
    else:
        log.info("trained in %.1f s: %s rows, %s epochs (%s skipped), %s passes, %.0f rows/s%s",
                 h.get("seconds", 0.0), h.get("rows_seen"), h.get("epochs"), h.get("skipped_epochs"),
                 h.get("passes"), h.get("rows_per_second") or 0.0,
                 "" if h.get("final_loss") is None else f", final loss {h['final_loss']:.4g}")
    return model


def selection_ranking(candidates: list[dict]) -> list[str]:
    """The candidates' names by validation value, best first (never scored: last; ties: table order)."""
    order = sorted(range(len(candidates)), key=lambda i: (candidates[i]["validation"] is None,
                                                          -(candidates[i]["validation"] or 0.0), i))
    return [candidates[i]["name"] for i in order]


def selection_summary(candidates: list[dict], validation_positives: int | None = None) -> str:
    """``"<winner> (validation v, s steps) over the runner-up <name> (v)"`` for logs and the CLI.

    With ``validation_positives`` (``v+``) it also says what the validation rows resolve, about
    ``1 / v+`` of the measure (docs/solvers.md, "What the holdout resolves"), and whether the
    runner-up is within that of the winner.
    """
    by_name = {c["name"]: c for c in candidates}
    ranked = [by_name[n] for n in selection_ranking(candidates)]
    win = next(c for c in candidates if c["selected"])
    text = f"{win['name']} (validation {win['validation']:.4f}, snapshot at step {win['steps']})"
    runner = next((c for c in ranked if not c["selected"] and c["validation"] is not None), None)
    if runner is not None:
        text += f"; runner-up {runner['name']} ({runner['validation']:.4f})"
    text += f"; {len(candidates)} candidates"
    if validation_positives:
        resolution = 1.0 / validation_positives
        text += f"; {validation_positives} validation positives resolve about {resolution:.4f}"
        if runner is not None and win["validation"] - runner["validation"] < resolution:
            text += " (the runner-up is within it)"
    return text


def train_options(job: TrainJob) -> dict:
    """The keyword arguments of :func:`nsdist.train` that a job fixes: the model it asks for.

    ``nsdist train`` and ``nsdist retrain`` both train with these (plus the
    data, the client and, for ``train``, checkpoints and progress), so a
    retrain candidate is the model ``nsdist train`` builds from the same job
    on the same partitions.
    """
    return {"prefetch": job.cluster.prefetch, "n_chains": job.cluster.n_chains, "standardize": job.dataset.standardize,
            **job.estimator_params()}


def _write_outputs(job: TrainJob, run: RunDir, model: LinearModel, train: Dataset, test: Dataset, role: str,
                   measures: dict, where: str) -> dict:
    """Write ``metrics.json`` and ``learning_curve.png``; return the metrics."""
    h = model.history
    key = MEASURE_KEYS[model.measure]
    metrics = {
        "measure": {"name": model.measure, "key": key, "value": measures[key]},
        "evaluation": {"data": role, "url": test.url, **measures},
        "training": {k: h.get(k) for k in ("seconds", "rows_seen", "rows_per_second", "epochs", "skipped_epochs",
                                          "passes", "partitions", "final_loss", "folds")},
        "dataset": {"url": train.url, "rows": train.num_rows, "features": train.n_features,
                    "partitions": len(train.partitions), "fingerprint": train.fingerprint,
                    "label_column": job.dataset.label_column, "inferred_features": inferred_features(train)},
        "model": {"dir": run.model, "measure": model.measure, "params": model.params,
                  "n_features": model.n_features, "version": model.version, "created": model.created},
        "cluster": where,
    }
    if h.get("selection"):
        metrics["selection"] = {"selected": h["selected"], "ranked": selection_ranking(h["selection"]),
                                "candidates": h["selection"], "validation_curve": h.get("validation_curve"),
                                "validation_positives": h.get("validation_positives")}
        log.info("selection: %s", selection_summary(h["selection"], h.get("validation_positives")))
    run.write_json("metrics.json", metrics)
    log.info("metrics on the %s data: %s", role, ", ".join(f"{k}={measures[k]:.4f}" for k in MEASURE_KEYS.values()))
    label = measure_label(key, beta=measures["beta"], k=measures["k"])
    title = (f"{os.path.basename(run.url)}: {model.params['solver'].upper()} for {label}, "
             f"{train.num_rows:,} training rows")
    if h.get("curve"):
        # the curve's measure is the selection's best value on the validation rows, at each check; its monitor
        # the measure on a sample of the evaluation data of the model the run would have returned there
        what = f"best {label} on the validation rows" if h.get("selection") else label
        watched = h.get("monitor")
        run.write_bytes("learning_curve.png", curve_png(
            h, measure=what, title=title,
            monitor=None if watched is None else f"{label} on {watched['rows']:,} {role} rows"))
        log.info("learning curve: %s (%d points)", run.path("learning_curve.png"), len(h["curve"]))
    elif h.get("folds"):
        watched = h.get("monitor")
        run.write_bytes("learning_curve.png", folds_curve_png(
            h, measure=f"best {label} on the fold's validation rows", title=f"{title}, {h['folds']}-fold selection",
            monitor=None if watched is None else f"{label} on {watched['rows']:,} {role} rows"))
        log.info("learning curve: %s (K-fold selection streams no partitions: each fold's validation measure%s, "
                 "%d checks)", run.path("learning_curve.png"),
                 "" if watched is None else f" and its winner's on {watched['rows']:,} {role} rows",
                 len(h["validation_curve"]))
    else:
        log.info("no learning curve: the %s solver streams no partitions (output.curve_rows 0: nothing measured "
                 "while it trained)", model.params["solver"])
    return metrics


# ------------------------------------------------------------- ingest options
def categories_of(url: str | None, categorical, storage_options: dict | None = None) -> dict:
    """``{"categorical": {column: categories}}`` of the dataset at ``url`` (its metadata: ``nsdist ingest
    --categories-of``), or {} without ``url``."""
    if not url:
        return {}
    if categorical:
        raise ValueError("--categories-of takes the columns to encode from its dataset: drop --categorical")
    from .data import Dataset

    categories = Dataset.open(url, storage_options=storage_options).metadata.get("categories")
    if not categories:
        raise ValueError(f"--categories-of {url}: that dataset has no one-hot encoded columns")
    return {"categorical": categories}


def check_ingest(src: str, options: dict, dst: str, *, overwrite: bool, storage_options: dict | None) -> None:
    """What ``nsdist.ingest`` checks before it starts: the input, its options and the destination."""
    from .data.fs import check_absent

    _check_source(src, options, storage_options)
    fs, out = resolve(dst, storage_options)
    check_absent(fs, out, overwrite=overwrite)


def _check_source(src: str, options: dict, storage_options: dict | None) -> None:
    """Open the raw input ``src`` with the reading options of ingest ``options`` (its format, columns, labels)."""
    from .data.sources import open_source

    keys = ("format", "label_column", "positive", "negative", "categorical", "header", "n_features",
            "feature_columns", "drop")
    open_source(src, **{k: v for k, v in options.items() if k in keys}, storage_options=storage_options)


# ------------------------------------------------------------- evaluate and predict
def run_evaluate(model: str, dataset: str, *, label_column: str = "label", drop: Sequence[str] = (), positive=None,
                 threshold: float = 0.0, format: str | None = None, storage_options: dict | None = None,
                 scheduler: str | None = None, out: str | None = None) -> tuple[str, dict, str]:
    """``nsdist evaluate``: every measure of the model at ``model`` (a model or run directory) on ``dataset``
    (:func:`nsdist.evaluate`: an svmlight or CSV file scored in this process, a Parquet dataset on the cluster
    at ``scheduler``, else an embedded one, its dashboard announced), written as JSON to ``out`` (default:
    ``evaluation.json`` beside the model).  Returns ``(model directory, measures, out)``."""
    from . import api
    from .data.fs import atomic_write_bytes
    from .data.scoring import file_input_format
    from .engine.cluster import connect
    from .report import to_json

    where = model_dir(model, storage_options)
    loaded = api.load_model(where, storage_options)
    how = dict(threshold=threshold, storage_options=storage_options, positive=positive)
    if file_input_format(dataset, storage_options, format):     # scored here, chunk by chunk: no cluster
        result = api.evaluate(loaded, dataset, label_column=label_column, format=format, drop=drop, **how)
    else:
        data = api.open_dataset(dataset, label_column=label_column, drop=drop,   # fails before a cluster starts
                                storage_options=storage_options, positive=positive)
        with connect(scheduler) as client:
            announce(client)
            result = api.evaluate(loaded, data, client=client, **how)
    out = out or RunDir(os.path.dirname(where.rstrip("/")) or ".").path("evaluation.json")
    atomic_write_bytes(out, to_json({"model": where, "dataset": dataset, "threshold": threshold,
                                     "measure": loaded.measure, **result}), storage_options)
    return where, result, out


def run_predict(model: str, src: str, dst: str, *, label_column: str = "label", keep: Sequence[str] = (),
                drop: Sequence[str] = (), threshold: float = 0.0, storage_options: dict | None = None,
                format: str | None = None, scheduler: str | None = None, progress: bool = True) -> dict:
    """``nsdist predict``: score ``src`` with the model at ``model`` (a model or run directory) into ``dst``
    (:func:`nsdist.predict`: a file, in this process; a directory, on the cluster at ``scheduler``, else an
    embedded one, its dashboard announced, with a progress bar on a terminal); :func:`nsdist.predict`'s result."""
    from . import api
    from .data.scoring import output_format
    from .engine.cluster import connect
    from .progress import FileBar

    loaded = api.load_model(model_dir(model, storage_options), storage_options)
    how = dict(label_column=label_column, keep=keep, drop=drop, threshold=threshold, storage_options=storage_options,
               format=format)
    if output_format(dst) is not None:
        if scheduler:
            raise ValueError(f"--scheduler: {dst} is one file, written by this process; name a directory to "
                             "score the input on the cluster")
        return api.predict(loaded, src, dst, **how)
    with connect(scheduler) as client, FileBar(enabled=None if progress else False) as bar:
        announce(client)
        return api.predict(loaded, src, dst, client=client, on_file=bar, **how)


# ------------------------------------------------------------------ helpers
def model_dir(path: str, storage_options: dict | None = None) -> str:
    """``path`` itself, or ``path/model`` when ``path`` is a run directory."""
    from .data.fs import access

    fs, root = resolve(path, storage_options)
    with access(fs, root, "read"):
        if not is_there(fs, f"{root}/model.json") and is_there(fs, f"{root}/model/model.json"):
            return path.rstrip("/") + "/model"
    return path


def announce(client) -> str:
    """Print where the job runs (the dashboard link included) on stdout; return it as one line."""
    from distributed import LocalCluster

    workers = len(client.scheduler_info().get("workers", {}))
    kind = "embedded LocalCluster" if isinstance(client.cluster, LocalCluster) else \
        f"Dask scheduler {client.scheduler.address}"
    where = f"{kind}, {workers} workers; dashboard: {dashboard_link(client)}"
    print(f"nsdist: {where}", flush=True)
    return where
