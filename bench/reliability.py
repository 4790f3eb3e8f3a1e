"""Reliability: faults injected for real and bad inputs tried, and what became of each.

Runs the scenario tests -- ``tests/test_faults.py`` (SIGKILLed workers, a
SIGKILLed driver, writes killed midway), ``tests/test_bad_input.py`` (bad data,
parameters and models through the API and the command line; pickles and YAML
tags) and ``tests/test_tls.py`` (a TLS-secured cluster) and ``tests/test_first_hour.py``
(what a new user hits: a wrong label column, a positive class no row has,
arguments only checked after a cluster started, Python-speaking errors) -- under pytest with
``--reliability-report``: each test records what it injected or tried, and its
outcome is pytest's, so a row reads "survived" or "rejected cleanly" only if
every assertion of its test held (the identical model, the message naming the
file / partition / row, the exit code, nothing half-written).

Then it probes, directly, inputs known to be handled badly (reported, not yet
fixed), so that the table shows them until they are fixed.

Run ``python bench/reliability.py`` (about 3 minutes on 2 cores); it prints the
tables and writes them to ``bench/results/reliability.md``, with every record
in ``bench/results/reliability.json``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TEST_FILES = ["tests/test_faults.py", "tests/test_bad_input.py", "tests/test_tls.py", "tests/test_first_hour.py"]


def run_tests(report: Path) -> dict:
    """Run the scenario tests with the reliability report plugin; return the report."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_FILES,
           "--reliability-report", str(report)]
    subprocess.run(cmd, cwd=REPO, check=False)
    return json.loads(report.read_text())


