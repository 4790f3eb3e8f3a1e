"""Whole-call scale benchmarks of the Dask engine (issue 11).

What a user waits for is the whole call, ``nsdist.train(...)`` to the model, so
every nsdist number here is the wall time of the whole call on a *fresh*
``LocalCluster`` (cluster start-up excluded, as the user passes ``client=``),
measured in the same run as a bare pyarrow scan of the same files on a fresh
cluster of the same shape; medians of ``--repeats`` runs.

Run ``python bench/scale.py`` (all parts) or ``--parts main,tpw`` etc.; a small
smoke run: ``python bench/scale.py --quick``.  Writes ``bench/results/scale.md``
and ``scale.json`` (``--out``).  ``--merge`` keeps the parts not rerun; a main
run of one cluster shape keeps the other shape's tables, marked as from their
own earlier run.

Parts
-----
main     Plain Parquet files as users have them (no ingest): ``--files`` files of
         ``--rows-per-file`` rows x ``--features`` float32 columns + an int8
         ``label`` (0/1, ``--pos-rate`` positives).  Per repeat, each on a fresh
         ``LocalCluster(n_workers=2, threads_per_worker=1)``: the scan (read +
         convert to numpy on 2 processes), nsdist explicit candidate (1PMB pAUC,
         ``eta``, 1 pass and 10 passes), nsdist default configuration (holdout,
         candidate population, early stopping), dask-ml
         ``Incremental(SGDClassifier(loss="hinge"))`` (whole job: read_parquet ..
         fitted).  Phase breakdown, model save, per-process peak RSS (VmHWM).
tpw      The same jobs (scan, explicit 1 / 10 pass, default) on
         ``threads_per_worker=2`` clusters, interleaved with the main runs.
sched    Task stream of the explicit 1-pass job: per-partition load and step
         compute, scheduling latency and gaps; the scheduler's task rate
         (empty tasks); the data-parallel mix cost.
rss      Peak RSS per worker at 10^6, 2x10^6 and 10^7 rows (same file size,
         more files), explicit 1 pass.
dp       Data-parallel speed-up K=1 -> K=2 on 2 cores for each ``--dp-modes``
         setting (the default population with 1PMB, and with 2PMB, whose steps
         outweigh the loads: the compute-bound one), against the ideal 2x and
         the bound the measured step and load set.
quality  Test pAUC(0, 0.1) at K = 1, 2, 4, 8 on the bundled data sets
         (ingested into >= 16 partitions), default configuration on one
         holdout at every K (the mixing's effect alone), and at K = 1 as the
         default chooses (K-fold selection on few positives), for each
         ``--quality-seeds`` seed (the selection's winner moves with the seed).
onefile  The main files' rows as one file of ``--files`` row groups, as a user
         may have them (one export): the explicit 1-pass job on it and on the
         files, and the scan of its row groups, each on a fresh cluster; the
         file is read as one partition per row group (``SPLIT_BYTES``), so the
         model is the files' model to the bit (checked), at the files' speed
         and memory.
cost     A cost model for 16 and 64 workers from the measured sched numbers.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# bench/ holds sparse.py, which would shadow pydata's `sparse` (imported by dask.array / dask-ml)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dask  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402

import nsdist  # noqa: E402
from nsdist import metrics  # noqa: E402
from nsdist.api import open_dataset, train  # noqa: E402
from nsdist.data.fs import atomic_write_bytes  # noqa: E402
from nsdist.engine.ring import RING_KEY  # noqa: E402

ALL_PARTS = ("main", "tpw", "sched", "rss", "dp", "quality", "onefile", "cost")
SHARED = Path("/work/shared/data")
REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- data
def make_dataset(root: Path, n_files: int, rows_per_file: int, d: int, pos_rate: float, seed: int) -> Path:
    """Plain Parquet as a user has it: x ~ N(0, I) float32 columns f0..; int8 label 0/1;
    positives shifted by mu (||mu|| = 2.5).  No nsdist metadata, no ingest."""
    if (root / "_done").exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    mu = np.random.default_rng(12345).normal(size=d)
    mu = (mu * 2.5 / np.linalg.norm(mu)).astype(np.float32)
    names = [f"f{j}" for j in range(d)]
    for i in range(n_files):
        rng = np.random.default_rng([seed, i])
        y = (rng.random(rows_per_file) < pos_rate).astype(np.int8)
        X = rng.standard_normal((rows_per_file, d), dtype=np.float32)
        X[y > 0] += mu
        cols = {name: X[:, j] for j, name in enumerate(names)}
        cols["label"] = y
        pq.write_table(pa.table(cols), root / f"part-{i:05d}.parquet", compression="snappy")
    (root / "_done").touch()
    return root


def files_of(root: Path) -> list[str]:
    return sorted(str(p) for p in root.glob("part-*.parquet"))


def one_file(root: Path) -> Path:
    """The files of ``root`` as the row groups of one file (``root``-one.parquet), in file order."""
    path = root.with_name(root.name + "-one.parquet")
    if not path.exists():
        files = files_of(root)
        tmp = path.with_suffix(".tmp")
        with pq.ParquetWriter(tmp, pq.read_schema(files[0]), compression="snappy") as writer:
            for f in files:
                table = pq.read_table(f)
                writer.write_table(table, row_group_size=table.num_rows)
        tmp.rename(path)
    return path


def load_arrays(root: Path) -> tuple[np.ndarray, np.ndarray]:
    ds = open_dataset(str(root))
    parts = [ds.read_partition(i, dtype=np.float32) for i in range(len(ds.partitions))]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


# ----------------------------------------------------------------------------- measures
def _vmhwm() -> float:
    """This process's peak resident set (MB)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 1024


def _reset_peak() -> None:
    """Reset this process's VmHWM (Linux: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb(client: Client) -> dict:
    workers = client.run(_vmhwm)
    return {"driver": _vmhwm(), "scheduler": client.run_on_scheduler(_vmhwm),
            **{f"worker {i}": v for i, v in enumerate(workers.values())}}


def fresh(workers: int, tpw: int, memory_limit: str):
    """A fresh cluster per measurement: no warm caches or allocator state carried over."""
    lc = LocalCluster(n_workers=workers, threads_per_worker=tpw, memory_limit=memory_limit,
                      dashboard_address=None, processes=True)
    client = Client(lc)
    client.wait_for_workers(workers)
    return lc, client


def measured(args, fn, tpw: int = 1):
    lc, client = fresh(args.workers, tpw, args.memory_limit)
    _reset_peak()
    try:
        return fn(client)
    finally:
        client.close()
        lc.close()


def _scan_partition(path: str, group: int | None = None) -> int:
    """Read a file (or one of its row groups) and convert it to numpy (X, y): the bare scan's task."""
    table = pq.read_table(path) if group is None else pq.ParquetFile(path).read_row_group(group)
    names = [n for n in table.column_names if n != "label"]
    X = np.column_stack([table.column(n).to_numpy() for n in names])
    y = table.column("label").to_numpy()
    assert X.shape[0] == y.shape[0]
    return X.shape[0]


def scan(client: Client, root: Path) -> dict:
    """The bare scan: every file (of a single file: every row group) read and converted to numpy (X, y), on
    the workers."""
    t0 = time.perf_counter()
    if root.is_file():
        groups = range(pq.ParquetFile(root).metadata.num_row_groups)
        rows = sum(client.gather(client.map(_scan_partition, [str(root)] * len(groups), groups, pure=False)))
    else:
        rows = sum(client.gather(client.map(_scan_partition, files_of(root), pure=False)))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rows": rows, "rows_per_s": rows / seconds, "loadavg_1min": os.getloadavg()[0]}


