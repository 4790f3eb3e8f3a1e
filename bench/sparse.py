"""Sparse data: bytes on disk and read speed of the two layouts, a generated text-like data set.

Run ``python bench/sparse.py`` (``--quick`` for a small smoke run; ``--rows``, ``--files``,
``--dir``).  Writes ``bench/results/sparse.md`` and ``bench/results/sparse.json``.

1. **LIBSVM w8a and a9a** (``shared/data``) ingested in both layouts (``layout="dense"``:
   one float64 column per feature; ``layout="sparse"``: CSR-style ``indices``/``values``
   list columns): bytes on disk, and rows/s of reading every partition, both as a bare
   pyarrow scan (``pq.read_table``) and as ``Dataset.read_partition`` (dense ndarray,
   resp. a checked ``scipy.sparse.csr_matrix``).
2. **Text-like data** made by :func:`generate_text_like` (reusable: ``from bench.sparse
   import generate_text_like`` or ``import sparse`` with ``bench/`` on the path):
   ``2^20`` features, about 100 non-zeros per row drawn with Zipf-distributed feature
   frequencies, tf-idf-like float32 values (rows L2-normalised), 1% positives whose
   probability rises with the score of a sparse true weight vector (saved beside the
   data as ``_true_weights.npz``), ``10^6`` rows in 16 files.  Reported: bytes, the
   rows/s of a bare pyarrow scan of the files and of ``Dataset.read_partition`` (CSR,
   every row validated).
3. **A 2^24-feature model**: seconds to save and load (``LinearModel``).
4. **Training** (issue 12; ``--parts`` selects, the parts not run keep their stored results):

   * ``libsvm-train``: w8a and a9a in both layouts; a fixed model (``LIBSVM_FIXED``,
     ``standardize=False``) must be the same in both (coefficients within 1e-9 relative,
     test measures identical) -- with ``standardize=True`` the models differ by design
     (dense standardisation centres, sparse does not); the defaults' test measures of
     both layouts; bytes and training rows/s.
   * ``text-onepass``: one pass of 1PMB (``TEXT_ONEPASS``: buffer size, standardisation,
     fixed eta) on the first 14 text-like files, each run with a fresh
     ``LocalCluster(n_workers=2, threads_per_worker=1)`` and preceded by a bare pyarrow
     scan of the same files: whole-job rows/s and its ratio to the scan, peak RSS per
     worker, Prec@1% / F1 / AUC on the last 2 files (never trained on).
   * ``text-sklearn``: ``SGDClassifier`` (hinge, log_loss) and
     ``LogisticRegression(solver="saga", max_iter=LR_MAX_ITER)`` on the same rows in memory.
   * ``text-defaults``: ``nsdist.train(train, measure="prec@k", k=0.01)``, whole job
     (progress per partition in ``DIR/defaults-progress.jsonl``).
   * ``partition``: what one training partition costs (:func:`partition_costs`): its bare
     scan, the checks of the CSR read, ``read_partition`` and ``read_block``, one
     candidate's ``run_epochs`` over it, and the engine's load and step tasks in a
     one-pass job (Dask's task stream).

   Test measures are computed on the driver with ``nsdist.metrics``.

All reads are sequential in one process (the machine's other core is left alone);
times are medians of ``--repeats`` runs, after one warm-up read (files in the page cache).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nsdist.data import Dataset, ingest  # noqa: E402
from nsdist.data.layout import DICTIONARY_PAGE_BYTES, parquet_options  # noqa: E402
from nsdist.model import LinearModel, load_model  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

__all__ = ["generate_text_like", "TEXT_DEFAULTS"]

TEXT_DEFAULTS = dict(n_rows=1_000_000, n_files=16, n_features=2**20, nnz_per_row=100, zipf_s=1.05,
                     positive_rate=0.01, n_informative=2000, noise=1.0, seed=0)


# ----------------------------------------------------------------------------- the generator


def _zipf_cdf(n_features: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n_features + 1, dtype=np.float64) ** s
    cdf = np.cumsum(p)
    return cdf / cdf[-1]


def _text_rows(rng: np.random.Generator, n: int, cdf: np.ndarray, feature_of_rank: np.ndarray,
               idf: np.ndarray, draws_per_row: float):
    """``(indptr, indices, values)`` of ``n`` rows: Zipf draws of ranks, duplicates merged into tf."""
    d = len(cdf)
    draws = rng.poisson(draws_per_row, size=n).clip(1)
    rows = np.repeat(np.arange(n, dtype=np.int64), draws)
    ranks = np.searchsorted(cdf, rng.random(rows.shape[0]), side="right").clip(0, d - 1)
    keys, tf = np.unique(rows * d + feature_of_rank[ranks], return_counts=True)
    row_of, cols = keys // d, (keys % d).astype(np.int32)
    values = (1.0 + np.log(tf)) * idf[cols]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=n), out=indptr[1:])
    norms = np.sqrt(np.add.reduceat(values ** 2, indptr[:-1])) if len(values) else np.ones(n)
    values /= np.repeat(norms, np.diff(indptr))
    return indptr, cols, values.astype(np.float32)


def _scores(indptr, cols, values, w) -> np.ndarray:
    contrib = values.astype(np.float64) * w[cols]
    out = np.add.reduceat(contrib, indptr[:-1]) if len(contrib) else np.zeros(len(indptr) - 1)
    out[np.diff(indptr) == 0] = 0.0
    return out


def generate_text_like(root: str | os.PathLike, *, n_rows: int = TEXT_DEFAULTS["n_rows"],
                       n_files: int = TEXT_DEFAULTS["n_files"], n_features: int = TEXT_DEFAULTS["n_features"],
                       nnz_per_row: float = TEXT_DEFAULTS["nnz_per_row"], zipf_s: float = TEXT_DEFAULTS["zipf_s"],
                       positive_rate: float = TEXT_DEFAULTS["positive_rate"],
                       n_informative: int = TEXT_DEFAULTS["n_informative"], noise: float = TEXT_DEFAULTS["noise"],
                       seed: int = TEXT_DEFAULTS["seed"], overwrite: bool = False) -> dict:
    """Write a text-like sparse nsdist dataset (``part-NNNNN.parquet``, sparse layout) to ``root``.

    Rows: ``Poisson(m)`` term draws from a Zipf(``zipf_s``) law over the
    ``n_features`` terms (term ranks shuffled over the feature indices, as by a hash);
    a term drawn ``tf`` times gets ``(1 + log tf) * idf``, rows are L2-normalised;
    ``m`` is calibrated on a pilot sample so that rows hold ``nnz_per_row`` distinct
    terms on average.
    Labels: ``z = x . w* + e`` with ``w*`` sparse (``n_informative`` terms of mid
    frequency, ``N(0, 1)`` weights, a quarter of them 4x larger, scaled so that
    ``x . w*`` has unit standard deviation) and ``e`` logistic noise of standard
    deviation ``noise``; the top ``positive_rate`` of ``z`` (threshold fixed on a
    pilot sample) are positive.

    Deterministic for the arguments.  Files are written once; a finished directory
    (``_generated.json`` present, same arguments) is reused unless ``overwrite``.
    Returns the description stored in ``_generated.json`` (``true_weights`` file
    ``_true_weights.npz``: ``indices``, ``values``, ``threshold``; ``seconds`` it took).
    """
    root = Path(root)
    started = time.perf_counter()
    args = dict(n_rows=n_rows, n_files=n_files, n_features=n_features, nnz_per_row=nnz_per_row,
                zipf_s=zipf_s, positive_rate=positive_rate, n_informative=n_informative, noise=noise, seed=seed,
                parquet={"compression": "zstd", "dictionary_page_bytes": DICTIONARY_PAGE_BYTES})
    done = root / "_generated.json"
    if done.exists() and not overwrite:
        info = json.loads(done.read_text())
        if info["args"] == args:
            return info
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    rng = np.random.default_rng([seed, 0])
    cdf = _zipf_cdf(n_features, zipf_s)
    feature_of_rank = rng.permutation(n_features).astype(np.int64)
    p_rank = np.diff(np.concatenate([[0.0], cdf]))
    p_feature = np.empty(n_features)
    p_feature[feature_of_rank] = p_rank
    idf = np.log1p(1.0 / (p_feature * nnz_per_row))
    lo, hi = 50, min(n_features, 50 + 40 * n_informative)          # mid-frequency terms
    informative = np.sort(feature_of_rank[rng.choice(np.arange(lo, hi), n_informative, replace=False)])
    w_values = rng.normal(size=n_informative)
    w_values[: n_informative // 4] *= 4.0
    w = np.zeros(n_features)
    w[informative] = w_values
    draws = float(nnz_per_row)
    for k in range(3):                                              # repeated terms merge: draw more
        indptr = _text_rows(np.random.default_rng([seed, 3, k]), 5_000, cdf, feature_of_rank, idf, draws)[0]
        draws *= nnz_per_row / (indptr[-1] / 5_000)
    pilot = _text_rows(np.random.default_rng([seed, 1]), 50_000, cdf, feature_of_rank, idf, draws)
    s_pilot = _scores(*pilot, w)
    w /= s_pilot.std()                                              # scores of unit spread
    w_values /= s_pilot.std()
    logistic_scale = noise * np.sqrt(3.0) / np.pi                   # noise: its std, in score std units
    z_pilot = s_pilot / s_pilot.std() + logistic_scale * np.random.default_rng([seed, 2]).logistic(size=50_000)
    threshold = float(np.quantile(z_pilot, 1.0 - positive_rate))
    np.savez(root / "_true_weights.npz", indices=informative, values=w_values, threshold=threshold)
    meta = {"format": "nsdist-dataset", "layout": "sparse", "label_column": "label", "n_features": n_features,
            "source": {"format": "generated", "generator": "bench/sparse.py:generate_text_like", "args": args}}
    schema = pa.schema([pa.field("indices", pa.list_(pa.int32()), nullable=False),
                        pa.field("values", pa.list_(pa.float32()), nullable=False),
                        pa.field("label", pa.int8(), nullable=False)],
                       metadata={b"nsdist": json.dumps(meta, sort_keys=True).encode()})
    bounds = np.linspace(0, n_rows, n_files + 1).astype(np.int64)
    nnz_total, positives = 0, 0
    for f in range(n_files):
        n = int(bounds[f + 1] - bounds[f])
        indptr, cols, values = _text_rows(np.random.default_rng([seed, 10 + f]), n, cdf, feature_of_rank, idf,
                                          draws)
        z = _scores(indptr, cols, values, w) + logistic_scale * np.random.default_rng([seed, 10_000 + f]).logistic(size=n)
        y = np.where(z > threshold, 1, -1).astype(np.int8)
        offsets = pa.array(indptr.astype(np.int32))
        table = pa.Table.from_arrays([pa.ListArray.from_arrays(offsets, pa.array(cols)),
                                      pa.ListArray.from_arrays(offsets, pa.array(values)), pa.array(y)],
                                     schema=schema)
        pq.write_table(table, root / f"part-{f:05d}.parquet", **parquet_options(table, "sparse"))
        nnz_total += len(cols)
        positives += int((y > 0).sum())
    info = {"args": args, "num_rows": n_rows, "nnz": nnz_total, "nnz_per_row": nnz_total / n_rows,
            "positives": positives, "positive_rate": positives / n_rows, "threshold": threshold,
            "draws_per_row": float(draws), "seconds": time.perf_counter() - started,
            "true_weights": "_true_weights.npz"}
    done.write_text(json.dumps(info, indent=1, sort_keys=True))
    return info


# ----------------------------------------------------------------------------- measurements


def _median_seconds(fn, repeats: int) -> float:
    fn()                                   # warm-up: files in the page cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _read_speeds(ds: Dataset, repeats: int) -> dict:
    paths = [p.path for p in ds.partitions]

    def scan():
        for p in paths:
            pq.read_table(p)

    def read():
        for i in range(len(ds.partitions)):
            ds.read_partition(i)

    n = ds.num_rows
    return {"pyarrow_scan_rows_per_s": n / _median_seconds(scan, repeats),
            "read_partition_rows_per_s": n / _median_seconds(read, repeats)}


def _bytes(ds: Dataset) -> int:
    return int(sum(p.size for p in ds.partitions))


def _memory_bytes(ds: Dataset) -> int:
    """Bytes of the matrices ``read_partition`` returns (ndarray, or CSR data + indices + indptr)."""
    total = 0
    for i in range(len(ds.partitions)):
        X, _ = ds.read_partition(i)
        total += X.nbytes if isinstance(X, np.ndarray) else X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    return int(total)


def libsvm(work: Path, repeats: int) -> list[dict]:
    rows = []
    for name in ("w8a", "a9a"):
        src = SHARED / name / f"{name}.xz"
        if not src.exists():
            print(f"skipping {name}: {src} not found", file=sys.stderr)
            continue
        import lzma

        with lzma.open(src) as f:
            text_bytes = len(f.read())
        for layout in ("dense", "sparse"):
            start = time.perf_counter()
            ds = ingest(src, work / f"{name}-{layout}", layout=layout, overwrite=True)
            seconds = time.perf_counter() - start
            row = {"data": name, "layout": layout, "rows": ds.num_rows, "features": ds.n_features,
                   "nnz": ds.metadata["ingest"]["nnz"], "partitions": len(ds.partitions),
                   "bytes": _bytes(ds), "memory_bytes": _memory_bytes(ds), "svmlight_bytes": text_bytes, "xz_bytes": src.stat().st_size,
                   "ingest_seconds": seconds, **_read_speeds(ds, repeats)}
            rows.append(row)
            print(json.dumps(row))
    return rows


def text_like(work: Path, n_rows: int, n_files: int, repeats: int) -> dict:
    info = generate_text_like(work / "text", n_rows=n_rows, n_files=n_files)
    ds = Dataset.open(work / "text")
    X, _ = ds.read_partition(0)
    out = {**info, "generate_seconds": info["seconds"], "files": len(ds.partitions), "bytes": _bytes(ds),
           "dense_float32_bytes_estimate": n_rows * info["args"]["n_features"] * 4,
           "csr_bytes_partition0": int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes),
           **_read_speeds(ds, repeats)}
    print(json.dumps({k: v for k, v in out.items() if k != "args"}))
    return out


def wide_model(work: Path, repeats: int) -> dict:
    d = 2**24
    model = LinearModel(coef=np.random.default_rng(0).normal(size=d), intercept=0.5, measure="prec@k")
    path = str(work / "wide-model")
    save = _median_seconds(lambda: model.save(path), repeats)
    load = _median_seconds(lambda: load_model(path), repeats)
    out = {"n_features": d, "weights_bytes": 8 * (d + 1), "save_seconds": save, "load_seconds": load,
           "model_json_bytes": os.path.getsize(os.path.join(path, "model.json"))}
    print(json.dumps(out))
    return out


# ----------------------------------------------------------------------------- training (issue 12)

PARTS = ("scan", "libsvm-train", "text-onepass", "text-onepass-rss", "text-sklearn", "text-defaults", "kernel",
         "partition")
# fixed models of the layout-equality check (standardize=False): Prec@k's own (structural) surrogate, and a
# smooth one (AUC, logistic phi)
LIBSVM_FIXED = {"prec@k structural": dict(measure="prec@k", k=0.01, solver="1pmb", eta=1.0, n_passes=2),
                "auc logistic": dict(measure="auc", surrogate="logistic", solver="1pmb", eta=1.0, n_passes=2)}
# 1PMB one-pass runs on the text-like data: buffer_size:std|raw:eta, eta = 10 / E||x||^2 (E||x||^2 = 1 for the
# raw L2-normalised rows).  Sparse data trains as stored under standardize=True too (since c10c707), so "std"
# runs are the "raw" ones; the older results (before c10c707) had 500:std:1.6e-5 (625,494 after scaling).
TEXT_ONEPASS = "500:raw:10,5000:raw:10"     # add ":tok" to a configuration for the _ArrayToken what-if
# what changed between the older stored results and the current ones (shown with the tables)
CHANGES = ("Since the older numbers: sparse data is no longer standardised by default; the epoch kernel updates only "
           "the weights a buffer touches for CSR blocks whenever a buffer's non-zeros are at most d (2 d for a population; also for one "
           "candidate; `nsdist/solvers/lazy.py`: scores `X_e @ W` reading only the entries' weights, the gradient only "
           "on the rows with a non-zero dS, the averaged-iterate sum kept lazily and added once per block; no "
           "`np.unique`), epoch buffers are CSR views instead of copies, and partitions are read into CSR from the "
           "list offsets and Arrow's buffers with vectorised checks (`nsdist/data/layout.py`); then (9c9e978, fbddbf3) "
           "epoch buffers became true views (scipy's constructor had copied the slices), a lazy step gathers its rows' "
           "entries itself (no scipy row selection) and adds (1 - t) Delta_t to W_sum as it goes (no d x M scratch), and "
           "the read's finite check sums float32 values in float32; then (7cbf36f, the engine, issues 11/12) the "
           "driver no longer fetches the 16 MB d x M state after every step, only the epoch statistics "
           "(`nsdist.engine.chain.GATHER_BYTES`); the first step's state is scattered to the worker of the first load "
           "instead of travelling inside the graph; the sample for the cut is read while the chain's last steps run "
           "(not before the chain) and its CSR blocks are scored where they were read (no concatenation on one "
           "worker); a fresh worker's first read no longer imports pandas (Arrow's to_numpy did: ~0.25 s). Then "
           "(a2a1696, in the previous numbers below): the lazy step of one candidate adds its gradient with `np.add.at` on 1-D views of W "
           "(no scipy matrix built per epoch; several candidates keep scipy's product), reuses the gathered weights "
           "for the float32 copy, and completes the block's iterate sum in slices (no temporary of W's size); the "
           "checked CSR read reads the index range off each row's first and last index once the rows are known to "
           "increase (two fewer passes over the indices), checks finiteness with one BLAS dot, and marks the matrix "
           "canonical; other engineers' commits f585d30 (cheaper loss calls per epoch) and 1ccc43f (dense blocks) "
           "are in these runs too. Measured alone, old and new code alternating in one process (partitions 0 and 3, "
           "62,500 rows, same iterates bit for bit): `run_epochs` of one candidate 67.6 / 70.9 -> 58.1 / 56.5 ms "
           "at buffer_size=500, 36.5 / 40.2 -> 27.9 / 31.0 ms at 5000; 25 candidates on 5,000 rows 335 -> 265 ms "
           "(500), 209 -> 176 ms (5000); the checks of the CSR read (8 partitions x 3) 5.8 -> 4.5 ms (float32), "
           "13.8 -> 12.3 ms (float64). The whole job does not show it: a partition's load task (Parquet read, "
           "checks, stream order) takes 190-280 ms and its step 60-100 ms in the engine, against 60-80 ms and "
           "30-60 ms in one process (see the per-partition table), and the runs vary by more than the saving. "
           "Since the previous numbers (84b0789): for a `train` call every worker's glibc mmap / trim thresholds "
           "are raised to 32 / 64 MiB and set back afterwards (`nsdist.engine.cluster.heap_for_blocks`, "
           "docs/engine.md §Cluster): Dask's nanny starts workers with `MALLOC_TRIM_THRESHOLD_=65536`, which fixes "
           "the mmap threshold at 128 KiB, so every larger temporary of a step (the d-sized state copies: 8 MB "
           "each at 2^20) was a fresh mmap faulted in page by page. A/B just before this rerun (40d3d77 vs 84b0789, "
           "the buffer_size=500 job, 3 alternating pairs on fresh clusters, medians): whole job 3.77 -> 3.58 s, "
           "chain 3.03 -> 2.83 s; the thresholds alone by `client.run(mallopt)` earlier (3 pairs, a loaded "
           "machine): 5.32 -> 3.39 s. Since the previous numbers (at 84b0789, the table just below; this rerun at "
           "d55070d): the text files were regenerated with the sparse layout's write options (`nsdist.data.layout."
           "parquet_options`: no Parquet dictionary on the `indices` / `values` lists, whose distinct values exceed one "
           "dictionary page; same rows, so the same models "
           "and test measures): 43.1 -> 39.4 MB a file on average, one partition's `pq.read_table` on one thread "
           "128 -> 95 ms. The bare scan got faster (818,159 / 1,012,421 -> 1,109,645 / 905,386 rows/s, a noisy "
           "machine), the one-pass job did not measurably: alternating the old and the new files (buffer_size=500, "
           "3 pairs, fresh clusters) 3.28 / 2.63 / 3.10 -> 2.93 / 3.05 / 2.90 s, load tasks 252 / 181 / 199 -> "
           "191 / 191 / 197 ms -- the job waits on the sequential steps and the 16 MB state's hand-offs, not on "
           "the reads. Since those numbers (at 4fc8624, the table above): the fixed run's cut is placed on the "
           "partitions the chain loaded last, kept on the workers, instead of three partitions read a second time "
           "at the chain's end (they had taken a worker from the last step; 4 alternating pairs before the commit: "
           "3.57-3.99 -> 3.35-3.52 s), and each run is also measured against a fresh-cluster scan.")
TRAIN_K = 0.01          # Prec@k's k on the text-like data (1% of the rows, = the positive rate)
LR_MAX_ITER = 15        # LogisticRegression(solver="saga") epochs cap (it does not converge: said so)


def _now() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def _test_measures(y: np.ndarray, s: np.ndarray, k) -> dict:
    """The held-out measures on the driver (nsdist.metrics: exact, ties in expectation)."""
    from nsdist import metrics

    return {"precision_at_k": metrics.precision_at_k(y, s, k), "f1_score": metrics.f1_score(y, s, 0.0),
            "auc": metrics.auc(y, s), "prbep": metrics.prbep(y, s), "n_rows": int(len(y)),
            "n_positives": int((y > 0).sum()), "predicted_positive": int((s > 0).sum())}


def _csr_of(ds: Dataset):
    import scipy.sparse as sp

    blocks = [ds.read_partition(i) for i in range(len(ds.partitions))]
    if ds.is_sparse:
        X = sp.vstack([b[0] for b in blocks], format="csr")
    else:
        X = np.concatenate([b[0] for b in blocks])
    return X, np.concatenate([b[1] for b in blocks])


def _worker_peak_rss() -> int:
    """Peak RSS of this process's image (``VmHWM``).  Not ``getrusage().ru_maxrss``: a spawned worker is
    forked from the driver and Linux keeps the fork's high-water mark across ``exec``, so ``ru_maxrss``
    reports the driver's memory, not the worker's."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _worker_rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _cluster():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    return cluster, Client(cluster)


