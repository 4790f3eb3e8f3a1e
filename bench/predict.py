"""Scoring a dataset: ``nsdist.predict`` into one file in this process, and into a directory on the cluster.

The files are ``bench/scale.py``'s (plain Parquet as users have it: ``--files`` files of ``--rows-per-file``
rows x ``--features`` float32 columns and an int8 ``label``).  Per repeat, in this order:

* the bare scan on a fresh ``LocalCluster(n_workers=2, threads_per_worker=1)`` (``bench/scale.py``'s: every
  file read and made numpy arrays on the workers): what reading costs on the cluster;
* **one file, here**: ``nsdist.predict(model, dir, "scores.parquet")``, the whole call (what ``nsdist predict``
  without a directory output did before: one process, batch by batch);
* **directory, cluster**: a fresh cluster of the same shape, then ``nsdist.predict(model, dir, "scores/",
  client=c)``, the whole call (the input's columns checked on the driver, the model scattered, one task per
  file writing its part, the manifest, the rename): what a user waits for once the cluster is up.

The model is a fixed ``LinearModel`` of the files' features (scoring does not depend on how it was trained).
Both outputs are checked to hold the same table.  Medians of ``--repeats`` runs; ratios are taken within each
repeat.  Writes ``bench/results/predict.md`` and ``predict.json``.

Run: ``python bench/predict.py`` (``--quick``: 4 small files, 1 repeat, nothing written).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:                 # `python bench/predict.py` puts bench/ first, not the root
    sys.path.insert(0, str(ROOT))

from bench.scale import fresh, make_dataset, scan  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _table_of_dir(path: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(path.glob("part-*.parquet"))])


def run(args) -> dict:
    import nsdist
    from nsdist.model import LinearModel

    data = make_dataset(Path(args.workdir) / f"plain-{args.files}x{args.rows_per_file}x{args.features}",
                        args.files, args.rows_per_file, args.features, 0.007, 0)
    names = [f"f{j}" for j in range(args.features)]
    model = LinearModel(np.random.default_rng(0).normal(size=args.features), 0.1, "pauc", feature_names=names)
    rows_total = args.files * args.rows_per_file
    out = Path(args.workdir) / "predict-out"
    runs = []
    for rep in range(args.repeats):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        lc, client = fresh(2, 1, args.memory_limit)
        try:
            scanned = scan(client, data)
        finally:
            client.close()
            lc.close()
        t0 = time.perf_counter()
        here = nsdist.predict(model, str(data), str(out / "scores.parquet"))
        t_here = time.perf_counter() - t0
        lc, client = fresh(2, 1, args.memory_limit)
        try:
            t0 = time.perf_counter()
            there = nsdist.predict(model, str(data), str(out / "scores"), client=client)
            t_there = time.perf_counter() - t0
            t0 = time.perf_counter()             # again on the same workers: a long-running cluster's call
            nsdist.predict(model, str(data), str(out / "scores"), client=client)
            t_warm = time.perf_counter() - t0
        finally:
            client.close()
            lc.close()
        same = _table_of_dir(out / "scores").equals(pq.read_table(out / "scores.parquet"))
        assert here["rows"] == there["rows"] == rows_total and same
        run = {"repeat": rep, "scan_seconds": scanned["seconds"], "one_file_seconds": t_here,
               "directory_seconds": t_there, "directory_warm_seconds": t_warm, "same_table": same,
               "loadavg_1min": os.getloadavg()[0], "speedup_directory_vs_one_file": t_here / t_there,
               "speedup_warm_directory_vs_one_file": t_here / t_warm, "directory_vs_scan": scanned["seconds"] / t_there}
        runs.append(run)
        print(json.dumps(run), flush=True)
    med = lambda key: statistics.median(r[key] for r in runs)   # noqa: E731
    return {"files": args.files, "rows_per_file": args.rows_per_file, "features": args.features,
            "rows": rows_total, "bytes_on_disk": sum(p.stat().st_size for p in data.glob("part-*.parquet")),
            "runs": runs, "median": {k: med(k) for k in ("scan_seconds", "one_file_seconds", "directory_seconds",
                                                          "directory_warm_seconds", "speedup_directory_vs_one_file",
                                                          "speedup_warm_directory_vs_one_file", "directory_vs_scan")}}


def report(r: dict, command: str) -> str:
    m = r["median"]
    rows = r["rows"]
    lines = [
        "# Scoring a dataset: one file here, or a directory on the cluster (bench/predict.py)", "",
        f"Written by `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Protocol in the module "
        "docstring of `bench/predict.py`; every run in `predict.json`.", "",
        f"Data: {r['files']} plain Parquet files x {r['rows_per_file']:,} rows x {r['features']} float32 columns + "
        f"int8 label ({rows:,} rows, {r['bytes_on_disk'] / 2**20:,.0f} MiB on disk, snappy). Cluster: a fresh "
        "`LocalCluster(n_workers=2, threads_per_worker=1)` on 2 shared cores; medians of "
        f"{len(r['runs'])} runs.", "",
        "| what | seconds (median) | rows/s | per run (s) |", "|---|---:|---:|---|",
    ]
    for key, label in (("scan_seconds", "bare scan on the cluster (read + numpy)"),
                       ("one_file_seconds", "`nsdist.predict(model, dir, 'scores.parquet')`: one process"),
                       ("directory_seconds", "`nsdist.predict(model, dir, 'scores/', client=c)`: fresh cluster"),
                       ("directory_warm_seconds", "the same call again on the same workers (a long-running cluster)")):
        per = " / ".join(f"{run[key]:.2f}" for run in r["runs"])
        lines.append(f"| {label} | {m[key]:.2f} | {rows / m[key]:,.0f} | {per} |")
    lines += ["", f"The directory on a fresh cluster runs at **{m['speedup_directory_vs_one_file']:.2f}x** the rows/s "
              f"of the one file here ({m['speedup_warm_directory_vs_one_file']:.2f}x on warm workers), and at "
              f"{m['directory_vs_scan']:.2f}x the bare scan's (medians of the per-run ratios; the scan only reads, "
              "scoring also converts, checks, multiplies and writes). On 2 cores one process already keeps both "
              "busy (Arrow decodes on its own threads), so the cluster only adds its processes' costs; what it "
              "buys is the other machines' cores and disks or network, which this machine does not have. The two "
              f"outputs hold the same table in every run: {all(run['same_table'] for run in r['runs'])}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/nsdist-scale", help="where the synthetic Parquet goes (shared "
                    "with bench/scale.py)")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--rows-per-file", type=int, default=125_000)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--memory-limit", default="4GiB", help="per-worker memory limit")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="4 files of 20,000 rows, 1 repeat, nothing written")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.rows_per_file, args.repeats = 4, 20_000, 1
    result = run(args)
    if args.quick:
        return 0
    from nsdist.data.fs import atomic_write_bytes

    command = "python bench/predict.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    atomic_write_bytes(str(RESULTS / "predict.json"), json.dumps(result, indent=2).encode())
    atomic_write_bytes(str(RESULTS / "predict.md"), report(result, command).encode())
    print(report(result, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
