"""Default ``NonDecomposableClassifier(measure)`` against the baselines and quoted peers, on every data set.

Run from the repository root::

    python bench/defaults.py                               # 7 data sets x 5 splits -> bench/results/defaults.{md,json}
    python bench/defaults.py --datasets letter --splits 1  # a quick look (writes to --out, default bench/results)
    python bench/defaults.py --replot                      # rebuild defaults.md from OUT/defaults.json

Protocol:

* Data sets: letter, mammography, ijcnn1, kddcup99, w8a, hiva, a9a, read by the
  loaders below (``LOADERS``, which ``bench/paper.py`` imports) and, for
  kddcup99, by ``bench.paper._kddcup`` (R2L + U2R attacks against ``normal.``
  of the 10% file, 98,456 rows).  The parsed arrays are cached in ``CACHE``;
  a cache file is written to a temporary name and renamed, so a reader never
  sees half a file.
* Split ``s`` (``s = 0 .. N-1``): 70/30 stratified, ``random_state=s``;
  ``StandardScaler`` fitted on the 70% training part.  Every choice (the
  candidate of nsdist's selection, the F1 threshold of LR tuned) is made on
  the training part; the test part is only scored.
* **nsdist default**: ``NonDecomposableClassifier(measure, random_state=s)``
  (plus ``beta=0.1`` for pAUC) -- nothing else set, so the fit holds out its
  validation rows, runs the candidate population and returns the selected one.
* **LR**: ``LogisticRegression(max_iter=5000)``, plain and
  ``class_weight="balanced"``, ranked by ``decision_function`` (threshold 0
  for F1).  **LR F1-thr** (F1 only): ``TunedThresholdClassifierCV(
  LogisticRegression(max_iter=5000), scoring="f1")`` (5-fold CV on the
  training part), F1 of its ``predict``.
* **CP**: the cutting-plane solver of ``NonDecomposableClassifier(measure,
  solver="cp")`` (``alpha = 1e-4``, ``tol = 1e-3``) capped as ``bench/paper.py``
  does it: no iteration limit but a time cap per fit (``--cp-cap``, 20 s),
  through ``bench.paper.cutting_plane_traced`` -- the library's loop with a
  time cap, checked bit for bit against ``nsdist.solvers.cp.cutting_plane``
  at start-up (``check_cp_replica``).  Its model is the library's (the last
  iterate, SVMperf's output); the lowest-objective iterate ("CP best") is kept in the JSON.
* **Quoted peers** (``PEERS``): LibAUC and SVMperf figures measured by others on
  comparable splits, printed as given -- not measured here.
* **LibAUC (measured here)**: LibAUC's SOPA run by ``bench/libauc_peer.py`` (its
  own environment: it needs PyTorch) on the same splits, read from
  ``OUT/libauc.json`` when that file exists; a measured peer like the others.
* **One-holdout column** (not the default, not a peer): the same default with
  ``validation_folds=1`` -- always one holdout, never K-fold selection (the
  default's ``"auto"`` takes 5 folds where the holdout would hold fewer than
  100 positives); its paired difference with the default and its fit seconds,
  in a section of its own.
* Timing: wall-clock seconds of ``fit``, one BLAS thread per process, ``--jobs``
  processes on whole splits; the table gives the median over splits.

Targets (``TARGETS``), per (data set, measure) cell, on the means over splits
in percent: nsdist default >= best peer - 0.5 on every cell; strictly above
the best peer on at least half of the cells; default fit time <= 10 x plain
LR's on every data set (every measure); ijcnn1 pAUC >= 67.3 and PRBEP >= 72.0.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # before numpy: one BLAS thread per process

import argparse
import bz2
import collections
import io
import json
import lzma
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:                 # `python bench/defaults.py` puts bench/ first, not the root
    sys.path.insert(0, str(ROOT))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"   # shared/ beside the repo
CACHE = Path(os.environ.get("NSDIST_BENCH_CACHE", Path(tempfile.gettempdir()) / "nsdist-bench-cache"))
CACHE_VERSION = 2                             # bump when a loader changes what it returns
RESULTS = ROOT / "bench" / "results"


# ------------------------------------------------------------------ loaders
# (bench/paper.py imports LOADERS and sets DATA; keep their names and contents)


def _svmlight(*files) -> tuple[np.ndarray, np.ndarray]:
    parts = []
    n_features = 0
    for f in files:
        opener = bz2.open if f.suffix == ".bz2" else lzma.open
        with opener(f, "rb") as fh:
            X, y = load_svmlight_file(fh)
        parts.append((X, y))
        n_features = max(n_features, X.shape[1])
    X = np.vstack([np.hstack([p[0].toarray(), np.zeros((p[0].shape[0], n_features - p[0].shape[1]))])
                   for p in parts])
    return X, np.concatenate([p[1] for p in parts])


def _letter():
    raw = np.loadtxt(DATA / "letter/letter-recognition.data", delimiter=",", dtype=str)
    return raw[:, 1:].astype(float), np.where(raw[:, 0] == "N", 1, -1)


def _mammography():
    raw = np.loadtxt(DATA / "mammography/mammography.csv", delimiter=",", dtype=str)
    return raw[:, :-1].astype(float), np.where(raw[:, -1] == "'1'", 1, -1)


def _hiva():
    with lzma.open(DATA / "hiva/hiva_train.data.xz", "rt") as fh:
        X = np.loadtxt(fh)
    return X, np.loadtxt(DATA / "hiva/hiva_train.labels")


LOADERS = {
    "letter": _letter,
    "ijcnn1": lambda: _svmlight(DATA / "ijcnn1/ijcnn1.trn.bz2", DATA / "ijcnn1/ijcnn1.tst.bz2"),
    "w8a": lambda: _svmlight(DATA / "w8a/w8a.xz"),
    "a9a": lambda: _svmlight(DATA / "a9a/a9a.xz", DATA / "a9a/a9a.t.xz"),
    "mammography": _mammography,
    "hiva": _hiva,
}

DATASETS = ("letter", "mammography", "ijcnn1", "kddcup99", "w8a", "hiva", "a9a")
COST_HINT = {"w8a": 6, "a9a": 5, "kddcup99": 5, "ijcnn1": 4, "hiva": 2, "mammography": 1, "letter": 1}


def _paper():
    from bench import paper               # late: bench/paper.py imports this module
    return paper


def _loader(name: str):
    return _paper()._kddcup if name == "kddcup99" else LOADERS[name]


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)                  # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The whole data set ``(X float64, y int8 in {-1, +1})``, parsed once and cached (atomically)."""
    cached = CACHE / f"{name}-v{CACHE_VERSION}.npz"
    if cached.exists():
        try:
            with np.load(cached) as z:
                return z["X"], z["y"]
        except (OSError, ValueError, KeyError, EOFError):
            pass                              # unreadable: parse again and replace it
    X, y = _loader(name)()
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.where(np.asarray(y) > 0, 1, -1).astype(np.int8)
    buf = io.BytesIO()
    np.savez(buf, X=X, y=y)
    _atomic_write(cached, buf.getvalue())
    return X, y


