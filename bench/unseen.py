"""The defaults on data sets that no constant of nsdist was ever chosen or reported on.

Run from the repository root::

    python bench/unseen.py                   # 3 data sets x 10 splits -> bench/results/unseen.{md,json}
    python bench/unseen.py --splits 2 --out /tmp/unseen-x

``bench/defaults.py`` measures the defaults on the seven bundled data sets, the ones the project
develops against.  This script asks the question of the issue that introduced the in-fit
selection ("defaults that win on data nobody tuned them on") on public data sets outside that
set: the three imbalanced classification tasks of *An Introduction to Statistical Learning*
(James, Witten, Hastie, Tibshirani & Taylor), as the book poses them:

* **Caravan** -- ``Purchase`` (a caravan insurance policy) from 85 socio-demographic and
  product-ownership columns; 5,822 rows, 6.0% positives (the book's section 4.7.6).
* **Default** -- ``default`` on a credit card from ``student`` (one-hot), ``balance`` and
  ``income``; 10,000 rows, 3.3% positives (section 4.3).
* **Wage** -- ``wage > 250`` (thousand dollars a year; the book's ``I(wage > 250)`` of section
  7.8.1) from ``year``, ``age`` and the categorical columns one-hot; ``wage`` and ``logwage`` are
  left out; 3,000 rows, 2.6% positives.

Data: the CSV files inside the ``ISLP`` 0.6.0 wheel on PyPI (the book's own Python package),
fetched once with ``pip download --no-deps ISLP==0.6.0`` into ``CACHE`` (``bench/defaults.py``'s),
checked against ``WHEEL_SHA256`` and read with :mod:`zipfile`; the package itself is never
imported or installed.

Protocol: exactly ``bench/defaults.py``'s (its ``run_split``): 70/30 stratified splits (seed = split
index), ``StandardScaler`` fitted on the training part; the default
``NonDecomposableClassifier(measure, random_state=seed)`` (``beta=0.1`` for pAUC) against
``LogisticRegression`` plain and balanced, LR with a threshold tuned for F1
(``TunedThresholdClassifierCV``) and the cutting plane (time cap 20 s per fit).  The same
targets are marked: nsdist >= the best peer - 0.5 point, strictly best, fit time <= 10x plain LR.
One more column gives the same default always on one holdout (``validation_folds=1``; the
default's ``"auto"`` takes 5-fold selection where the holdout would hold fewer than 100
positives, as on all three sets here), the default's paired difference with it and its fit
seconds -- another setting of nsdist, not a peer.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # before numpy: one BLAS thread per process

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:                 # `python bench/unseen.py` puts bench/ first, not the root
    sys.path.insert(0, str(ROOT))

from bench import defaults  # noqa: E402

WHEEL = "islp-0.6.0-py3-none-any.whl"
WHEEL_SHA256 = "ca772cecca1747a2f84ee799a5503ddddbdf0e98f90c235494790c1d036c694b"
DATASETS = ("caravan", "default", "wage")


def wheel() -> Path:
    """The ISLP wheel in ``CACHE``, downloaded once from the package registry and checked by its SHA-256."""
    path = defaults.CACHE / WHEEL
    if not path.exists():
        defaults.CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=defaults.CACHE) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--only-binary=:all:", "ISLP==0.6.0", "-d", tmp], check=True)
            fetched = Path(tmp) / WHEEL
            if not fetched.exists():
                raise FileNotFoundError(f"pip download ISLP==0.6.0 did not give {WHEEL}: {os.listdir(tmp)}")
            os.replace(fetched, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise ValueError(f"{path}: SHA-256 {digest}, expected {WHEEL_SHA256}; delete the file to fetch it again")
    return path


def _csv(name: str):
    import pandas as pd

    with zipfile.ZipFile(wheel()) as z:
        return pd.read_csv(io.BytesIO(z.read(f"ISLP/data/{name}.csv")))


def _design(frame, label) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)``: numeric columns as they are, the others one-hot (every level), ``y`` +1 / -1."""
    import pandas as pd

    X = pd.get_dummies(frame, dtype=float).to_numpy(dtype=np.float64)
    return X, np.where(np.asarray(label), 1, -1)


def _caravan():
    f = _csv("Caravan")
    return _design(f.drop(columns="Purchase"), f["Purchase"] == "Yes")


def _default():
    f = _csv("Default")
    return _design(f.drop(columns="default"), f["default"] == "Yes")


def _wage():
    f = _csv("Wage")
    return _design(f.drop(columns=["wage", "logwage"]), f["wage"] > 250)


defaults.LOADERS.update(caravan=_caravan, default=_default, wage=_wage)


