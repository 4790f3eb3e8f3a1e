"""The ``nsdist`` command line: ingest, train, evaluate, predict, retrain, bench.

Every subcommand exits 0 on success and, on any error, non-zero with a
one-line reason on stderr (``--debug`` shows the traceback instead):
1 for a failed run, 2 for a bad command line or job file, 130 when
interrupted (and ``retrain`` 75 when the model registry is locked, see
:mod:`nsdist.retrain`).  Besides the parser, this module holds what the
commands run: :func:`run_train` (a training job end to end, also used by
``pipelines.demo``) and :func:`predict_file`.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

import numpy as np

from . import __version__
from ._validation import ceil9
from .estimator import NonDecomposableClassifier
from .jobs import DatasetSpec, IngestSpec, JobError, TrainJob, apply_overrides, default_run_dir, job_from_dict, \
    load_job, parse_overrides, validate
from .model import LinearModel, atomic_write_bytes, load_model
from .report import MEASURE_KEYS, RunDir, RunLog, curve_png, measure_label, measures_table, to_json

if TYPE_CHECKING:  # importing them loads Dask, which reads its logging settings (see _setup_logging)
    from .data import Dataset
    from .engine.chain import ChainProgress

__all__ = ["main", "build_parser", "run_train", "train_job", "predict_file", "load_rows", "TrainRun", "TRAIN_OPTIONS"]

log = logging.getLogger("nsdist")

#: ``extra=`` of records for the run log only (the console shows the error line instead)
_RUN_LOG_ONLY = {"run_log_only": True}

SCHEDULER_HELP = ("address of a running Dask scheduler (tcp://host:8786); default: $DASK_SCHEDULER_ADDRESS, "
                  "else an embedded LocalCluster starts and its dashboard link is printed")

#: ``nsdist train`` shorthands: (option, job key, metavar, help); each is a ``--set KEY=VALUE``
TRAIN_OPTIONS: list[tuple[str, str, str, str]] = [
    ("--measure", "measure.name", "NAME", "measure to optimise: pauc, auc, prec@k, prbep, f1"),
    ("--beta", "measure.beta", "B", "pAUC(0, B) for --measure pauc, B in (0, 1]"),
    ("--k", "measure.k", "K", "Prec@k: a number of rows >= 1 or a fraction in (0, 1]"),
    ("--threshold", "measure.threshold", "T", "score above which a row is labelled positive (F1)"),
    ("--solver", "solver.name", "NAME", "solver: 1pmb, 2pmb, ftrl, psg, cp"),
    ("--eta", "solver.eta", "ETA", "step size"),
    ("--buffer-size", "solver.buffer_size", "N", "rows per epoch buffer (2PMB: reservoir size)"),
    ("--n-passes", "solver.n_passes", "N", "passes over the data"),
    ("--random-state", "solver.random_state", "SEED", "seed of the stream order"),
    ("--label-column", "dataset.label_column", "COL", "label column of the dataset"),
    ("--test", "dataset.test_url", "DATASET", "Parquet dataset to evaluate on (and draw the learning curve on)"),
    ("--holdout", "dataset.holdout", "F", "instead of --test: hold out this fraction of the partitions"),
    ("--standardize", "dataset.standardize", "BOOL",
     "true (default): train on features scaled to zero mean, unit variance; false: as stored"),
    ("--out", "output.dir", "DIR", "run directory (default runs/<job or dataset name>)"),
    ("--checkpoint-every", "output.checkpoint_every", "N", "write out/checkpoint.json every N partitions"),
    ("--scheduler", "cluster.scheduler", "ADDRESS", SCHEDULER_HELP),
    ("--n-workers", "cluster.n_workers", "N", "embedded cluster: worker processes"),
]


# ------------------------------------------------------------------- parsing
class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors and examples kept as written."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``nsdist`` argument parser with all subcommands."""
    parser = _Parser(prog="nsdist", description="Train linear models for partial AUC, Prec@k, PRBEP and F1 "
                     "with the 1PMB/2PMB solvers of Kar, Narasimhan & Jain (2014), on Dask.",
                     epilog=_examples("nsdist ingest data/letter/letter-recognition.data runs/letter/data "
                                      "--label-column 0 --positive N",
                                      "nsdist train conf/letter-pauc.yaml",
                                      "nsdist evaluate runs/letter-pauc runs/letter/data",
                                      "nsdist COMMAND --help"))
    parser.add_argument("--version", action="version", version=f"nsdist {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the library's log on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    _add_ingest(sub)
    _add_train(sub)
    _add_evaluate(sub)
    _add_predict(sub)
    _add_retrain(sub)
    _add_bench(sub)
    return parser


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _add_ingest(sub) -> None:
    p = sub.add_parser("ingest", help="convert a CSV / svmlight / Parquet input into a partitioned Parquet dataset",
                       description="Convert a raw file (CSV, svmlight/LIBSVM text, Parquet; gz/bz2/xz ok) into "
                       "the Parquet dataset nsdist trains on: one float column per feature plus an int8 'label' "
                       "column in {-1,+1}, rows shuffled and split into partitions, with the label mapping, "
                       "categories and source recorded in DST/_nsdist.json. DST is replaced only once complete.",
                       epilog=_examples("nsdist ingest data/letter/letter-recognition.data runs/letter/data "
                                        "--format csv --label-column 0 --positive N --rows-per-partition 1000",
                                        "nsdist ingest ../shared/data/ijcnn1/ijcnn1.tst.bz2 runs/ijcnn1/test "
                                        "--format svmlight --n-features 22",
                                        "nsdist ingest ../shared/data/mammography/mammography.csv "
                                        "runs/mammography/data --label-column 6 --positive 1"))
    p.add_argument("src", help="raw input file or Parquet dataset (local path or fsspec URL)")
    p.add_argument("dst", help="output Parquet dataset directory")
    p.add_argument("--format", choices=("svmlight", "csv", "parquet"),
                   help="input format (default: from the name; .csv, .svm/.libsvm/.t/.trn/.tst or no "
                   "extension, .parquet or a directory)")
    p.add_argument("--label-column", default="label", metavar="COL",
                   help="label column: a name, or a 0-based index (negative: from the end); a CSV without "
                   "header has columns col0, col1, ... (default: label; svmlight: always the first token)")
    p.add_argument("--positive", action="append", metavar="VALUE",
                   help="a label value of the positive class (repeatable; default: labels are 1/-1, 1/0 or "
                   "true/false, svmlight: > 0)")
    p.add_argument("--negative", action="append", metavar="VALUE",
                   help="a label value of the negative class (repeatable); rows with other labels are dropped")
    p.add_argument("--categorical", action="append", default=[], metavar="COL",
                   help="a CSV column to one-hot encode (repeatable)")
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="CSV: the first line names the columns (default: detected)")
    p.add_argument("--n-features", type=int, metavar="D",
                   help="svmlight: the dimension (default: the largest index; give the training set's for a "
                   "test set)")
    p.add_argument("--rows-per-partition", type=int, metavar="N",
                   help="rows per Parquet partition (default: about 64 MiB of features)")
    p.add_argument("--no-shuffle", action="store_true", help="keep the input order (default: shuffle)")
    p.add_argument("--random-state", type=int, default=0, metavar="SEED", help="seed of the shuffle (default 0)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float64", help="feature dtype")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)
    p.set_defaults(run=_cmd_ingest)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model from a job file or from options",
                       description="Train a linear model on a Parquet dataset, streaming its partitions "
                       "through Dask. JOB is a YAML job file (see conf/ and the README's job-file reference); "
                       "or give a DATASET and options. Options below override the job file's keys; --set "
                       "overrides any key (the value is read as YAML).\n\n"
                       "The run directory receives model/, job.yaml, metrics.json, learning_curve.png, run.log "
                       "and checkpoint.json.",
                       epilog=_examples("nsdist train conf/letter-pauc.yaml",
                                        "nsdist train conf/letter-pauc.yaml --set solver.eta=2 "
                                        "--set measure.beta=0.05",
                                        "nsdist train runs/letter/data --measure pauc --beta 0.1 --solver 2pmb "
                                        "--holdout 0.25 --out runs/x",
                                        "nsdist train runs/x/job.yaml --resume        # continue a killed run",
                                        "nsdist train conf/letter-pauc.yaml --scheduler tcp://10.0.0.5:8786"))
    p.add_argument("job", metavar="JOB|DATASET", help="a job file (.yaml) or a Parquet dataset URL")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a job key, e.g. solver.eta=2 (repeatable)")
    for option, key, metavar, text in TRAIN_OPTIONS:
        p.add_argument(option, metavar=metavar, dest=key, help=f"{text} [{key}]")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in the run directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it is off when stderr is not a "
                   "terminal)")
    p.set_defaults(run=_cmd_train)


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="every measure of a model on a Parquet dataset",
                       description="Compute pAUC, AUC, Prec@k, PRBEP and F1 of a model on a Parquet dataset, "
                       "exactly and out of core; print them and write them as JSON. The dataset's features must "
                       "match the model's.",
                       epilog=_examples("nsdist evaluate runs/letter-pauc/model runs/letter/data",
                                        "nsdist evaluate runs/letter-pauc runs/letter/data --out eval.json"))
    p.add_argument("model", help="model directory (or a run directory holding model/)")
    p.add_argument("dataset", help="Parquet dataset URL")
    p.add_argument("--label-column", default="label", metavar="COL", help="label column (default: label)")
    p.add_argument("--threshold", type=float, default=0.0, metavar="T",
                   help="score above which a row is labelled positive, for F1 (default 0)")
    p.add_argument("--out", metavar="FILE", help="JSON output (default: evaluation.json next to the model)")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)
    p.set_defaults(run=_cmd_evaluate)