def nsdist_job(client: Client, root: Path, kind: str, args, test=None, n_rows: int | None = None,
               **extra) -> dict:
    """The whole call ``nsdist.train(dir, ...)`` -> model, then ``model.save``; phases and RSS."""
    params = {"explicit1": dict(eta=args.eta, n_passes=1), "explicit10": dict(eta=args.eta, n_passes=10),
              "default": {}, "population1": dict(n_passes=1)}[kind]
    params = {"solver": "1pmb", **params, **extra}
    t0 = time.perf_counter()
    model = train(str(root), measure="pauc", client=client, **params)
    seconds = time.perf_counter() - t0
    out = tempfile.mkdtemp(prefix="nsdist-scale-model-")
    t1 = time.perf_counter()
    model.save(out)
    save_s = time.perf_counter() - t1
    shutil.rmtree(out, ignore_errors=True)
    h = model.history
    phases = dict(h.get("phases", {}))
    phases["other"] = seconds - sum(phases.values())     # open (footers), moments, resolve, plan, history
    n_rows = n_rows or sum(pq.ParquetFile(f).metadata.num_rows for f in ([root] if root.is_file() else files_of(root)))
    passes = int(h.get("passes") or 0)
    r = {"seconds": seconds, "save_seconds": save_s, "phases": phases, "passes": passes,
         "rows_seen": int(h.get("rows_seen", 0)), "rows_read": passes * n_rows,
         "rows_per_s": passes * n_rows / seconds, "chain_seconds": phases.get("chain"),
         "chain_rows_per_s": passes * n_rows / phases["chain"] if phases.get("chain") else None,
         "selected": h.get("selected"), "eta": model.params.get("eta"), "rss_mb": peak_rss_mb(client),
         "loadavg_1min": os.getloadavg()[0], "partitions": len(open_dataset(str(root)).partitions),
         "model_sha256": hashlib.sha256(model.coef.tobytes() + np.float64(model.intercept).tobytes()).hexdigest()}
    if test is not None:
        s = model.decision_function(test[0])
        r["test_pauc"] = metrics.partial_auc(test[1], s, 0.1)
    return r


def dask_ml_job(client: Client, root: Path, test, d: int) -> dict:
    """dask-ml Incremental(SGDClassifier(loss="hinge")): the whole job, read_parquet .. fitted."""
    import dask.dataframe as dd
    from dask_ml.wrappers import Incremental
    from sklearn.linear_model import SGDClassifier

    t0 = time.perf_counter()
    df = dd.read_parquet(str(root / "part-*.parquet"))
    arr = df[[f"f{j}" for j in range(d)] + ["label"]].to_dask_array(lengths=True)   # one blocking for X and y
    X, y = arr[:, :d], arr[:, d].astype("int8")
    inc = Incremental(SGDClassifier(loss="hinge", random_state=0), scoring=None)
    inc.fit(X, y, classes=[0, 1])
    seconds = time.perf_counter() - t0
    s = inc.estimator_.decision_function(test[0])
    return {"seconds": seconds, "rows": int(X.shape[0]), "rows_per_s": X.shape[0] / seconds,
            "test_pauc": metrics.partial_auc(test[1], s, 0.1), "rss_mb": peak_rss_mb(client)}


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


# ----------------------------------------------------------------------------- parts
def part_main(args, root: Path, test, res: dict) -> None:
    """main + tpw: per repeat, every job on a fresh cluster, interleaved; tpw=2 right after tpw=1."""
    tpws = (1, 2) if "tpw" in args.parts else (1,)
    kinds = [k for k in ("explicit1", "explicit10", "default") if k in args.jobs]
    runs: dict = {tpw: {k: [] for k in ("scan", *kinds, "dask_ml")} for tpw in tpws}
    for rep in range(args.repeats):
        for tpw in tpws:
            runs[tpw]["scan"].append(measured(args, lambda c: {**scan(c, root), "rss_mb": peak_rss_mb(c)}, tpw))
            for kind in kinds:
                r = measured(args, lambda c: nsdist_job(c, root, kind, args, test), tpw)
                runs[tpw][kind].append(r)
                print(f"  rep {rep} tpw={tpw} {kind}: {r['seconds']:.2f} s, {r['passes']} pass(es), "
                      f"{r['rows_per_s']:,.0f} rows/s; phases "
                      + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()), flush=True)
            if tpw == 1 and "dask_ml" in args.jobs:
                runs[tpw]["dask_ml"].append(measured(args, lambda c: dask_ml_job(c, root, test, args.features), 1))
                print(f"  rep {rep} dask-ml: {runs[1]['dask_ml'][-1]['seconds']:.2f} s", flush=True)
            print(f"  rep {rep} tpw={tpw} scan: {runs[tpw]['scan'][-1]['seconds']:.2f} s", flush=True)
    out = {}
    for tpw in tpws:
        scan_rps = statistics.median(r["rows_per_s"] for r in runs[tpw]["scan"])
        block = {"scan": {"rows_per_s": scan_rps, "seconds": med(runs[tpw]["scan"], "seconds"),
                          "rss_mb": median_run(runs[tpw]["scan"])["rss_mb"], "runs": runs[tpw]["scan"]}}
        dm = runs[tpw].get("dask_ml") or []
        dm_rps = statistics.median(r["rows_per_s"] for r in dm) if dm else None
        if dm:
            block["dask_ml"] = {"rows_per_s": dm_rps, "seconds": med(dm, "seconds"),
                                "test_pauc": median_run(dm)["test_pauc"], "runs": dm}
        for kind in kinds:
            rs = runs[tpw][kind]
            rps = statistics.median(r["rows_per_s"] for r in rs)
            m = median_run(rs)
            block[kind] = {
                "seconds": med(rs, "seconds"), "rows_per_s": rps, "passes": m["passes"],
                "ratio_vs_scan": rps / scan_rps, "ratio_vs_dask_ml": rps / dm_rps if dm_rps else None,
                "chain_rows_per_s": statistics.median(r["chain_rows_per_s"] for r in rs),
                "chain_ratio_vs_scan": statistics.median(r["chain_rows_per_s"] for r in rs) / scan_rps,
                "phases": {k: statistics.median(r["phases"].get(k, 0.0) for r in rs) for k in m["phases"]},
                "save_seconds": med(rs, "save_seconds"), "rss_mb": m["rss_mb"],
                "test_pauc": m.get("test_pauc"), "selected": m.get("selected"), "eta": m.get("eta"),
                "runs": rs}
        out[f"tpw{tpw}"] = block
    # a --merge run of fewer cluster shapes keeps the others, marked as from their own (earlier) run
    kept = {k: {**v, "from_before": v.get("from_before") or (res.get("commands") or {}).get(
        "tpw" if k == "tpw2" else "main")} for k, v in (res.get("main") or {}).items() if k not in out}
    res["main"] = {**out, **kept}


def _index(key: str) -> int:
    return int(key.rsplit("-", 1)[1])


def task_stream_stats(data: list[dict]) -> dict:
    spans: dict[str, tuple[float, float, str]] = {}
    for t in data:
        for ss in t["startstops"]:
            if ss["action"] == "compute":
                spans[str(t["key"])] = (ss["start"], ss["stop"], t["worker"])
    steps = {_index(k): v for k, v in spans.items() if k.startswith("nsdist-step")}
    loads = {_index(k): v for k, v in spans.items() if k.startswith("nsdist-load")}
    mixes = [b - a for k, (a, b, _) in spans.items() if k.startswith("nsdist-mix")]
    compute = [b - a for a, b, _ in steps.values()]
    load = [b - a for a, b, _ in loads.values()]
    latency, gap = [], []
    for i in sorted(steps)[1:]:
        if i - 1 not in steps:
            continue
        start, _, worker = steps[i]
        busy = max((b for a, b, w in spans.values() if w == worker and b <= start), default=0.0)
        ready = max(steps[i - 1][1], loads[i][1] if i in loads else 0.0, busy)
        latency.append(start - ready)
        gap.append(start - steps[i - 1][1])
    chain_span = (max(b for a, b, _ in steps.values()) - min(a for a, b, _ in steps.values())) if steps else 0.0
    return {"steps": len(steps), "median_step_ms": 1e3 * statistics.median(compute) if compute else None,
            "median_load_ms": 1e3 * statistics.median(load) if load else None,
            "median_mix_ms": 1e3 * statistics.median(mixes) if mixes else None,
            "median_latency_ms": 1e3 * statistics.median(latency) if latency else None,
            "median_gap_ms": 1e3 * statistics.median(gap) if gap else None,
            "latency_ratio": statistics.median(latency) / statistics.median(compute) if latency else None,
            "gap_ratio": statistics.median(gap) / statistics.median(compute) if gap else None,
            "chain_span_s": chain_span, "step_busy_s": sum(compute), "load_busy_s": sum(load)}


