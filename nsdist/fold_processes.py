"""K-fold selection's fold fits held by worker processes (the estimator's ``n_jobs``; docs/solvers.md §Selection).

Each of ``P = min(n_jobs, K)`` processes is sent the rows once per fit and
holds the fold fits ``f = p, p + P, ...``; at each check the driver sends
every process the folds' joint decision and gets back what each of its fits
saw at the next check (:func:`nsdist.estimator.fit_folds_in_lockstep`).  A fit
is computed alone wherever it runs, on one BLAS thread, so the model is the
in-process one, bit for bit.

The processes are joblib's loky processes (as scikit-learn's ``n_jobs``):
fresh interpreters that do not run the caller's main module again, so a
script without ``if __name__ == "__main__":`` works.  They are kept for the
next fit (the first ``n_jobs`` fit of a session starts them, about a second;
later ones reuse them) and hold nothing between fits.  Each receives a copy of
the rows: ``P`` copies beside the caller's while a fit runs.
"""
from __future__ import annotations

import atexit
import threading
import traceback
from typing import Any

import numpy as np

__all__ = ["map_folds_in_processes"]

_HOSTS: list = []               # [(process, connection)], kept across fits
_LOCK = threading.Lock()        # one fit at a time talks to them


def _serve(conn) -> None:
    """A fold process: hold the fold fits of the current fit and answer the driver's requests."""
    from .estimator import advance_folds, fold_plans, fold_results, start_folds
    fits: list = []
    folds: list[int] = []
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        kind = request[0]
        if kind == "stop":
            return
        try:
            if kind == "start":
                _, cfg, X, y, fold, folds = request
                fits = start_folds(cfg, X, y, fold, folds)
                del X
                conn.send(("ok", dict(zip(folds, fold_plans(fits)))))
            elif kind == "advance":
                _, decisions, n, alone = request
                conn.send(("ok", dict(zip(folds, advance_folds(fits, [decisions[f] for f in folds], n, alone)))))
            else:                                    # "result": the fits leave with it
                conn.send(("ok", dict(zip(folds, fold_results(fits)))))
                fits = []
        except BaseException as exc:  # the driver raises it, with this traceback
            fits = []
            conn.send(("error", (exc, traceback.format_exc())))


def _hosts(n: int) -> list:
    """``n`` live fold processes (started as needed)."""
    from joblib.externals.loky.backend.context import get_context
    ctx = get_context("loky")
    _HOSTS[:] = [(p, c) for p, c in _HOSTS if p.is_alive()]
    while len(_HOSTS) < n:
        here, there = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(there,), daemon=True, name=f"nsdist-folds-{len(_HOSTS)}")
        process.start()
        there.close()
        _HOSTS.append((process, here))
    return _HOSTS[:n]


@atexit.register
def _shutdown() -> None:
    """Stop every fold process (at exit, or after a fit broken off mid-exchange)."""
    for process, conn in _HOSTS:
        try:
            conn.send(("stop",))
        except (BrokenPipeError, OSError):
            pass
        conn.close()
    for process, _ in _HOSTS:
        process.join(timeout=5)
        if process.is_alive():
            process.terminate()
    _HOSTS.clear()


def _exchange(hosts: list, requests: list) -> dict[int, Any]:
    """Send each process its request and merge their answers by fold; the first error is raised after every
    answer is read (so that the next fit starts in step)."""
    for (_, conn), request in zip(hosts, requests):
        conn.send(request)
    merged: dict[int, Any] = {}
    error = None
    for process, conn in hosts:
        try:
            status, body = conn.recv()
        except EOFError:
            raise RuntimeError(f"the K-fold selection process {process.name} ended without answering "
                               f"(exit code {process.exitcode})") from None
        if status == "error" and error is None:
            error = body
        elif status == "ok":
            merged.update(body)
    if error is not None:
        exc, trace = error
        raise exc from RuntimeError(f"in the fold process:\n{trace}")
    return merged


def map_folds_in_processes(cfg, X, y: np.ndarray, fold: np.ndarray, n_jobs: int) -> list[dict]:
    """The ``K`` fold fits of K-fold selection held by ``min(n_jobs, K)`` processes, driven in lockstep;
    their ``fold_result()`` in fold order."""
    from .estimator import fit_folds_in_lockstep
    k = cfg.validation_folds
    with _LOCK:
        hosts = _hosts(min(n_jobs, k))
        n = len(hosts)
        try:
            planned = _exchange(hosts, [("start", cfg, X, y, fold, list(range(p, k, n))) for p in range(n)])

            def advance(decisions: list, limit: int, alone: bool) -> list:
                seen = _exchange(hosts, [("advance", decisions, limit, alone)] * n)
                return [seen[f] for f in range(k)]

            fit_folds_in_lockstep(cfg, advance, [planned[f] for f in range(k)])
            results = _exchange(hosts, [("result",)] * n)
        except BaseException as exc:
            if not isinstance(exc, Exception) or isinstance(exc, RuntimeError):
                _shutdown()          # broken off mid-exchange (an interrupt, a dead process): start afresh
            raise
        return [results[f] for f in range(k)]
