"""K-fold selection's fold fits held on Dask workers, advanced in lockstep (``validation_folds > 1``;
docs/solvers.md §Selection, "K-fold selection").

The rows of a K-fold fit are on the driver (the fit reads them there).  They
are scattered once; each fold's fit is started on a worker by one task under
a deterministic key and stays there, in the worker's memory, holding only its
validation rows (it gathers its training rows from the shared ``X`` a pass at
a time).  At each check the driver submits one small task per fold, pinned to
the worker holding that fold's fit: it settles the previous check with the
folds' joint decision, runs the fit to the next check and returns what the
check saw (a few vectors of the candidates' values).  The driver makes the
next joint decision from the ``K`` observations
(:func:`nsdist.estimator.fit_folds_in_lockstep`), so the model is the
in-process estimator's, bit for bit.

No more fits run at once than there are cores to run them (:func:`fold_slots`):
a worker of two threads on one core would run two fits side by side, each at
half speed, and each fold's clock (its learning curve) would count the other's
time.  A fit lost with its worker (the scheduler would restart it from its
first check, and its next observation or decision would be out of step), or
with the worker holding the scattered rows, is redone: the driver still holds
the rows, so it scatters them again and restarts every fold's fit, up to
:data:`~nsdist._faults.MAX_RESTARTS` times.
"""
from __future__ import annotations

import logging
import operator
from typing import Any, Callable

import numpy as np
from dask.base import tokenize
from distributed import as_completed

from .._faults import MAX_RESTARTS, WorkLost, cancel_quietly, redo_lost
from ..solvers.config import TrainConfig
from ..solvers.select import OutOfStep

__all__ = ["fold_tasks", "fold_slots", "fold_placement"]

log = logging.getLogger("nsdist.engine")


def _cores() -> int:
    """This worker's usable cores (Dask's count: CPU affinity and cgroup limits included)."""
    from dask.system import cpu_count
    return int(cpu_count())