def _add_predict(sub) -> None:
    p = sub.add_parser("predict", help="score a Parquet or CSV file with a model",
                       description="Write the score and the predicted label (+1/-1) of every row of INPUT to "
                       "OUTPUT (Parquet or CSV, by extension), atomically. INPUT's columns must be the model's "
                       "features, plus the label column and any --keep columns, which are copied to OUTPUT.",
                       epilog=_examples("nsdist predict runs/letter-pauc runs/letter/data scores.parquet",
                                        "nsdist predict runs/x/model new.csv scores.csv --keep id"))
    p.add_argument("model", help="model directory (or a run directory holding model/)")
    p.add_argument("input", help="Parquet file or dataset directory, or a CSV file with a header")
    p.add_argument("output", help="output file: .parquet or .csv")
    p.add_argument("--label-column", default="label", metavar="COL",
                   help="label column: not a feature; copied to the output when present (default: label)")
    p.add_argument("--keep", action="append", default=[], metavar="COL",
                   help="copy this column (an id ...) to the output; not a feature (repeatable)")
    p.add_argument("--threshold", type=float, default=0.0, metavar="T",
                   help="predict +1 where the score is above T (default 0)")
    p.set_defaults(run=_cmd_predict)


def _add_retrain(sub) -> None:
    from . import retrain

    p = sub.add_parser("retrain", help="retrain on newly arrived partitions; promote the model unless worse",
                       description=retrain.__doc__.split("\n\n")[0].replace("``", "") + "\n\nOne run lists the "
                       "dataset's partitions, trains a candidate on the new ones, scores it and the current "
                       "model on the newest new partition, and records a new version in the model registry "
                       "(output.dir), promoted or refused. Exit 0 (promoted, refused, no new data), 75 when "
                       "another run holds the registry's lock, 1 on an error, 2 for a bad job file.",
                       epilog=_examples("nsdist retrain conf/retrain.yaml",
                                        "nsdist retrain conf/retrain.yaml --scheduler tcp://10.0.0.5:8786 "
                                        "--summary runs/retrain-summary.json"))
    retrain.add_arguments(p)
    p.set_defaults(run=retrain.run)


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="list the benchmark scripts, or run one",
                       description="Without NAME, list the scripts in the bench directory with their first "
                       "docstring line. With NAME, run bench/NAME.py with the remaining arguments and return "
                       "its exit code.",
                       epilog=_examples("nsdist bench", "nsdist bench losses", "nsdist bench defaults table"))
    p.add_argument("name", nargs="?", help="script to run (file name without .py)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("--dir", default=str(_BENCH_DIR), metavar="DIR",
                   help="directory of the scripts (default: bench/ of this source tree)")
    p.set_defaults(run=_cmd_bench)


_BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


# ------------------------------------------------------------------ commands
def _cmd_ingest(args) -> int:
    from . import api
    from .engine.cluster import connect

    column = args.label_column
    spec = validate(IngestSpec, {
        "src": args.src, "format": args.format, "positive": args.positive, "negative": args.negative,
        "label_column": int(column) if column.lstrip("-").isdigit() else column,
        "categorical": args.categorical, "header": args.header, "n_features": args.n_features,
        "rows_per_partition": args.rows_per_partition, "shuffle": not args.no_shuffle,
        "random_state": args.random_state, "dtype": args.dtype}, "command line")
    with connect(args.scheduler) as client:
        _announce(client)
        ds = api.ingest(spec.src, args.dst, **spec.options(), overwrite=args.overwrite, client=client)
    print(f"{args.dst}: {ds.num_rows} rows ({ds.metadata.get('positives')} positive), {ds.n_features} features, "
          f"{len(ds.partitions)} partitions")
    return 0


def _cmd_train(args) -> int:
    job = train_job(args)
    result = run_train(job, resume=args.resume, progress=not args.no_progress)
    evaluation = result.metrics["evaluation"]
    print(measures_table({f"nsdist {result.model.params['solver']}": evaluation}))
    print(f"\n{evaluation['data']} data: {evaluation['n_rows']} rows, {evaluation['n_positives']} positives; "
          f"trained in {result.metrics['training']['seconds']:.1f} s")
    print(f"run directory: {job.output.dir} (model/, metrics.json, learning_curve.png, run.log)")
    return 0


