"""Cluster failures that redoing the work cures, and how often it is redone.

(docs/engine.md §Partition chain, "Failures".)

Every driver loop that submits work to Dask -- the partition chain, the
workers' sample, K-fold selection's fold fits, ingest's calls -- redoes work
lost with a worker: its tasks are pure functions of their inputs (ingest's
write the same files), so a redo gives the same result.  Errors of the data
or of the math are raised at once.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterable, TypeVar

__all__ = ["MAX_RESTARTS", "STOP_WAIT", "WorkLost", "is_transient", "redo_lost", "cancel_quietly", "running_tasks",
           "wait_for_tasks"]

T = TypeVar("T")

#: How many times work lost with a worker is redone before the error is raised
MAX_RESTARTS = 3
#: Seconds a stopped job waits at most for its running tasks to end before it removes what they write
STOP_WAIT = 30.0


class WorkLost(RuntimeError):
    """Work lost with a worker, found out from what came back (a fold fit the scheduler restarted elsewhere
    answers for the wrong check)."""


def is_transient(exc: BaseException) -> bool:
    """Failures of the cluster (not of the data or the math) that a redo can cure: a killed worker, a
    cancelled future or lost dependencies, a dropped connection, a timeout."""
    from asyncio import CancelledError, TimeoutError as AsyncTimeout

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (WorkLost, KilledWorker, CancelledError, FutureCancelledError, CommClosedError,
                            AsyncTimeout, ConnectionError)) or "lost dependencies" in str(exc)


def redo_lost(attempt: Callable[[int], T], lost: Callable[[BaseException, int], None], *,
              max_restarts: int = MAX_RESTARTS) -> T:
    """``attempt(r)`` for ``r = 0, 1, ...`` until it returns: after a transient failure (:func:`is_transient`)
    ``lost(exc, r + 1)`` runs (say so, reload what was lost) and the work is redone, at most ``max_restarts``
    times; any other error, and the last redo's, is raised."""
    restart = 0
    while True:
        try:
            return attempt(restart)
        except Exception as exc:  # a lost worker, a cancelled future, a dropped connection
            if not is_transient(exc) or restart == max_restarts:
                raise
            restart += 1
            lost(exc, restart)


def cancel_quietly(client, futures: Iterable) -> None:
    """Cancel ``futures`` of a failed or abandoned attempt, so that their results (partitions, rows) leave the
    workers now rather than when the error holding them is freed; the cluster may be gone, and then the
    error being raised is the one to report, not the cancel's."""
    futures = [f for f in futures if f is not None]
    if futures:
        with contextlib.suppress(Exception):
            client.cancel(futures)


def running_tasks(client, prefix: str) -> list[str]:
    """The keys starting with ``prefix`` of the tasks the workers' threads run, cancelled ones included: Dask
    cannot stop a running task, and cancelling one drops only its result (the task runs on, and writes what
    it writes).  Empty if the workers cannot be asked (the cluster is gone)."""
    try:
        answers = client.run(_running_keys, prefix, on_error="return")
    except Exception:  # the scheduler is gone: no worker to ask
        return []
    return sorted(key for keys in answers.values() if isinstance(keys, list) for key in keys)


def wait_for_tasks(client, prefix: str, timeout: float = STOP_WAIT, poll: float = 0.05) -> list[str]:
    """Wait until no worker runs a task whose key starts with ``prefix`` (:func:`running_tasks`), ``timeout``
    seconds at most; the keys still running then."""
    deadline = time.monotonic() + timeout
    while (keys := running_tasks(client, prefix)) and time.monotonic() < deadline:
        time.sleep(poll)
    return keys


def _running_keys(prefix: str, dask_worker=None) -> list[str]:
    """On a worker (``client.run``): the keys starting with ``prefix`` of the tasks its threads run."""
    return [str(ts.key) for ts in dask_worker.state.all_running_tasks if str(ts.key).startswith(prefix)]