def _worker_slots(client) -> dict[str, int]:
    """Each worker's share of the fold fits that may run at once: on each host its workers' threads, but no
    more than the host's cores, split over its workers by their threads (a worker left without a share
    holds no fold fit)."""
    workers = client.scheduler_info()["workers"]
    try:
        cores = client.run(_cores)
    except Exception:  # a worker leaving meanwhile: count threads only (the fits still run, maybe crowded)
        cores = {}
    hosts: dict[str, list[str]] = {}
    for address, info in workers.items():
        hosts.setdefault(info.get("host", address), []).append(address)
    slots = {}
    for members in hosts.values():
        threads = {a: int(workers[a].get("nthreads", 1)) for a in sorted(members)}
        total = sum(threads.values())
        budget = min(total, max((int(cores.get(a, 0)) for a in members), default=0) or total)
        share = {a: budget * t // total for a, t in threads.items()}
        for a in sorted(threads, key=lambda a: -threads[a])[:budget - sum(share.values())]:
            share[a] += 1                 # the remainder, to the workers of most threads
        slots.update({a: n for a, n in share.items() if n})
    return slots


def fold_slots(client) -> int:
    """How many fold fits run at once on ``client``'s cluster: on each host, its workers' threads, but no
    more than the host's cores."""
    return sum(_worker_slots(client).values())


def fold_placement(slots: dict[str, int], k: int) -> list[str]:
    """The worker of each of ``k`` fold fits: dealt in turn to the workers by their slots (a worker of two
    slots takes two folds a round), in address order."""
    seats = [a for r in range(max(slots.values(), default=1)) for a in sorted(slots) if slots[a] > r]
    return [seats[f % len(seats)] for f in range(k)]


def fold_tasks(client, start_fold: Callable, advance_fold: Callable, lockstep: Callable,
               on_check: Callable[[int, int, float, int], None] | None = None,
               monitor: tuple | None = None) -> Callable[[TrainConfig, Any, np.ndarray, np.ndarray], list[dict]]:
    """A ``map_folds`` (:meth:`nsdist.NonDecomposableClassifier.fit`) that holds the ``K`` fold fits on
    ``client``'s workers (``start_fold(cfg, X, y, fold, f, monitor=...)``), drives them with ``lockstep(cfg,
    advance, n_checks, on_check)`` (:func:`nsdist.estimator.fit_folds_in_lockstep`), each check's advance
    ``advance_fold(fit, decision, n, alone)`` as one task per fold on its worker, and returns their
    ``fold_result()`` in fold order.  ``on_check(i, n, best, alive)`` after each check (progress).
    ``monitor`` rows ``(X, y)`` (the learning curve's) are scattered once with the training rows."""
    def map_folds(cfg: TrainConfig, X, y: np.ndarray, fold: np.ndarray) -> list[dict]:
        k, token = cfg.validation_folds, tokenize(cfg.params(), X, y, fold, monitor)

        def attempt(restart: int) -> list[dict]:
            """Start the fold fits, drive them to the end, collect their results.  A failed attempt cancels its
            tasks and drops its rows and fits from the cluster (the traceback would keep them there, the whole
            data set among them, as long as the error is held)."""
            # keys of this job's own: a scattered dict keeps its keys, and "X" would be every job's
            watched = () if monitor is None else (("X_monitor", monitor[0]), ("y_monitor", monitor[1]))
            prefix = f"nsdist-fold-{token}-{restart}"
            rows = client.scatter({f"nsdist-fold-rows-{token}-{restart}-{name}": a
                                   for name, a in (("X", X), ("y", y), ("fold", fold), *watched)})
            X_, y_, fold_, *monitor_ = rows.values()
            slots = _worker_slots(client)
            where = fold_placement(slots, k)
            in_flight: set = set()     # (a finished advance's future is let go: else a lost fit's would be redone)
            fits: list = []

            def on_each(name: str, call: Callable, args: list[tuple], fetch: bool = True) -> list:
                """The task ``call(*args[f])`` of every fold on its fit's worker, at most the worker's slots at a
                time; the results in fold order (``fetch=False``: their futures, the results left there)."""
                queue = {a: [f for f in range(k) if where[f] == a] for a in slots}
                out: list = [None] * k
                futures: dict = {}
                running = as_completed(loop=client.loop)

                def launch(a: str) -> None:
                    f = queue[a].pop(0)
                    future = client.submit(call, *args[f], key=f"{prefix}-{name}-{f}", workers=[a],
                                           allow_other_workers=True, pure=False)
                    in_flight.add(future)
                    futures[future] = f
                    running.add(future)

                for a in queue:
                    for _ in range(min(slots[a], len(queue[a]))):
                        launch(a)
                for future in running:
                    f = futures.pop(future)
                    in_flight.discard(future)
                    out[f] = future.result() if fetch or future.status == "error" else future
                    if queue[where[f]]:
                        launch(where[f])
                return out

            checks = [0]                # advances so far (the last answers None: the fits have ended)

            def advance(decisions: list, n: int, alone: bool) -> list:
                checks[0] += 1
                try:
                    seen = on_each(f"check{checks[0]}", advance_fold,
                                   [(fit, d, n, alone) for fit, d in zip(fits, decisions)])
                except OutOfStep as exc:
                    raise WorkLost(f"a fold fit was lost and restarted on another worker ({exc})") from exc
                if any(o is not None and o.check != checks[0] for o in seen):
                    raise WorkLost(f"a fold fit was lost and restarted on another worker: checks "
                                   f"{[None if o is None else o.check for o in seen]} at check {checks[0]}")
                return seen

            try:
                fits[:] = on_each("start", start_fold, [(cfg, X_, y_, fold_, f, tuple(monitor_) or None)
                                                        for f in range(k)], fetch=False)
                n_checks = [len(c) for c in on_each("plan", operator.attrgetter("checks"), [(fit,) for fit in fits])]
                lockstep(cfg, advance, n_checks, on_check)
                results = on_each("result", operator.methodcaller("fold_result"), [(fit,) for fit in fits])
            except BaseException:
                cancel_quietly(client, [*in_flight, *fits, *rows.values()])
                raise
            cancel_quietly(client, [*fits, *rows.values()])       # the fits leave the workers now
            log.info("K-fold selection: %d fold fits done in lockstep over %d checks", k, checks[0] - 1)
            return results

        def lost(exc: BaseException, restart: int) -> None:
            log.warning("K-fold selection: fold fits lost (%s: %s); scattering the rows again and restarting "
                        "all %d (restart %d/%d)", type(exc).__name__, exc, k, restart, MAX_RESTARTS)

        return redo_lost(attempt, lost)
    return map_folds
