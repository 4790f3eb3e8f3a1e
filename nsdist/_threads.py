"""One BLAS thread for the arithmetic that decides a model's bits (docs/engine.md §Partition chain: "One BLAS thread").

OpenBLAS divides a matrix product among its threads, and how it divides it
depends on how many it has; the partial sums then round differently.  The same
fit on the same rows gave different bits with one BLAS thread and with two: in
a Dask worker (whose nanny sets ``OPENBLAS_NUM_THREADS=1``) and in the driver
of a 2-core machine, so ``nsdist.train`` and the estimator disagreed on HIVA's
1617 features (by 7e-18), while Letter's 16 are too few for OpenBLAS to
divide.  Every computation that decides a model runs under
:func:`one_blas_thread`, wherever it runs: the estimator's ``fit`` and
``partial_fit``, a K-fold selection's fold fits, ``nsdist.train`` on the
driver, and the engine's tasks that multiply (a step, a round's mix, the cut's
scores, the evaluation's scores).

The limit is process-wide (BLAS has one thread pool): it is set when the
first such computation of the process starts and restored when the last one
running ends, so that fits in several threads of one process (a threaded Dask
worker, a thread pool of fits) never see it lifted under them.  BLAS calls of
other code in the process meanwhile run on one thread too.  (threadpoolctl lets
only one "controlling" Python thread change OpenBLAS's limit and silently
ignores the others; the thread that sets or restores the limit here takes that
role for the call and gives it up after.)
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, Iterator, TypeVar

import threadpoolctl

__all__ = ["one_blas_thread", "on_one_blas_thread"]

F = TypeVar("F", bound=Callable)


class _Limit:
    """The process's one-thread BLAS limit: set by the first computation that enters, restored by the last to
    leave (under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.controller: threadpoolctl.ThreadpoolController | None = None   # made on first use: after numpy's BLAS
        self.limiter = None
        self.running = 0

    def enter(self) -> None:
        with self.lock:
            if self.running == 0:
                self.controller = self.controller or threadpoolctl.ThreadpoolController()
                self.limiter = _in_control(lambda: self.controller.limit(limits=1, user_api="blas"))
            self.running += 1

    def leave(self) -> None:
        with self.lock:
            self.running -= 1
            if self.running == 0:
                _in_control(self.limiter.restore_original_limits)
                self.limiter = None


_LIMIT = _Limit()


def _in_control(change: Callable[[], object]) -> object:
    """``change()`` (setting BLAS limits) from this thread, whichever thread controlled OpenBLAS's limit before."""
    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:          # threadpoolctl >= 3.6: one controlling thread
        release(force=True)
    try:
        return change()
    finally:
        if release is not None:
            release(force=True)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS (OpenBLAS, MKL, BLIS) on one thread inside; as it was once no computation of the process is inside."""
    _LIMIT.enter()
    try:
        yield
    finally:
        _LIMIT.leave()


def on_one_blas_thread(fn: F) -> F:
    """``fn`` run under :func:`one_blas_thread` (a decorator; the function keeps its name for pickling)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)
    return run  # type: ignore[return-value]