def _libsvm_split(name: str, work: Path):
    """(train, test, label) datasets of both layouts: a9a's own test file; w8a's last 3 of 10 partitions."""
    src = SHARED / name / f"{name}.xz"
    out = {}
    for layout in ("dense", "sparse"):
        start = time.perf_counter()
        if name == "a9a":
            train = ingest(src, work / f"train-{name}-{layout}", layout=layout, overwrite=True)
            test = ingest(SHARED / name / f"{name}.t.xz", work / f"train-{name}.t-{layout}", layout=layout,
                          n_features=train.n_features, overwrite=True)
            split = "a9a.t (16,281 rows)"
        else:
            ds = ingest(src, work / f"train-{name}-{layout}", layout=layout, rows_per_partition=5000,
                        overwrite=True)
            train, test = ds.select(range(7), "train"), ds.select(range(7, len(ds.partitions)), "test")
            split = "last 3 of 10 partitions of 5,000 rows (shuffled at ingest; the same rows in both layouts)"
        out[layout] = (train, test, split, time.perf_counter() - start)
    return out


def libsvm_training(work: Path, repeats: int, fixed_configs: dict) -> list[dict]:
    """Both layouts: fixed unstandardised models (equality, rows/s), and the defaults; test measures."""
    import nsdist

    rows = []
    for name in ("w8a", "a9a"):
        if not (SHARED / name / f"{name}.xz").exists():
            print(f"skipping {name}: not found", file=sys.stderr)
            continue
        split = _libsvm_split(name, work)
        cluster, client = _cluster()
        try:
            result = {"data": name, "split": split["dense"][2], "fixed": fixed_configs, "layouts": {},
                      "equality": {}}
            models: dict = {key: {} for key in fixed_configs}
            for layout, (train, test, _, ingest_s) in split.items():
                Xt, yt = _csr_of(test)
                r = {"train_rows": train.num_rows, "test_rows": test.num_rows, "features": train.n_features,
                     "train_bytes": _bytes(train), "test_bytes": _bytes(test), "ingest_seconds": ingest_s, "fixed": {}}
                for key, fixed in fixed_configs.items():
                    secs, rps = [], []
                    for _ in range(repeats):
                        t = time.perf_counter()
                        m = nsdist.train(train, client=client, standardize=False, **fixed)
                        secs.append(time.perf_counter() - t)
                        rps.append(m.history["rows_per_second"])
                    models[key][layout] = m
                    r["fixed"][key] = {"seconds": statistics.median(secs), "all_seconds": secs,
                                       "rows_per_s_whole_job": fixed["n_passes"] * train.num_rows / statistics.median(secs),
                                       "rows_per_s_chain": statistics.median(rps),
                                       "test": _test_measures(yt, m.decision_function(Xt), TRAIN_K)}
                t = time.perf_counter()
                d = nsdist.train(train, client=client, measure="prec@k", k=TRAIN_K)
                secs = time.perf_counter() - t
                r["defaults"] = {"seconds": secs, "rows_seen": d.history["rows_seen"],
                                 "rows_per_s_chain": d.history["rows_per_second"], "selected": d.params.get("selected"),
                                 "eta": d.params.get("eta"), "passes": d.history["passes"],
                                 "test": _test_measures(yt, d.decision_function(Xt), TRAIN_K)}
                result["layouts"][layout] = r
            for key in fixed_configs:
                a, b = models[key]["dense"], models[key]["sparse"]
                scale = max(np.abs(a.coef).max(), abs(a.intercept), 1e-300)
                result["equality"][key] = {
                    "max_abs_diff_coef": float(np.abs(a.coef - b.coef).max()),
                    "max_rel_diff": float(max(np.abs(a.coef - b.coef).max(), abs(a.intercept - b.intercept)) / scale),
                    "intercepts": [a.intercept, b.intercept],
                    "measures_identical": (result["layouts"]["dense"]["fixed"][key]["test"]
                                           == result["layouts"]["sparse"]["fixed"][key]["test"])}
        finally:
            client.close()
            cluster.close()
        rows.append(result)
        print(json.dumps(result, default=str), flush=True)
    return rows