def split(name: str, seed: int):
    """``(X_train, y_train, X_test, y_test)`` of split ``seed``: 70/30 stratified, standardised on the train part."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load(name)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), ytr, scaler.transform(Xte), yte


# ---------------------------------------------------------------- the table

MEASURES = {"pauc": {"beta": 0.1}, "prbep": {}, "f1": {}}
MEASURE_TITLE = {"pauc": "pAUC(0,0.1)", "prbep": "PRBEP", "f1": "F1"}
MEASURED = ("nsdist", "lr", "lr_bal", "lr_thr", "cp", "libauc_here")
LABEL = {"nsdist": "nsdist default", "lr": "LR", "lr_bal": "LR bal", "lr_thr": "LR F1-thr", "cp": "CP",
         "cp_best": "CP best", "libauc_here": "LibAUC (measured)", "libauc": "LibAUC (quoted)",
         "svmperf": "SVMperf (quoted)"}
# Figures measured by others on comparable splits, in percent, printed as given (not measured here).
PEERS = {
    "libauc": {("ijcnn1", "pauc"): 67.3, ("ijcnn1", "prbep"): 72.0, ("ijcnn1", "f1"): 71.7,
               ("mammography", "pauc"): 81.6, ("mammography", "f1"): 64.3},
    "svmperf": {("w8a", "pauc"): 84.0, ("w8a", "f1"): 75.5, ("hiva", "prbep"): 39.8,
                ("kddcup99", "pauc"): 98.6},
}
MARGIN = 0.5                                  # points: ">= best peer - 0.5"
TIME_RATIO = 10.0                             # default fit time <= 10 x plain LR's
ABSOLUTE = {("ijcnn1", "pauc"): 67.3, ("ijcnn1", "prbep"): 72.0}
CP_CAP = 20.0
HOLDOUT = {"validation_folds": 1}             # the one-holdout column: the default but never K-fold selection


def _lr(**kw):
    from sklearn.linear_model import LogisticRegression
    return LogisticRegression(max_iter=5000, **kw)


def run_split(name: str, seed: int, measures: tuple[str, ...], cp_cap: float) -> dict:
    """Every method on split ``seed`` of ``name``: ``{"by_measure": {measure: {method: record}}}`` plus facts."""
    from sklearn.model_selection import TunedThresholdClassifierCV

    from nsdist import NonDecomposableClassifier
    from nsdist.solvers.measure import learns_intercept, make_loss, measure_function

    paper = _paper()
    t_start = time.perf_counter()
    Xtr, ytr, Xte, yte = split(name, seed)
    d = Xtr.shape[1]
    out: dict = {"seed": seed, "n_train": int(Xtr.shape[0]), "n_test": int(Xte.shape[0]), "d": int(d),
                 "pos_rate": float((ytr > 0).mean()), "by_measure": {m: {} for m in measures}}
    f = {m: measure_function(m, **MEASURES[m]) for m in measures}
    for key, kw in (("lr", {}), ("lr_bal", {"class_weight": "balanced"})):
        t0 = time.perf_counter()
        lr = _lr(**kw).fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
        s = lr.decision_function(Xte)
        for m in measures:
            out["by_measure"][m][key] = {"value": f[m](yte, s), "seconds": seconds,
                                         "n_iter": int(np.max(lr.n_iter_))}
    if "f1" in measures:
        t0 = time.perf_counter()
        tuned = TunedThresholdClassifierCV(_lr(), scoring="f1").fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
        s = np.where(tuned.predict(Xte) == 1, 1.0, -1.0)
        out["by_measure"]["f1"]["lr_thr"] = {"value": f["f1"](yte, s), "seconds": seconds,
                                             "threshold": float(tuned.best_threshold_),
                                             "cv_f1": float(tuned.best_score_)}
    for m in measures:
        res = out["by_measure"][m]
        t0 = time.perf_counter()
        est = NonDecomposableClassifier(m, random_state=seed, **MEASURES[m]).fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
        sel = est.selection_ or []
        chosen = [c["name"] for c in sel if c["selected"]]
        res["nsdist"] = {
            "value": est.score(Xte, yte), "seconds": seconds, "n_iter": int(est.n_iter_),
            "selected": chosen[0] if chosen else None,
            "selected_validation": next((c["validation"] for c in sel if c["selected"]), None),
            "folds": est.folds_, "validation_positives": int(est.validation_positives_),
            "n_candidates": len(sel), "checks": len(est.validation_curve_),
            "selection": [{k: c.get(k) for k in ("name", "step_scale", "validation", "steps", "steps_trained",
                                                  "cost_share", "dropped_at_check",
                                                  "reason", "selected")} for c in sel],
        }
        t0 = time.perf_counter()        # the same default with one holdout: another setting, not a peer
        est = NonDecomposableClassifier(m, random_state=seed, **HOLDOUT, **MEASURES[m]).fit(Xtr, ytr)
        res["nsdist_holdout"] = {"value": est.score(Xte, yte), "seconds": time.perf_counter() - t0,
                                 "selected": next(c["name"] for c in est.selection_ if c["selected"])}
        fi = learns_intercept(m)
        cp = paper.cutting_plane_traced(Xtr, ytr, make_loss(m, **MEASURES[m]), lam=paper.CP_LAMBDA,
                                        tol=paper.CP_TOL, fit_intercept=fi, max_iter=paper.CP_MAX_ITER, cap=cp_cap)
        for key, z in (("cp", cp["last"]), ("cp_best", cp["best"])):
            res[key] = {"value": f[m](yte, Xte @ z[:d] + (z[d] if fi else 0.0)), "seconds": cp["seconds"],
                        "n_iter": cp["n_iter"], "converged": cp["converged"], "gap": cp["gap"],
                        "zero_model": bool(not np.any(z))}
    out["wall"] = time.perf_counter() - t_start
    return out


# ---------------------------------------------------------------- summary


def _stat(values: list[float]) -> dict:
    v = 100.0 * np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "std": float(v.std()), "n": int(v.size)}


def measured_peers(out: Path) -> dict:
    """``(data set, seed) -> {measure: test value in [0, 1], "seconds": its whole tuning}`` of LibAUC
    measured on the splits (``OUT/libauc.json`` of ``bench/libauc_peer.py``; empty when that file does
    not exist)."""
    path = out / "libauc.json"
    if not path.exists():
        return {}
    return {(r["name"], r["seed"]): {**{m: v["test"] / 100.0 for m, v in r["selected"].items()},
                                     "seconds": r["seconds"]}
            for r in json.loads(path.read_text())["runs"]}


def summarise(runs: dict, libauc: dict | None = None) -> dict:
    """Per (data set, measure): means in percent, best peer, the two marks, timings, the selection counts.

    ``libauc``: :func:`measured_peers`; a data set's measured LibAUC column appears when it covers every
    split of the run (so that its paired differences are over the same splits)."""
    cells, libauc = {}, libauc or {}
    for name, splits in runs.items():
        if not splits:
            continue
        lr_sec = float(np.median([sp["by_measure"][next(iter(sp["by_measure"]))]["lr"]["seconds"]
                                  for sp in splits]))
        seeds = [sp["seed"] for sp in splits]
        libauc_sec = (float(np.median([libauc[name, s]["seconds"] for s in seeds]))
                      if all((name, s) in libauc for s in seeds) else None)
        for m in splits[0]["by_measure"]:
            recs = {k: [sp["by_measure"][m][k] for sp in splits] for k in splits[0]["by_measure"][m]}
            if all(m in libauc.get((name, s), {}) for s in seeds):
                recs["libauc_here"] = [{"value": libauc[name, s][m]} for s in seeds]
            stat = {k: _stat([r["value"] for r in v]) for k, v in recs.items()}
            peers = {k: stat[k]["mean"] for k in MEASURED if k != "nsdist" and k in stat}
            quoted = {p: PEERS[p][name, m] for p in PEERS if (name, m) in PEERS[p]}
            allp = {**peers, **quoted}
            best_key = max(allp, key=allp.get)
            ns = stat["nsdist"]["mean"]
            ns_sec = float(np.median([r["seconds"] for r in recs["nsdist"]]))
            picks = collections.Counter(r["selected"] for r in recs["nsdist"])
            odd = collections.Counter()
            for r in recs["nsdist"]:
                for c in r["selection"]:
                    if c["validation"] is None or (c["reason"] and "diverg" in c["reason"].lower()) or (
                            c["reason"] and "finite" in c["reason"].lower()):
                        odd[c["name"]] += 1
            cells[f"{name}/{m}"] = {
                "data": name, "measure": m, "n_splits": len(splits), "stat": stat, "quoted": quoted,
                "best_peer": best_key, "best_peer_value": allp[best_key],
                "diff_vs_best": ns - allp[best_key],
                "meets_margin": bool(ns >= allp[best_key] - MARGIN), "strictly_best": bool(ns > allp[best_key]),
                "best_measured": max(peers, key=peers.get),
                "meets_margin_measured": bool(ns >= max(peers.values()) - MARGIN),
                "strictly_best_measured": bool(ns > max(peers.values())),
                "paired_diff_vs_best_measured": _stat([a["value"] - b["value"] for a, b in
                                                       zip(recs["nsdist"], recs[max(peers, key=peers.get)])]),
                "nsdist_seconds": ns_sec, "lr_seconds": lr_sec, "time_ratio": ns_sec / lr_sec,
                "cp_seconds": float(np.median([r["seconds"] for r in recs["cp"]])),
                "libauc_seconds": libauc_sec,
                "cp_cap_hit": sum(not r["converged"] for r in recs["cp"]),
                "cp_zero": sum(r["zero_model"] for r in recs["cp"]),
                "selected": picks.most_common(), "odd_candidates": dict(odd),
                "absolute_target": ABSOLUTE.get((name, m)),
                "selected_validation_mean": float(100 * np.mean([r["selected_validation"] for r in recs["nsdist"]
                                                                 if r["selected_validation"] is not None])),
                "validation_positives": round(float(np.mean([r.get("validation_positives", round(
                    0.1 * sp["n_train"] * sp["pos_rate"])) for r, sp in zip(recs["nsdist"], splits)]))),
                "selected_by": selection_mode(splits, m),
                "cost": _family_cost(recs["nsdist"]),
            }
    return cells


def _family_cost(records: list[dict]) -> dict[str, float] | None:
    """Median over splits of each candidate family's seconds (``fit seconds x cost_share`` summed over its
    step scales; the family is the name before ``@``), most expensive first; None for runs that predate
    ``cost_share``."""
    if any("cost_share" not in c for r in records for c in r["selection"]):
        return None
    per_split = []
    for r in records:
        fam: dict[str, float] = collections.defaultdict(float)
        for c in r["selection"]:
            fam[c["name"].split("@")[0]] += r["seconds"] * c["cost_share"]
        per_split.append(fam)
    med = {f: float(np.median([s.get(f, 0.0) for s in per_split])) for f in per_split[0]}
    return dict(sorted(med.items(), key=lambda kv: -kv[1]))


def holdout_cells(splits: list[dict], measure: str) -> list[str]:
    """The one-holdout column (``nsdist_holdout``) as mean ± std and the default's paired difference with it
    (default minus one holdout, mean ± standard error); dashes for runs that predate it."""
    if any("nsdist_holdout" not in sp["by_measure"][measure] for sp in splits):
        return ["–", "–"]
    one = [100 * sp["by_measure"][measure]["nsdist_holdout"]["value"] for sp in splits]
    diff = np.subtract([100 * sp["by_measure"][measure]["nsdist"]["value"] for sp in splits], one)
    return [f"{np.mean(one):.1f} ± {np.std(one):.1f}", f"{diff.mean():+.1f} ± {diff.std() / np.sqrt(diff.size):.1f}"]


def selection_mode(splits: list[dict], measure: str) -> str:
    """How the default selected: ``K folds`` or ``holdout``, with the validation positives it chose on."""
    recs = [sp["by_measure"][measure]["nsdist"] for sp in splits]
    if any("folds" not in r for r in recs):
        return "–"
    k = {r["folds"] for r in recs}
    v = np.mean([r["validation_positives"] for r in recs])
    return (f"{k.pop()} folds" if len(k) == 1 and None not in k else
            "holdout" if k == {None} else "mixed") + f" (v+ {v:.0f})"


def holdout_table(cells: dict, runs: dict) -> str:
    """Per cell: how the default selected, the default, the default with ``validation_folds=1``, their paired
    difference, fit seconds (median), and whether the one-holdout column would meet the margin."""
    lines = ["| data | measure | default selected by | nsdist default | nsdist `validation_folds=1` | "
             "paired difference default − one holdout (± s.e.) | fit s: default / one holdout (median) | "
             "one holdout ≥ best − 0.5 |", "|---|---|---|---|---|---|---|---|"]
    for c in cells.values():
        splits = runs[c["data"]]
        mean, diff = holdout_cells(splits, c["measure"])
        if mean == "–":
            continue
        sec = np.median([sp["by_measure"][c["measure"]]["nsdist_holdout"]["seconds"] for sp in splits])
        meets = c["stat"]["nsdist_holdout"]["mean"] >= c["best_peer_value"] - MARGIN
        lines.append(f"| {c['data']} | {MEASURE_TITLE[c['measure']]} | {selection_mode(splits, c['measure'])} | "
                     f"{_pm(c['stat']['nsdist'])} | {mean} | {diff} | "
                     f"{c['nsdist_seconds']:.2f} / {sec:.2f} | {'yes' if meets else '**NO**'} |")
    shown = [c for c in cells.values() if "nsdist_holdout" in c["stat"]]
    if shown:
        lines.append(f"\nIn the default's place, `validation_folds=1` would be ≥ best peer − {MARGIN} on "
                     f"{sum(c['stat']['nsdist_holdout']['mean'] >= c['best_peer_value'] - MARGIN for c in shown)}/"
                     f"{len(shown)} cells and strictly best on "
                     f"{sum(c['stat']['nsdist_holdout']['mean'] > c['best_peer_value'] for c in shown)}/{len(shown)}.")
    return "\n".join(lines) + "\n"


def _pm(st: dict) -> str:
    return f"{st['mean']:.1f} ± {st['std']:.1f}"


def table(cells: dict) -> str:
    head = ["data", "measure", "nsdist default", "LR", "LR bal", "LR F1-thr", "CP", "LibAUC (measured)",
            "LibAUC (quoted)", "SVMperf (quoted)", "best peer", "≥ best − 0.5", "strictly best",
            "selected most often"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells.values():
        st = c["stat"]
        row = [c["data"], MEASURE_TITLE[c["measure"]], f"**{_pm(st['nsdist'])}**"]
        for k in ("lr", "lr_bal", "lr_thr", "cp", "libauc_here"):
            cell = _pm(st[k]) if k in st else "–"
            if k == "cp" and c["cp_cap_hit"]:
                cell += f" [cap {c['cp_cap_hit']}/{c['n_splits']}]"
            if k == "cp" and c["cp_zero"]:
                cell += f" [w=0 {c['cp_zero']}/{c['n_splits']}]"
            row.append(cell)
        for p in PEERS:
            row.append(f"{c['quoted'][p]:.1f}" if p in c["quoted"] else "–")
        row.append(f"{LABEL[c['best_peer']]} {c['best_peer_value']:.1f} ({c['diff_vs_best']:+.2f})")
        row.append("yes" if c["meets_margin"] else "**NO**")
        row.append("yes" if c["strictly_best"] else "no")
        top, k = c["selected"][0]
        row.append(f"{top} ({k}/{c['n_splits']})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def timing_table(cells: dict) -> str:
    by_set: dict = {}
    for c in cells.values():
        by_set.setdefault(c["data"], []).append(c)
    lines = ["| data | LR s (median) | nsdist s: " + " / ".join(MEASURE_TITLE[m] for m in MEASURES) +
             " | ratio nsdist / LR: " + " / ".join(MEASURE_TITLE[m] for m in MEASURES) +
             " | worst ratio ≤ 10 | CP s (median) | LibAUC measured s (median; its 3 learning rates) |",
             "|---|---|---|---|---|---|---|"]
    for name, cs in by_set.items():
        bym = {c["measure"]: c for c in cs}
        sec = " / ".join(f"{bym[m]['nsdist_seconds']:.2f}" if m in bym else "–" for m in MEASURES)
        rat = " / ".join(f"{bym[m]['time_ratio']:.1f}" if m in bym else "–" for m in MEASURES)
        worst = max(c["time_ratio"] for c in cs)
        cps = " / ".join(f"{bym[m]['cp_seconds']:.1f}" if m in bym else "–" for m in MEASURES)
        lib = cs[0].get("libauc_seconds")
        lines.append(f"| {name} | {cs[0]['lr_seconds']:.2f} | {sec} | {rat} | "
                     f"{'yes' if worst <= TIME_RATIO else '**NO**'} ({worst:.1f}) | {cps} | "
                     f"{'–' if lib is None else f'{lib:.1f}'} |")
    return "\n".join(lines) + "\n"


def targets(cells: dict) -> dict:
    n = len(cells)
    met = [k for k, c in cells.items() if c["meets_margin"]]
    best = [k for k, c in cells.items() if c["strictly_best"]]
    ratios: dict = {}
    for c in cells.values():
        ratios[c["data"]] = max(ratios.get(c["data"], 0.0), c["time_ratio"])
    absolute = {k: {"value": c["stat"]["nsdist"]["mean"], "target": c["absolute_target"],
                    "met": bool(c["stat"]["nsdist"]["mean"] >= c["absolute_target"])}
                for k, c in cells.items() if c["absolute_target"] is not None}
    return {
        "cells": n,
        "margin": {"met": len(met), "missed": [k for k in cells if k not in met], "target_met": len(met) == n},
        "strictly_best": {"count": len(best), "cells": best, "target_met": 2 * len(best) >= n},
        "time": {"worst_ratio_per_set": ratios, "missed": [k for k, r in ratios.items() if r > TIME_RATIO],
                 "target_met": all(r <= TIME_RATIO for r in ratios.values())},
        "absolute": absolute,
        "measured_only": {"margin_met": sum(c["meets_margin_measured"] for c in cells.values()),
                          "strictly_best": sum(c["strictly_best_measured"] for c in cells.values())},
    }


def notes(cells: dict) -> str:
    out = []
    for k, c in cells.items():
        st = c["stat"]
        bm = c["best_measured"]
        pd_ = c["paired_diff_vs_best_measured"]
        if not c["meets_margin"]:
            out.append(f"* **{c['data']} {MEASURE_TITLE[c['measure']]}**: nsdist default {_pm(st['nsdist'])} vs "
                       f"best peer {LABEL[c['best_peer']]} {c['best_peer_value']:.1f} ({c['diff_vs_best']:+.2f} "
                       f"points); against the best measured peer {LABEL[bm]}: paired difference "
                       f"{pd_['mean']:+.1f} ± {pd_['std']:.1f}.")
        if c["odd_candidates"]:
            out.append(f"* {c['data']} {MEASURE_TITLE[c['measure']]}: candidates without a finite validation "
                       f"value (diverged or never scored; count over splits): "
                       + ", ".join(f"{n} ({v})" for n, v in c["odd_candidates"].items()) + ".")
        gap = c["selected_validation_mean"] - st["nsdist"]["mean"]
        if gap > 5:
            out.append(f"* {c['data']} {MEASURE_TITLE[c['measure']]}: the selected candidates' validation value "
                       f"(mean {c['selected_validation_mean']:.1f}) is {gap:.1f} points above their test value: the "
                       f"selection ({c['selected_by']}) chose on about {c['validation_positives']} validation "
                       "positives, so the choice is noisy and its value optimistic.")
        if "cp_best" in st and st["cp_best"]["mean"] > max(c["best_peer_value"], st["nsdist"]["mean"]):
            out.append(f"* {c['data']} {MEASURE_TITLE[c['measure']]}: CP's lowest-objective iterate (not what the "
                       f"library returns) reaches {_pm(st['cp_best'])}, above every column of the table.")
    return "\n".join(out) + "\n" if out else "None.\n"


def selection_table(cells: dict) -> str:
    lines = ["| data | measure | selected candidate (splits) | nsdist test (mean) |", "|---|---|---|---|"]
    for c in cells.values():
        picks = ", ".join(f"{n} ({k})" for n, k in c["selected"])
        lines.append(f"| {c['data']} | {MEASURE_TITLE[c['measure']]} | {picks} | "
                     f"{c['stat']['nsdist']['mean']:.1f} |")
    return "\n".join(lines) + "\n"


def cost_table(cells: dict) -> str:
    """Each candidate family's part of the default fit (median seconds over splits)."""
    rows = [c for c in cells.values() if c.get("cost")]
    if not rows:
        return "(not recorded by this run)\n"
    lines = ["| data | measure | fit s (median) | candidate families, seconds (share of the fit) |", "|---|---|---|---|"]
    for c in rows:
        total = sum(c["cost"].values()) or 1.0
        fams = ", ".join(f"{f} {s:.3f} ({s / total:.0%})" for f, s in c["cost"].items())
        lines.append(f"| {c['data']} | {MEASURE_TITLE[c['measure']]} | {c['nsdist_seconds']:.2f} | {fams} |")
    return "\n".join(lines) + "\n"