def train_job(args) -> TrainJob:
    """The job of an ``nsdist train`` command line: a job file or a dataset, plus overrides.

    Option values are passed on as strings (quoted, so that a path is never
    read as YAML); the schema converts them to numbers where a key wants one.
    """
    options = [f"{key}={json.dumps(value)}" for _, key, _, _ in TRAIN_OPTIONS
               if (value := getattr(args, key)) is not None]
    overrides = options + args.overrides
    if args.job.endswith((".yaml", ".yml")):
        return load_job(args.job, overrides)
    name = os.path.basename(args.job.rstrip("/")) or "train"
    raw = {"dataset": {"url": args.job}, "output": {"dir": default_run_dir(name)}}
    return job_from_dict(apply_overrides(raw, parse_overrides(overrides)), "command line")


def _cmd_evaluate(args) -> int:
    from . import api
    from .engine.cluster import connect

    model_dir = _model_dir(args.model)
    model = load_model(model_dir)
    dataset = api.open_dataset(args.dataset, label_column=args.label_column)  # fails before a cluster starts
    with connect(args.scheduler) as client:
        _announce(client)
        result = api.evaluate(model, dataset, client=client, threshold=args.threshold)
    out = args.out or RunDir(os.path.dirname(model_dir.rstrip("/")) or ".").path("evaluation.json")
    atomic_write_bytes(out, to_json({"model": model_dir, "dataset": args.dataset, "threshold": args.threshold,
                                     "measure": model.measure, **result}))
    print(measures_table({model_dir: result}))
    print(f"\n{result['n_rows']} rows, {result['n_positives']} positives; written to {out}")
    return 0


def _cmd_predict(args) -> int:
    model = load_model(_model_dir(args.model))
    n = predict_file(model, args.input, args.output, label_column=args.label_column, keep=args.keep,
                     threshold=args.threshold)
    print(f"{n} rows scored; written to {args.output}")
    return 0


def _cmd_bench(args) -> int:
    bench = Path(args.dir)
    if not bench.is_dir():
        raise FileNotFoundError(f"no bench directory at {bench}; run from a source checkout or pass --dir")
    scripts = sorted(p for p in bench.glob("*.py") if not p.name.startswith("_"))
    if args.name is None:
        for script in scripts:
            doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
            print(f"{script.stem:<16} {doc.strip().splitlines()[0] if doc.strip() else ''}")
        return 0
    script = bench / f"{args.name.removesuffix('.py')}.py"
    if not script.is_file():
        names = ", ".join(s.stem for s in scripts) or "none"
        raise FileNotFoundError(f"no bench script {args.name!r} in {bench} (available: {names})")
    return subprocess.call([sys.executable, str(script), *args.args], cwd=bench.parent)


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
            where = _announce(client)
            log.info("cluster: %s", where)
            train, test, role = _datasets(job.dataset, client)
            model = _fit(job, client, train, test, role, run, runlog, resume=resume, progress=progress)
            model.save(run.model)
            log.info("model saved to %s", run.model)
            measures = api.evaluate(model, test, client=client, threshold=job.measure.threshold)
        metrics = _write_outputs(job, run, model, train, test, role, measures, where)
        return TrainRun(model, metrics, train, test)
    except BaseException as exc:
        log.error("failed: %s: %s", type(exc).__name__, " ".join(str(exc).split()), extra=_RUN_LOG_ONLY)
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
        (train, test), role = _holdout(train, spec.holdout), "holdout"
    else:
        test, role = train, "training"
        log.warning("no test data (dataset.test_url or dataset.holdout): metrics.json reports the training data")
    for name, ds in dict.fromkeys([("training", train), (role, test)]):
        log.info("%s data: %s, %d rows, %d features, %d partitions, fingerprint %s", name, ds.url, ds.num_rows,
                 ds.n_features, len(ds.partitions), ds.fingerprint[:12])
    return train, test, role


