"""LibAUC's SOPA measured on the splits of ``bench/defaults.py`` (the peer the defaults table quotes).

``bench/defaults.py`` compares the default nsdist model with LibAUC figures
quoted from elsewhere (ijcnn1 pAUC 67.3 / PRBEP 72.0 / F1 71.7, mammography pAUC
81.6 / F1 64.3), whose splits, pAUC normalisation and tuning are not known.
This script runs LibAUC itself on exactly the splits of the table, so the
table can show a measured LibAUC column beside the quoted one.

LibAUC needs PyTorch, which nsdist does not; run it from its own environment::

    python -m venv .venv-peers
    .venv-peers/bin/pip install -e . torch==2.14.1 torchvision==0.29.1 libauc==2.0.1
    .venv-peers/bin/python bench/libauc_peer.py               # 7 data sets x 5 splits
    .venv-peers/bin/python bench/libauc_peer.py --datasets mammography --splits 1
    python bench/defaults.py --replot                         # the table with the measured column

It writes ``OUT/libauc.json`` (every split, every learning rate) and
``OUT/libauc.md``; ``bench/defaults.py`` reads the JSON when it renders its table.

Protocol (LibAUC's one-way pAUC method, SOPA, as its documentation sets it up):

* Split ``s`` of ``bench/defaults.py`` (70/30 stratified, ``random_state=s``,
  standardised on the training part).  The training part loses the same 10%
  validation rows nsdist's default fit holds out (:meth:`nsdist.solvers.plan.Holdout.draw`,
  seed ``s``); LibAUC trains on the other 90%.
* Model: ``torch.nn.Linear(d, 1)``; its sigmoid is the score the loss sees.
* Loss: ``libauc.losses.pAUC_CVaR_Loss(data_len, pos_len, beta=0.1)``: the
  squared hinge with margin 1 on sigmoid scores over the top ``beta`` negatives
  (its defaults otherwise: ``margin=1.0``, ``eta=0.1``).
* Optimiser: ``libauc.optimizers.SOPA`` (its default ``mode="adam"``).
* Batches: ``libauc.sampler.DualSampler(batch_size=64, sampling_rate=0.5)``
  (LibAUC's defaults), 20 epochs; ``torch.manual_seed(s)``, sampler seed ``s``.
* Learning rate: each of ``--lrs`` (default 1e-3, SOPA's default, 1e-2, 1e-1)
  is trained; per measure the one with the best value on the validation rows
  is kept (as a LibAUC user tunes it).  F1: the threshold that maximises F1 on
  the validation rows (:func:`nsdist.solvers.measure.f1_threshold`; nsdist's
  plug-in rule and the table's "LR F1-thr").
* Test measures with ``nsdist.metrics`` on the test part, as every other column.
  Nothing is chosen on the test part.
* Seconds: wall-clock of the whole tuning (every learning rate), one thread.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.defaults import COST_HINT, DATASETS, MEASURE_TITLE, MEASURES, RESULTS, _atomic_write, split  # noqa: E402

EPOCHS = 20
BATCH_SIZE = 64
SAMPLING_RATE = 0.5
LRS = (1e-3, 1e-2, 1e-1)
BETA = MEASURES["pauc"]["beta"]
VALIDATION_FRACTION, VALIDATION_MAX_ROWS = 0.1, 200_000     # nsdist's defaults: the same held-out rows


class _Rows:
    """The minimal ``torch.utils.data.Dataset`` LibAUC's sampler reads its labels from."""

    def __init__(self, y01: np.ndarray) -> None:
        self.targets = y01

    def __len__(self) -> int:
        return self.targets.shape[0]


