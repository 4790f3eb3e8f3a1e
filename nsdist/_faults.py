"""Cluster failures that redoing the work cures, and how often it is redone.

(docs/engine.md §Partition chain, "Failures".)

Every driver loop that submits work to Dask -- the partition chain, the
workers' sample, K-fold selection's fold fits, ingest's calls -- redoes work
lost with a worker: its tasks are pure functions of their inputs (ingest's
write the same files), so a redo gives the same result.  Errors of the data
or of the math are raised at once.
"""
from __future__ import annotations

__all__ = ["MAX_RESTARTS", "is_transient"]

#: How many times work lost with a worker is redone before the error is raised
MAX_RESTARTS = 3


def is_transient(exc: BaseException) -> bool:
    """Failures of the cluster (not of the data or the math) that a redo can cure: a killed worker, a
    cancelled future or lost dependencies, a dropped connection, a timeout."""
    from asyncio import CancelledError, TimeoutError as AsyncTimeout

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (KilledWorker, CancelledError, FutureCancelledError, CommClosedError,
                            AsyncTimeout, ConnectionError)) or "lost dependencies" in str(exc)