def report(cells: dict, meta: dict, runs: dict) -> str:
    t = targets(cells)
    n = t["cells"]
    absolute = "; ".join(f"{k}: {v['value']:.1f} vs {v['target']:.1f} -> {'met' if v['met'] else 'MISSED'}"
                         for k, v in t["absolute"].items()) or "not run"
    data = "; ".join(f"{k}: {v['n']:,} rows x {v['d']} features, {v['pos_rate']:.2%} positives"
                     for k, v in meta["datasets"].items())
    missing = [f"{k} ({v}/{meta['n_splits']} splits)" for k, v in meta["splits_done"].items()
               if v < meta["n_splits"]]
    partial = ("**Partial run** -- missing splits: " + ", ".join(missing) + ". Means are over the splits that ran.\n\n"
               if missing else "")
    return (
        "# Default `NonDecomposableClassifier` against baselines and quoted peers\n\n"
        f"Written by `{' '.join(['python bench/defaults.py', *meta['argv']])}` ({meta['n_splits']} splits, "
        f"{meta['wall_seconds']:.0f} s wall, {meta['jobs']} process(es), load average {meta['loadavg_start']:.1f} "
        f"at start / {meta['loadavg_end']:.1f} at the end on {meta['cpus']} cores, shared with other jobs). "
        "Protocol in the module docstring of `bench/defaults.py`; every split in `defaults.json`.\n\n"
        + partial +
        f"Data: {data}. No subsampling: every row of every data set is used. Positive class: letter `N` vs the "
        "other letters; kddcup99 the R2L + U2R attacks vs `normal.` of the 10% file, other attacks dropped (its README's "
        "option (c), as `bench/paper.py`), categoricals one-hot; the others as in their READMEs (label +1 / '1').\n\n"
        "* Cells: test measure in percent, mean ± std (population std) over the splits. 70/30 stratified splits "
        "(seed = split index), `StandardScaler` fitted on the training part. Nothing is chosen on the test part.\n"
        "* **nsdist default**: `NonDecomposableClassifier(measure, random_state=seed)` (+ `beta=0.1` for pAUC), "
        "nothing else set (its own holdout, candidate population, early stopping; F1: plug-in threshold).\n"
        "* LR: `LogisticRegression(max_iter=5000)`, plain / `class_weight='balanced'`, `decision_function` "
        "(threshold 0 for F1). LR F1-thr: `TunedThresholdClassifierCV(LogisticRegression(max_iter=5000), "
        "scoring='f1')` (F1 only).\n"
        f"* CP: the library's cutting plane (`solver='cp'`, alpha 1e-4, tol 1e-3, its best iterate), time cap "
        f"{meta['cp_cap']:g} s per fit as in `bench/paper.py` (`[cap k/n]`: the cap stopped it in k splits; "
        "`[w=0 k/n]`: its best iterate is w = 0, i.e. constant scores). The cap is wall-clock and the machine "
        "was loaded, so a capped CP made fewer iterations than it would alone: its capped cells are what 20 s "
        "bought here, not CP's optimum.\n"
        "* **LibAUC (measured)**: LibAUC's SOPA (`pAUC_CVaR_Loss(beta=0.1)`, squared hinge with margin 1 on "
        "sigmoid scores, `SOPA` in Adam mode, `DualSampler(64, 0.5)`, 20 epochs, a linear model) run here by "
        "`bench/libauc_peer.py` on these splits, trained on the training part minus nsdist's validation rows; "
        "learning rate (1e-3 / 1e-2 / 1e-1) chosen per measure on those validation rows; F1 at the "
        "validation-optimal threshold (protocol and per-split values in `libauc.md` / `libauc.json`).\n"
        "* **LibAUC (quoted) / SVMperf columns are quoted** (figures measured by others on comparable splits), "
        "not measured here; their protocols (pAUC normalisation, splits, tuning) may differ.\n"
        f"* best peer: the highest of the measured baselines and the quoted figures; \"≥ best − 0.5\": nsdist mean "
        f"≥ best peer − {MARGIN} point; \"strictly best\": nsdist mean > best peer. \"selected most often\": the "
        "candidate in nsdist's `selection_` marked `selected`, most frequent over the splits "
        "(surrogate@step scale, step = scale / E||x||^2).\n\n"
        "## Results\n\n" + table(cells) +
        f"\n**≥ best peer − 0.5: {t['margin']['met']}/{n}** (target: all {n} -> "
        f"{'met' if t['margin']['target_met'] else 'MISSED'}); "
        f"**strictly best: {t['strictly_best']['count']}/{n}** (target: at least half -> "
        f"{'met' if t['strictly_best']['target_met'] else 'MISSED'}); "
        f"**fit time ≤ 10× plain LR on every set: {'met' if t['time']['target_met'] else 'MISSED'}**"
        + (f" (missed on {', '.join(t['time']['missed'])})" if t["time"]["missed"] else "")
        + f"; **ijcnn1 absolute targets**: {absolute}.\n\n"
        f"Against the measured columns only (LR, LR bal, LR F1-thr, CP, LibAUC measured; quoted figures left out): "
        f"≥ best − 0.5 on {t['measured_only']['margin_met']}/{n}, strictly best on "
        f"{t['measured_only']['strictly_best']}/{n}.\n\n"
        "## Fit seconds (median over splits)\n\n"
        "Plain LR is fitted once per split (the same model serves the three measures); nsdist once per measure. "
        "Timings come from processes sharing 2 cores with other jobs (load average above), so they are noisy.\n\n"
        + timing_table(cells) + timing_check_text(meta.get("timing_check"), meta.get("timing_check_history", [])) +
        "\n## What each candidate costs\n\n"
        "A fit's seconds split over its candidates by `selection_`'s `cost_share` (the steps each was alive for, "
        "over all candidates' steps), summed over the step scales of a family (`/const`: constant steps). Each "
        "live candidate costs a step one column of `X @ W` and of `X.T @ dS`, so the split is exact for the "
        "products; the surrogates' own costs differ (the logistic pair sum is O(n+ m) a buffer, the others "
        "O(n log n)), so it is approximate for them.\n\n" + cost_table(cells) +
        "\n## K-fold or one holdout (`validation_folds`)\n\n"
        "The default (`validation_folds=\"auto\"`) selects by 5-fold selection where a holdout of 10% would hold "
        "fewer than 100 positives (and the rows number at most `validation_max_rows`), else on one holdout "
        "(docs/solvers.md §Selection, \"K-fold selection\"): the population trained on each fold's complement and "
        "checked on the fold, the folds in lockstep (halving and early stopping decided on their mean), the best mean wins, its fold models averaged -- every positive takes part in the "
        "choice, for about five times the fit. The column `validation_folds=1` is the same default always on one "
        "holdout; another setting of the library, not a peer: the targets above are judged on the default "
        "alone.\n\n" + holdout_table(cells, runs) +
        "\n## Selection (from `selection_`)\n\n" + selection_table(cells) +
        "\n## Where a target is missed, and anything odd\n\n" + notes(cells) +
        "\n## Reproduce\n\n```\n"
        ".venv/bin/python bench/defaults.py                  # all 7 data sets, 5 splits, 2 processes\n"
        ".venv/bin/python bench/defaults.py --datasets letter,mammography --splits 2 --out /tmp/defaults-x\n"
        ".venv/bin/python bench/defaults.py --timing-check   # then: re-time LR and nsdist alone, add to this file\n"
        ".venv/bin/python bench/defaults.py --replot         # rebuild this file from defaults.json\n"
        ".venv-peers/bin/python bench/libauc_peer.py         # the measured LibAUC column (PyTorch; see its "
        "docstring), then --replot\n```\n"
    )