def _scan_seconds(paths: list[str]) -> float:
    start = time.perf_counter()
    for p in paths:
        pq.read_table(p)
    return time.perf_counter() - start


def _scan_to_numpy(path: str) -> int:
    """One file read and made numpy arrays, as the chain's load starts: row offsets, indices, values, labels."""
    table = pq.read_table(path)
    indices, values = table.column("indices").combine_chunks(), table.column("values").combine_chunks()
    offsets = indices.offsets.to_numpy()
    cols, data = indices.values.to_numpy(), values.values.to_numpy()
    y = table.column("label").to_numpy()
    assert cols.shape == data.shape and offsets.shape[0] == y.shape[0] + 1
    return y.shape[0]


def _worker_cpu() -> tuple[float, float, int]:
    """This process's CPU seconds so far in user and in kernel mode, and its minor page faults (run on a worker)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def _cpu_since(client, before: dict) -> dict:
    """The workers' CPU since ``before`` (``client.run(_worker_cpu)``), summed over the workers: user and kernel
    seconds and minor page faults."""
    after = client.run(_worker_cpu)
    used = [tuple(a - b for a, b in zip(after[w], before[w])) for w in before if w in after]
    return {"user": sum(u[0] for u in used), "system": sum(u[1] for u in used), "faults": int(sum(u[2] for u in used))}


FIRST_TOUCH_MB = 256


def _first_touch() -> dict:
    """What fresh memory costs on this machine: a new process writes ``FIRST_TOUCH_MB`` MiB once (every page
    faulted in) and then again (no faults), in ms per MiB.  A virtual machine whose host backs guest memory
    lazily (and takes back pages freed for a while) can charge milliseconds a MiB for the first write against
    tens of microseconds for the second, so a job's fresh memory, not its arithmetic, can set its time."""
    import subprocess

    code = ("import time, numpy as np\n"
            f"a = np.empty({FIRST_TOUCH_MB} << 17)\n"
            "t = time.perf_counter(); a.fill(1.0); t1 = time.perf_counter(); a.fill(2.0); t2 = time.perf_counter()\n"
            "print(t1 - t, t2 - t1)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    first, again = (1000 * float(x) / FIRST_TOUCH_MB for x in out)
    return {"first_write_ms_per_mib": first, "second_write_ms_per_mib": again}


def _cpu_seconds(cpu: dict) -> float:
    return cpu["user"] + cpu["system"]


def _median_cpu(runs: list[dict], key: str) -> dict:
    """The median over ``runs`` of each of their ``key`` CPU figures (:func:`_cpu_since`)."""
    return {k: statistics.median(r[key][k] for r in runs) for k in ("user", "system", "faults")}


def _fresh_scan(paths: list[str]) -> tuple[float, dict]:
    """The bare scan as ``bench/scale.py`` times it (issue 11): every file read and made numpy arrays on the
    two workers of a fresh ``LocalCluster`` -- the footing of the job's fresh workers (its start-up apart).
    Returns its seconds and the workers' CPU (:func:`_cpu_since`)."""
    cluster, client = _cluster()
    try:
        before = client.run(_worker_cpu)
        start = time.perf_counter()
        rows = sum(client.gather(client.map(_scan_to_numpy, paths, pure=False)))
        seconds = time.perf_counter() - start
        cpu = _cpu_since(client, before)
    finally:
        client.close()
        cluster.close()
    assert rows > 0
    return seconds, cpu


def text_split(work: Path, n_test_files: int = 2):
    ds = Dataset.open(work / "text")
    n = len(ds.partitions)
    return ds, ds.select(range(n - n_test_files), "train"), ds.select(range(n - n_test_files, n), "test")


def _config_name(buffer_size: int, standardize: bool, token_patch: bool = False) -> str:
    return f"buffer_size={buffer_size}, standardize={standardize}" + (", chain token from arrays" if token_patch else "")


def _onepass_configs(spec: str) -> list[tuple]:
    """``BUFFER_SIZE:std|raw:ETA[:tok]`` comma-separated -> ``(buffer_size, standardize, eta, token_patch)``."""
    out = []
    for c in spec.split(","):
        b, std, eta, *rest = c.split(":")
        out.append((int(b), std == "std", float(eta), rest == ["tok"]))
    return out


class _ArrayToken:
    """What-if for the driver (``:tok`` configurations): ``PartitionChain`` keys its tasks by
    ``tokenize(..., state.to_dict(), ...)``, which turns the d x M iterates and sums into Python lists and
    tokenises them float by float (seconds at d = 2^20).  Inside this context the driver's chain tokenises
    the same state from its arrays instead (dask hashes array buffers); the model is unchanged (task keys
    only), the time saved is what the chain would save by keying on the arrays."""

    def __enter__(self):
        import nsdist.engine.chain as chain
        from dask.base import tokenize

        def arrays(x):
            if isinstance(x, dict) and "W" in x and "W_sum" in x:
                return {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in x.items()}
            return x

        self._chain, self._orig = chain, chain.tokenize
        chain.tokenize = lambda *a: tokenize(*[arrays(x) for x in a])
        return self

    def __exit__(self, *exc):
        self._chain.tokenize = self._orig


def text_onepass(work: Path, repeats: int, configs=((500, True, 10.0),)) -> dict:
    """One pass of 1PMB (fixed eta): whole-job rows/s against two bare pyarrow scans in the same run, RSS.

    The scans: ``pq.read_table`` of every file in this process, warm (after a warm-up scan here: page
    cache, allocator and Arrow's threads all warm); and :func:`_fresh_scan`, the files read and
    made numpy arrays on a fresh two-worker cluster, as the job's workers are fresh (``bench/scale.py``'s
    scan for issue 11).  ``configs``: ``(buffer_size, standardize, eta)``, each run ``repeats`` times (the
    first of them also scores the held-out files).
    """
    import nsdist

    ds, train, test = text_split(work)
    paths = [p.path for p in train.partitions]
    X0, _ = train.read_partition(0)
    csr0 = int(X0.data.nbytes + X0.indices.nbytes + X0.indptr.nbytes)
    del X0
    _scan_seconds(paths)                                       # warm-up: files in the page cache
    Xt, yt = _csr_of(test)
    touch = [_first_touch()]
    runs = []
    for buffer_size, standardize, eta, token_patch in configs:
        for rep in range(repeats):
            scan = _scan_seconds(paths)
            fresh_scan, scan_cpu = _fresh_scan(paths)
            t0 = time.perf_counter()
            cluster, client = _cluster()
            try:
                t1 = time.perf_counter()
                idle = client.run(_worker_rss)
                before = client.run(_worker_cpu)
                with _ArrayToken() if token_patch else contextlib.nullcontext():
                    m = nsdist.train(train, client=client, solver="1pmb", eta=eta, n_passes=1, measure="prec@k",
                                     k=TRAIN_K, buffer_size=buffer_size, standardize=standardize)
                t2 = time.perf_counter()
                cpu = _cpu_since(client, before)
                peak = client.run(_worker_peak_rss)
            finally:
                client.close()
                cluster.close()
            run = {"config": _config_name(buffer_size, standardize, token_patch), "buffer_size": buffer_size,
                   "token_patch": token_patch,
                   "standardize": standardize, "eta": eta, "repeat": rep, "scan_seconds": scan, "startup_seconds": t1 - t0,
                   "train_seconds": t2 - t1, "scan_rows_per_s": train.num_rows / scan,
                   "rows_per_s_whole_job": train.num_rows / (t2 - t1),
                   "rows_per_s_with_startup": train.num_rows / (t2 - t0),
                   "rows_per_s_chain": m.history["rows_per_second"], "phases": m.history["phases"],
                   "fresh_scan_seconds": fresh_scan, "fresh_scan_rows_per_s": train.num_rows / fresh_scan,
                   "ratio_whole_job_vs_fresh_scan": fresh_scan / (t2 - t1),
                   "ratio_whole_job_vs_scan": scan / (t2 - t1), "ratio_chain_vs_scan": m.history["rows_per_second"] * scan / train.num_rows,
                   "worker_idle_rss": sorted(idle.values()), "worker_peak_rss": sorted(peak.values()),
                   "worker_cpu": cpu, "fresh_scan_worker_cpu": scan_cpu,
                   "ratio_cpu_fresh_scan_vs_job": _cpu_seconds(scan_cpu) / _cpu_seconds(cpu),
                   "epochs": m.history["epochs"]}
            if rep == 0:
                run["test"] = _test_measures(yt, m.decision_function(Xt), TRAIN_K)
            runs.append(run)
            print(_now(), json.dumps({k: v for k, v in run.items() if k != "phases"}), flush=True)
    out = {"train_rows": train.num_rows, "train_files": len(train.partitions),
           "test_rows": test.num_rows, "test_files": len(test.partitions), "n_features": train.n_features,
           "partition_csr_bytes": csr0, "model_bytes": 8 * train.n_features,
           "dense_partition_float32_bytes": train.partitions[0].num_rows * train.n_features * 4,
           "runs": runs, "summary": {}, "first_touch": touch + [_first_touch()]}
    for buffer_size, standardize, eta, token_patch in configs:
        name = _config_name(buffer_size, standardize, token_patch)
        rs = [r for r in runs if r["config"] == name]
        med = lambda key: statistics.median(r[key] for r in rs)                       # noqa: E731
        out["summary"][name] = {
            "buffer_size": buffer_size, "standardize": standardize, "eta": eta, "runs": len(rs), "scan_rows_per_s": med("scan_rows_per_s"),
            "rows_per_s_whole_job": med("rows_per_s_whole_job"), "rows_per_s_chain": med("rows_per_s_chain"),
            "rows_per_s_with_startup": med("rows_per_s_with_startup"),
            "ratio_whole_job_vs_scan": med("ratio_whole_job_vs_scan"), "ratio_chain_vs_scan": med("ratio_chain_vs_scan"),
            "train_seconds": med("train_seconds"), "scan_seconds": med("scan_seconds"),
            "fresh_scan_rows_per_s": med("fresh_scan_rows_per_s"),
            "ratio_whole_job_vs_fresh_scan": med("ratio_whole_job_vs_fresh_scan"),
            "chain_seconds": statistics.median(r["phases"]["chain"] for r in rs),
            "worker_peak_rss_max": max(max(r["worker_peak_rss"]) for r in rs),
            "worker_idle_rss_max": max(max(r["worker_idle_rss"]) for r in rs),
            "worker_cpu_seconds": _median_cpu(rs, "worker_cpu"),
            "fresh_scan_worker_cpu_seconds": _median_cpu(rs, "fresh_scan_worker_cpu"),
            "ratio_cpu_fresh_scan_vs_job": med("ratio_cpu_fresh_scan_vs_job"),
            "test": rs[0]["test"]}
    return out


def text_sklearn(work: Path, lr: bool = True) -> dict:
    """scikit-learn on the same training rows, in memory (CSR float64), tested on the same held-out files."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    _, train, test = text_split(work)
    t = time.perf_counter()
    X, y = _csr_of(train)
    X = X.astype(np.float64)
    load = time.perf_counter() - t
    Xt, yt = _csr_of(test)
    Xt = Xt.astype(np.float64)
    out = {"load_seconds": load, "train_csr_float64_bytes": int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes),
           "train_nnz": int(X.nnz), "models": {}}
    models = {"SGDClassifier(loss='hinge')": SGDClassifier(loss="hinge", random_state=0),
              "SGDClassifier(loss='log_loss')": SGDClassifier(loss="log_loss", random_state=0)}
    if lr:
        models[f"LogisticRegression(solver='saga', max_iter={LR_MAX_ITER})"] = LogisticRegression(
            solver="saga", max_iter=LR_MAX_ITER, random_state=0)
    for name, est in models.items():
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            est.fit(X, y)
        secs = time.perf_counter() - t
        r = {"seconds": secs, "rows_per_s": X.shape[0] * int(np.max(est.n_iter_)) / secs,
             "n_iter": int(np.max(est.n_iter_)),
             "converged": not any(issubclass(w.category, ConvergenceWarning) for w in caught),
             "test": _test_measures(yt, est.decision_function(Xt), TRAIN_K)}
        out["models"][name] = r
        print(_now(), name, json.dumps(r), flush=True)
    return out


def text_defaults(work: Path, progress: Path | None = None, extra: dict | None = None) -> dict:
    """The default configuration (holdout, candidate population, early stopping): whole-job time, test measures."""
    import nsdist

    _, train, test = text_split(work)
    Xt, yt = _csr_of(test)
    log = open(progress, "w") if progress else None

    def on_step(p):
        if log is not None:
            log.write(json.dumps({"t": _now(), "step": p.step, "n_steps": p.n_steps, "pass": p.pass_index,
                                  "rows_seen": p.rows_seen, "elapsed": p.elapsed}) + "\n")
            log.flush()

    t0 = time.perf_counter()
    cluster, client = _cluster()
    try:
        t1 = time.perf_counter()
        m = nsdist.train(train, client=client, measure="prec@k", k=TRAIN_K, on_step=on_step, **(extra or {}))
        t2 = time.perf_counter()
        peak = client.run(_worker_peak_rss)
    finally:
        client.close()
        cluster.close()
        if log is not None:
            log.close()
    h = m.history
    out = {"extra_params": extra or {}, "startup_seconds": t1 - t0, "train_seconds": t2 - t1, "rows_seen": h["rows_seen"],
           "rows_per_s_chain": h["rows_per_second"], "passes": h["passes"], "max_passes": h["max_passes"],
           "validation_rows": h["validation_rows"], "selected": m.params.get("selected"), "eta": m.params.get("eta"),
           "n_candidates": len(h.get("selection", [])), "phases": h["phases"],
           "worker_peak_rss": sorted(peak.values()),
           "test": _test_measures(yt, m.decision_function(Xt), TRAIN_K)}
    print(_now(), json.dumps(out), flush=True)
    return out


def kernel_cost(work: Path) -> dict:
    """The epoch kernel alone (``run_epochs``, one process): the same rows and non-zeros at d = 2^20 and at
    d = 2^14 (indices folded modulo d), one candidate and the default population, two buffer sizes; each with
    the update the kernel chooses (lazy for CSR buffers touching few features) and with the dense update
    forced (the whole d x M matrix every epoch)."""
    import scipy.sparse as sp

    import nsdist.solvers.kernel as kernel
    from nsdist.solvers.config import TrainConfig
    from nsdist.solvers.kernel import SGDState, run_epochs
    from nsdist.solvers.lazy import use_lazy

    X, y = Dataset.open(work / "text").read_partition(0, dtype=np.float32)     # the files' width, as trained
    rows = []
    for d in (X.shape[1], 2**14):
        Xd = sp.csr_matrix((X.data, X.indices % d, X.indptr), shape=(X.shape[0], d))
        Xd.sum_duplicates()
        for params in (dict(eta=10.0, n_passes=1), {}):
            cfg = TrainConfig.from_params(measure="prec@k", k=TRAIN_K, standardize=False, **params).resolve(
                n_features=d, n_rows=10**6, mean_sq_norm=1.0, n_validation=1000)
            M = len(cfg.candidates)
            n = 20_000          # 40 epochs of 500 rows: the per-block copies of W (O(d M)) are not all it shows
            for bs in (500, 5000):
                chosen = "lazy" if use_lazy(Xd[:n], M, bs, None) else "dense"
                for update in dict.fromkeys((chosen, "dense")):
                    kernel.use_lazy = use_lazy if update == chosen else (lambda *a: False)
                    try:
                        secs = []
                        for _ in range(3):
                            start = time.perf_counter()
                            run_epochs(SGDState.zeros(d, M), Xd[:n], y[:n], cfg.population, buffer_size=bs)
                            secs.append(time.perf_counter() - start)
                    finally:
                        kernel.use_lazy = use_lazy
                    sec = statistics.median(secs)
                    r = {"d": d, "candidates": M, "buffer_size": bs, "rows": n, "nnz": int(Xd[:n].nnz),
                         "update": update, "chosen": update == chosen, "seconds": sec, "all_seconds": secs,
                         "rows_per_s": n / sec, "ms_per_epoch": 1000 * sec / -(-n // bs)}
                    rows.append(r)
                    print(_now(), json.dumps(r), flush=True)
    return {"rows": rows, "dtype": "float32"}


def _task_stream_means(records: list[dict]) -> dict:
    """Mean seconds and count of each (task prefix, action) of Dask's task stream, for nsdist's load and step."""
    out: dict = {}
    for rec in records:
        key = rec["key"][0] if isinstance(rec["key"], tuple) else rec["key"]
        task = next((t for t in ("load", "step") if str(key).startswith(f"nsdist-{t}-")), None)
        if task is None:
            continue
        for ss in rec["startstops"]:
            agg = out.setdefault(f"{task} {ss['action']}", [0, 0.0])
            agg[0] += 1
            agg[1] += ss["stop"] - ss["start"]
    return {k: {"n": n, "mean_seconds": sec / n} for k, (n, sec) in sorted(out.items())}


def partition_costs(work: Path, repeats: int) -> dict:
    """What one training partition (62,500 rows, ~6.25 M non-zeros, float32) costs, in one process and in
    the engine.

    In one process, medians over the first ``repeats`` training partitions (each read afresh, files in the
    page cache): the bare scan ``pq.read_table``; the dataset's Parquet read (``Dataset._read``, one chunk
    per column) and the checks of the CSR read on its table (:func:`nsdist.data.layout.sparse_matrix`);
    ``read_partition``; ``read_block`` with
    a row permutation (the chain's load: read, check, stream order); ``run_epochs`` of one candidate
    (the text-onepass model) over partition 0 from a zero state, ``repeats`` times per buffer size.  In
    the engine: the one-pass job of ``text-onepass`` once per buffer size (fresh cluster), the mean
    seconds of its load and step tasks from Dask's task stream.

    Every one-process figure is also taken in CPU seconds (``time.process_time``: all threads of the
    process, so the scan's Arrow decoding threads count), and the engine's job in the CPU seconds of
    its worker processes and of the driver (which hosts the scheduler).  They bound what the one-pass
    job can reach against the scan on this machine (:func:`_onepass_bound`).
    """
    import nsdist
    from distributed import get_task_stream

    from nsdist.data.layout import sparse_matrix
    from nsdist.solvers.config import TrainConfig
    from nsdist.solvers.kernel import SGDState, run_epochs

    _, train, _ = text_split(work)
    paths = [p.path for p in train.partitions][:repeats]
    _scan_seconds(paths)                                       # warm-up: files in the page cache
    perm = np.random.default_rng(0).permutation(train.partitions[0].num_rows)
    secs: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    def timed(name: str, f):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = f()
        secs.setdefault(name, []).append(time.perf_counter() - start)
        cpu.setdefault(name, []).append(time.process_time() - start_cpu)
        return out

    for i, path in enumerate(paths):
        timed("scan", lambda: pq.read_table(path))
        table, where = timed("parquet", lambda: train._read(i, train.schema.read_columns))
        timed("checks", lambda: sparse_matrix(table, train.n_features, np.float32, where, names=train.schema.names))
        del table
        timed("read_partition", lambda: train.read_partition(i, dtype=np.float32))
        timed("read_block", lambda: train.read_block(i, dtype=np.float32, order=lambda y: perm[:y.shape[0]]))
    X, y = train.read_partition(0, dtype=np.float32)
    cfg = TrainConfig.from_params(measure="prec@k", k=TRAIN_K, standardize=False, eta=10.0, n_passes=1).resolve(
        n_features=X.shape[1], n_rows=10**6, mean_sq_norm=1.0, n_validation=1000)
    engine = {}
    for bs in (500, 5000):
        for _ in range(repeats):
            timed(f"run_epochs {bs}", lambda: run_epochs(SGDState.zeros(X.shape[1], 1), X, y, cfg.population,
                                                         buffer_size=bs))
        cluster, client = _cluster()
        try:
            before = client.run(time.process_time)
            with get_task_stream(client) as ts:
                start, start_cpu = time.perf_counter(), time.process_time()
                m = nsdist.train(train, client=client, solver="1pmb", eta=10.0, n_passes=1, measure="prec@k",
                                 k=TRAIN_K, buffer_size=bs, standardize=False)
                job, driver_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            after = client.run(time.process_time)
        finally:
            client.close()
            cluster.close()
        engine[str(bs)] = {"job_seconds": job, "chain_seconds": m.history["phases"]["chain"],
                           "workers_cpu_seconds": sum(after[w] - before[w] for w in after),
                           "driver_cpu_seconds": driver_cpu, "tasks": _task_stream_means(ts.data)}
        print(_now(), bs, json.dumps(engine[str(bs)]), flush=True)
    return {"rows": int(X.shape[0]), "nnz": int(X.nnz), "partitions": len(paths), "dtype": "float32",
            "train_partitions": len(train.partitions),
            "median_seconds": {k: statistics.median(v) for k, v in secs.items()}, "all_seconds": secs,
            "median_cpu_seconds": {k: statistics.median(v) for k, v in cpu.items()}, "cores": os.cpu_count(),
            "engine": engine}


def _pct(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def _mib(x) -> str:
    return f"{x / 2**20:,.0f} MiB"


def _older_onepass(old: dict | None, when: str) -> list[str]:
    """The summary table of replaced one-pass results, marked as older (none: no lines)."""
    if not old:
        return []
    lines = [f"Older one-pass numbers: {when} (finished {old.get('finished', '?')}; same files, same calls):", "",
             "| buffer_size, standardize | ETA | scan rows/s | whole-job rows/s | ratio whole-job / scan | "
             "chain rows/s | test Prec@1% | test F1 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, x in old["summary"].items():
        lines.append(f"| {name} (older) | {x['eta']:.2g} | {x['scan_rows_per_s']:,.0f} | "
                     f"{x['rows_per_s_whole_job']:,.0f} | {x['ratio_whole_job_vs_scan']:.2f}x | "
                     f"{x['rows_per_s_chain']:,.0f} | {_pct(x['test']['precision_at_k'])} | "
                     f"{_pct(x['test']['f1_score'])} |")
    return lines + [""]


def markdown_training(t: dict) -> list[str]:
    """The training tables (issue 12) from ``raw["training"]``; missing parts are said to be missing."""
    loads = [x["load_average"] for v in t.values() for x in (v if isinstance(v, list) else [v])
             if isinstance(x, dict) and x.get("load_average")]
    lines = ["## Training on sparse data (issue 12)", "",
             "Reproduce (each part can be run alone; the parts not run keep their stored results in "
             "`bench/results/sparse.json`, which holds every number below and every single run):", "",
             "```", "python bench/sparse.py --dir /tmp/nsdist-bench-sparse --parts libsvm-train",
             "python bench/sparse.py --dir /tmp/nsdist-bench-sparse --parts text-onepass,text-sklearn",
             "python bench/sparse.py --dir /tmp/nsdist-bench-sparse --parts text-onepass-rss",
             "python bench/sparse.py --dir /tmp/nsdist-bench-sparse --parts kernel",
             "python bench/sparse.py --dir /tmp/nsdist-bench-sparse --parts text-defaults --defaults-set "
             "buffer_size=5000,max_passes=1", "```", "",
             "Machine: 2 cores shared with other jobs (1-minute load average "
             + (f"{min(min(l) for l in loads):.0f}-{max(max(l) for l in loads):.0f}" if loads else "?")
             + " during these parts, and the memory, kernel and reduced-defaults parts overlapped each other): "
             "absolute rates are low and noisy; the scan and nsdist are measured in the same run so that their "
             "ratio is comparable.", ""]
    lib = t.get("libsvm")
    if lib:
        fixed = lib[0]["fixed"]
        lines += ["### LIBSVM w8a and a9a: the sparse model against the dense one", "",
                  "Data ingested with `nsdist.ingest(src, dst, layout=\"dense\"|\"sparse\")`. Fixed models "
                  "(no holdout, no selection; a sample of partitions gives the cut), per layout: "
                  + "; ".join(f"**{k}**: `nsdist.train(train, client=c, standardize=False, "
                              + ", ".join(f"{a}={v!r}" for a, v in f.items()) + ")`" for k, f in fixed.items())
                  + ". The equality needs `standardize=False`: dense standardisation centres the features and "
                  "sparse standardisation does not (centring would destroy sparsity), so the *standardised* "
                  "models differ by design. Defaults: `nsdist.train(train, client=c, measure=\"prec@k\", k=0.01)` "
                  "(holdout, candidate population, early stopping, `standardize=True`). Test measures by "
                  "`nsdist.metrics` on the held-out rows: Prec@k at k = 1% of them, F1 at score 0. One fresh "
                  "`LocalCluster(n_workers=2, threads_per_worker=1)` per data set; whole-job rows/s = training "
                  "rows x passes / wall seconds of `nsdist.train` (median of the repeats); chain rows/s: the "
                  "streaming phase alone.", "",
                  "| data | test rows | fixed model | max rel. diff sparse vs dense (coef, b) | test measures identical |",
                  "|---|---|---|---:|---|"]
        for r in lib:
            for key, e in r["equality"].items():
                lines.append(f"| {r['data']} | {r['split']} | {key} | {e['max_rel_diff']:.1e} | "
                             f"{'yes' if e['measures_identical'] else '**no**'} |")
        if any(not e["measures_identical"] or e["max_rel_diff"] > 1e-9 for r in lib for e in r["equality"].values()):
            lines += ["", "Where the layouts differ (w8a with Prec@k's structural surrogate, deterministic over "
                      "repeats): the dense kernel's `X @ W` (BLAS) and the CSR product sum in different orders, so "
                      "scores differ in the last bits (checked separately on w8a rows: 41,871 of 120,000 products "
                      "differ bitwise), and the structural surrogate's discrete step (which rows enter the "
                      "loss-augmented top k; w8a's binary features make near-ties common) turns one ulp into a "
                      "different subgradient, after which the iterates drift apart. The smooth logistic surrogate "
                      "stays within 3e-16 on the same rows. With 8 training partitions instead of 7, and through "
                      "`NonDecomposableClassifier` in memory on the same 7, the dense and sparse models are "
                      "bit-identical: the equality holds as long as no near-tie flips; it is not guaranteed."]
        lines += ["", "| data | layout | fixed model | train rows | bytes on disk (train) | s | whole-job rows/s | "
                  "chain rows/s | test Prec@1% | test F1 | test AUC |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in lib:
            for key in r["fixed"]:
                for layout, x in r["layouts"].items():
                    fx = x["fixed"][key]
                    lines.append(f"| {r['data']} | {layout} | {key} | {x['train_rows']:,} | {x['train_bytes']:,} | "
                                 f"{fx['seconds']:.2f} | {fx['rows_per_s_whole_job']:,.0f} | {fx['rows_per_s_chain']:,.0f} | "
                                 f"{_pct(fx['test']['precision_at_k'])} | {_pct(fx['test']['f1_score'])} | "
                                 f"{_pct(fx['test']['auc'])} |")
        lines += ["", "| data | layout | defaults: whole-job s | passes | selected | test Prec@1% | test F1 | test AUC |",
                  "|---|---|---:|---:|---|---:|---:|---:|"]
        for r in lib:
            for layout, x in r["layouts"].items():
                dx = x["defaults"]
                lines.append(f"| {r['data']} | {layout} | {dx['seconds']:.1f} | {dx['passes']} | {dx['selected']} | "
                             f"{_pct(dx['test']['precision_at_k'])} | {_pct(dx['test']['f1_score'])} | "
                             f"{_pct(dx['test']['auc'])} |")
        lines += ["", "This part rerun at 964d98d (2026-11-29 00:25 UTC) with fused steps (docs/engine.md §Fused steps: "
                  "a cached dataset of small partitions is gathered and stepped several partitions to a task on one "
                  "worker, and each segment's first group runs while the driver checks). Defaults, whole job: w8a "
                  "dense 7.6 -> 4.5 s, sparse 3.6 -> 1.3 s; a9a dense 0.9 -> 0.7 s, sparse 1.4 -> 0.7 s; the same "
                  "passes, selected candidates and test measures (the same models). Fixed 2-pass models: the dense "
                  "ones are fused too (w8a prec@k 0.74 -> 0.59 s, auc 0.58 -> 0.44 s); the sparse ones keep their "
                  "last blocks for the cut and are not (0.21 -> 0.27 s, 0.21 -> 0.22 s: the machine)."]
        lines += ["", "Ratios sparse / dense: " + "; ".join(
            f"{r['data']} " + ", ".join(
                f"{key} {r['layouts']['sparse']['fixed'][key]['rows_per_s_whole_job'] / r['layouts']['dense']['fixed'][key]['rows_per_s_whole_job']:.2f}x whole-job rows/s"
                for key in r["fixed"])
            + f", {r['layouts']['sparse']['train_bytes'] / r['layouts']['dense']['train_bytes']:.2f}x bytes on disk"
            for r in lib) + ".", ""]
    op = t.get("text_onepass")
    if op:
        lines += ["### Text-like data: one pass of 1PMB against a bare scan", "",
                  f"Training: the first {op['train_files']} files ({op['train_rows']:,} rows); test: the last "
                  f"{op['test_files']} ({op['test_rows']:,} rows, never trained on). Per run, in this order: a bare "
                  "`pq.read_table` of the training files in the driver (sequential, after a warm-up scan in the same "
                  "process: page cache, allocator and Arrow's two decoding threads warm; \"warm scan\"), "
                  + ("the same files read and made numpy arrays (row offsets, indices, values, labels) on the two "
                     "workers of a fresh `LocalCluster(n_workers=2, threads_per_worker=1)`, `bench/scale.py`'s scan "
                     "for issue 11 (\"fresh scan\": the footing of the job's fresh workers, whose first reads pay "
                     "for fresh memory -- 530-650 ms against 170-190 ms later, measured in one worker), "
                     if any("ratio_whole_job_vs_fresh_scan" in s for s in op["summary"].values()) else "")
                  + "a fresh `LocalCluster(n_workers=2, threads_per_worker=1)`, then",
                  "`nsdist.train(train, client=c, solver=\"1pmb\", eta=ETA, n_passes=1, measure=\"prec@k\", k=0.01, "
                  "buffer_size=B, standardize=S)`; whole-job rows/s = training rows / wall seconds of that call "
                  "(class check, sample for the cut, chain, cut; the cluster's start-up apart); chain: the streaming "
                  "phase alone. ETA = 10 / E||x||^2 (E||x||^2 = 1 raw, 625,494 after the scale-only "
                  "standardisation); the Prec@k structural surrogate's model does not depend on ETA here (checked "
                  "for ETA x 0.1 ... x 100 on 3 files: identical test measures). "
                  f"Medians of {max(s['runs'] for s in op['summary'].values())} runs; test measures of the first.", "",
                  "| buffer_size, standardize | ETA | scan rows/s | nsdist whole-job rows/s | ratio whole-job / scan | "
                  "chain rows/s | ratio chain / scan | job s | chain s | test Prec@1% | test F1 | test AUC |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        fresh = all("ratio_whole_job_vs_fresh_scan" in s for s in op["summary"].values())
        if fresh:
            lines[-2:] = ["| buffer_size, standardize | ETA | warm scan rows/s | fresh scan rows/s | nsdist whole-job "
                          "rows/s | ratio whole-job / warm scan | ratio whole-job / fresh scan | chain rows/s | "
                          "ratio chain / warm scan | job s | chain s | test Prec@1% | test F1 | test AUC |",
                          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, s in op["summary"].items():
            lines.append(f"| {name} | {s['eta']:g} | {s['scan_rows_per_s']:,.0f} | "
                         + (f"{s['fresh_scan_rows_per_s']:,.0f} | " if fresh else "")
                         + f"{s['rows_per_s_whole_job']:,.0f} | **{s['ratio_whole_job_vs_scan']:.2f}x** | "
                         + (f"**{s['ratio_whole_job_vs_fresh_scan']:.2f}x** | " if fresh else "")
                         + f"{s['rows_per_s_chain']:,.0f} | "
                         f"{s['ratio_chain_vs_scan']:.2f}x | {s['train_seconds']:.1f} | {s['chain_seconds']:.1f} | "
                         f"{_pct(s['test']['precision_at_k'])} | {_pct(s['test']['f1_score'])} | {_pct(s['test']['auc'])} |")
        lines += ["", "Every run (whole-job rows/s, ratio to the warm" + (" / fresh" if fresh else "")
                  + " scan of the same run): " + "; ".join(
                      f"{r['config']} #{r['repeat']}: {r['rows_per_s_whole_job']:,.0f} "
                      f"({r['ratio_whole_job_vs_scan']:.3f}x"
                      + (f" / {r['ratio_whole_job_vs_fresh_scan']:.3f}x" if fresh else "") + ")"
                      for r in op["runs"]) + ".", ""]
        cpu = [(n, s) for n, s in op["summary"].items() if "worker_cpu_seconds" in s]
        if cpu:
            lines += ["Workers' CPU (both workers, medians; user + kernel, `getrusage` on each worker): " + "; ".join(
                f"{n}: the job {_cpu_seconds(s['worker_cpu_seconds']):.2f} s (kernel "
                f"{s['worker_cpu_seconds']['system']:.2f} s, {s['worker_cpu_seconds']['faults']:,.0f} page faults), "
                f"the fresh scan {_cpu_seconds(s['fresh_scan_worker_cpu_seconds']):.2f} s (kernel "
                f"{s['fresh_scan_worker_cpu_seconds']['system']:.2f} s, "
                f"{s['fresh_scan_worker_cpu_seconds']['faults']:,.0f}): the job's rows per CPU second are "
                f"**{s['ratio_cpu_fresh_scan_vs_job']:.2f}x** the scan's" for n, s in cpu) + ".", ""]
        if op.get("first_touch"):
            ft = op["first_touch"]
            lines += [f"Fresh memory on this machine (a new process writes {FIRST_TOUCH_MB} MiB twice, at the part's "
                      "start / end; `_first_touch`): " + " / ".join(f"{x['first_write_ms_per_mib']:.2f}" for x in ft)
                      + " ms a MiB the first time (its pages faulted in), "
                      + " / ".join(f"{x['second_write_ms_per_mib']:.3f}" for x in ft) + " ms the second.", ""]
        if op.get("note"):
            lines += [op["note"], ""]
    if op:
        lines += [CHANGES, ""]
        if any(r.get("token_patch") for r in op["runs"]):
            lines += ["Rows \"chain token from arrays\": the same job with one change on the driver for the "
                      "measurement only (`_ArrayToken` in bench/sparse.py): `PartitionChain._run_from` keys its tasks "
                      "by `tokenize(..., state.to_dict(), ...)`, which converts the d x M iterates and sums to Python "
                      "lists and tokenises them float by float; these runs tokenise the same state from its arrays. "
                      "The model is the same (only task keys change). The chain itself keys by the arrays since "
                      "545152f (08:32 UTC), before the runs stored here, so the patch is a no-op in them: those rows are "
                      "a second measurement of the same code. Before 545152f, in the same session (one run each, not "
                      "stored): 17.2 s unpatched against 8.2 s patched at buffer_size=500 -- the list token took half "
                      "the job.", ""]
    for key, when in (("text_onepass_previous", "the numbers replaced by the ones above (before the changes above)"),
                      ("text_onepass_older", "the first stored numbers, before the lazy update")):
        lines += _older_onepass(t.get(key), when)
    old_rss = t.get("text_onepass_rss_older")
    if old_rss:
        lines += [f"Older worker peak RSS (finished {old_rss.get('finished', '?')}): " + "; ".join(
            f"{r['config']}: {', '.join(_mib(x) for x in r['worker_peak_rss'])}" for r in old_rss["runs"]) + ".", ""]
    rss = t.get("text_onepass_rss")
    if rss:
        lines += ["### Text-like data: memory of the workers", "",
                  "One more run per configuration (the same call, fresh cluster each): peak RSS of each worker "
                  "process = `VmHWM` of `/proc/self/status` read on the workers with `client.run` after the job "
                  "(fresh workers, so the job's peak); idle = psutil RSS of the fresh workers before it.", "",
                  "| buffer_size, standardize | worker peak RSS (both workers) | worker idle RSS |", "|---|---|---:|"]
        for r in rss["runs"]:
            lines.append(f"| {r['config']} | {', '.join(_mib(x) for x in r['worker_peak_rss'])} | "
                         f"{_mib(max(r['worker_idle_rss']))} |")
        lines += ["", f"For scale: one training partition ({rss['train_rows'] // rss['train_files']:,} rows) is "
                  f"{rss['partition_csr_bytes'] / 2**20:,.0f} MiB as CSR (float32 values, int32 indices); the weight "
                  f"vector {rss['model_bytes'] / 2**20:,.0f} MiB (float64, d = {rss['n_features']:,}); the same "
                  f"partition dense in float32 would be {rss['dense_partition_float32_bytes'] / 2**30:,.0f} GiB.", ""]
    sk = t.get("text_sklearn")
    if sk:
        lines += ["### Text-like data: scikit-learn on the same rows, in memory", "",
                  f"The training files read into one CSR (float64, {sk['train_csr_float64_bytes'] / 2**20:,.0f} MiB, "
                  f"{sk['train_nnz']:,} non-zeros; reading {sk['load_seconds']:.1f} s), raw features (rows are already "
                  "L2-normalised tf-idf), default parameters, `random_state=0`; tested on the same held-out files, "
                  "F1 at decision_function > 0.", "",
                  "| model | fit s | epochs | converged | test Prec@1% | test F1 | test AUC | predicted positive |",
                  "|---|---:|---:|---|---:|---:|---:|---:|"]
        for name, r in sk["models"].items():
            lines.append(f"| `{name}` | {r['seconds']:.1f} | {r['n_iter']} | {'yes' if r['converged'] else 'no (capped)'} | "
                         f"{_pct(r['test']['precision_at_k'])} | {_pct(r['test']['f1_score'])} | {_pct(r['test']['auc'])} | "
                         f"{r['test']['predicted_positive']:,} |")
        lines.append("")
    if op or sk:
        lines += ["### Text-like data: held-out measures side by side", "",
                  "Same 875,000 training rows, same 125,000 test rows; Prec@1% = precision of the top 1,250 "
                  "scores; F1 of the predictions score > 0 (nsdist places the intercept at the top-k cut of the "
                  "sample; scikit-learn's threshold is its own).", "",
                  "| model | training s | test Prec@1% | test F1 | test AUC |", "|---|---:|---:|---:|---:|"]
        for name, x in (op or {}).get("summary", {}).items():
            lines.append(f"| nsdist 1PMB, one pass, {name} | {x['train_seconds']:.0f} (whole job, median) | "
                         f"{_pct(x['test']['precision_at_k'])} | {_pct(x['test']['f1_score'])} | {_pct(x['test']['auc'])} |")
        dd = t.get("text_defaults")
        if dd and dd.get("test"):
            lines.append(f"| nsdist defaults | {dd['train_seconds']:.0f} (whole job) | "
                         f"{_pct(dd['test']['precision_at_k'])} | {_pct(dd['test']['f1_score'])} | {_pct(dd['test']['auc'])} |")
        dr = t.get("text_defaults_reduced")
        if dr and dr.get("test"):
            lines.append(f"| nsdist defaults, buffer_size=5000, max_passes=1 | {dr['train_seconds']:.0f} (whole job) | "
                         f"{_pct(dr['test']['precision_at_k'])} | {_pct(dr['test']['f1_score'])} | {_pct(dr['test']['auc'])} |")
        for name, r in (sk or {}).get("models", {}).items():
            lines.append(f"| `{name}` in memory | {r['seconds']:.0f} (fit only) | {_pct(r['test']['precision_at_k'])} | "
                         f"{_pct(r['test']['f1_score'])} | {_pct(r['test']['auc'])} |")
        lines += ["", "The scale-only standardisation (`standardize=True`, the default) hurts on these rows: "
                  "L2-normalised tf-idf rows have E||x||^2 = 1, and dividing each feature by its standard deviation "
                  "on the sample blows the rare terms up (E||x||^2 = 625,494 afterwards), so the one-pass model's "
                  "Prec@1% halves against the same run on the raw rows.", ""]
    kc = t.get("kernel")
    if kc:
        lines += ["### Where the time goes: the epoch kernel at two widths", "",
                  "`run_epochs` alone in one process on the first rows of a text-like partition (~100 non-zeros per "
                  f"row, {kc.get('dtype', 'float64')}), the same rows and non-zeros with the feature indices folded "
                  "to d = 2^14; one candidate (`eta` and `n_passes` fixed) and the default population (`n_passes` and "
                  "`eta` unset). Update: the one the kernel chooses (lazy: only the touched weights) and the dense one "
                  "forced (the whole d x M matrix each epoch); median of 3.", "",
                  "| d | candidates | buffer_size | rows | update | rows/s | ms per epoch |",
                  "|---:|---:|---:|---:|---|---:|---:|"]
        for r in kc["rows"]:
            upd = r.get("update", "as chosen then")
            upd = upd + (" (chosen)" if r.get("chosen") and r.get("update") == "dense" else "")
            lines.append(f"| 2^{int(np.log2(r['d']))} | {r['candidates']} | {r['buffer_size']} | {r['rows']:,} | "
                         f"{upd} | {r['rows_per_s']:,.0f} | {r['ms_per_epoch']:.1f} |")
        lines += ["", "Lazy over dense at d = 2^20: " + "; ".join(
            f"{a['candidates']} candidate{'s' if a['candidates'] > 1 else ''}, buffer {a['buffer_size']}: "
            f"{b['ms_per_epoch'] / a['ms_per_epoch']:.1f}x"
            for a in kc["rows"] for b in kc["rows"]
            if a.get("update") == "lazy" and b.get("update") == "dense" and a["d"] == b["d"] == 2**20
            and a["candidates"] == b["candidates"] and a["buffer_size"] == b["buffer_size"]) + ".", ""]
        if kc.get("note"):
            lines += [kc["note"], ""]
    for key, when in (("kernel_previous", "replaced by the ones above, before the changes above"),
                      ("kernel_older", "float64 rows, before the lazy update was used at one candidate")):
        old_k = t.get(key)
        if old_k:
            when = old_k.get("label", when)
            lines += [f"Older kernel numbers ({when}; finished {old_k.get('finished', '?')}): " + "; ".join(
                f"2^{int(np.log2(r['d']))} x {r['candidates']}, buffer {r['buffer_size']}"
                + (f" ({r['update']})" if "update" in r else "") + f": {r['ms_per_epoch']:.1f} ms/epoch"
                for r in old_k["rows"]) + ".", ""]
    lines += _markdown_partition(t.get("partition"), t.get("partition_previous") or t.get("partition_older"))
    for key in ("text_defaults", "text_defaults_reduced"):
        dd = t.get(key)
        if not dd:
            continue
        extra = dd.get("extra_params") or {}
        call = "nsdist.train(train, client=c, measure=\"prec@k\", k=0.01" + "".join(
            f", {k}={v!r}" for k, v in extra.items()) + ")"
        lines += [f"### Text-like data: the default configuration{' (reduced budget)' if extra else ''}", "",
                  f"`{call}` with a fresh `LocalCluster(n_workers=2, threads_per_worker=1)`; test on the same "
                  "held-out files.", ""]
        if dd.get("test"):
            lines += ["| whole-job s | rows seen | passes | candidates | validation rows | selected | chain rows/s | "
                      "worker peak RSS | test Prec@1% | test F1 | test AUC |",
                      "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
                      f"| {dd['train_seconds']:.0f} | {dd['rows_seen']:,} | {dd['passes']} | {dd['n_candidates']} | "
                      f"{dd['validation_rows']:,} | {dd['selected']} | {dd['rows_per_s_chain']:,.0f} | "
                      f"{_mib(max(dd['worker_peak_rss']))} | {_pct(dd['test']['precision_at_k'])} | "
                      f"{_pct(dd['test']['f1_score'])} | {_pct(dd['test']['auc'])} |", ""]
        if dd.get("note"):
            lines += [dd["note"], ""]
    return lines


def _onepass_bound(pc: dict, bs: str) -> dict:
    """The highest whole-job / scan ratio the one-pass job could reach here, from one process's costs.

    Per partition, the scan takes ``scan`` seconds of wall time; the job must at least read and order
    the partition (``read_block``'s CPU) and step on it (``run_epochs``' CPU, one thread) -- on
    ``cores`` cores no faster than their sum over ``cores``, and no faster than the steps alone, which
    run one after another.  Hand-offs, scheduling and the cut's sample are left out, so the real job
    is slower still.
    """
    wall, cpu = pc["median_seconds"], pc["median_cpu_seconds"]
    work = cpu["read_block"] + cpu[f"run_epochs {bs}"]
    floor = max(work / pc["cores"], wall[f"run_epochs {bs}"])
    return {"scan_wall": wall["scan"], "scan_cpu": cpu["scan"], "job_cpu": work, "job_floor": floor,
            "bound": wall["scan"] / floor}


def _markdown_partition(pc: dict | None, old: dict | None) -> list[str]:
    """The per-partition costs (``partition``), beside the numbers they replaced."""
    if not pc:
        return []
    names = {"scan": "bare scan `pq.read_table`", "parquet": "the dataset's Parquet read (`Dataset._read`)",
             "checks": "checks of the CSR read (`sparse_matrix` on that table)",
             "read_partition": "`read_partition` (Parquet read + checked CSR + labels)",
             "read_block": "`read_block` with a row permutation (the chain's load)",
             "run_epochs 500": "`run_epochs`, one candidate, buffer_size=500",
             "run_epochs 5000": "`run_epochs`, one candidate, buffer_size=5000"}
    prev = (old or {}).get("median_seconds", {})
    lines = ["### Where the time goes: one training partition", "",
             f"One process, {pc['rows']:,} rows, {pc['nnz']:,} non-zeros, {pc['dtype']}; medians over "
             f"{pc['partitions']} partitions (reads) or runs (`run_epochs` over partition 0 from a zero state, "
             "the text-onepass model). Engine: the text-onepass job once per buffer size, mean seconds of its "
             "tasks (Dask's task stream; loads and steps of the two workers overlap and share the 2 cores)."
             + (f" Previous: {old.get('note', 'the numbers replaced')} (finished {old.get('finished', '?')})."
                if old else ""), "",
             "| what | ms | CPU ms | previous ms |", "|---|---:|---:|---:|"]
    cpu = pc.get("median_cpu_seconds", {})
    for key, label in names.items():
        if key in pc["median_seconds"]:
            before = f"{1000 * prev[key]:.1f}" if key in prev else "–"
            used = f"{1000 * cpu[key]:.1f}" if key in cpu else "–"
            lines.append(f"| {label} | {1000 * pc['median_seconds'][key]:.1f} | {used} | {before} |")
    for bs, e in pc["engine"].items():
        pe = (old or {}).get("engine", {}).get(bs, {})
        for task, x in e["tasks"].items():
            p = pe.get("tasks", {}).get(task)
            lines.append(f"| engine, buffer_size={bs}: {task} (mean of {x['n']}) | {1000 * x['mean_seconds']:.1f} | – | "
                         + (f"{1000 * p['mean_seconds']:.1f} |" if p else "– |"))
        k = pc["train_partitions"]
        lines.append(f"| engine, buffer_size={bs}: chain / {k} partitions | {1000 * e['chain_seconds'] / k:.1f} | – | "
                     + (f"{1000 * pe['chain_seconds'] / k:.1f} |" if pe else "– |"))
        if "workers_cpu_seconds" in e:
            lines.append(f"| engine, buffer_size={bs}: whole job / {k} partitions (CPU: workers + driver) | "
                         f"{1000 * e['job_seconds'] / k:.1f} | "
                         f"{1000 * (e['workers_cpu_seconds'] + e['driver_cpu_seconds']) / k:.1f} | – |")
    if cpu:
        lines += ["", "What the one-pass job can reach against the scan on this machine, per partition "
                  f"({pc['cores']} cores; `_onepass_bound`): the scan's wall time against the least the job "
                  "needs -- the CPU of reading and ordering the partition (`read_block`) and of stepping on it "
                  "(`run_epochs`), spread over every core, and never less than the step alone (steps run one "
                  "after another). Hand-offs, scheduling and the cut's sample are left out, so this is an upper "
                  "bound; the measured ratio is in the last column (this part's own engine run).", "",
                  "| buffer_size | scan wall ms | scan CPU ms | job CPU ms (read_block + run_epochs) | "
                  "job floor ms | bound on whole-job / scan | measured here |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for bs, e in pc["engine"].items():
            b = _onepass_bound(pc, bs)
            measured = b["scan_wall"] * pc["train_partitions"] / e["job_seconds"]
            lines.append(f"| {bs} | {1000 * b['scan_wall']:.1f} | {1000 * b['scan_cpu']:.1f} | "
                         f"{1000 * b['job_cpu']:.1f} | {1000 * b['job_floor']:.1f} | **{b['bound']:.2f}x** | "
                         f"{measured:.2f}x |")
    if pc.get("note"):
        lines += ["", pc["note"]]
    return lines + [""]


def markdown(raw: dict) -> str:
    lines = [f"Machine: {raw['machine']}, {raw['cpu_count']} cores, shared (1-minute load average "
             f"{raw['load_average'][0]:.1f} at the start, {raw['load_average'][1]:.1f} at the end: absolute "
             "rates are lower than on an idle machine, ratios between layouts hold); reads sequential in one "
             f"process, median of {raw['repeats']} runs after a warm-up.", ""]
    if raw["libsvm"]:
        lines += ["## LIBSVM w8a and a9a, both layouts", "",
                  "| data | layout | rows | d | nnz/row | files | bytes on disk | vs svmlight text | "
                  "bytes in memory (float64) | pyarrow scan rows/s | read_partition rows/s |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in raw["libsvm"]:
            lines.append(f"| {r['data']} | {r['layout']} | {r['rows']:,} | {r['features']} | "
                         f"{r['nnz'] / r['rows']:.1f} | {r['partitions']} | {r['bytes']:,} | "
                         f"{r['bytes'] / r['svmlight_bytes']:.2f}x | {r['memory_bytes']:,} | "
                         f"{r['pyarrow_scan_rows_per_s']:,.0f} | "
                         f"{r['read_partition_rows_per_s']:,.0f} |")
        lines += ["", "Dense: one float64 column per feature (zstd); sparse: `indices` list<int32> + "
                  "`values` list<float64> (zstd). `read_partition` returns a dense ndarray, resp. a "
                  "`csr_matrix` with every row checked (indices in range, strictly increasing, lengths "
                  "equal, values finite).", ""]
    t = raw["text"]
    a = t["args"]
    lines += ["## Generated text-like data (`generate_text_like`)", "",
              f"{t['num_rows']:,} rows, 2^{int(np.log2(a['n_features']))} = {a['n_features']:,} features, "
              f"{t['nnz_per_row']:.1f} non-zeros per row (Zipf s = {a['zipf_s']}), "
              f"{t['positive_rate']:.2%} positives, {t['files']} files.", "",
              "| measure | value |", "|---|---:|",
              f"| bytes on disk (sparse, float32 values, zstd) | {t['bytes']:,} |",
              f"| bytes per non-zero on disk | {t['bytes'] / t['nnz']:.2f} |",
              f"| dense float32 would be | {t['dense_float32_bytes_estimate'] / 2**40:.1f} TiB |",
              f"| bare pyarrow scan (`pq.read_table`), rows/s | {t['pyarrow_scan_rows_per_s']:,.0f} |",
              f"| bare pyarrow scan, non-zeros/s | {t['pyarrow_scan_rows_per_s'] * t['nnz_per_row']:,.0f} |",
              f"| `Dataset.read_partition` (checked CSR), rows/s | {t['read_partition_rows_per_s']:,.0f} |",
              f"| generation, s | {t['generate_seconds']:.1f} |", ""]
    m = raw["model"]
    lines += ["## A 2^24-feature model", "",
              f"`LinearModel.save`: {m['save_seconds']:.3f} s, `load_model`: {m['load_seconds']:.3f} s "
              f"({m['weights_bytes'] / 2**20:.0f} MiB of float64 weights, model.json {m['model_json_bytes']} "
              "bytes: the feature names are the range `{\"prefix\": \"x\", \"start\": 0, \"n\": d}`).", ""]
    if raw.get("training"):
        lines += markdown_training(raw["training"])
    return "\n".join(lines)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=TEXT_DEFAULTS["n_rows"], help="rows of the text-like data")
    parser.add_argument("--files", type=int, default=TEXT_DEFAULTS["n_files"], help="its number of files")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the read measurements")
    parser.add_argument("--train-repeats", type=int, default=3, help="repeats of the timed training runs")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated subset of {', '.join(PARTS)}; the others keep their stored results")
    parser.add_argument("--onepass", default=TEXT_ONEPASS,
                        help="one-pass configurations BUFFER_SIZE:std|raw:ETA (standardize=True|False), comma-separated")
    parser.add_argument("--no-lr", action="store_true", help="skip LogisticRegression(solver='saga')")
    parser.add_argument("--defaults-set", default="", help="text-defaults: parameters changed from the defaults, "
                        "e.g. buffer_size=5000,max_passes=1 (values read as JSON)")
    parser.add_argument("--dir", default=None, help="where to write the data (default: a temporary directory; "
                        "the text-like data is kept there and reused when it is given)")
    parser.add_argument("--quick", action="store_true", help="10^5 text-like rows, 2 repeats; results not saved")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    if args.quick:
        args.rows, args.repeats, args.train_repeats = 100_000, 2, 1
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="nsdist-bench-sparse-"))
    work.mkdir(parents=True, exist_ok=True)
    stored = RESULTS / "sparse.json"
    new: dict = {}
    try:
        load_before = os.getloadavg()[0]
        if "scan" in parts:
            new = {"machine": f"{platform.processor() or platform.machine()}", "cpu_count": os.cpu_count(),
                   "repeats": args.repeats, "libsvm": libsvm(work, args.repeats),
                   "text": text_like(work, args.rows, args.files, args.repeats),
                   "model": wide_model(work, args.repeats)}
            new["load_average"] = [load_before, os.getloadavg()[0]]
        else:
            generate_text_like(work / "text", n_rows=args.rows, n_files=args.files)
        training: dict = {}
        if "libsvm-train" in parts:
            training["libsvm"] = libsvm_training(work, args.train_repeats, LIBSVM_FIXED)
        if "text-onepass" in parts:
            configs = _onepass_configs(args.onepass)
            training["text_onepass"] = text_onepass(work, args.train_repeats, configs)
        if "text-onepass-rss" in parts:      # one run per configuration, for the workers' peak RSS only
            configs = _onepass_configs(args.onepass)
            training["text_onepass_rss"] = text_onepass(work, 1, configs)
        if "text-sklearn" in parts:
            training["text_sklearn"] = text_sklearn(work, lr=not args.no_lr)
        if "kernel" in parts:
            training["kernel"] = kernel_cost(work)
        if "partition" in parts:
            training["partition"] = partition_costs(work, args.repeats)
        if "text-defaults" in parts:
            extra = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.defaults_set.split(",") if kv)}
            training["text_defaults" + ("_reduced" if extra else "")] = text_defaults(
                work, progress=work / "defaults-progress.jsonl", extra=extra)
        for key, value in training.items():
            for v in value if isinstance(value, list) else [value]:
                v["load_average"] = [load_before, os.getloadavg()[0]]
                v["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    if args.quick:
        print(json.dumps({**new, "training": training}, indent=1, default=str))
        return
    raw = json.loads(stored.read_text()) if stored.exists() else {}     # the other parts' stored results
    raw.update(new)
    stored_training = raw.setdefault("training", {})
    for key in ("text_onepass", "text_onepass_rss", "kernel", "partition"):   # the numbers replaced stay, older:
        if key in training and key in stored_training:               # the first ones, and the last replaced
            older = key + ("_older" if key + "_older" not in stored_training else "_previous")
            stored_training[older] = stored_training[key]
    stored_training.update(training)
    write_atomically(stored, json.dumps(raw, indent=1) + "\n")
    table = markdown(raw)
    print(table)
    write_atomically(RESULTS / "sparse.md", "# Sparse data: layouts, reading, training, wide models\n\n" + table)


if __name__ == "__main__":
    main()
