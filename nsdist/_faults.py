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
from typing import Callable, Iterable, TypeVar

__all__ = ["MAX_RESTARTS", "WorkLost", "is_transient", "redo_lost", "cancel_quietly"]

T = TypeVar("T")

#: How many times work lost with a worker is redone before the error is raised
MAX_RESTARTS = 3


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