def ring_stats(timings: list) -> dict:
    """Per step of the ring (``ChainProgress.timings``, nsdist.engine.ring.TIMINGS): step and load compute, the
    scheduling latency as for a task stream (the step's start minus the moment the state was made -- the step
    before ended -- and the block loaded; its worker is free once its own load ends) and the state's transit
    (the step before's end to the state's arrival in this worker's mailbox: what a step would wait if its
    block were loaded first).  Empty when no step ran in the ring."""
    T = np.array([t for t in timings if t is not None])
    if T.shape[0] < 2:
        return {}
    step, load = T[:, 4] - T[:, 3], T[:, 1] - T[:, 0]
    latency = T[1:, 3] - np.maximum(T[:-1, 4], T[1:, 1])
    transit, gap = T[1:, 2] - T[:-1, 4], T[1:, 3] - T[:-1, 4]
    med = lambda a: float(np.median(a))      # noqa: E731
    return {"ring": True, "steps": int(T.shape[0]), "median_step_ms": 1e3 * med(step),
            "median_load_ms": 1e3 * med(load), "median_latency_ms": 1e3 * med(latency),
            "median_transit_ms": 1e3 * med(transit), "median_gap_ms": 1e3 * med(gap),
            "latency_ratio": med(latency) / med(step), "transit_ratio": med(transit) / med(step),
            "gap_ratio": med(gap) / med(step), "chain_span_s": float(T[:, 4].max() - T[:, 3].min()),
            "step_busy_s": float(step.sum()), "load_busy_s": float(load.sum())}


def _noop(i):
    return i


def scheduler_rate(client: Client, n: int = 2000) -> dict:
    """Tasks/s of the scheduler on empty tasks (a dependent chain and independent tasks)."""
    t0 = time.perf_counter()
    client.gather(client.map(_noop, range(n), pure=False))
    indep = (time.perf_counter() - t0) / n
    fut = client.submit(_noop, 0, pure=False)
    t0 = time.perf_counter()
    m = 200
    for _ in range(m):
        fut = client.submit(_noop, fut, pure=False)
    fut.result()
    chained = (time.perf_counter() - t0) / m
    return {"independent_task_ms": 1e3 * indep, "chained_task_ms": 1e3 * chained}


def part_sched(args, root: Path, res: dict) -> None:
    out = {}
    for tpw in ((1, 2) if ("tpw" in args.parts or args.sched_tpw2) else (1,)):
        runs: dict[bool, list] = {True: [], False: []}
        for rep in range(args.repeats):
            # the ring (the default) and the chain of dependent step tasks (nsdist.ring off), alternating
            for ring in ((True, False) if rep % 2 == 0 else (False, True)):
                def one(c):
                    with get_task_stream(c) as ts0:
                        scan(c, root)
                    per_file = [ss["stop"] - ss["start"] for t in ts0.data for ss in t["startstops"]
                                if ss["action"] == "compute" and str(t["key"]).startswith("_scan_partition")]
                    timings: list = []
                    with get_task_stream(c) as ts, dask.config.set({RING_KEY: ring}):
                        r = nsdist_job(c, root, "explicit1", args, on_step=lambda p: timings.append(p.timings))
                    st = {"ring": False, **task_stream_stats(ts.data), **ring_stats(timings)}
                    st["scan_file_ms"] = 1e3 * statistics.median(per_file) if per_file else None
                    st["whole_seconds"] = r["seconds"]
                    st["scheduler"] = scheduler_rate(c)
                    return st
                runs[ring].append(measured(args, one, tpw))
        for ring, rs in runs.items():
            keys = [k for k in rs[0] if isinstance(rs[0][k], (int, float)) and not isinstance(rs[0][k], bool)
                    and rs[0][k] is not None]
            block = {k: statistics.median(r[k] for r in rs) for k in keys}
            block["ring"] = all(r["ring"] for r in rs)
            block["whole_seconds_runs"] = [r["whole_seconds"] for r in rs]
            block["scheduler"] = {k: statistics.median(r["scheduler"][k] for r in rs) for k in rs[0]["scheduler"]}
            out[f"tpw{tpw}" if ring else f"tpw{tpw}_dependent"] = block
            print(f"  sched tpw={tpw} ring={ring}: {block}", flush=True)
    # data-parallel: mix cost and step/load at K=2
    def dp(c):
        with get_task_stream(c) as ts:
            r = nsdist_job(c, root, "explicit1", args, n_chains=2)
        st = task_stream_stats(ts.data)
        st["whole_seconds"] = r["seconds"]
        return st
    dps = [measured(args, dp) for _ in range(args.repeats)]
    out["k2"] = {k: statistics.median(r[k] for r in dps) for k in dps[0] if dps[0][k] is not None}
    res["sched"] = out


def part_rss(args, res: dict) -> None:
    out = {}
    for n_files in args.rss_files:
        rows = n_files * args.rows_per_file
        if rows * args.features * 4 * 1.05 > shutil.disk_usage(args.workdir).free * 0.5:
            out[str(rows)] = {"skipped": "not enough free disk"}
            continue
        root = make_dataset(Path(args.workdir) / f"main-{n_files}x{args.rows_per_file}x{args.features}",
                            n_files, args.rows_per_file, args.features, args.pos_rate, seed=1)
        runs = [measured(args, lambda c: nsdist_job(c, root, "explicit1", args)) for _ in range(args.rss_repeats)]
        scans = [measured(args, lambda c: scan(c, root)) for _ in range(args.rss_repeats)]
        workers = [max(v for k, v in r["rss_mb"].items() if k.startswith("worker")) for r in runs]
        m = median_run(runs)
        out[str(rows)] = {"files": n_files, "seconds": med(runs, "seconds"), "rows_per_s": med(runs, "rows_per_s"),
                          "scan_rows_per_s": med(scans, "rows_per_s"),
                          "ratio_vs_scan": med(runs, "rows_per_s") / med(scans, "rows_per_s"),
                          "max_worker_rss_mb": statistics.median(workers), "rss_mb": m["rss_mb"],
                          "phases": m["phases"]}
        print(f"  rss {rows:,}: {out[str(rows)]}", flush=True)
    res["rss"] = out


def part_onefile(args, root: Path, res: dict) -> None:
    """The explicit 1-pass job on the files and on their rows as one file, and the scans, interleaved."""
    path = one_file(root)
    kinds = {"files": root, "one file": path}
    runs: dict = {k: {"job": [], "scan": []} for k in kinds}
    for rep in range(args.repeats):
        for kind, src in kinds.items():
            runs[kind]["scan"].append(measured(args, lambda c: scan(c, src)))
            r = measured(args, lambda c: nsdist_job(c, src, "explicit1", args))
            runs[kind]["job"].append(r)
            print(f"  rep {rep} {kind}: {r['seconds']:.2f} s, {r['partitions']} partitions, worker peak "
                  f"{max(v for k, v in r['rss_mb'].items() if k.startswith('worker')):.0f} MB; scan "
                  f"{runs[kind]['scan'][-1]['seconds']:.2f} s", flush=True)
    out = {}
    for kind, v in runs.items():
        jobs = v["job"]
        out[kind] = {"partitions": jobs[0]["partitions"], "seconds": med(jobs, "seconds"),
                     "rows_per_s": med(jobs, "rows_per_s"), "scan_rows_per_s": med(v["scan"], "rows_per_s"),
                     "ratio_vs_scan": med(jobs, "rows_per_s") / med(v["scan"], "rows_per_s"),
                     "max_worker_rss_mb": statistics.median(
                         max(x for k, x in r["rss_mb"].items() if k.startswith("worker")) for r in jobs),
                     "models": sorted({r["model_sha256"][:16] for r in jobs}), "runs": jobs}
    out["file_bytes"] = path.stat().st_size
    out["same_model"] = out["files"]["models"] == out["one file"]["models"] and len(out["files"]["models"]) == 1
    res["onefile"] = out