def _holdout(ds: Dataset, fraction: float) -> tuple[Dataset, Dataset]:
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
    """The rows of a dataset in partition order, in memory: ``(X, y)``; at most ``max_rows`` of them."""
    limit = ds.num_rows if max_rows is None else max_rows
    X, y, n = [], [], 0
    for part in ds.partitions:
        if n >= limit:
            break
        Xp, yp = ds.read_partition(part.index)
        X.append(Xp[:limit - n])
        y.append(yp[:limit - n])
        n += y[-1].shape[0]
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
        model = api.train(train, client=client, prefetch=job.cluster.prefetch, checkpoint=run.checkpoint,
                          checkpoint_every=job.output.checkpoint_every,
                          checkpoint_seconds=job.output.checkpoint_seconds, resume=resume,
                          validation=validation, on_step=on_step, standardize=job.dataset.standardize,
                          **params)
    h = model.history
    log.info("trained in %.1f s: %s rows, %s epochs (%s skipped), %s passes, %.0f rows/s, final loss %.4g",
             h.get("seconds", 0.0), h.get("rows_seen"), h.get("epochs"), h.get("skipped_epochs"),
             h.get("passes"), h.get("rows_per_second") or 0.0, h.get("final_loss") or math.nan)
    return model


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
def _model_dir(path: str) -> str:
    """``path`` itself, or ``path/model`` when ``path`` is a run directory."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    if not fs.exists(f"{root}/model.json") and fs.exists(f"{root}/model/model.json"):
        return path.rstrip("/") + "/model"
    return path


def _announce(client) -> str:
    """Print where the job runs (the dashboard link included) on stdout; return it as one line."""
    from distributed import LocalCluster

    workers = len(client.scheduler_info().get("workers", {}))
    kind = "embedded LocalCluster" if isinstance(client.cluster, LocalCluster) else \
        f"Dask scheduler {client.scheduler.address}"
    where = f"{kind}, {workers} workers; dashboard: {client.dashboard_link}"
    print(f"nsdist: {where}", flush=True)
    return where


# -------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nsdist`` command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose or args.debug
    _setup_logging(verbose)
    try:
        with _quiet_dask_workers(not verbose):
            return args.run(args)
    except KeyboardInterrupt:
        print("nsdist: interrupted (a training run continues with --resume)", file=sys.stderr)
        return 130
    except JobError as exc:
        if args.debug:
            raise
        for problem in exc.problems:
            print(f"nsdist {args.command}: {problem}", file=sys.stderr)
        return 2
    except Exception as exc:  # every error ends in one line, unless --debug
        if args.debug:
            raise
        print(f"nsdist {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"no such file or directory: {exc.filename}"
    text = " ".join(str(exc).split())
    if isinstance(exc, (ValueError, FileNotFoundError, NotImplementedError, PermissionError)):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text} (run with --debug for the traceback)"


def _setup_logging(verbose: bool) -> None:
    """Library log records go to the run log (INFO) and, with ``--verbose``, to stderr."""
    global _CONSOLE
    logger = logging.getLogger("nsdist")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if _CONSOLE is None:
        _CONSOLE = logging.StreamHandler(sys.stderr)
        _CONSOLE.setFormatter(logging.Formatter("nsdist: %(message)s"))
        _CONSOLE.addFilter(lambda record: not getattr(record, "run_log_only", False))
        logger.addHandler(_CONSOLE)
    _CONSOLE.setLevel(logging.INFO if verbose else logging.WARNING)


@contextlib.contextmanager
def _quiet_dask_workers(quiet: bool) -> Iterator[None]:
    """Limit the Dask log of the worker processes started meanwhile to critical messages.

    Worker processes set up their logging from the environment they inherit,
    so a failed task then ends in the command's one-line error alone.
    """
    key = "DASK_LOGGING__DISTRIBUTED"
    if not quiet or key in os.environ:
        yield
        return
    os.environ[key] = "critical"
    try:
        yield
    finally:
        del os.environ[key]


_CONSOLE: logging.Handler | None = None