def timing_check(datasets: tuple[str, ...], n_splits: int, note: str = "") -> dict:
    """Plain LR and default nsdist fit seconds, one process, one fit after the other (no CP, no other method).

    The result is dated (UTC) and carries ``note`` (what was timed, e.g. the commit), so that successive
    checks can be told apart in ``timing_check_history``.
    """
    from nsdist import NonDecomposableClassifier

    load0, rows = os.getloadavg()[0], {}
    for name in datasets:
        lr, ns = [], {m: [] for m in MEASURES}
        for seed in range(n_splits):
            Xtr, ytr, _, _ = split(name, seed)
            t0 = time.perf_counter()
            _lr().fit(Xtr, ytr)
            lr.append(time.perf_counter() - t0)
            for m in MEASURES:
                t0 = time.perf_counter()
                NonDecomposableClassifier(m, random_state=seed, **MEASURES[m]).fit(Xtr, ytr)
                ns[m].append(time.perf_counter() - t0)
        lr_med = float(np.median(lr))
        rows[name] = {"lr_seconds": lr, "nsdist_seconds": ns, "lr_median": lr_med,
                      "ratio": {m: float(np.median(v)) / lr_med for m, v in ns.items()}}
        print(f"timing {name}: LR {lr_med:.2f} s, ratios "
              + " / ".join(f"{r:.1f}" for r in rows[name]["ratio"].values()), file=sys.stderr, flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "note": note, "n_splits": n_splits,
            "loadavg_start": load0, "loadavg_end": os.getloadavg()[0], "by_data": rows}