def letter(n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The first rows of the bundled Letter data (positive class ``N``)."""
    rows = np.loadtxt(REPO / "data" / "letter" / "letter-recognition.data", delimiter=",", dtype=str,
                      max_rows=n_rows)
    return rows[:, 1:].astype(np.float64), np.where(rows[:, 0] == "N", 1, -1).astype(np.int8)


def write_parquet(root: Path, X: np.ndarray, y: np.ndarray, rows_per_file: int) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True)
    for i in range(0, len(y), rows_per_file):
        cols = {f"f{j}": X[i:i + rows_per_file, j] for j in range(X.shape[1])}
        pq.write_table(pa.table({**cols, "label": y[i:i + rows_per_file]}),
                       root / f"part-{i // rows_per_file:05d}.parquet")
    return str(root)


def probe_f1_without_positives(tmp: Path, scheduler: str) -> dict:
    """``train(measure="f1", solver="1pmb")`` on data with no positive row (docs/measures.md §Labels: a ValueError)."""
    from distributed import Client

    from nsdist.api import train

    X, y = letter(4000)
    url = write_parquet(tmp / "negatives", X[y < 0], y[y < 0], rows_per_file=1000)
    with Client(scheduler, set_as_default=False) as client:
        try:
            model = train(url, client=client, measure="f1", solver="1pmb", n_passes=1)
        except ValueError as exc:
            return {"rejected": True, "outcome": f"ValueError: {exc}"}
    return {"rejected": False, "outcome": f"trained a model (|w| = {np.linalg.norm(model.coef):.3g}, "
                                         f"{model.history['skipped_epochs']} of "
                                         f"{model.history['skipped_epochs'] + model.history['epochs']} epochs "
                                         "skipped)"}


def probe_refused_resume_keeps_the_run(tmp: Path, scheduler: str) -> dict:
    """``nsdist train ... --resume`` refused (other parameters): is the run directory left as it was?"""
    X, y = letter(4000)
    url = write_parquet(tmp / "data", X, y, rows_per_file=1000)
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": scheduler}
    run = tmp / "run"
    base = [sys.executable, "-m", "nsdist", "train", url, "--n-passes", "1", "--checkpoint-every", "1", "--out",
            str(run), "--no-progress"]
    subprocess.run(base, cwd=REPO, env=env, capture_output=True, check=True)
    before = (run / "job.yaml").read_text()
    refused = subprocess.run([*base, "--random-state", "9", "--resume"], cwd=REPO, env=env, capture_output=True,
                             text=True)
    kept = (run / "job.yaml").read_text() == before
    return {"rejected": refused.returncode != 0 and kept,
            "outcome": f"exit {refused.returncode}; job.yaml " + ("kept" if kept else
                       "replaced by the refused job's (so `nsdist train <run>/job.yaml --resume` now fails too)")}


def probe_rewritten_partition_is_not_the_exam(tmp: Path, scheduler: str) -> dict:
    """``nsdist retrain``: a partition the current model trained on, rewritten (or touched), is new; is it
    kept out of the held-out exam (which neither model may have trained on)?"""
    from nsdist.retrain import RetrainSpec, plan

    seen = {f"date=2026-11-0{d}/part-0.parquet": {"size": d, "tag": "t"} for d in (2, 3)}
    state = plan(seen, {}, RetrainSpec()).manifest                 # day 2 trained on, day 3 held out
    listing = {"date=2026-11-01/part-0.parquet": {"size": 1, "tag": "t"},   # a late, fresh partition
               **seen, "date=2026-11-02/part-0.parquet": {"size": 9, "tag": "t"}}  # day 2 rewritten
    p = plan(dict(sorted(listing.items())), state, RetrainSpec(holdout_partitions=2))
    trained = "date=2026-11-02/part-0.parquet"
    return {"rejected": trained not in p.holdout,
            "outcome": f"new {p.new}; exam {p.holdout}; trained on {p.train}"}


def probe_unguarded_script(tmp: Path, scheduler: str) -> dict:
    """A script that trains at its top level, without ``if __name__ == "__main__":`` (the README's
    quickstart pasted as is, once): Dask's spawned workers re-import it."""
    X, y = letter(2000)
    url = write_parquet(tmp / "data", X, y, rows_per_file=1000)
    script = tmp / "qs.py"
    script.write_text(f"import nsdist\nnsdist.train({url!r}, n_passes=1)\n")
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    return {"rejected": proc.returncode == 1 and len(lines) == 1 and "__main__" in lines[0],
            "outcome": f"exit {proc.returncode} in {time.monotonic() - t0:.1f} s, {len(lines)} stderr lines: "
                       f"{lines[-1] if lines else ''}"}


PROBES = [("F1 / 1PMB on data with no positive row", probe_f1_without_positives),
          ("a refused `--resume` leaves the run directory's job.yaml", probe_refused_resume_keeps_the_run),
          ("retrain: a rewritten partition the current model trained on is never the exam",
           probe_rewritten_partition_is_not_the_exam),
          ("a script calling nsdist.train without the `__main__` guard", probe_unguarded_script)]


def run_probes() -> list[dict]:
    from distributed import LocalCluster

    out = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        warnings.simplefilter("ignore")
        for i, (scenario, probe) in enumerate(PROBES):
            work = Path(tmp) / str(i)
            work.mkdir()
            out.append({"scenario": scenario, **probe(work, cluster.scheduler_address)})
    return out


def rows_of(report: dict, kind: str) -> list[tuple[dict, dict]]:
    return [(test, rec) for test in report["tests"] for rec in test["records"] if rec["kind"] == kind]


def cell(text) -> str:
    """One table cell: one line without control characters, pytest's temporary directories
    shortened to ``…/``, pipes escaped."""
    text = re.sub(r"[\x00-\x1f\x7f]", "", " ".join(str(text).split()))
    text = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/", "…/", text)
    return text.replace("|", "\\|")


def markdown(report: dict, probes: list[dict], meta: dict) -> str:
    faults, bad, safety = (rows_of(report, k) for k in ("fault", "bad input", "safety"))
    injected = sum(r["injected"] for _, r in faults)
    survived = sum(r["injected"] for t, r in faults if t["outcome"] == "passed")
    rejected = sum(t["outcome"] == "passed" for t, _ in bad)
    lines = [
        "# Reliability and safety",
        "",
        f"{meta['date']}, {meta['machine']}; `python bench/reliability.py` ran `pytest {' '.join(TEST_FILES)}` "
        f"({meta['tests_passed']} of {meta['tests']} tests passed, {report['seconds']:.0f} s).",
        "",
        f"**Faults: {injected} injected, {survived} survived with the identical result. "
        f"Bad inputs: {len(bad)} tried, {rejected} rejected cleanly. "
        f"Known gaps: {len(probes)} probed, {sum(p['rejected'] for p in probes)} handled.** "
        "A row counts only if every assertion of its test held.",
        "",
        "## Faults injected (every one a SIGKILL of a real process)",
        "",
        "| scenario | injected | survived, identical result | details |",
        "|---|---|---|---|",
    ]
    for test, rec in faults:
        details = ", ".join(f"{k}: {v}" for k, v in rec.items() if k not in ("kind", "scenario", "injected"))
        ok = rec["injected"] if test["outcome"] == "passed" else f"no ({test.get('error', test['outcome'])})"
        lines.append(f"| {cell(rec['scenario'])} | {rec['injected']} | {cell(ok)} | {cell(details)} |")
    lines += ["", "Identical result: the final model equals the undisturbed run's bit for bit (coefficients, "
              "intercept, epochs, rows); for killed writes: every file loads, verifies and holds one whole, "
              "recent save.", "",
              "## Bad input (API and `nsdist` command line)", "",
              "| input | rejected cleanly | exit code | message |", "|---|---|---|---|"]
    for test, rec in bad:
        ok = "yes" if test["outcome"] == "passed" else f"no ({test.get('error', test['outcome'])})"
        lines.append(f"| {cell(rec['scenario'])} | {cell(ok)} | {rec.get('exit_code', '')} | "
                     f"`{cell(rec.get('message', ''))[:240]}` |")
    lines += ["", "Rejected cleanly: `ValueError` from `nsdist.api` and a non-zero exit with one error line "
              "naming the file / partition / row / field or the parameter, and no model, metrics or "
              "temporary file left.", "", "## Safety", "", "| check | held |", "|---|---|"]
    for test, rec in safety:
        lines.append(f"| {cell(rec['scenario'])} | {'yes' if test['outcome'] == 'passed' else 'no'} |")
    lines += ["", "## Known gaps (probed directly by this script)", "",
              "| input | handled | what happens |", "|---|---|---|"]
    for probe in probes:
        lines.append(f"| {cell(probe['scenario'])} | {'yes' if probe['rejected'] else 'no'} | "
                     f"{cell(probe['outcome'])} |")
    failed = [t for t in report["tests"] if t["outcome"] != "passed"]
    if failed:
        lines += ["", "## Failed tests", ""] + [f"- `{t['nodeid']}`: {cell(t.get('error', ''))}" for t in failed]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of reliability.md / .json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = run_tests(Path(tmp) / "report.json")
    probes = run_probes()
    import dask
    import distributed

    meta = {"date": dt.date.today().isoformat(),
            "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, dask {dask.__version__}, "
                       f"distributed {distributed.__version__}",
            "tests": len(report["tests"]), "tests_passed": sum(t["outcome"] == "passed" for t in report["tests"])}
    text = markdown(report, probes, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reliability.md").write_text(text)
    (args.out / "reliability.json").write_text(json.dumps({**meta, "pytest": report, "probes": probes}, indent=1))
    print(text)
    return 0 if meta["tests"] == meta["tests_passed"] else 1


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    sys.exit(code)
