"""Cost of one surrogate-loss call relative to the mat-vec ``X @ w`` it needs anyway.

For every loss of ``nsdist.losses`` at buffer sizes 500, 5 000 and 50 000
(d = 100, 1% positives, float32), time

* ``value_and_grad(X, y, w)`` -- the docs/surrogates.md §Interface entry point (validates ``X``);
* ``value_and_dscore(X @ w, y)`` and ``X.T @ dscore`` -- what the solvers run;
* ``check_matrix(X)`` -- the validation alone,

each as the median over repeats of the per-call time, reported as a ratio to
the median time of ``X @ w``.  The target is every loss within 5x the mat-vec
at 50 000 rows.  BLAS runs on one thread by default (``--blas-threads``): on a
shared machine a multi-threaded mat-vec whose threads wait for a busy core is
an order of magnitude slower, which would make the ratios meaningless.

Run ``python bench/losses.py``; it prints a Markdown table and writes it to
``bench/results/losses.md``, with the raw numbers in ``bench/results/losses.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import timeit
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from nsdist import losses
from nsdist._validation import check_matrix

#: (label, registry name, parameters)
LOSSES = [
    ("pauc hinge", "pauc", {"beta": 0.1, "surrogate": "hinge"}),
    ("pauc logistic", "pauc", {"beta": 0.1, "surrogate": "logistic"}),
    ("pauc squared_hinge", "pauc", {"beta": 0.1, "surrogate": "squared_hinge"}),
    ("auc hinge", "auc", {}),
    ("prec@k k=0.01", "prec@k", {"k": 0.01}),
    ("prbep", "prbep", {}),
    ("f1", "f1", {}),
]
RESULTS = Path(__file__).resolve().parent / "results"


def per_call_seconds(fn, repeats: int, min_batch: float = 2e-3) -> float:
    """Median over ``repeats`` batches of the time per call; a batch lasts >= ``min_batch`` s."""
    timer = timeit.Timer(fn)
    number = 1
    while timer.timeit(number) < min_batch:
        number *= 2
    return float(np.median(timer.repeat(repeat=repeats, number=number))) / number


def make_buffer(n: int, d: int, pos_frac: float, seed: int = 0):
    """float32 ``X`` with ``max(1, round(pos_frac n))`` positives shifted along a random direction."""
    rng = np.random.default_rng(seed)
    n_pos = max(1, round(pos_frac * n))
    y = rng.permutation(np.repeat(np.array([1, -1], dtype=np.int8), [n_pos, n - n_pos]))
    direction = rng.standard_normal(d) / np.sqrt(d)
    X = (rng.standard_normal((n, d)) + np.outer(y > 0, direction)).astype(np.float32)
    return X, y, rng.standard_normal(d) / np.sqrt(d)


def run(sizes: list[int], d: int, pos_frac: float, repeats: int, blas_threads: int) -> dict:
    """Time every loss at every size; returns the raw numbers (seconds per call)."""
    rows = []
    for n in sizes:
        X, y, w = make_buffer(n, d, pos_frac)
        w32 = w.astype(np.float32)
        matvec = per_call_seconds(lambda: X @ w32, repeats)
        check = per_call_seconds(lambda: check_matrix(X), repeats)
        for label, name, params in LOSSES:
            loss = losses.get(name, **params)

            def solver_path():
                _, dscore = loss.value_and_dscore(X @ w32, y)
                return X.T @ dscore.astype(np.float32)

            rows.append({
                "loss": label, "n": n, "matvec": matvec, "check_matrix": check,
                "value_and_grad": per_call_seconds(lambda: loss.value_and_grad(X, y, w), repeats),
                "dscore_and_two_matvecs": per_call_seconds(solver_path, repeats),
            })
    return {
        "d": d, "pos_frac": pos_frac, "dtype": "float32", "repeats": repeats,
        "blas_threads": blas_threads, "unit": "seconds per call (median)", "numpy": np.__version__,
        "machine": platform.machine(), "cpu_count": os.cpu_count(), "results": rows,
    }


def markdown(raw: dict) -> str:
    """Ratios to ``X @ w``: ``value_and_grad`` / (``value_and_dscore`` + 2 mat-vecs) per size."""
    sizes = sorted({r["n"] for r in raw["results"]})
    by_key = {(r["loss"], r["n"]): r for r in raw["results"]}
    header = "| loss | " + " | ".join(f"n = {n:,}" for n in sizes) + " |"
    lines = [
        f"Cost per call as a multiple of `X @ w` (d = {raw['d']}, {raw['pos_frac']:.0%} positives, "
        f"float32, BLAS threads: {raw['blas_threads']}, median of {raw['repeats']}). "
        "Each cell: `value_and_grad` / "
        "(`value_and_dscore` + `X @ w` + `X.T @ dscore`).",
        "",
        header,
        "|" + "---|" * (len(sizes) + 1),
    ]
    labels = list(dict.fromkeys(r["loss"] for r in raw["results"]))
    for label in labels:
        cells = [f"{by_key[label, n]['value_and_grad'] / by_key[label, n]['matvec']:.1f}x / "
                 f"{by_key[label, n]['dscore_and_two_matvecs'] / by_key[label, n]['matvec']:.1f}x"
                 for n in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    first = [by_key[labels[0], n] for n in sizes]
    lines.append("| *`check_matrix(X)` alone* | "
                 + " | ".join(f"{r['check_matrix'] / r['matvec']:.1f}x" for r in first) + " |")
    lines.append("| *`X @ w` (µs)* | " + " | ".join(f"{1e6 * r['matvec']:.0f}" for r in first) + " |")
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 5_000, 50_000])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--pos-frac", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--blas-threads", type=int, default=1)
    args = parser.parse_args(argv)
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        raw = run(args.sizes, args.d, args.pos_frac, args.repeats, args.blas_threads)
    table = markdown(raw)
    print(table, end="")
    write_atomically(RESULTS / "losses.md", "# Surrogate-loss cost\n\n" + table)
    write_atomically(RESULTS / "losses.json", json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    main()