DP_MODES = ("population", "population-2pmb", "single")


def _dp_setting(args, root: Path, mode: str) -> tuple[Path, int, str, dict, dict]:
    """The data, job kind, ``train`` arguments and description of one ``--dp-modes`` setting."""
    if mode in ("population", "population-2pmb"):
        solver = "2pmb" if mode.endswith("2pmb") else "1pmb"
        n_rows = args.files * args.rows_per_file
        return root, n_rows, "population1", {"solver": solver}, {
            "features": args.features, "files": args.files, "rows": n_rows,
            "setting": f"default population (no eta), solver={solver!r}, n_passes=1"}
    d = args.dp_features
    root = make_dataset(Path(args.workdir) / f"dp-{args.dp_files}x{args.dp_rows_per_file}x{d}",
                        args.dp_files, args.dp_rows_per_file, d, args.pos_rate, seed=3)
    n_rows = args.dp_files * args.dp_rows_per_file
    return root, n_rows, "explicit1", dict(surrogate=args.dp_surrogate, buffer_size=args.dp_buffer), {
        "features": d, "files": args.dp_files, "rows": n_rows,
        "setting": f"one candidate, eta={args.eta}, surrogate={args.dp_surrogate}, "
                   f"buffer_size={args.dp_buffer}, n_passes=1"}


