"""K-fold selection's fold fits as Dask tasks (``validation_folds > 1``; docs/solvers.md §Selection).

The rows of a K-fold fit are on the driver (the fit reads them there); the
``K`` fold fits are independent, so they run as ``K`` tasks on the workers:
the rows scattered once, one task per fold under a deterministic key, the
results gathered in fold order.  Each task runs the same function the
estimator runs in-process, so the model is the same, bit for bit.  A fold fit
lost with its worker, or with the worker that held the scattered rows (a task
whose rows are gone is cancelled), is redone: the driver still holds the rows,
so it scatters them again and resubmits the lost fits, up to
:data:`~nsdist._faults.MAX_RESTARTS` times.

No more fits run at once than there are cores to run them (:func:`fold_slots`):
a worker of two threads on one core would run two fits side by side, each at
half speed and each holding its copies of the rows, and each fold's clock (its
learning curve) would count the other's time.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
from dask.base import tokenize
from distributed import as_completed

from .._faults import MAX_RESTARTS, cancel_quietly, is_transient, redo_lost
from ..solvers.config import TrainConfig

__all__ = ["fold_tasks", "fold_slots"]

log = logging.getLogger("nsdist.engine")

FoldFit = Callable[..., dict]


def _cores() -> int:
    """This worker's usable cores (Dask's count: CPU affinity and cgroup limits included)."""
    from dask.system import cpu_count
    return int(cpu_count())


def fold_slots(client) -> int:
    """How many fold fits run at once on ``client``'s cluster: on each host, its workers' threads, but no more
    than the host's cores (at least 1)."""
    workers = client.scheduler_info()["workers"]
    try:
        cores = client.run(_cores)
    except Exception:  # a worker leaving meanwhile: count threads only (the fits still run, maybe crowded)
        cores = {}
    hosts: dict[str, tuple[int, int]] = {}
    for address, info in workers.items():
        host = info.get("host", address)
        threads, host_cores = hosts.get(host, (0, 0))
        hosts[host] = (threads + int(info.get("nthreads", 1)), max(host_cores, int(cores.get(address, 0))))
    return max(1, sum(min(threads, host_cores or threads) for threads, host_cores in hosts.values()))


def fold_tasks(client, fit_fold: FoldFit, on_fold: Callable[[int, int, int], None] | None = None,
               monitor: tuple | None = None) -> Callable[[TrainConfig, Any, np.ndarray, np.ndarray], list[dict]]:
    """A ``map_folds`` (:meth:`nsdist.NonDecomposableClassifier.fit`) that runs ``fit_fold(cfg, X, y, fold, f,
    monitor=monitor)`` for ``f = 0 .. K-1`` as Dask tasks of ``client`` and returns their results in fold order;
    ``on_fold(f, done, K)`` is called as each fit arrives (progress).  ``monitor`` rows ``(X, y)`` (the learning
    curve's) are scattered once with the training rows."""
    def map_folds(cfg: TrainConfig, X, y: np.ndarray, fold: np.ndarray) -> list[dict]:
        k, token = cfg.validation_folds, tokenize(cfg.params(), X, y, fold, monitor)
        done: dict[int, dict] = {}

        def attempt(restart: int) -> list[dict]:
            """Fit the folds not yet done; raise the first loss after collecting every fit that arrived.  A
            failed attempt cancels its tasks and drops its rows from the cluster (the traceback would keep
            them there, the whole data set among them, as long as the error is held)."""
            # keys of this job's own: a scattered dict keeps its keys, and "X" would be every job's
            watched = () if monitor is None else (("X_monitor", monitor[0]), ("y_monitor", monitor[1]))
            rows = client.scatter({f"nsdist-fold-rows-{token}-{restart}-{name}": a
                                   for name, a in (("X", X), ("y", y), ("fold", fold), *watched)})
            X_, y_, fold_, *monitor_ = rows.values()

            def submit(f: int):
                return client.submit(fit_fold, cfg, X_, y_, fold_, f, monitor=tuple(monitor_) or None,
                                     key=f"nsdist-fold-{token}-{f}" + (f"-redo{restart}" if restart else ""))

            waiting = [f for f in range(k) if f not in done]
            slots = fold_slots(client)
            futures = {submit(f): f for f in waiting[:slots]}
            waiting = waiting[slots:]
            try:
                lost = None
                running = as_completed(list(futures), loop=client.loop)
                for future in running:
                    if waiting:                  # a fit ended (or was lost): the next one takes its slot
                        following = waiting.pop(0)
                        nxt = submit(following)
                        futures[nxt] = following
                        running.add(nxt)
                    f = futures[future]
                    try:
                        done[f] = future.result()
                    except Exception as exc:  # a lost worker, lost rows, a dropped connection: redone below
                        if not is_transient(exc):
                            raise
                        lost = exc
                        continue
                    log.info("K-fold selection: fold %d of %d fitted (%d done)", f + 1, k, len(done))
                    if on_fold is not None:
                        on_fold(f, len(done), k)
                if lost is not None:
                    raise lost
            except BaseException:
                cancel_quietly(client, [*futures, *rows.values()])
                raise
            return [done[f] for f in range(k)]

        def lost(exc: BaseException, restart: int) -> None:
            log.warning("K-fold selection: %d of %d fold fits lost (%s: %s); scattering the rows again and "
                        "redoing them (restart %d/%d)", k - len(done), k, type(exc).__name__, exc, restart,
                        MAX_RESTARTS)

        return redo_lost(attempt, lost)
    return map_folds