def _run_split(name: str, seed: int, measures: tuple[str, ...], cp_cap: float) -> dict:
    """``bench/defaults.py``'s split, from a module that has registered the loaders above."""
    return defaults.run_split(name, seed, measures, cp_cap)


def report(cells: dict, meta: dict, runs: dict) -> str:
    """``unseen.md``: the defaults table's columns that apply (no quoted or LibAUC figures exist here)."""
    t = defaults.targets(cells)
    n = t["cells"]
    data = "; ".join(f"{k}: {v['n']:,} rows x {v['d']} features, {v['pos_rate']:.2%} positives"
                     for k, v in meta["datasets"].items())
    head = ["data", "measure", "nsdist default", "LR", "LR bal", "LR F1-thr", "CP", "best peer",
            "paired difference (± s.e.)", "≥ best − 0.5", "strictly best", "selected most often",
            "default selected by", "nsdist `validation_folds=1`", "default − one holdout (± s.e.)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells.values():
        st = c["stat"]
        cp = (defaults._pm(st["cp"]) + (f" [cap {c['cp_cap_hit']}/{c['n_splits']}]" if c["cp_cap_hit"] else "")
              + (f" [w=0 {c['cp_zero']}/{c['n_splits']}]" if c["cp_zero"] else ""))
        top, k = c["selected"][0]
        pd_ = c["paired_diff_vs_best_measured"]
        rows.append("| " + " | ".join([
            c["data"], defaults.MEASURE_TITLE[c["measure"]], f"**{defaults._pm(st['nsdist'])}**",
            *(defaults._pm(st[m]) if m in st else "–" for m in ("lr", "lr_bal", "lr_thr")), cp,
            f"{defaults.LABEL[c['best_peer']]} {c['best_peer_value']:.1f} ({c['diff_vs_best']:+.2f})",
            f"{pd_['mean']:+.1f} ± {pd_['std'] / np.sqrt(pd_['n']):.1f}",
            "yes" if c["meets_margin"] else "**NO**", "yes" if c["strictly_best"] else "no",
            f"{top} ({k}/{c['n_splits']})", defaults.selection_mode(runs[c["data"]], c["measure"]),
            *defaults.holdout_cells(runs[c["data"]], c["measure"])]) + " |")
    times = ["| data | LR s (median) | nsdist s: pAUC(0,0.1) / PRBEP / F1 | ratio nsdist / LR | "
             "`validation_folds=1` s: pAUC(0,0.1) / PRBEP / F1 |", "|---|---|---|---|---|"]
    for name in meta["datasets"]:
        cs = [c for c in cells.values() if c["data"] == name]
        times.append(f"| {name} | {cs[0]['lr_seconds']:.3f} | "
                     + " / ".join(f"{c['nsdist_seconds']:.2f}" for c in cs) + " | "
                     + " / ".join(f"{c['time_ratio']:.1f}" for c in cs) + " | "
                     + " / ".join(f"{np.median([sp['by_measure'][c['measure']]['nsdist_holdout']['seconds'] for sp in runs[name]]):.2f}"
                                  for c in cs) + " |")
    return (
        "# The defaults on data sets they were never tuned or reported on\n\n"
        f"Written by `{' '.join(['python bench/unseen.py', *meta['argv']])}` ({meta['n_splits']} splits, "
        f"{meta['wall_seconds']:.0f} s wall, {meta['jobs']} process(es), load average {meta['loadavg_start']:.1f} "
        f"at start / {meta['loadavg_end']:.1f} at the end on {meta['cpus']} cores). Protocol and data in the module "
        "docstring of `bench/unseen.py`: the imbalanced tasks of *An Introduction to Statistical Learning* from the "
        "CSV files of the `ISLP` 0.6.0 wheel, split, scaled and scored exactly as `bench/defaults.py` does; every "
        "split in `unseen.json`.\n\n"
        f"Data: {data}.\n\n"
        "Cells: test measure in percent, mean ± std over the splits; nothing is chosen on the test part. "
        "Columns as in `defaults.md` (CP: the library's cutting plane, its returned iterate, 20 s cap per fit; "
        "`[w=0 k/n]`: that iterate is w = 0, constant scores, in k splits). Paired difference: nsdist minus the best "
        "peer split by split, mean ± its standard error (std / sqrt(splits)) -- how much of a gap the splits "
        "resolve. The last three columns: how the default selected (`validation_folds=\"auto\"`: 5 folds where a holdout "
        "would hold fewer than 100 positives, docs/solvers.md §Selection), and the same default always on one "
        "holdout (`validation_folds=1`) -- another setting of the library, not a peer.\n\n"
        + "\n".join(rows) + "\n\n"
        f"**≥ best peer − 0.5: {t['margin']['met']}/{n}**; **strictly best: {t['strictly_best']['count']}/{n}**; "
        f"**fit time ≤ 10× plain LR on every set: {'met' if t['time']['target_met'] else 'MISSED'}**"
        + (f" (missed on {', '.join(t['time']['missed'])})" if t["time"]["missed"] else "") + ".\n\n"
        f"With `validation_folds=1` in the default's place (the same peers): ≥ best peer − 0.5 on "
        f"{sum(c['stat']['nsdist_holdout']['mean'] >= c['best_peer_value'] - defaults.MARGIN for c in cells.values())}/{n}, "
        f"strictly best on {sum(c['stat']['nsdist_holdout']['mean'] > c['best_peer_value'] for c in cells.values())}/{n}.\n\n"
        "## Fit seconds (median over splits)\n\n" + "\n".join(times) + "\n\n"
        "## Where a target is missed, and anything odd\n\n" + defaults.notes(cells) +
        "\n## Reproduce\n\n```\n.venv/bin/python bench/unseen.py            # fetches the ISLP wheel once (pip)\n"
        ".venv/bin/python bench/unseen.py --replot   # rebuild this file from unseen.json\n```\n"
    )


def publish(out: Path, meta: dict, runs: dict) -> dict:
    """``unseen.json`` (runs, summary, targets) and ``unseen.md``, both written atomically; returns the cells."""
    cells = defaults.summarise(runs)
    payload = {"meta": meta, "summary": cells, "targets": defaults.targets(cells) if cells else None, "runs": runs}
    defaults._atomic_write(out / "unseen.json", json.dumps(defaults._rounded(payload), indent=1).encode())
    if cells:
        defaults._atomic_write(out / "unseen.md", report(cells, meta, runs).encode())
    return cells


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", help=f"comma list of {', '.join(DATASETS)} (default: all)")
    parser.add_argument("--splits", type=int, default=10,
                        help="number of splits, seeds 0..N-1 (default 10: the sets are small, a test part of Wage "
                             "holds 24 positives)")
    parser.add_argument("--cp-cap", type=float, default=defaults.CP_CAP,
                        help=f"CP time cap per fit, s (default {defaults.CP_CAP:g})")
    parser.add_argument("--jobs", type=int, default=2, help="parallel processes, each running whole splits")
    parser.add_argument("--out", type=Path, default=defaults.RESULTS, help=f"output folder (default {defaults.RESULTS})")
    parser.add_argument("--replot", action="store_true", help="rebuild unseen.md from OUT/unseen.json")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    if args.replot:
        payload = json.loads((args.out / "unseen.json").read_text())
        publish(args.out, payload["meta"], payload["runs"])
        return
    datasets = tuple(args.datasets.split(",")) if args.datasets else DATASETS
    if unknown := [d for d in datasets if d not in DATASETS]:
        parser.error(f"unknown data set: {', '.join(unknown)}")
    defaults._paper().check_cp_replica()
    for name in datasets:                     # parse (or read the cache) once, before the workers fork
        X, y = defaults.load(name)
        print(f"{name}: {X.shape[0]:,} x {X.shape[1]}, {np.mean(y > 0):.2%} positives", file=sys.stderr, flush=True)
    measures = tuple(defaults.MEASURES)
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    meta = {"argv": argv, "n_splits": args.splits, "jobs": args.jobs, "cp_cap": args.cp_cap,
            "cpus": os.cpu_count(), "loadavg_start": load0, "wheel_sha256": WHEEL_SHA256}
    results: dict = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(_run_split, n, s, measures, args.cp_cap): (n, s)
                   for n in datasets for s in range(args.splits)}
        for fut in as_completed(futures):
            n, s = futures[fut]
            results[n, s] = fut.result()
            print(f"{n} split {s}: {results[n, s]['wall']:.1f} s ({time.perf_counter() - t0:.0f} s elapsed)",
                  file=sys.stderr, flush=True)
    runs = {n: [results[n, s] for s in range(args.splits)] for n in datasets}
    meta.update(wall_seconds=time.perf_counter() - t0, loadavg_end=os.getloadavg()[0],
                datasets={n: {"n": v[0]["n_train"] + v[0]["n_test"], "d": v[0]["d"], "pos_rate": v[0]["pos_rate"]}
                          for n, v in runs.items()})
    publish(args.out, meta, runs)
    print((args.out / "unseen.md").read_text())


if __name__ == "__main__":
    main()
