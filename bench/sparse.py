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

All reads are sequential in one process (the machine's other core is left alone);
times are medians of ``--repeats`` runs, after one warm-up read (files in the page cache).
"""
from __future__ import annotations

import argparse
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
from nsdist.data.layout import row_group_rows  # noqa: E402
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
                zipf_s=zipf_s, positive_rate=positive_rate, n_informative=n_informative, noise=noise, seed=seed)
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
        pq.write_table(table, root / f"part-{f:05d}.parquet", compression="zstd",
                       row_group_size=row_group_rows("sparse", n, len(cols)))
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
    return "\n".join(lines)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=TEXT_DEFAULTS["n_rows"], help="rows of the text-like data")
    parser.add_argument("--files", type=int, default=TEXT_DEFAULTS["n_files"], help="its number of files")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write the data (default: a temporary directory; "
                        "the text-like data is kept there and reused when it is given)")
    parser.add_argument("--quick", action="store_true", help="10^5 text-like rows, 2 repeats; results not saved")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = 100_000, 2
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="nsdist-bench-sparse-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        load_before = os.getloadavg()[0]
        raw = {"machine": f"{platform.processor() or platform.machine()}", "cpu_count": os.cpu_count(),
               "repeats": args.repeats, "libsvm": libsvm(work, args.repeats),
               "text": text_like(work, args.rows, args.files, args.repeats),
               "model": wide_model(work, args.repeats)}
        raw["load_average"] = [load_before, os.getloadavg()[0]]
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    table = markdown(raw)
    print(table)
    if not args.quick:
        write_atomically(RESULTS / "sparse.md", "# Sparse data: layouts, reading, wide models\n\n" + table)
        write_atomically(RESULTS / "sparse.json", json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
