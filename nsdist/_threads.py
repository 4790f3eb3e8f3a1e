"""One BLAS thread for the arithmetic that decides a model's bits (docs/engine.md §Reproducibility).

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
scores, the evaluation's scores).  The limit is set and restored per call
(``threadpoolctl``, about 15 microseconds); BLAS calls of other code in the
same process meanwhile run on one thread too.
"""
from __future__ import annotations

import functools
from typing import Callable, TypeVar

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread", "on_one_blas_thread"]

F = TypeVar("F", bound=Callable)

_controller: list[ThreadpoolController] = []      # made on first use: after numpy has loaded its BLAS


def one_blas_thread():
    """A context manager: BLAS (OpenBLAS, MKL, BLIS) on one thread inside it, as it was outside."""
    if not _controller:
        _controller.append(ThreadpoolController())
    return _controller[0].limit(limits=1, user_api="blas")


def on_one_blas_thread(fn: F) -> F:
    """``fn`` run under :func:`one_blas_thread` (a decorator; the function keeps its name for pickling)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)
    return run  # type: ignore[return-value]