def _timing_rows(tc: dict) -> list[str]:
    """One table row per data set of a timing check: LR median, nsdist medians, ratios."""
    return [f"| {name} | {r['lr_median']:.3f} | "
            + " / ".join(f"{float(np.median(v)):.3f}" for v in r["nsdist_seconds"].values()) + " | "
            + " / ".join(f"{v:.1f}" for v in r["ratio"].values()) + " |" for name, r in tc["by_data"].items()]


def _timing_title(tc: dict) -> str:
    """``date, note`` of a timing check (checks before dating began: "undated")."""
    return ", ".join(x for x in (tc.get("date") or "undated", tc.get("note")) if x)


def timing_check_text(tc: dict | None, history: list[dict] = ()) -> str:
    """The latest timing check as a table, then the earlier ones (``timing_check_history``), newest first."""
    if not tc:
        return ""
    head = ("| data | LR s (median) | nsdist s: " + " / ".join(MEASURE_TITLE[m] for m in MEASURES) +
            " | ratio: " + " / ".join(MEASURE_TITLE[m] for m in MEASURES) + " |")
    lines = [f"\nTiming check (`python bench/defaults.py --timing-check`; {_timing_title(tc)}): plain LR and "
             f"default nsdist only, in one process, one fit after the other, {tc['n_splits']} splits (load average "
             f"{tc['loadavg_start']:.1f} at start / {tc['loadavg_end']:.1f} at the end). The target is judged on the "
             "table above; this shows how much of the ratio is contention.\n", head, "|---|---|---|---|",
             *_timing_rows(tc)]
    if history:
        lines += ["\nEarlier timing checks (same protocol), newest first:"]
        for old in reversed(history):
            lines += [f"\n*{_timing_title(old)}* (load average {old['loadavg_start']:.1f} / "
                      f"{old['loadavg_end']:.1f})\n", head, "|---|---|---|---|", *_timing_rows(old)]
    return "\n".join(lines) + "\n"


