"""K-fold selection's fold fits held on Dask workers, advanced in lockstep (``validation_folds > 1``;
docs/solvers.md §Selection, "K-fold selection").

The rows of a K-fold fit are on the driver (the fit reads them there).  They
are scattered once.  The folds are dealt to the cluster's slots -- no more
than there are cores to run them (:func:`fold_slots`: a worker of two threads
on one core would run two fits side by side, each at half speed, and each
fold's clock, its learning curve, would count the other's time) -- and each
slot's fold fits are started on its worker by one task under a deterministic
key and stay there, in the worker's memory, each holding only its validation
rows (it gathers its training rows from the shared ``X`` a pass at a time).
At each check the driver submits one small task per slot, pinned to the
worker holding its fits: it settles the previous check with the folds' joint
decision, runs each of its fits to the next check and returns what the check
saw (a few vectors of the candidates' values).  The driver makes the next
joint decision from the ``K`` observations
(:func:`nsdist.estimator.fit_folds_in_lockstep`), so the model is the
in-process estimator's, bit for bit.  A task per slot, not per fold: on 2
cores a check costs one round of two tasks, not three rounds.

A fit lost with its worker (the scheduler would restart it from its first
check, and its next observation or decision would be out of step), or with
the worker holding the scattered rows, is redone: the driver still holds the
rows, so it scatters them again and restarts every fold's fit, up to
:data:`~nsdist._faults.MAX_RESTARTS` times.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Callable

import numpy as np
from distributed import as_completed

from .._faults import MAX_RESTARTS, WorkLost, cancel_quietly, redo_lost
from ..solvers.config import TrainConfig
from ..solvers.select import OutOfStep
from .cluster import fetch as gather

__all__ = ["fold_tasks", "fold_slots", "fold_seats"]

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


def fold_seats(slots: dict[str, int], k: int) -> list[tuple[str, list[int]]]:
    """The fold fits each slot holds, ``(worker, folds)``: the slots dealt in turn over the workers (a worker
    of two takes one of each round), at most ``k`` of them, and fold ``f`` to seat ``f mod n``."""
    seats = [a for r in range(max(slots.values(), default=1)) for a in sorted(slots) if slots[a] > r][:k]
    return [(a, list(range(s, k, len(seats)))) for s, a in enumerate(seats)]


def fold_tasks(client, start_folds: Callable, advance_folds: Callable, fold_plans: Callable,
               fold_results: Callable, lockstep: Callable,
               on_check: Callable[[int, int, float, int], None] | None = None,
               monitor: tuple | None = None) -> Callable[[TrainConfig, Any, np.ndarray, np.ndarray], list[dict]]:
    """A ``map_folds`` (:meth:`nsdist.NonDecomposableClassifier.fit`) that holds the ``K`` fold fits on
    ``client``'s workers, a group of them per slot (:func:`fold_seats`; ``start_folds(cfg, X, y, fold, folds,
    monitor)``), drives them with ``lockstep(cfg, advance, n_checks, on_check)``
    (:func:`nsdist.estimator.fit_folds_in_lockstep`), each check's advance ``advance_folds(fits, decisions,
    n, alone)`` one task per slot on its worker, and returns ``fold_results(fits)`` in fold order.
    ``on_check(i, n, best, alive)`` after each check (progress).  ``monitor`` rows ``(X, y)`` (the learning
    curve's) are scattered once with the training rows."""
    def map_folds(cfg: TrainConfig, X, y: np.ndarray, fold: np.ndarray) -> list[dict]:
        # the call's own keys (a fresh token, not the inputs' hash): hashed keys would be those of an identical
        # job just before, which Dask may still be forgetting when these rows are scattered -- a race that can
        # hang or lose the scatter (dask/distributed#8576; a resumed 2PMB job's reservoir scatter hung so once)
        k, token = cfg.validation_folds, uuid.uuid4().hex

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
            seats = fold_seats(_worker_slots(client), k)
            in_flight: set = set()     # (a finished advance's future is let go: else a lost fit's would be redone)
            fits: list = []

            def on_seats(name: str, call: Callable, args: list[tuple], fetch: bool = True) -> list:
                """The task ``call(*args[s])`` of every seat on its worker, all at once; their results in seat
                order (``fetch=False``: their futures, the results left there)."""
                futures = [client.submit(call, *args[s], key=f"{prefix}-{name}-{s}", workers=[a],
                                         allow_other_workers=True, pure=False) for s, (a, _) in enumerate(seats)]
                in_flight.update(futures)
                for future in as_completed(futures, loop=client.loop):
                    if future.status == "error":
                        future.result()             # raises the task's error
                in_flight.difference_update(futures)
                return gather(client, futures) if fetch else futures

            def by_fold(per_seat: list[list]) -> list:
                out: list = [None] * k
                for (_, folds), values in zip(seats, per_seat):
                    for f, value in zip(folds, values):
                        out[f] = value
                return out

            checks = [0]                # advances so far (the last answers None: the fits have ended)

            def advance(decisions: list, n: int, alone: bool) -> list:
                checks[0] += 1
                try:
                    seen = by_fold(on_seats(f"check{checks[0]}", advance_folds,
                                            [(fit, [decisions[f] for f in folds], n, alone)
                                             for fit, (_, folds) in zip(fits, seats)]))
                except OutOfStep as exc:
                    raise WorkLost(f"a fold fit was lost and restarted on another worker ({exc})") from exc
                if any(o is not None and o.check != checks[0] for o in seen):
                    raise WorkLost(f"a fold fit was lost and restarted on another worker: checks "
                                   f"{[None if o is None else o.check for o in seen]} at check {checks[0]}")
                return seen

            try:
                fits[:] = on_seats("start", start_folds, [(cfg, X_, y_, fold_, folds, tuple(monitor_) or None)
                                                         for _, folds in seats], fetch=False)
                n_checks = by_fold(on_seats("plan", fold_plans, [(fit,) for fit in fits]))
                lockstep(cfg, advance, n_checks, on_check)
                results = by_fold(on_seats("result", fold_results, [(fit,) for fit in fits]))
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
