"""SIGTERM as an interrupt (:mod:`nsdist._signals`): raised in the main thread, also when it (or Ctrl-C) first
lands where Python only prints an exception, and a second SIGTERM ends the process at once."""
from __future__ import annotations

import errno
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from nsdist._signals import TERMINATED_STATUS, Terminated, terminate_as_interrupt
from nsdist.data.fs import staging_directory


def _wait_for_signal() -> None:
    """Ordinary Python code for a second: where a pending signal's handler runs."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        time.sleep(0.001)


def test_sigterm_raises_terminated_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with terminate_as_interrupt():
            signal.raise_signal(signal.SIGTERM)
            _wait_for_signal()
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)],
                         ids=["SIGTERM", "Ctrl-C"])
@pytest.mark.parametrize("then", ["ordinary code", "the block ends"])
def test_an_interrupt_handled_inside_a_gc_callback_is_raised_again(then, signum, raised):
    """The handler's exception, raised inside a garbage collector's callback (as ``distributed``'s
    ``GCDiagnosis`` installs), is only printed by Python; the block delivers it again, so the command still
    unwinds instead of running to its end (a CI run's ingest once did, and replaced the previous dataset).
    It is raised in the next ordinary code, or as the block ends if the block ends first; SIGTERM as
    :class:`Terminated`, Ctrl-C as a plain :class:`KeyboardInterrupt`."""
    printed = []
    hook = sys.unraisablehook
    sent = []

    def callback(phase, info):
        if phase == "stop" and not sent:        # (the last of the collection: the block ends next)
            sent.append(phase)
            signal.raise_signal(signum)                 # the handler runs here, inside the callback

    reached_end = False
    gc.callbacks.append(callback)
    sys.unraisablehook = printed.append
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            with terminate_as_interrupt():
                gc.collect()
                if then == "ordinary code":
                    _wait_for_signal()
                    reached_end = True
    finally:
        gc.callbacks.remove(callback)
        sys.unraisablehook = hook
    _wait_for_signal()                                  # raised once: nothing more comes after the block
    assert type(caught.value) is raised
    assert sent == ["stop"] and not reached_end
    assert printed == []                                # not printed as "Exception ignored", and not lost
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_other_unraisable_exceptions_still_reach_the_previous_hook():
    seen = []
    hook = sys.unraisablehook

    class Noisy:
        def __del__(self):
            raise ValueError("from __del__")

    sys.unraisablehook = seen.append
    try:
        with terminate_as_interrupt():
            Noisy()
    finally:
        sys.unraisablehook = hook
    assert [type(u.exc_value) for u in seen] == [ValueError]


def test_a_second_sigterm_ends_the_process_at_once(tmp_path):
    """The first SIGTERM unwinds; one sent while the command is unwinding (here: a ``finally`` that would
    take a minute) ends the process by the signal."""
    script = tmp_path / "second.py"
    script.write_text(textwrap.dedent("""
        import os, signal, time
        from nsdist._signals import terminate_as_interrupt
        with terminate_as_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)
            finally:
                print("unwinding", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)
                print("not reached", flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout.split() == ["unwinding"]
    assert TERMINATED_STATUS == 143


class _InterruptedOnce(LocalFileSystem):
    """The local file system, but once armed, the first call of ``method`` meets an interrupt -- a SIGTERM
    landing there -- after doing its work in part (``rm``: one file removed) or before it (``info``, which
    fsspec's ``exists`` calls and whose every exception, an interrupt too, it takes for "not there")."""

    cachable = False

    def __init__(self, method: str) -> None:
        super().__init__()
        self.method, self.armed, self.hit = method, False, False

    def _interrupt(self, path) -> None:
        if self.armed and not self.hit:
            self.hit = True
            if self.method == "rm":
                os.remove(next(p for p in Path(path).rglob("*") if p.is_file()))
            raise Terminated()

    def rm(self, path, recursive=False, maxdepth=None):
        if self.method == "rm":
            self._interrupt(path)
        if self.method == "late file" and self.armed and not self.hit:
            # what shutil.rmtree meets when a task still running writes a file into a directory it has listed
            self.hit = True
            late = Path(path) / "_work" / "chunk-00000007.arrow"
            super().rm(path, recursive=recursive, maxdepth=maxdepth)
            late.parent.mkdir(parents=True)
            late.write_bytes(b"late")
            raise OSError(errno.ENOTEMPTY, "Directory not empty", "_work")
        return super().rm(path, recursive=recursive, maxdepth=maxdepth)

    def info(self, path, **kwargs):
        if self.method == "info":
            self._interrupt(path)
        return super().info(path, **kwargs)


@pytest.mark.parametrize("method", ["rm", "info", "late file"])
def test_a_stopped_write_removes_its_staging_directory_whole(tmp_path, method):
    """A command stopped while writing a dataset removes its staging directory on the way out, also when an
    interrupt lands in that cleanup (one CI run's ingest exited 143 and left its ``.data.tmp-*``), and when a
    task still running writes a file into it meanwhile (an ingest stopped in its shuffle failed with
    "Directory not empty: '_work'"): the removal is done whole, an interrupt raised after it; the previous
    output is as it was."""
    dst = tmp_path / "data"
    dst.mkdir()
    (dst / "part-00000.parquet").write_bytes(b"previous")
    fs = _InterruptedOnce(method)
    with pytest.raises(Terminated):
        with staging_directory(fs, str(dst), overwrite=True) as staging:
            for k in range(3):
                (Path(staging) / f"part-{k:05d}.parquet").write_bytes(b"new")
            fs.armed = True                     # the cleanup's first call is hit
            raise Terminated()
    assert fs.hit == (method != "info")         # (the cleanup does not ask ``exists``, which an interrupt fooled)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert (dst / "part-00000.parquet").read_bytes() == b"previous" and len(list(dst.iterdir())) == 1


# ------------------------------------------------------------------ "is it there?" does not swallow an interrupt
class _Armed:
    """Once ``on``, ``info`` of the local and ``memory://`` file systems meets an interrupt (a SIGTERM landing
    there) for any path holding ``STOP``; ``hits`` lists those paths.  fsspec's own ``exists`` calls ``info``
    under a bare ``except`` that takes the interrupt for "not there"."""

    def __init__(self) -> None:
        self.on, self.hits = False, []


@pytest.fixture
def interrupted_info(monkeypatch) -> _Armed:
    from fsspec.implementations.memory import MemoryFileSystem

    armed = _Armed()
    for cls in (LocalFileSystem, MemoryFileSystem):
        def info(self, path, _original=cls.info, **kwargs):
            if armed.on and "STOP" in str(path):
                armed.hits.append(str(path))
                raise Terminated()
            return _original(self, path, **kwargs)
        monkeypatch.setattr(cls, "info", info)
    return armed


def _model(coef):
    import numpy as np

    from nsdist.model import LinearModel

    return LinearModel(coef=np.array(coef, dtype=float), intercept=0.25, measure="prec@k")


@pytest.mark.parametrize("where", ["memory", "local"])
def test_asking_whether_a_model_or_input_is_there_raises_an_interrupt_that_lands_meanwhile(
        tmp_path, interrupted_info, where):
    """fsspec's ``exists`` runs ``info`` under a bare ``except``: an interrupt landing there was answered
    "not there", and the command ran on -- loading a model said "no model.json here", a run directory's
    model was not found, an input was "missing".  On ``memory://`` (``info`` interrupted) each question now
    raises the interrupt; on a local disk presence is asked of the operating system, not of ``info``, so the
    same questions answer right without calling it."""
    from nsdist import run
    from nsdist.data import scoring
    from nsdist.data.fs import exists
    from nsdist.model import LinearModel

    root = f"memory://signals-{os.getpid()}" if where == "memory" else str(tmp_path)
    url = f"{root}/STOP/model"
    model = _model([1.0, -2.0, 0.5])
    model.save(url)
    interrupted_info.on = True
    if where == "local":
        assert exists(url) and run._exists(url, None) and run.model_dir(url) == url
        assert not interrupted_info.hits                  # (reading the model, ``info`` raises: not swallowed)
        return
    calls = [lambda: exists(url), lambda: LinearModel.load(url), lambda: run.model_dir(url),
             lambda: run._exists(url, None),
             lambda: scoring.write_scores(model, f"{root}/STOP/rows.csv", f"{root}/GO/scores.csv")]
    for call in calls:
        with pytest.raises(Terminated):
            call()
    assert len(interrupted_info.hits) == len(calls)


def test_saving_over_a_model_stops_when_an_interrupt_lands_while_it_looks_for_the_old_one(interrupted_info):
    """``LinearModel.save`` asks whether a model is already there, to remove the weights it replaces; an
    interrupt landing in that question was taken for "no model" and the save went on.  Now it stops before
    writing anything, and the previous model loads as it was."""
    from fsspec.implementations.memory import MemoryFileSystem

    from nsdist.model import LinearModel

    url = f"memory://signals-save-{os.getpid()}/STOP/model"
    _model([1.0, 2.0]).save(url)
    before = {k: v.getvalue() for k, v in MemoryFileSystem.store.items() if "signals-save" in k}
    interrupted_info.on = True
    with pytest.raises(Terminated):
        _model([3.0, 4.0]).save(url)
    assert interrupted_info.hits[0].endswith("/STOP/model/model.json")
    interrupted_info.on = False
    assert {k: v.getvalue() for k, v in MemoryFileSystem.store.items() if "signals-save" in k} == before
    assert LinearModel.load(url).coef.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("kind", ["file", "directory", "missing", "dangling link"])
def test_is_there_answers_as_fsspec_exists(tmp_path, kind):
    """The same answers as ``fs.exists`` on local disks and ``memory://``; ``links=True`` counts a dangling
    link too (a name taken, for a staging directory's rename)."""
    import fsspec

    from nsdist.data.fs import is_there

    path = tmp_path / "x"
    if kind == "file":
        path.write_bytes(b"1")
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "nowhere")
    local = fsspec.filesystem("file")
    assert is_there(local, str(path)) == local.exists(str(path)) == (kind in ("file", "directory"))
    assert is_there(local, str(path), links=True) == (kind != "missing")
    mem = fsspec.filesystem("memory")
    mpath = f"/is-there-{os.getpid()}-{kind.replace(' ', '-')}/x"
    if kind == "file":
        mem.pipe_file(mpath, b"1")
    elif kind == "directory":
        mem.makedirs(mpath)
    assert is_there(mem, mpath) == mem.exists(mpath) == (kind in ("file", "directory"))
