"""K-fold selection's fold fits on processes: ``n_jobs`` against one after the other.

Run from the repository root::

    python bench/folds.py                                  # -> bench/results/folds.{md,json}
    python bench/folds.py --datasets letter --repeats 3    # a quick look

Protocol: split 0 of ``bench/defaults.py`` (70/30 stratified, standardised on
the training part), ``NonDecomposableClassifier(measure, random_state=0)``
with the defaults, where ``validation_folds="auto"`` takes 5 folds (the data
sets where it keeps one holdout are reported as such and not timed).  Timed:
``fit`` as a whole, wall clock, one BLAS thread per process, with
``n_jobs=None`` (the fold fits one after the other, in this process) and
``n_jobs=2`` (joblib's loky processes).  The first ``n_jobs=2`` fit of each
cell is reported apart (the run's first also starts the processes); the
medians are over ``--repeats`` fits with the processes running.  Plain ``LogisticRegression``
(``bench/defaults.py``'s) is timed on the same rows for scale.  Every
``n_jobs=2`` model is checked equal, bit for bit, to the in-process one.

The whole call a cluster user makes is timed too: the training rows written
as Parquet files of ``FILE_ROWS`` rows, ``nsdist.train(dir, measure=...,
client=c)`` on a fresh ``LocalCluster(n_workers=2, threads_per_worker=1)`` per
repeat (its start-up not timed: the user passes ``client=``), which reads the
files on the workers, holds the fold fits there in lockstep and returns the
estimator's model (checked bit for bit).
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # before numpy: one BLAS thread per process

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from defaults import MEASURES, MEASURE_TITLE, _atomic_write, _lr, split  # noqa: E402
from reliability import write_parquet  # noqa: E402

import nsdist  # noqa: E402
from nsdist import NonDecomposableClassifier  # noqa: E402

DATASETS = ("letter", "mammography", "hiva", "kddcup99", "w8a")
FILE_ROWS = 2000                  # rows per Parquet file of the whole-call timing


def _timed(make, X, y):
    t = time.perf_counter()
    est = make().fit(X, y)
    return time.perf_counter() - t, est


def run(name: str, measure: str, repeats: int) -> dict:
    """One (data set, measure) cell: the fit with ``n_jobs=None`` and ``n_jobs=2``, and plain LR."""
    X, y, _, _ = split(name, 0)

    def est(n_jobs):
        return lambda: NonDecomposableClassifier(measure, random_state=0, n_jobs=n_jobs, **MEASURES[measure])

    first, here = _timed(est(None), X, y)
    if here.folds_ is None:
        return {"data": name, "measure": measure, "folds": None, "seconds_one_holdout": first}
    cold, there = _timed(est(2), X, y)          # the run's first n_jobs=2 fit also starts the processes
    seq = [first] + [_timed(est(None), X, y)[0] for _ in range(repeats - 1)]
    par = [_timed(est(2), X, y) for _ in range(repeats)]
    same = all(np.array_equal(e.coef_, here.coef_) and np.array_equal(e.intercept_, here.intercept_)
               for e in [there] + [e for _, e in par])
    lr = [_timed(_lr, X, y)[0] for _ in range(repeats)]
    calls, same_call = whole_call(X, y, measure, repeats, here)
    return {"data": name, "measure": measure, "folds": here.folds_, "rows": int(X.shape[0]),
            "seconds_n_jobs_none": seq, "seconds_n_jobs_2": [t for t, _ in par], "seconds_n_jobs_2_first": cold,
            "seconds_lr": lr, "bit_identical": same, "seconds_train_call": calls, "train_call_identical": same_call}


def whole_call(X: np.ndarray, y: np.ndarray, measure: str, repeats: int, reference) -> tuple[list[float], bool]:
    """Seconds of ``nsdist.train`` on the rows as Parquet files, a fresh 2-worker cluster each repeat, and
    whether every model is ``reference``'s (the estimator's) bit for bit."""
    from distributed import Client, LocalCluster

    seconds, same = [], True
    with tempfile.TemporaryDirectory() as tmp:
        url = write_parquet(Path(tmp) / "data", X, y, FILE_ROWS)
        for _ in range(repeats):
            with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0") as cluster, \
                    Client(cluster) as client:
                t = time.perf_counter()
                model = nsdist.train(url, client=client, measure=measure, random_state=0, **MEASURES[measure])
                seconds.append(time.perf_counter() - t)
            same &= bool(np.array_equal(model.coef, reference.coef_.ravel())
                         and model.intercept == float(reference.intercept_[0]))
    return seconds, same


def report(rows: list[dict], meta: dict) -> str:
    lines = ["# K-fold selection's fold fits on processes (`n_jobs`)", "",
             f"Written by `python bench/folds.py` ({meta['repeats']} repeats, {meta['wall']:.0f} s wall, load "
             f"average {meta['load'][0]:.1f} at start / {meta['load'][1]:.1f} at the end on {os.cpu_count()} "
             "cores, shared). Protocol in the module docstring; every time in `folds.json`.", "",
             "| data | measure | folds | fit s, `n_jobs=None` (median) | fit s, `n_jobs=2` (median) | speed-up | "
             "`n_jobs=2` first fit s (the run's first starts the processes) | plain LR s (median) | same model bit for bit "
             "| `nsdist.train` s, whole call (median) | its model the estimator's |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        title = MEASURE_TITLE[r["measure"]]
        if r["folds"] is None:
            lines.append(f"| {r['data']} | {title} | one holdout (\"auto\" keeps it) | "
                         f"{r['seconds_one_holdout']:.2f} | – | – | – | – | – | – | – |")
            continue
        a, b = np.median(r["seconds_n_jobs_none"]), np.median(r["seconds_n_jobs_2"])
        lines.append(f"| {r['data']} | {title} | {r['folds']} | {a:.2f} | {b:.2f} | {a / b:.2f}x | "
                     f"{r['seconds_n_jobs_2_first']:.2f} | {np.median(r['seconds_lr']):.3f} | "
                     f"{'yes' if r['bit_identical'] else '**NO**'} | {np.median(r['seconds_train_call']):.2f} | "
                     f"{'yes' if r['train_call_identical'] else '**NO**'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: %(default)s)")
    parser.add_argument("--measures", default="prbep", help="comma-separated of pauc, prbep, f1 (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="timed fits per setting (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    t, load0 = time.perf_counter(), os.getloadavg()[0]
    rows = []
    for name in args.datasets.split(","):
        for measure in args.measures.split(","):
            rows.append(run(name, measure, args.repeats))
            print(json.dumps(rows[-1]), flush=True)
    meta = {"repeats": args.repeats, "wall": time.perf_counter() - t, "load": [load0, os.getloadavg()[0]]}
    _atomic_write(args.out / "folds.json", json.dumps({"meta": meta, "rows": rows}, indent=1).encode())
    text = report(rows, meta)
    _atomic_write(args.out / "folds.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()