def _median_of(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ms(v: float | None, unit: str = " ms") -> str:
    return "-" if v is None else f"{v:.0f}{unit}"


def dp_bound(step_ms: float, load_ms: float) -> float:
    """The most K=2 can gain over K=1 on two one-thread workers, from a partition's step S and load L.

    K=1 steps one partition at a time, so a pass needs at least ``max(S, (L + S) / 2)`` a
    partition (its steps in sequence, or both cores busy); K=2 at least ``(L + S) / 2``
    (both cores busy). The ideal 2x needs ``L = 0``.
    """
    half = (load_ms + step_ms) / 2
    return max(step_ms, half) / half


def part_dp(args, root: Path, res: dict) -> None:
    """K=1 vs K=2 on 2 cores, for each ``--dp-modes`` setting.

    ``population``: the issue's own call ``nsdist.train(dir, measure='pauc', solver='1pmb',
    n_passes=1)`` -- no ``eta``, so the holdout and the whole candidate population (M candidates
    per step, one load): the step is M times a single candidate's, the load is not.
    ``population-2pmb``: the same with ``solver='2pmb'``, whose steps (pairs against the
    reservoir) cost several loads -- the compute-bound setting.  ``single``: one explicit
    candidate with ``--dp-surrogate`` / ``--dp-buffer`` on a ``--dp-features``-column data set.
    """
    res["dp"] = {m: v for m, v in res.get("dp", {}).items() if m in DP_MODES}    # --merge keeps the others
    for mode in args.dp_modes:
        data, n_rows, kind, extra, desc = _dp_setting(args, root, mode)
        runs = {1: [], 2: []}
        for _ in range(args.repeats):
            for k in (1, 2):
                def one(c):
                    with get_task_stream(c) as ts:
                        r = nsdist_job(c, data, kind, args, n_rows=n_rows, n_chains=k, **extra)
                    r["stream"] = task_stream_stats(ts.data)
                    return r
                runs[k].append(measured(args, one))
                st = runs[k][-1]["stream"]
                print(f"  dp {mode} K={k}: {runs[k][-1]['seconds']:.2f} s whole, chain "
                      f"{runs[k][-1]['chain_seconds'] or 0:.2f} s, step {_ms(st['median_step_ms'])} "
                      f"load {_ms(st['median_load_ms'])}", flush=True)
        out = dict(desc)
        for k in (1, 2):
            out[f"k{k}"] = {"seconds": med(runs[k], "seconds"),
                            "chain_seconds": _median_of(r["chain_seconds"] for r in runs[k]),
                            **{f"median_{x}_ms": _median_of(r["stream"][f"median_{x}_ms"] for r in runs[k])
                               for x in ("step", "load", "mix")},
                            "test_pauc": median_run(runs[k]).get("test_pauc"),
                            "runs": runs[k]}
        out["speedup_whole"] = out["k1"]["seconds"] / out["k2"]["seconds"]
        out["speedup_chain"] = (out["k1"]["chain_seconds"] / out["k2"]["chain_seconds"]
                                if out["k1"]["chain_seconds"] and out["k2"]["chain_seconds"] else None)
        S, L = out["k1"]["median_step_ms"], out["k1"]["median_load_ms"]
        out["speedup_bound"] = dp_bound(S, L) if S and L else None     # None: no chain (K-fold selection)
        res["dp"][mode] = out


QUALITY_SETS = {
    # name: (train source, ingest kwargs, test source or None (then the last quarter of the partitions))
    "letter": (REPO / "data/letter/letter-recognition.data", dict(format="csv", label_column=0, positive="N"), None),
    "mammography": (SHARED / "mammography/mammography.csv", dict(format="csv", label_column=-1, positive="1"), None),
    "ijcnn1": (SHARED / "ijcnn1/ijcnn1.trn.bz2", dict(format="svmlight"), SHARED / "ijcnn1/ijcnn1.tst.bz2"),
    "a9a": (SHARED / "a9a/a9a.xz", dict(format="svmlight", n_features=123), SHARED / "a9a/a9a.t.xz"),
    "w8a": (SHARED / "w8a/w8a.xz", dict(format="svmlight", n_features=300), None),
}


def _count_rows(src: Path) -> int:
    import bz2
    import gzip
    import lzma
    opener = {".bz2": bz2.open, ".xz": lzma.open, ".gz": gzip.open}.get(src.suffix, open)
    with opener(src, "rt") as fh:
        return sum(1 for line in fh if line.strip())


def part_quality(args, res: dict, flush=lambda: None) -> None:
    work = Path(args.workdir) / "quality"
    out = {}
    lc, client = fresh(args.workers, 1, args.memory_limit)
    try:
        for name in args.quality_sets:
            src, kw, test_src = QUALITY_SETS[name]
            if not src.exists():
                out[name] = {"skipped": f"{src} not found"}
                continue
            n = _count_rows(src)
            n_parts = args.quality_partitions if test_src else args.quality_partitions * 4 // 3
            dst = work / name
            ds = nsdist.ingest(str(src), str(dst / "train"), rows_per_partition=math.ceil(n / n_parts),
                               overwrite=True, client=client, **kw)
            if test_src is not None:
                tkw = dict(kw, n_features=ds.n_features) if kw.get("format") == "svmlight" else kw
                te = nsdist.ingest(str(test_src), str(dst / "test"), rows_per_partition=50_000, overwrite=True,
                                   client=client, **tkw)
                tr = ds
            else:
                P = len(ds.partitions)
                cut = P - P // 4
                tr, te = ds.select(range(cut), "train"), ds.select(range(cut, P), "test")
            Xt, yt = zip(*(te.read_partition(i) for i in range(len(te.partitions))))
            import scipy.sparse as sp
            Xt = sp.vstack(Xt, format="csr") if sp.issparse(Xt[0]) else np.concatenate(Xt)
            yt = np.concatenate(yt)
            row = {"train_partitions": len(tr.partitions), "train_rows": int(tr.num_rows), "test_rows": int(len(yt)),
                   "seeds": {}}
            for seed in args.quality_seeds:
                runs = {}
                # every K on one holdout (validation_folds=1), so the K differences are the mixing's alone;
                # then K=1 as the default chooses ("auto": K-fold selection where a holdout would hold fewer than
                # 100 positives -- which n_chains > 1 never uses), what a user gets without setting anything
                for key, k, folds in [(f"k{k}", k, 1) for k in args.quality_k] + [("default", 1, "auto")]:
                    t0 = time.perf_counter()
                    model = train(tr, client=client, measure="pauc", beta=0.1, solver="1pmb", n_chains=k,
                                  random_state=seed, validation_folds=folds)
                    s = model.decision_function(Xt)
                    runs[key] = {"test_pauc": metrics.partial_auc(yt, s, 0.1),
                                 "seconds": time.perf_counter() - t0, "passes": model.history.get("passes"),
                                 "selected": model.history.get("selected"), "folds": model.history.get("folds", 1)}
                    print(f"  quality {name} seed={seed} {key}: {runs[key]}", flush=True)
                row["seeds"][str(seed)] = runs
            # per seed, each K against K = the first of --quality-k; a cell of the table is the mean over seeds
            diffs = [100 * (per_k[f"k{k}"]["test_pauc"] - per_k[f"k{args.quality_k[0]}"]["test_pauc"])
                     for per_k in row["seeds"].values() for k in args.quality_k[1:]]
            for k in args.quality_k:
                row[f"k{k}"] = {"test_pauc": statistics.mean(r[f"k{k}"]["test_pauc"] for r in row["seeds"].values())}
            row["default"] = {"test_pauc": statistics.mean(r["default"]["test_pauc"] for r in row["seeds"].values()),
                              "folds": sorted({r["default"]["folds"] for r in row["seeds"].values()})}
            row["k2_vs_default_points"] = [100 * (r["k2"]["test_pauc"] - r["default"]["test_pauc"])
                                           for r in row["seeds"].values() if "k2" in r]
            row["max_abs_diff_points"] = max(map(abs, diffs), default=0.0)
            row["mean_abs_diff_points"] = statistics.mean(map(abs, diffs)) if diffs else 0.0
            row["mean_diff_points"] = statistics.mean(diffs) if diffs else 0.0
            row["within_half_point"] = [sum(abs(d) <= 0.5 for d in diffs), len(diffs)]
            out[name] = row
            res["quality"] = out
            flush()
    finally:
        client.close()
        lc.close()
    res["quality"] = out


def part_cost(res: dict, partitions_per_pass: int, prefetch: int = 2) -> None:
    """Per-partition time of a pass on W workers, from measured S (step), L (load), lat (handoff latency),
    sigma (scheduler cost per task) and mix (per round).

    sequential (K=1):  T(W) = max(S + lat, (L + S) / W, 2 sigma)          saturates at W* = (L+S)/(S+lat)
    data-parallel (K):  T(W) = max((S + lat + mix) / K, (L + S) / W, (2 + 1/K) sigma),  K <= min(W, P)
    where P = partitions per pass (rounds are cut at pass ends).  Rows/s = rows per partition / T.
    """
    sc = res.get("sched", {}).get("tpw1")
    if not sc:
        return
    S, L = sc["median_step_ms"], sc["median_load_ms"]
    # the ring's state transit, which a compute-bound chain waits for (a load-bound one hides it behind a load)
    lat = max(sc.get("median_transit_ms") or sc.get("median_latency_ms") or 0.0, 0.0)
    sigma = sc["scheduler"]["independent_task_ms"]
    mix = (res["sched"].get("k2") or {}).get("median_mix_ms") or 1.0
    hop = sc["scheduler"]["chained_task_ms"]      # a dependent task's round trip: the per-round floor
    model = {"prefetch": prefetch, "S_ms": S, "L_ms": L, "latency_ms": lat, "sigma_ms": sigma, "mix_ms": mix, "chained_hop_ms": hop,
             "partitions_per_pass": partitions_per_pass}
    table = {}
    for W in (1, 2, 4, 8, 16, 32, 64):
        seq = max(S + lat, (L + S) / W, 2 * sigma)
        K = min(W, partitions_per_pass)
        dp_ = max((S + lat + mix + hop) / K, (L + S) / W, (2 + 1 / K) * sigma)
        K_unc = W
        dp_unc = max((S + lat + mix + hop) / K_unc, (L + S) / W, (2 + 1 / K_unc) * sigma)
        # the chain submits rounds while (rounds in flight) * K <= prefetch: with K > prefetch one round at a
        # time, so a round's loads do not overlap the previous round's steps
        in_flight = prefetch // K + 1
        dp_pf = dp_ if in_flight >= 2 else max((L + S + lat + mix + hop) / K, (L + S) / W, (2 + 1 / K) * sigma)
        table[W] = {"sequential_ms_per_partition": seq, "sequential_speedup": (L + S) / seq,
                    "dp_default_prefetch_ms_per_partition": dp_pf, "dp_default_prefetch_speedup": (L + S) / dp_pf,
                    "dp_ms_per_partition": dp_, "dp_speedup": (L + S) / dp_, "dp_K": K,
                    "dp_unbounded_ms_per_partition": dp_unc, "dp_unbounded_speedup": (L + S) / dp_unc}
    model["table"] = table
    model["sequential_saturates_at_W"] = (L + S) / (S + lat)
    model["dp_scheduler_bound_W"] = (L + S) / (2 * sigma)
    res["cost"] = model


# ----------------------------------------------------------------------------- report
def paired_ratios(blk: dict) -> dict:
    """Per repeat: a job's rows/s over the same repeat's scan (and dask-ml); median, min, max."""
    scans = blk.get("scan", {}).get("runs") or []
    dms = (blk.get("dask_ml") or {}).get("runs") or []
    out = {}
    for kind in ("explicit1", "explicit10", "default"):
        runs = (blk.get(kind) or {}).get("runs") or []
        if not runs or len(runs) != len(scans):
            continue
        sc = [r["rows_per_s"] / s["rows_per_s"] for r, s in zip(runs, scans)]
        v = {"scan": (statistics.median(sc), min(sc), max(sc)),
             "load": ", ".join(f"{r['loadavg_1min']:.1f}" for r in runs if "loadavg_1min" in r) or "n/a"}
        if len(dms) == len(runs):
            dm = [r["rows_per_s"] / d["rows_per_s"] for r, d in zip(runs, dms)]
            v["dm"] = (statistics.median(dm), min(dm), max(dm))
        out[kind] = v
    return out


def _seed_spread(v: dict, k: int) -> str:
    """Mean |difference| in points between every two seeds' test pAUC at ``K = k`` ("" with one seed)."""
    vals = [100 * s[f"k{k}"]["test_pauc"] for s in v.get("seeds", {}).values() if f"k{k}" in s]
    pairs = [abs(a - b) for i, a in enumerate(vals) for b in vals[i + 1:]]
    return f"{sum(pairs) / len(pairs):.2f}" if pairs else ""


def _default_cells(v: dict) -> str:
    """The K=1 default's cell (its selection in brackets) and the K=2 runs' mean difference to it, in points."""
    d, diffs = v.get("default"), v.get("k2_vs_default_points") or []
    if d is None:
        return "| "
    how = " / ".join(f"{f} folds" if f > 1 else "holdout" for f in d["folds"])
    return (f"{100 * d['test_pauc']:.2f} ({how}) | "
            + (f"{statistics.mean(diffs):+.2f}" if diffs else ""))


def write_report(r: dict, out: Path, command: str) -> None:
    a = r["config"]
    cmds = r.get("commands") or {}
    by_cmd: dict = {}
    for p, v in cmds.items():
        by_cmd.setdefault((v["command"], v["commit"], v["date"], v.get("nsdist_dirty")), []).append(p)
    L = ["# Scale benchmark (bench/scale.py)", "",
         *[f"- parts {', '.join(ps)}: `{c}` at {commit}{' (nsdist/ with uncommitted edits of other engineers: ' + dirty.replace(chr(10), '; ') + ')' if dirty else ''}, {date}"
           for (c, commit, date, dirty), ps in by_cmd.items()], "",
         f"Last command: `{command}`  ", f"Date: {r['date']}; machine: {os.cpu_count()} cores (shared, noisy); "
         f"`LocalCluster(n_workers={a['workers']}, threads_per_worker=1|2, memory_limit={a['memory_limit']})`, "
         "a fresh cluster for every timed run (start-up excluded: the user passes `client=`).", ""]
    if "main" in r:
        L += [f"## Whole call vs the bare scan and dask-ml ({a['files']} plain Parquet files x "
              f"{a['rows_per_file']:,} rows = {a['files'] * a['rows_per_file']:,} rows, {a['features']} float32 "
              f"columns + int8 label, {a['pos_rate']:.1%} positives; no ingest)", "",
              "Whole call: `nsdist.train(dir, measure='pauc', solver='1pmb', client=c, ...)` to the returned model "
              f"(explicit: `eta={a['eta']}, n_passes=1|10`; default: no `eta`/`n_passes`, i.e. 10% holdout, the "
              "candidate population, early stopping).  rows/s = passes x dataset rows / wall seconds.  Scan: every "
              "file read with pyarrow and converted to numpy on the workers (2 processes).  dask-ml: "
              "`Incremental(SGDClassifier(loss='hinge'))`, whole job from `dd.read_parquet` to the fitted model, "
              f"one pass.  Medians of {a['repeats']} runs; every run on a fresh cluster, scan and jobs interleaved.", ""]
        for tpw, blk in r["main"].items():
            stale = blk.get("from_before")
            L += [f"### {tpw.replace('tpw', 'threads_per_worker=')}", ""]
            if stale:
                L += [f"*From an earlier run, before the changes since: `{stale.get('command')}` at "
                      f"{stale.get('commit')}, {stale.get('date')}; not comparable with the tables above.*", ""]
            L += [
                  "| job | passes | whole call s | rows/s | vs scan | vs dask-ml | chain alone rows/s | chain vs scan "
                  "| test pAUC(0.1) |", "|---|---|---|---|---|---|---|---|---|",
                  f"| bare scan | 1 | {blk['scan']['seconds']:.2f} | {blk['scan']['rows_per_s']:,.0f} | 1.00 | | | | |"]
            if "dask_ml" in blk:
                dm = blk["dask_ml"]
                L.append(f"| dask-ml Incremental(SGD hinge) | 1 | {dm['seconds']:.2f} | {dm['rows_per_s']:,.0f} | "
                         f"{dm['rows_per_s'] / blk['scan']['rows_per_s']:.2f} | 1.00 | | | {dm['test_pauc']:.4f} |")
            for kind, label, target in (("explicit1", "nsdist explicit, 1 pass", "0.7"),
                                        ("explicit10", "nsdist explicit, 10 passes", "0.7"),
                                        ("default", "nsdist default (selection)", "0.5")):
                if kind not in blk:
                    continue
                b = blk[kind]
                vs_dm = f"{b['ratio_vs_dask_ml']:.2f}" if b.get("ratio_vs_dask_ml") else ""
                L.append(f"| {label} | {b['passes']} | {b['seconds']:.2f} | {b['rows_per_s']:,.0f} | "
                         f"**{b['ratio_vs_scan']:.2f}** (target >= {target}) | {vs_dm} | {b['chain_rows_per_s']:,.0f} "
                         f"| {b['chain_ratio_vs_scan']:.2f} | {b['test_pauc']:.4f} |")
            L.append("")
            paired = paired_ratios(blk)
            if paired:
                L += ["Paired ratios (each repeat's job against the scan / dask-ml of the same repeat, minutes apart "
                      "on the same loaded machine; median and range over the repeats):", "",
                      "| job | vs scan: median [min, max] | vs dask-ml: median [min, max] | repeat loadavg (1 min) |",
                      "|---|---|---|---|"]
                for kind, v in paired.items():
                    dm = (f"{v['dm'][0]:.2f} [{v['dm'][1]:.2f}, {v['dm'][2]:.2f}]" if v.get("dm") else "")
                    L.append(f"| {kind} | {v['scan'][0]:.2f} [{v['scan'][1]:.2f}, {v['scan'][2]:.2f}] | {dm} | "
                             f"{v['load']} |")
                L.append("")
            kinds = [k for k in ("explicit1", "explicit10", "default") if k in blk]
            if kinds:
                names = list(blk[kinds[0]]["phases"])
                for k in kinds[1:]:
                    names += [n for n in blk[k]["phases"] if n not in names]
                L += ["Phase breakdown (median seconds; `other` = whole call minus the engine's phases: opening "
                      "the footers, the moments, resolving the candidates, the plan, the history; `save` = "
                      "`model.save` after the call):", "",
                      "| job | " + " | ".join(names) + " | save | whole call |",
                      "|---|" + "---|" * (len(names) + 2)]
                for k in kinds:
                    b = blk[k]
                    L.append(f"| {k} | " + " | ".join(f"{b['phases'].get(n, 0.0):.2f}" for n in names)
                             + f" | {b['save_seconds']:.3f} | {b['seconds']:.2f} |")
                L += ["", "Peak RSS (VmHWM, MB) of each process in the median run (a LocalCluster's scheduler lives in the driver process, so those two columns are one process):", "",
                      "| job | " + " | ".join(blk[kinds[0]]["rss_mb"]) + " |",
                      "|---|" + "---|" * len(blk[kinds[0]]["rss_mb"])]
                L.append("| scan | " + " | ".join(f"{v:.0f}" for v in blk["scan"]["rss_mb"].values()) + " |")
                for k in kinds:
                    L.append(f"| {k} | " + " | ".join(f"{v:.0f}" for v in blk[k]["rss_mb"].values()) + " |")
                L.append("")
        if "tpw1" in r["main"] and "tpw2" in r["main"] and not any(
                r["main"][k].get("from_before") for k in ("tpw1", "tpw2")):
            L += ["### threads_per_worker: 1 vs 2 (whole call, median seconds; same run)", "",
                  "| job | tpw=1 s | tpw=2 s | tpw=2 / tpw=1 time |", "|---|---|---|---|"]
            for k in ("scan", "explicit1", "explicit10", "default"):
                if k in r["main"]["tpw1"] and k in r["main"]["tpw2"]:
                    t1, t2 = r["main"]["tpw1"][k]["seconds"], r["main"]["tpw2"][k]["seconds"]
                    r1, r2 = r["main"]["tpw1"][k].get("runs") or [], r["main"]["tpw2"][k].get("runs") or []
                    per = ", ".join(f"{b['seconds'] / a['seconds']:.2f}" for a, b in zip(r1, r2))
                    L.append(f"| {k} | {t1:.2f} | {t2:.2f} | {t2 / t1:.2f} (per repeat: {per}) |")
            L.append("")
    if "sched" in r:
        L += ["## Scheduling (the explicit 1-pass job, step by step)", "",
              "Per partition: step compute, load compute (read + convert + order + scale), scheduling latency (a "
              "step's start minus the moment its state, its block and its worker were all ready), raw gap between "
              "consecutive steps.  `ring`: the default chain, whose steps take their states from the step before "
              "by message (docs/engine.md §The ring), timed by the steps themselves (`ChainProgress.timings`); "
              "`transit`: the state's way from the step before's end to this worker's mailbox, which only a step "
              "whose block is already loaded waits for.  `dependent`: the same job with `nsdist.ring` off, each "
              "step a task depending on the step before (Dask's task stream).  Scheduler rate: empty tasks, "
              "independent (`client.map`) and as a dependent chain (one round trip per task).", "",
              "`scan file ms`: the bare scan's task for one file (read + convert) on the same cluster just before "
              "the job: what `load` would cost without the engine's row order and scaling.", "",
              "| cluster | chain | steps | step ms | load ms | scan file ms | latency ms | latency / step | transit ms "
              "| transit / step | gap ms | gap / step | empty task ms (indep.) | chained task ms | whole call s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for tpw in ("tpw1", "tpw1_dependent", "tpw2", "tpw2_dependent"):
            s = r["sched"].get(tpw)
            if s:
                sf = f"{s['scan_file_ms']:.1f}" if s.get("scan_file_ms") else "n/a"
                tr = ("– | –" if s.get("median_transit_ms") is None
                      else f"{s['median_transit_ms']:.2f} | {s['transit_ratio']:.1%}")
                chain = "ring" if s.get("ring") else "dependent"
                L.append(f"| {tpw.split('_')[0]} | {chain} | {s['steps']:.0f} | {s['median_step_ms']:.1f} | "
                         f"{s['median_load_ms']:.1f} | {sf} | {s['median_latency_ms']:.2f} | "
                         f"{s['latency_ratio']:.1%} | "
                         f"{tr} | {s['median_gap_ms']:.1f} | {s['gap_ratio']:.0%} | "
                         f"{s['scheduler']['independent_task_ms']:.2f} | {s['scheduler']['chained_task_ms']:.2f} | "
                         f"{s['whole_seconds']:.2f} |")
        k2 = r["sched"].get("k2")
        if k2:
            L += ["", f"K=2 on the same files: step {k2['median_step_ms']:.1f} ms, load {k2['median_load_ms']:.1f} ms, "
                  f"mix {k2.get('median_mix_ms', float('nan')):.1f} ms per round; whole call {k2['whole_seconds']:.2f} s."]
        L.append("")
    if "rss" in r:
        L += ["## Peak RSS per worker vs dataset size (explicit 1 pass, files of "
              f"{a['rows_per_file']:,} rows, more files)", "",
              "| rows | files | whole call s | rows/s | vs scan | max worker peak RSS MB | driver MB |",
              "|---|---|---|---|---|---|---|"]
        for n, v in r["rss"].items():
            if "skipped" in v:
                L.append(f"| {int(n):,} | skipped: {v['skipped']} | | | | | |")
            else:
                L.append(f"| {int(n):,} | {v['files']} | {v['seconds']:.2f} | {v['rows_per_s']:,.0f} | "
                         f"{v['ratio_vs_scan']:.2f} | {v['max_worker_rss_mb']:.0f} | {v['rss_mb']['driver']:.0f} |")
        L.append("")
    if "onefile" in r:
        o = r["onefile"]
        L += [f"## One large file: the main files' rows as one file of {o['one file']['partitions']} row groups "
              f"({o['file_bytes'] / 2**20:,.0f} MiB)", "",
              "A file of more than `SPLIT_BYTES` (128 MiB) is read as several partitions, runs of its row groups "
              "(docs/engine.md §Dataset format).  Explicit 1-pass job (as in the main part) and the scan (of the "
              f"files; of the file's row groups), each on a fresh cluster; medians of {a['repeats']} runs.", "",
              "| data | partitions | whole call s | rows/s | vs its scan | max worker peak RSS MB | model |",
              "|---|---|---|---|---|---|---|"]
        for kind in ("files", "one file"):
            v = o[kind]
            L.append(f"| {kind} | {v['partitions']} | {v['seconds']:.2f} | {v['rows_per_s']:,.0f} | "
                     f"{v['ratio_vs_scan']:.2f} | {v['max_worker_rss_mb']:.0f} | {', '.join(v['models'])} |")
        L += ["", f"The same model from the one file as from the files: **{'yes' if o['same_model'] else 'NO'}**.", ""]
    if "dp" in r:
        L += ["## Data-parallel: K=1 vs K=2 on 2 cores", "",
              "Medians of `runs` fresh-cluster runs (tpw=1) a setting, K=1 and K=2 alternating.  "
              "Bound: the most K=2 can gain on two one-thread workers given the K=1 run's step S and load L a "
              "partition -- K=1 needs at least max(S, (L + S) / 2) a partition, K=2 at least (L + S) / 2 "
              "(`dp_bound`); the ideal 2x needs L = 0.  The phases outside the chain (validation sample, "
              "reservoir) do not change with K.", "",
              "| setting | data | K | runs | whole call s | chain s | step ms | load ms | mix ms | speed-up whole | "
              "speed-up chain | bound | ideal |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for mode, d in r["dp"].items():
            for k in (1, 2):
                b = d[f"k{k}"]
                mix = f"{b['median_mix_ms']:.1f}" if b.get("median_mix_ms") else ""
                bound = f"{d['speedup_bound']:.2f}x" if d.get("speedup_bound") else "-"
                chain = f"{d['speedup_chain']:.2f}x" if d.get("speedup_chain") else "-"
                tail = (f"**{d['speedup_whole']:.2f}x** | **{chain}** | {bound} | 2x |"
                        if k == 2 else " | | | |")
                L.append(f"| {d['setting'] if k == 1 else ''} | "
                         + (f"{d['files']} files, {d['rows']:,} rows x {d['features']} float32" if k == 1 else "")
                         + f" | {k} | {len(b['runs'])} | {b['seconds']:.2f} | {b['chain_seconds'] or 0:.2f} | "
                         f"{_ms(b['median_step_ms'], '')} | {_ms(b['median_load_ms'], '')} | {mix} | {tail}")
        L.append("")
    if "quality" in r:
        ks = a["quality_k"]
        seeds = sorted({int(s) for row in r["quality"].values() if isinstance(row, dict)    # the part's own runs:
                        for s in row.get("seeds", {})}) or [0]       # a later run of another part resets the config
        L += ["## Data-parallel: test pAUC(0, 0.1) at K = " + ", ".join(map(str, ks)), "",
              "Default configuration (population, early stopping) on one holdout at every K "
              "(`validation_folds=1`: `n_chains > 1` always streams one holdout, so this keeps the selection "
              "the same and the K differences are the mixing's), 1PMB pAUC(0, 0.1); data ingested "
              "with `nsdist.ingest(src, dst, rows_per_partition=...)`; test = the set's test file, else the last "
              f"quarter of the partitions. Seeds (`random_state`): {', '.join(map(str, seeds))}; a K cell is the "
              f"mean over the seeds; the differences are each seed's K against its own K={ks[0]} (in points). "
              f"`K={ks[0]} seed vs seed`: the mean |difference| between two seeds at K={ks[0]} -- how far the "
              "result moves when only the seed changes (the holdout, the row order and so the selected candidate "
              "change with it), the scale against which the K differences are read. `K=1 default`: the same "
              "call with nothing set (`validation_folds='auto'`: 5-fold selection where a holdout would hold "
              "fewer than 100 positives, else one holdout; the selection it used in brackets), and `K=2 - K=1 "
              "default`: the mean over the seeds of the K=2 run against it -- what switching a default job to "
              "two chains changes.", "",
              "| data set | train partitions | train rows | test rows | " + " | ".join(f"K={k}" for k in ks)
              + f" | max abs diff | mean abs diff | mean diff | within 0.5 | K={ks[0]} seed vs seed "
              "| K=1 default | K=2 - K=1 default |",
              "|---|---|---|---|" + "---|" * (len(ks) + 7)]
        for name, v in r["quality"].items():
            if "skipped" in v:
                L.append(f"| {name} | skipped: {v['skipped']} |")
                continue
            within = v.get("within_half_point")
            L.append(f"| {name} | {v['train_partitions']} | {v['train_rows']:,} | {v['test_rows']:,} | "
                     + " | ".join(f"{100 * v[f'k{k}']['test_pauc']:.2f}" for k in ks)
                     + f" | {v['max_abs_diff_points']:.2f} | {v.get('mean_abs_diff_points', float('nan')):.2f} | "
                     f"{v.get('mean_diff_points', float('nan')):+.2f} | "
                     + (f"{within[0]}/{within[1]}" if within else "") + f" | {_seed_spread(v, ks[0])} | "
                     + _default_cells(v) + " |")
        L.append("")
    if "cost" in r:
        c = r["cost"]
        L += ["## Cost model (16 and 64 workers)", "",
              f"Measured (tpw=1, task stream): step S = {c['S_ms']:.1f} ms, load L = {c['L_ms']:.1f} ms per "
              f"partition; hand-off latency = {c['latency_ms']:.2f} ms; scheduler cost per task sigma = "
              f"{c['sigma_ms']:.2f} ms; dependent-task round trip = {c['chained_hop_ms']:.2f} ms; mix = "
              f"{c['mix_ms']:.1f} ms per round; P = {c['partitions_per_pass']} partitions per pass.", "",
              "Per-partition time of a pass on W workers:", "",
              "- sequential (K=1): `T = max(S + lat, (L + S) / W, 2 sigma)`",
              "- data-parallel (K = min(W, P) chains): `T = max((S + lat + mix + hop) / K, (L + S) / W, "
              "(2 + 1/K) sigma)`; the last column lets K = W (P >= W partitions per pass)", "",
              f"- data-parallel at the default `prefetch={c.get('prefetch', 2)}`: the chain keeps "
              "`prefetch // K + 1` rounds in flight, so for K > prefetch one round at a time and a round's loads "
              "do not overlap the previous round's steps: `T = (L + S + lat + mix + hop) / K`", "",
              "| W | sequential ms/partition | seq. speed-up vs 1 worker | data-parallel K | dp ms/partition (prefetch >= K) | dp "
              "speed-up | dp at default prefetch ms/partition | speed-up | dp (K=W) ms/partition | dp (K=W) speed-up |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for W, v in c["table"].items():
            pf = (f"{v['dp_default_prefetch_ms_per_partition']:.1f} | {v['dp_default_prefetch_speedup']:.1f}"
                  if "dp_default_prefetch_ms_per_partition" in v else " | ")
            L.append(f"| {W} | {v['sequential_ms_per_partition']:.1f} | {v['sequential_speedup']:.2f} | {v['dp_K']} | "
                     f"{v['dp_ms_per_partition']:.1f} | {v['dp_speedup']:.1f} | {pf} | "
                     f"{v['dp_unbounded_ms_per_partition']:.2f} | {v['dp_unbounded_speedup']:.1f} |")
        L += ["", f"Sequential mode saturates at W* = (L + S) / (S + lat) = {c['sequential_saturates_at_W']:.1f} "
              "workers: beyond that the chain's own step is the bound and more workers only load ahead.  "
              f"Data-parallel mode scales until K reaches the partitions per pass (P = {c['partitions_per_pass']} "
              f"here) or the scheduler's task rate, W ~ (L + S) / (2 sigma) = {c['dp_scheduler_bound_W']:.0f} workers "
              "at this partition size (larger partitions push it out linearly).", ""]
    if r.get("notes"):
        L += ["## Notes", "", *[f"- {n}" for n in r["notes"]], ""]
    text = "\n".join(L)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(str(out.with_suffix(".md")), text.encode())
    atomic_write_bytes(str(out.with_suffix(".json")), json.dumps(r, indent=2, default=str).encode())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/nsdist-scale", help="where the synthetic Parquet goes")
    ap.add_argument("--parts", default=",".join(ALL_PARTS), help=f"comma-separated subset of {ALL_PARTS}")
    ap.add_argument("--jobs", default="explicit1,explicit10,default,dask_ml", help="jobs of the main part")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--rows-per-file", type=int, default=125_000)
    ap.add_argument("--rows", type=int, default=None, help="total rows (sets --rows-per-file = rows / files)")
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--pos-rate", type=float, default=0.007)
    ap.add_argument("--eta", type=float, default=0.1, help="the explicit candidate's step")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="4GiB", help="per-worker memory limit")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rss-files", default="8,16,80", help="file counts of the RSS part (x --rows-per-file)")
    ap.add_argument("--rss-repeats", type=int, default=1)
    ap.add_argument("--sched-tpw2", action="store_true", help="sched part on threads_per_worker=2 clusters too")
    ap.add_argument("--dp-modes", default="population,population-2pmb",
                    help=f"comma-separated settings of the dp part, of {DP_MODES}")
    ap.add_argument("--dp-features", type=int, default=1000)
    ap.add_argument("--dp-files", type=int, default=16)
    ap.add_argument("--dp-rows-per-file", type=int, default=12_500)
    ap.add_argument("--dp-surrogate", default="logistic")
    ap.add_argument("--dp-buffer", type=int, default=500)
    ap.add_argument("--quality-sets", default="letter,mammography,ijcnn1,a9a,w8a")
    ap.add_argument("--quality-k", default="1,2,4,8")
    ap.add_argument("--quality-partitions", type=int, default=16, help="training partitions per data set")
    ap.add_argument("--quality-seeds", default="0", help="random_state values of the quality part (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="4 files x 25k rows, 1 repeat, small RSS/dp (smoke run)")
    ap.add_argument("--merge", action="store_true", help="keep the parts of an existing --out JSON not rerun")
    ap.add_argument("--note", action="append", default=[], help="a note for the report (repeatable)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scale"))
    args = ap.parse_args(argv)
    raw = list(sys.argv[1:] if argv is None else argv)
    shown = []
    for i, a in enumerate(raw):     # notes go to the Notes section, not into the command line shown
        shown.append('"<note>"' if i > 0 and raw[i - 1] == "--note" else a)
    command = "python bench/scale.py " + " ".join(shown)
    if args.quick:
        args.files, args.rows_per_file, args.repeats = 4, 25_000, 1
        args.rss_files, args.dp_files, args.dp_rows_per_file = "2,4", 4, 5_000
        args.quality_sets = "letter"
    if args.rows:
        args.rows_per_file = args.rows // args.files
    args.parts = [p for p in args.parts.split(",") if p]
    args.jobs = [j for j in args.jobs.split(",") if j]
    args.rss_files = [int(x) for x in args.rss_files.split(",") if x]
    args.quality_k = [int(x) for x in args.quality_k.split(",") if x]
    args.quality_sets = [x for x in args.quality_sets.split(",") if x]
    args.quality_seeds = [int(x) for x in args.quality_seeds.split(",") if x]
    args.dp_modes = [x for x in args.dp_modes.split(",") if x]
    if "main" in args.parts and "dask_ml" in args.jobs and importlib.util.find_spec("dask_ml") is None:
        ap.error("the main part's dask_ml job needs dask-ml: `make bench` (pip install -e '.[bench]'), "
                 "or leave it out with --jobs explicit1,explicit10,default")    # now, not after a repeat's runs
    if set(args.dp_modes) - set(DP_MODES):
        ap.error(f"--dp-modes: unknown {sorted(set(args.dp_modes) - set(DP_MODES))}; known {DP_MODES}")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    res: dict = {}
    if args.merge and out.with_suffix(".json").exists():
        res = json.loads(out.with_suffix(".json").read_text())
    res["config"] = {k: v for k, v in vars(args).items() if k not in ("out",)}
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["notes"] = list(args.note) or res.get("notes", [])
    import subprocess
    git = lambda *a: subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout.strip()  # noqa: E731
    res.setdefault("commands", {})
    for p in args.parts:
        res["commands"][p] = {"command": command, "commit": git("rev-parse", "--short", "HEAD"),
                              "nsdist_dirty": git("status", "--short", "nsdist") or None,
                              "date": res["date"]}
    root = make_dataset(work / f"main-{args.files}x{args.rows_per_file}x{args.features}", args.files,
                        args.rows_per_file, args.features, args.pos_rate, seed=1)
    test_root = make_dataset(work / f"test-{args.features}", 2, 100_000, args.features, args.pos_rate, seed=2)
    test = load_arrays(test_root)
    report = lambda: write_report(res, out, command)  # noqa: E731
    main_key = "tpw" if "tpw" in args.parts and "main" not in args.parts else "main"   # tpw runs inside main
    runs = {main_key: lambda: part_main(args, root, test, res), "sched": lambda: part_sched(args, root, res),
            "rss": lambda: part_rss(args, res), "dp": lambda: part_dp(args, root, res),
            "quality": lambda: part_quality(args, res, report), "onefile": lambda: part_onefile(args, root, res)}
    for name, run in runs.items():
        if name in args.parts:
            print(f"[{time.strftime('%H:%M:%S')}] part {name}", flush=True)
            run()
            report()
    if "cost" in args.parts:
        part_cost(res, args.files)
    report()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