def train_sopa(X: np.ndarray, y01: np.ndarray, lr: float, seed: int, epochs: int = EPOCHS):
    """SOPA on ``(X, y01)``: the linear model's ``(w, b)`` after ``epochs`` epochs of DualSampler batches."""
    import torch
    from libauc.losses import pAUC_CVaR_Loss
    from libauc.optimizers import SOPA
    from libauc.sampler import DualSampler

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    Xt = torch.as_tensor(X, dtype=torch.float32)
    yt = torch.as_tensor(y01, dtype=torch.float32).reshape(-1, 1)
    model = torch.nn.Linear(X.shape[1], 1)
    loss_fn = pAUC_CVaR_Loss(data_len=X.shape[0], pos_len=int(y01.sum()), beta=BETA, device=torch.device("cpu"))
    opt = SOPA(model.parameters(), lr=lr, device=torch.device("cpu"))
    sampler = DualSampler(_Rows(y01), batch_size=BATCH_SIZE, labels=y01, sampling_rate=SAMPLING_RATE,
                          random_seed=seed)
    for _ in range(epochs):
        order = torch.as_tensor(np.fromiter(iter(sampler), dtype=np.int64))
        for idx in order.split(BATCH_SIZE):        # what DataLoader(batch_size, sampler=sampler) batches
            pred = torch.sigmoid(model(Xt[idx]))
            loss = loss_fn(pred, yt[idx], idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return model.weight.numpy().ravel().astype(np.float64), float(model.bias.item())


def run_split(name: str, seed: int, lrs: tuple[float, ...], epochs: int) -> dict:
    """Every learning rate's validation and test values on split ``seed``; the selected one per measure."""
    from nsdist.solvers.measure import f1_threshold, measure_function
    from nsdist.solvers.plan import Holdout

    Xtr, ytr, Xte, yte = split(name, seed)
    y = np.where(ytr > 0, 1, -1)
    y_test = np.where(yte > 0, 1, -1)
    val = Holdout.draw(y, np.arange(y.shape[0]), seed, VALIDATION_FRACTION, VALIDATION_MAX_ROWS).mask(
        y, np.arange(y.shape[0]))
    X, y_fit, Xv, yv = Xtr[~val], y[~val], Xtr[val], y[val]
    t0 = time.perf_counter()
    per_lr = []
    for lr in lrs:
        t = time.perf_counter()
        w, b = train_sopa(X, (y_fit > 0).astype(np.int64), lr, seed, epochs)
        sv, st = Xv @ w + b, Xte @ w + b
        row = {"lr": lr, "seconds": time.perf_counter() - t, "finite": bool(np.all(np.isfinite(w)))}
        for m in MEASURES:
            P = measure_function(m, **MEASURES[m])
            if not row["finite"]:
                row[m] = {"validation": None, "test": None}
            elif m == "f1":
                f, thr = f1_threshold(yv, sv)
                row[m] = {"validation": 100 * f, "test": 100 * P(y_test, st - thr)}
            else:
                row[m] = {"validation": 100 * P(yv, sv), "test": 100 * P(y_test, st)}
        per_lr.append(row)
    selected = {}
    for m in MEASURES:
        ok = [r for r in per_lr if r[m]["validation"] is not None]
        best = max(ok, key=lambda r: r[m]["validation"])          # ties: the first (smaller) rate
        selected[m] = {"lr": best["lr"], "validation": best[m]["validation"], "test": best[m]["test"]}
    return {"name": name, "seed": seed, "seconds": time.perf_counter() - t0, "train_rows": int(X.shape[0]),
            "validation_rows": int(Xv.shape[0]), "per_lr": per_lr, "selected": selected}


def summarise(runs: list[dict]) -> dict:
    """Per (data set, measure): mean and population std of the selected test values over the splits."""
    out: dict = {}
    for name in dict.fromkeys(r["name"] for r in runs):
        rs = sorted((r for r in runs if r["name"] == name), key=lambda r: r["seed"])
        out[name] = {"splits": len(rs), "seconds_median": float(np.median([r["seconds"] for r in rs]))}
        for m in MEASURES:
            v = np.array([r["selected"][m]["test"] for r in rs])
            lrs = [r["selected"][m]["lr"] for r in rs]
            out[name][m] = {"mean": float(v.mean()), "std": float(v.std()), "values": v.tolist(),
                            "lr_selected": lrs}
    return out


def report(summary: dict, meta: dict) -> str:
    lines = ["# LibAUC (SOPA) measured on the splits of the defaults table", "",
             f"Written by `{meta['command']}` ({meta['date']}, {meta['wall_seconds']:.0f} s wall, "
             f"{meta['jobs']} process(es); torch {meta['torch']}, libauc {meta['libauc']}). "
             "Protocol in the module docstring of `bench/libauc_peer.py`; every split and learning rate in "
             "`libauc.json`.", "",
             f"Linear model, `pAUC_CVaR_Loss(beta={BETA})` (squared hinge, margin 1, on sigmoid scores), "
             f"`SOPA` (Adam mode), `DualSampler(batch_size={BATCH_SIZE}, sampling_rate={SAMPLING_RATE})`, "
             f"{meta['epochs']} epochs, learning rate chosen per measure on nsdist's validation rows from "
             f"{', '.join(f'{v:g}' for v in meta['lrs'])}; F1 at the validation-optimal threshold. "
             "Cells: test measure in percent, mean ± std over the splits.", "",
             "| data | " + " | ".join(MEASURE_TITLE[m] for m in MEASURES)
             + " | learning rates chosen (" + " / ".join(MEASURE_TITLE[m] for m in MEASURES) + ") | seconds (median) |",
             "|---|" + "---|" * (len(MEASURES) + 2)]
    for name, s in summary.items():
        cells = [f"{s[m]['mean']:.1f} ± {s[m]['std']:.1f}" for m in MEASURES]
        chosen = " / ".join(",".join(f"{v:g}" for v in s[m]["lr_selected"]) for m in MEASURES)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {chosen} | {s['seconds_median']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", help=f"comma list of {', '.join(DATASETS)} (default: all)")
    parser.add_argument("--splits", type=int, default=5, help="number of splits, seeds 0..N-1 (default 5)")
    parser.add_argument("--lrs", default=",".join(f"{v:g}" for v in LRS),
                        help="comma list of learning rates tried per fit (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="epochs per fit (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel processes, each running whole splits")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"output folder (default {RESULTS})")
    args = parser.parse_args(argv)
    try:
        import libauc
        import torch
    except ImportError as exc:
        parser.exit(2, f"bench/libauc_peer.py needs PyTorch and LibAUC ({exc}); install them into an environment "
                       "of their own: python -m venv .venv-peers && .venv-peers/bin/pip install -e . "
                       "torch==2.14.1 torchvision==0.29.1 libauc==2.0.1\n")

    names = tuple(args.datasets.split(",")) if args.datasets else DATASETS
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        parser.error(f"unknown data set(s) {', '.join(unknown)}; valid: {', '.join(DATASETS)}")
    lrs = tuple(float(v) for v in args.lrs.split(","))
    work = sorted(((n, s) for n in names for s in range(args.splits)), key=lambda t: -COST_HINT.get(t[0], 1))
    t0 = time.perf_counter()
    runs = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_split, n, s, lrs, args.epochs): (n, s) for n, s in work}
        for fut in as_completed(futures):
            r = fut.result()
            runs.append(r)
            sel = ", ".join(f"{m} {r['selected'][m]['test']:.1f} (lr {r['selected'][m]['lr']:g})" for m in MEASURES)
            print(f"{r['name']} split {r['seed']}: {sel}; {r['seconds']:.1f} s", flush=True)
    meta = {"command": "python bench/libauc_peer.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_seconds": time.perf_counter() - t0,
            "jobs": args.jobs, "torch": torch.__version__, "libauc": getattr(libauc, "__version__", "2.0.1"),
            "python": platform.python_version(), "epochs": args.epochs, "lrs": list(lrs),
            "batch_size": BATCH_SIZE, "sampling_rate": SAMPLING_RATE, "beta": BETA}
    summary = summarise(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    _atomic_write(args.out / "libauc.json", json.dumps({"meta": meta, "summary": summary,
                                                         "runs": sorted(runs, key=lambda r: (r["name"], r["seed"]))},
                                                        indent=1).encode())
    text = report(summary, meta)
    _atomic_write(args.out / "libauc.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()
