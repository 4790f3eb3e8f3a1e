"""The ``nsdist`` command line: ingest, train, evaluate, predict, retrain, bench.

Every subcommand exits 0 on success and, on any error, non-zero with a
one-line reason on stderr (``--debug`` shows the traceback instead):
1 for a failed run, 2 for a bad command line or job file, 130 when
interrupted (Ctrl-C), 143 when terminated (SIGTERM, :mod:`nsdist._signals`: it
unwinds as Ctrl-C does) (and ``retrain`` 75 when the model registry is locked, see
:mod:`nsdist.retrain`).  This module parses arguments, validates them and
reports; what the commands run lives in :mod:`nsdist.run`
(:func:`~nsdist.run.run_train`, :func:`~nsdist.run.run_predict`).  It imports
neither Dask nor the solvers until a command needs them, so ``--help`` is fast.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from . import __version__
from ._cli_messages import cli_names, one_line, speak_cli
from ._signals import TERMINATED_STATUS, Terminated, terminate_as_interrupt

if TYPE_CHECKING:
    from .jobs import TrainJob

__all__ = ["main", "build_parser", "train_job", "TRAIN_OPTIONS"]

log = logging.getLogger("nsdist")

SCHEDULER_HELP = ("address of a running Dask scheduler (tcp://host:8786); default: $DASK_SCHEDULER_ADDRESS, "
                  "else an embedded LocalCluster starts, listening on 127.0.0.1 only, and its dashboard link is printed")
NO_PROGRESS_HELP = "no progress bar (it is off when stderr is not a terminal)"
CSV_POSITION = "a CSV's columns: a name, or a 0-based position (col0, col1, ... without a header line)"
DROP_HELP = "a column that is neither a feature nor the label (an id, a timestamp): left out, never read (repeatable)"

#: ``nsdist train`` shorthands: (option, job key, metavar, help); each is a ``--set KEY=VALUE``
TRAIN_OPTIONS: list[tuple[str, str, str, str]] = [
    ("--measure", "measure.name", "NAME", "measure to optimise: pauc, auc, prec@k, prbep, f1"),
    ("--beta", "measure.beta", "B", "pAUC(0, B) for --measure pauc, B in (0, 1]"),
    ("--k", "measure.k", "K", "Prec@k: a number of rows >= 1 or a fraction in (0, 1]"),
    ("--threshold", "measure.threshold", "T", "score above which a row is labelled positive (F1)"),
    ("--solver", "solver.name", "NAME", "solver: 1pmb, 2pmb, ftrl, psg, cp"),
    ("--eta", "solver.eta", "ETA", "step size (default: chosen in the fit among five decades)"),
    ("--buffer-size", "solver.buffer_size", "N", "rows per epoch buffer (2PMB: reservoir size)"),
    ("--n-passes", "solver.n_passes", "N", "passes over the data (default: early stopping on the validation measure)"),
    ("--validation-fraction", "solver.validation_fraction", "F",
     "fraction of each class held out to choose what is unset (default 0.1; 0: none)"),
    ("--n-chains", "cluster.n_chains", "K",
     "data-parallel mode: K chains per round, their models averaged (default 1: the exact sequence); "
     "faster where a step costs more than a load (2PMB, many candidates), not where loads bound the job"),
    ("--random-state", "solver.random_state", "SEED", "seed of the stream order"),
    ("--label-column", "dataset.label_column", "COL", "label column of the dataset"),
    ("--positive", "dataset.positive", "VALUE",
     "label value of the positive class as stored (class names: --positive fraud); every other label is "
     "negative (default: labels are 1/-1, 1/0 or true/false)"),
    ("--test", "dataset.test_url", "DATASET", "Parquet dataset to evaluate on (never seen by the fit)"),
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
                                      "--format csv --label-column 0 --positive N --rows-per-partition 1000 "
                                      "--overwrite",
                                      "nsdist train conf/letter-pauc.yaml",
                                      "nsdist evaluate runs/letter-pauc runs/letter/data",
                                      "nsdist train --help                # every command explains its options"))
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
                                        "runs/mammography/data --label-column 6 --positive 1",
                                        "nsdist ingest transactions/ runs/tx/data --positive fraud --categorical "
                                        "country --feature-column amount --feature-column country"))
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
                   help=f"a CSV or Parquet column to one-hot encode (repeatable); {CSV_POSITION}")
    p.add_argument("--feature-column", action="append", metavar="COL",
                   help="Parquet: a feature column (repeatable, in order; default: every column but the label)")
    p.add_argument("--drop", action="append", default=[], metavar="COL",
                   help=f"CSV or Parquet: {DROP_HELP}; {CSV_POSITION}")
    p.add_argument("--categories-of", metavar="DATASET",
                   help="CSV or Parquet: one-hot encode the columns a dataset ingested before encoded, with its "
                   "categories (a value it never saw: all zeros), so that a test set gets the training set's features")
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
    p.add_argument("--layout", choices=("auto", "dense", "sparse"), default="auto",
                   help="dense: one column per feature; sparse: CSR-style 'indices'/'values' list columns "
                   "(the dimension in the metadata); auto (default): sparse when at most half the size of dense")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)
    _add_storage_options(p)
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(run=_cmd_ingest)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model from a job file or from options",
                       description="Train a linear model on a Parquet dataset, streaming its partitions "
                       "through Dask. JOB is a YAML job file (see conf/ and the README's job-file reference); "
                       "or give a DATASET and options. Options below override the job file's keys; --set "
                       "overrides any key (the value is read as YAML).\n\n"
                       "Data with few positives (a 10% holdout would hold fewer than 100) and at most "
                       "solver.validation_max_rows rows is read onto the driver and selected by 5-fold selection, "
                       "its fold fits held on the workers in lockstep (solver.validation_folds: auto; 1 always "
                       "streams one holdout).\n\n"
                       "The run directory receives model/, job.yaml, metrics.json, learning_curve.png, run.log "
                       "and checkpoint.json (a streamed run).",
                       epilog=_examples("nsdist train conf/letter-pauc.yaml",
                                        "nsdist train conf/letter-pauc.yaml --set solver.eta=2 "
                                        "--set measure.beta=0.05",
                                        "nsdist train runs/letter/data --measure pauc --beta 0.1 --solver 2pmb "
                                        "--holdout 0.25 --out runs/x",
                                        "nsdist train payments/ --label-column status --positive fraud "
                                        "--measure prbep   # Parquet as you have it",
                                        "nsdist train runs/x/job.yaml --resume        # continue a killed run",
                                        "nsdist train conf/letter-pauc.yaml --scheduler tcp://10.0.0.5:8786"))
    p.add_argument("job", metavar="JOB|DATASET", help="a job file (.yaml) or a Parquet dataset URL")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a job key, e.g. solver.eta=2 (repeatable)")
    for option, key, metavar, text in TRAIN_OPTIONS:
        p.add_argument(option, metavar=metavar, dest=key, help=f"{text} [{key}]")
    p.add_argument("--drop", action="append", metavar="COL", dest="dataset.drop", help=f"{DROP_HELP} [dataset.drop]")
    p.add_argument("--resume", action="store_true",
                   help="continue a killed streamed run from the checkpoint in the run directory (a job that fits "
                        "in memory -- K-fold selection, ftrl, psg, cp -- writes none: run it again instead)")
    _add_storage_options(p)
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(run=_cmd_train)


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="every measure of a model on a Parquet dataset, an svmlight or a CSV file",
                       description="Compute pAUC, AUC, Prec@k, PRBEP and F1 of a model on a Parquet dataset, "
                       "exactly and out of core, or on an svmlight/LIBSVM file or a CSV file of raw rows (scored "
                       "in this process, chunk by chunk; a CSV's columns as nsdist predict reads them: columns "
                       "one-hot encoded at ingest are encoded as ingest did); print them and write them as JSON. "
                       "The dataset's features must match the model's.",
                       epilog=_examples("nsdist evaluate runs/letter-pauc/model runs/letter/data",
                                        "nsdist evaluate runs/letter-pauc runs/letter/data --out eval.json",
                                        "nsdist evaluate runs/a9a a9a.t.xz",
                                        "nsdist evaluate runs/kdd test.csv.gz --label-column col41 --positive "
                                        "guess_passwd."))
    p.add_argument("model", help="model directory (or a run directory holding model/)")
    p.add_argument("dataset", help="Parquet dataset URL, an svmlight file or a .csv file (.gz/.bz2/.xz ok)")
    p.add_argument("--label-column", default="label", metavar="COL",
                   help=f"label column (default: label); {CSV_POSITION}")
    p.add_argument("--drop", action="append", default=[], metavar="COL", help=DROP_HELP)
    p.add_argument("--positive", action="append", metavar="VALUE",
                   help="a label value of the positive class as stored (class names: --positive fraud; "
                        "repeatable); every other label is negative (default: labels are 1/-1, 1/0 or true/false)")
    p.add_argument("--threshold", type=float, default=0.0, metavar="T",
                   help="score above which a row is labelled positive, for F1 (default 0)")
    p.add_argument("--format", choices=("svmlight", "csv", "parquet"),
                   help="DATASET's format (default: from its name, as ingest tells it: .csv is CSV, a name "
                   "without an extension svmlight, a directory Parquet)")
    p.add_argument("--out", metavar="FILE", help="JSON output (default: evaluation.json next to the model)")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)
    _add_storage_options(p)
    p.set_defaults(run=_cmd_evaluate)


def _add_predict(sub) -> None:
    p = sub.add_parser("predict", help="score a Parquet dataset, a CSV or an svmlight file with a model",
                       description="Write the score and the predicted label (+1/-1) of every row of INPUT to OUTPUT: a"
                       " .parquet or .csv file (scored in this process, written atomically), or a directory (each "
                       "Parquet file of INPUT scored on the Dask cluster into OUTPUT/part-NNNNN.parquet, in sorted "
                       "file order, published whole with its manifest _nsdist.json; a directory of scores there is "
                       "replaced, anything else refused). INPUT's columns are the model's features, the label column, "
                       "any --keep columns (copied to OUTPUT) and any --drop columns (left out); any other column is "
                       "refused, naming it (a column added upstream is never taken for a feature); a model of "
                       "one-hot columns (ingest --categorical COL: features COL=value) takes the raw column COL, "
                       "encoded as ingest did (an unseen value sets none of its features; a warning counts such rows)."
                       " Sparse input (svmlight, or Parquet in the sparse layout) is scored as CSR rows.",
                       epilog=_examples("nsdist predict runs/letter-pauc runs/letter/data scores.parquet",
                                        "nsdist predict runs/x/model new.csv scores.csv --keep id",
                                        "nsdist predict runs/x payments/ scores.parquet --keep txn --drop ts",
                                        "nsdist predict runs/x s3://b/day=1201 s3://b/scores/day=1201 --keep id"))
    p.add_argument("model", help="model directory (or a run directory holding model/)")
    p.add_argument("input", help="Parquet file, dataset directory or glob, a CSV file (a header line is detected "
                   "as ingest detects it; without one the columns are col0, col1, ...), or an svmlight file "
                   "(.gz/.bz2/.xz ok; feature j is index j+1)")
    p.add_argument("output", help="a .parquet or .csv file (scored here), or a directory (scored on the cluster)")
    p.add_argument("--label-column", default="label", metavar="COL",
                   help=f"label column: not a feature; copied to the output when present (default: label); "
                   f"{CSV_POSITION}")
    p.add_argument("--keep", action="append", default=[], metavar="COL",
                   help="copy this column (an id ...) to the output; not a feature (repeatable)")
    p.add_argument("--drop", action="append", default=[], metavar="COL", help=DROP_HELP)
    p.add_argument("--threshold", type=float, default=0.0, metavar="T",
                   help="predict +1 where the score is above T (default 0)")
    p.add_argument("--format", choices=("svmlight", "csv", "parquet"),
                   help="INPUT's format (default: from its name, as ingest tells it: .csv is CSV, a name without "
                   "an extension svmlight, a directory Parquet)")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP + " (a directory OUTPUT only)")
    _add_storage_options(p)
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(run=_cmd_predict)


def _add_retrain(sub) -> None:
    p = sub.add_parser("retrain", help="retrain on newly arrived partitions; promote the model unless worse",
                       description="Scheduled retraining (nsdist retrain JOB): new partitions in, a better "
                       "model out, or none.\n\nOne run lists the "
                       "dataset's partitions, trains a candidate on the new ones, scores it and the current "
                       "model on the newest new partition, and records a new version in the model registry "
                       "(output.dir), promoted or refused. Exit 0 (promoted, refused, no new data), 75 when "
                       "another run holds the registry's lock, 1 on an error, 2 for a bad job file.",
                       epilog=_examples("nsdist retrain conf/retrain.yaml",
                                        "nsdist retrain conf/retrain.yaml --scheduler tcp://10.0.0.5:8786 "
                                        "--summary runs/retrain-summary.json"))
    add_retrain_arguments(p)
    p.set_defaults(run=_cmd_retrain)


def add_retrain_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nsdist retrain`` (also ``python -m pipelines.retrain``)."""
    parser.add_argument("job", metavar="JOB", help="retrain job file (YAML; see conf/retrain.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a job key, e.g. retrain.tolerance=0.01 (repeatable)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="address of a running Dask scheduler (tcp://host:8786) [cluster.scheduler]")
    parser.add_argument("--summary", metavar="FILE",
                        help="also write the JSON summary here (path or fsspec URL), atomically")
    _add_storage_options(parser)


STORAGE_HELP = ("fsspec options for every URL (credentials, endpoint ...): JSON or YAML text, or @FILE holding it, "
                "e.g. '{\"key\": ..., \"secret\": ..., \"client_kwargs\": {\"endpoint_url\": \"http://...\"}}'; "
                "merged over the job's storage_options; default: $NSDIST_STORAGE_OPTIONS. Secrets are never "
                "written to job.yaml, logs or metrics. AWS_* variables and fsspec's configuration also apply "
                "(see docs/object-storage.md)")


def _add_storage_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-options", metavar="JSON|@FILE", default=os.environ.get("NSDIST_STORAGE_OPTIONS"),
                   help=STORAGE_HELP)


def _storage(args) -> dict:
    """The parsed ``--storage-options`` (``{}`` without)."""
    from .jobs import parse_storage_options

    return parse_storage_options(getattr(args, "storage_options", None))


def _cmd_retrain(args) -> int:
    from . import retrain

    return retrain.run(args)


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
    from .jobs import IngestSpec, validate
    from .progress import IngestBar
    from .run import announce, categories_of, check_ingest

    spec = validate(IngestSpec, {
        "src": args.src, "format": args.format, "positive": args.positive, "negative": args.negative,
        "label_column": args.label_column,          # a CSV reads "3" as a position unless a column is named so
        "categorical": args.categorical, "header": args.header, "n_features": args.n_features,
        "feature_columns": args.feature_column, "drop": args.drop,
        "rows_per_partition": args.rows_per_partition, "shuffle": not args.no_shuffle,
        "random_state": args.random_state, "dtype": args.dtype, "layout": args.layout}, "command line")
    options = {**spec.options(), **categories_of(args.categories_of, args.categorical, _storage(args) or None)}
    check_ingest(spec.src, options, args.dst, overwrite=args.overwrite, storage_options=_storage(args) or None)
    with connect(args.scheduler, processes=False, n_workers=1, threads_per_worker=min(4, os.cpu_count() or 1),
                 quiet=True) as client, IngestBar(enabled=False if args.no_progress else None) as bar:
        announce(client)      # like nsdist.ingest: in-process workers unless --scheduler
        ds = api.ingest(spec.src, args.dst, **options, overwrite=args.overwrite, client=client,
                        storage_options=_storage(args) or None, on_progress=bar)
    print(f"{args.dst}: {plural(ds.num_rows, 'row')} ({ds.metadata.get('positives')} positive), "
          f"{plural(ds.n_features, 'feature')}, {plural(len(ds.partitions), 'partition')}")
    return 0


def plural(n: int, noun: str) -> str:
    """``1 partition``, ``20 partitions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _cmd_train(args) -> int:
    job = train_job(args)            # a bad job exits 2 before the training code is even imported
    from .report import measures_table, name_list
    from .run import run_train, selection_summary

    result = run_train(job, resume=args.resume, progress=not args.no_progress)
    evaluation = result.metrics["evaluation"]
    print(measures_table({f"nsdist {result.model.params['solver']}": evaluation}))
    print(f"\n{evaluation['data']} data: {plural(evaluation['n_rows'], 'row')}, "
          f"{plural(evaluation['n_positives'], 'positive')}; trained in {result.metrics['training']['seconds']:.1f} s")
    inferred = result.metrics["dataset"]["inferred_features"]
    if inferred:
        but = "the label and the dropped ones" if job.dataset.drop else "the label"
        print(f"features: {name_list(inferred)} (every column but {but}; --drop COL leaves one out)")
    if "selection" in result.metrics:
        sel = result.metrics["selection"]
        print(f"selected {selection_summary(sel['candidates'], sel.get('validation_positives'))}")
    print(f"run directory: {job.output.dir} (model/, metrics.json, learning_curve.png, run.log)")
    return 0


def train_job(args) -> TrainJob:
    """The job of an ``nsdist train`` command line: a job file or a dataset, plus overrides.

    Option values are passed on as strings (quoted, so that a path is never
    read as YAML); the schema converts them to numbers where a key wants one.
    """
    from .jobs import apply_overrides, default_run_dir, job_from_dict, load_job, parse_overrides, with_storage_options

    options = [f"{key}={json.dumps(value)}" for key in [k for _, k, _, _ in TRAIN_OPTIONS] + ["dataset.drop"]
               if (value := getattr(args, key)) is not None]
    overrides = options + args.overrides
    storage = _storage(args)
    if args.job.endswith((".yaml", ".yml")):
        return load_job(args.job, overrides, storage)
    name = os.path.basename(args.job.rstrip("/")) or "train"
    raw = {"dataset": {"url": args.job}, "output": {"dir": default_run_dir(name)}}
    return job_from_dict(with_storage_options(apply_overrides(raw, parse_overrides(overrides)), storage),
                         "command line")


def _cmd_evaluate(args) -> int:
    from .report import measures_table
    from .run import run_evaluate

    model_dir, result, out = run_evaluate(args.model, args.dataset, label_column=args.label_column,
                                          drop=args.drop, positive=args.positive, threshold=args.threshold,
                                          format=args.format, storage_options=_storage(args) or None,
                                          scheduler=args.scheduler, out=args.out)
    print(measures_table({model_dir: result}))
    print(f"\n{plural(result['n_rows'], 'row')}, {plural(result['n_positives'], 'positive')}; written to {out}")
    return 0


def _cmd_predict(args) -> int:
    from .run import run_predict

    r = run_predict(args.model, args.input, args.output, label_column=args.label_column, keep=args.keep,
                    drop=args.drop, threshold=args.threshold, storage_options=_storage(args) or None,
                    format=args.format, scheduler=args.scheduler, progress=not args.no_progress)
    where = "" if r["files"] is None else \
        f" on the cluster into {plural(r['files'], 'part file')} in {r['seconds']:.1f} s"
    print(f"{plural(r['rows'], 'row')} scored{where}; written to {args.output}")
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


# -------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nsdist`` command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose or args.debug
    _setup_logging(verbose)
    from .jobs import JobError

    try:
        with terminate_as_interrupt(), _quiet_dask_workers(not verbose), _warnings_as_lines(args.command, verbose):
            return args.run(args)
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"nsdist: {how}; nothing half-written is left (a streamed training run continues with --resume; one "
              "that fits in memory, such as K-fold selection, is run again)", file=sys.stderr)
        return TERMINATED_STATUS if isinstance(exc, Terminated) else 130
    except JobError as exc:
        if args.debug:
            raise
        for problem in exc.problems:
            print(f"nsdist {args.command}: {problem}", file=sys.stderr)
        return 2
    except Exception as exc:  # every error ends in one line, unless --debug
        if args.debug:
            raise
        from .data.fs import scrub

        text = speak_cli(one_line(exc), cli_names(parser, args.command))
        print(scrub(f"nsdist {args.command}: error: {text}"), file=sys.stderr)
        return 1


@contextlib.contextmanager
def _warnings_as_lines(command: str, verbose: bool) -> Iterator[None]:
    """Python warnings as one line each (``nsdist train: warning: ...``), not Python's two with a source line."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        where = f" ({category.__name__} at {filename}:{lineno})" if verbose else ""
        print(f"nsdist {command}: warning: {text}{where}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


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