def _rounded(obj):
    if isinstance(obj, float):
        return obj if not math.isfinite(obj) else float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return _rounded(obj.item())
    return obj


def publish(out: Path, meta: dict, runs: dict, echo: bool = True) -> None:
    """``defaults.json`` (runs, summary, targets) and ``defaults.md``, both written atomically."""
    cells = summarise(runs, measured_peers(out))
    payload = {"meta": meta, "peers_quoted": {p: {f"{k[0]}/{k[1]}": v for k, v in d.items()} for p, d in PEERS.items()},
               "summary": cells, "targets": targets(cells) if cells else None, "runs": runs}
    _atomic_write(out / "defaults.json", json.dumps(_rounded(payload), indent=1).encode())
    if cells:
        _atomic_write(out / "defaults.md", report(cells, meta, runs).encode())
        if echo:
            print(table(cells))
            print(timing_table(cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=["table"], help="accepted for compatibility; the table is all")
    parser.add_argument("--datasets", help=f"comma list of {', '.join(DATASETS)} (default: all)")
    parser.add_argument("--splits", type=int, default=5, help="number of splits, seeds 0..N-1 (default 5)")
    parser.add_argument("--measures", default=",".join(MEASURES), help="comma list (default: pauc,prbep,f1)")
    parser.add_argument("--cp-cap", type=float, default=CP_CAP, help=f"CP time cap per fit, s (default {CP_CAP:g})")
    parser.add_argument("--jobs", type=int, default=2, help="parallel processes, each running whole splits")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"output folder (default {RESULTS})")
    parser.add_argument("--replot", action="store_true", help="rebuild defaults.md from OUT/defaults.json")
    parser.add_argument("--timing-check", action="store_true",
                        help="re-time plain LR and default nsdist alone (one process) on --datasets and add the "
                             "result to OUT/defaults.{json,md} (the previous check moves to the history)")
    parser.add_argument("--note", default="", help="--timing-check: what is timed (e.g. the commit), shown with it")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    if args.timing_check:
        payload = json.loads((args.out / "defaults.json").read_text())
        names = tuple(args.datasets.split(",")) if args.datasets else DATASETS
        previous = payload["meta"].get("timing_check")
        if previous:
            payload["meta"].setdefault("timing_check_history", []).append(previous)
        payload["meta"]["timing_check"] = timing_check(names, args.splits, args.note)
        publish(args.out, payload["meta"], payload["runs"])
        return
    if args.replot:
        payload = json.loads((args.out / "defaults.json").read_text())
        publish(args.out, payload["meta"], payload["runs"])
        return
    datasets = tuple(args.datasets.split(",")) if args.datasets else DATASETS
    measures = tuple(args.measures.split(","))
    unknown = [d for d in datasets if d not in DATASETS] + [m for m in measures if m not in MEASURES]
    if unknown:
        parser.error(f"unknown data set or measure: {', '.join(unknown)}")
    _paper().check_cp_replica()
    for name in datasets:                     # parse (or read the cache) once, before the workers fork
        X, y = load(name)
        print(f"{name}: {X.shape[0]:,} x {X.shape[1]}, {np.mean(y > 0):.2%} positives", file=sys.stderr, flush=True)
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    tasks = sorted(((n, s) for n in datasets for s in range(args.splits)), key=lambda t: (-COST_HINT.get(t[0], 0), t[1]))
    results: dict = {}
    meta = {"argv": argv, "n_splits": args.splits, "jobs": args.jobs, "cp_cap": args.cp_cap,
            "measures": list(measures), "datasets": {}, "cpus": os.cpu_count(), "loadavg_start": load0}
    earlier = args.out / "defaults.json"      # the timing checks are measurements of their own: a new table keeps them
    if earlier.exists():
        previous = json.loads(earlier.read_text())["meta"]
        meta.update({k: previous[k] for k in ("timing_check", "timing_check_history") if k in previous})

    def flush() -> None:
        runs = {n: [results[n, s] for s in range(args.splits) if (n, s) in results] for n in datasets}
        meta.update(wall_seconds=time.perf_counter() - t0, loadavg_end=os.getloadavg()[0],
                    splits_done={n: len(v) for n, v in runs.items()},
                    datasets={n: {"n": v[0]["n_train"] + v[0]["n_test"], "d": v[0]["d"], "pos_rate": v[0]["pos_rate"]}
                              for n, v in runs.items() if v})
        publish(args.out, meta, {n: v for n, v in runs.items() if v}, echo=False)

    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_split, n, s, measures, args.cp_cap): (n, s) for n, s in tasks}
        for fut in as_completed(futures):
            n, s = futures[fut]
            results[n, s] = fut.result()
            print(f"{n} split {s}: {results[n, s]['wall']:.1f} s ({time.perf_counter() - t0:.0f} s elapsed)",
                  file=sys.stderr, flush=True)
            flush()                           # partial results on disk after every split
    flush()
    payload = json.loads((args.out / "defaults.json").read_text())
    cells = payload["summary"]
    print(table(cells))
    print(timing_table(cells))
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
