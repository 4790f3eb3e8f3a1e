"""The README's and ``nsdist --help``'s examples run as pasted (issue 14, item 6 and 7).

Every ```python block of README.md is written to a file of its own and run with
``python file.py`` from a fresh directory holding only a link to ``data/`` -- as
a new user pastes it into ``qs.py`` -- twice, since a second run must work
too.  The ``nsdist --help`` examples run in order in another fresh directory.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
BIN = Path(sys.executable).parent


def workdir(tmp_path: Path) -> Path:
    """A fresh directory with ``data/`` (the bundled data) and ``conf/``, as in a clone."""
    for name in ("data", "conf"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def env() -> dict:
    """The user's environment: no scheduler address (the embedded cluster starts), nsdist importable."""
    out = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    out["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return out


def run_script(path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, path.name], cwd=path.parent, env=env(), capture_output=True, text=True,
                          timeout=timeout)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2
    assert any("nsdist.train(" in block and "__main__" in block for block in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_example_runs_as_pasted_twice(index, tmp_path):
    script = workdir(tmp_path) / "qs.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    for attempt in (1, 2):                       # idempotent: a second run works as well
        proc = run_script(script)
        assert proc.returncode == 0, (attempt, proc.stdout, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr and "Nanny failed" not in proc.stderr


def test_readme_dask_example_without_its_guard_stops_at_once_with_one_line(tmp_path):
    """Item 6: the unguarded script is refused before any worker process starts, saying what to write."""
    block = next(b for b in BLOCKS if "__main__" in b and "nsdist.train(" in b)
    lines = block.splitlines()
    guard = next(i for i, line in enumerate(lines) if line.startswith("if __name__"))
    body = [line[4:] if line.startswith("    ") else line for line in lines[guard + 1:]]
    script = workdir(tmp_path) / "qs.py"
    script.write_text("\n".join(lines[:guard] + body) + "\n", encoding="utf-8")
    proc = run_script(script, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"{script} starts Dask worker processes from top-level code, which they re-run when they import the "
        "script: put that code under `if __name__ == \"__main__\":` (or pass client=, a running scheduler's "
        "address)"]
    assert "Nanny" not in proc.stderr and "FileExistsError" not in proc.stderr


def help_examples(*command: str) -> list[str]:
    out = subprocess.run([str(BIN / "nsdist"), *command, "--help"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return [line.strip() for line in out.split("examples:\n", 1)[1].splitlines() if line.strip()]


def test_every_help_example_parses():
    from nsdist.cli import build_parser

    parser = build_parser()
    for command in ("", "ingest", "train", "evaluate", "predict", "retrain", "bench"):
        for example in help_examples(*filter(None, [command])):
            argv = shlex.split(example, comments=True)[1:]
            assert argv[0] == (command or argv[0]), example
            if argv[-1] == "--help":
                continue
            parser.parse_args(argv)


def test_top_level_help_examples_run_in_order(tmp_path):
    """Item 7: ``nsdist --help``'s session (ingest, train, evaluate) runs as pasted, in a fresh clone's directory."""
    cwd = workdir(tmp_path)
    examples = help_examples()
    assert examples[0].startswith("nsdist ingest data/letter/letter-recognition.data")
    for example in examples:
        argv = shlex.split(example)
        if argv[0] == "nsdist" and argv[1:2] == ["train"]:
            argv += ["--set", "solver.n_passes=2", "--set", "cluster.n_workers=1"]   # the same job, shorter
        proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, env=env(), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, (example, proc.stderr)
        assert "Traceback" not in proc.stderr and "warning" not in proc.stderr.lower(), (example, proc.stderr)
    assert (cwd / "runs" / "letter-pauc" / "model" / "model.json").is_file()
    assert (cwd / "runs" / "letter-pauc" / "evaluation.json").is_file()


def test_readme_typical_session_runs_as_pasted(tmp_path):
    """The README's "typical session" (train x3, evaluate, predict, bench) in a fresh directory, line by line.

    The commands are run as written; one small cluster serves them all (``DASK_SCHEDULER_ADDRESS``, which
    the README documents) to spare a cluster start per line.
    """
    from distributed import LocalCluster

    block = README.split("A typical session:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) >= 5 and all(line.startswith("nsdist ") for line in lines)
    cwd = workdir(tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster:
        for line in lines:
            proc = subprocess.run(line, shell=True, cwd=cwd, capture_output=True, text=True, timeout=600,
                                  env={**env(), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                                       "DASK_SCHEDULER_ADDRESS": cluster.scheduler_address})
            assert proc.returncode == 0, (line, proc.stderr)
            assert "Traceback" not in proc.stderr, (line, proc.stderr)
    for path in ("runs/letter-pauc/model/model.json", "runs/lp2/metrics.json", "runs/prbep/metrics.json",
                 "runs/letter-pauc/evaluation.json", "scores.parquet"):
        assert (cwd / path).is_file(), path
