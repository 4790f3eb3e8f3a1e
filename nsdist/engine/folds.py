"""K-fold selection's fold fits as Dask tasks (``validation_folds > 1``; docs/solvers.md §Selection).

The rows of a K-fold fit are on the driver (the fit reads them there); the
``K`` fold fits are independent, so they run as ``K`` tasks on the workers:
the rows scattered once, one task per fold under a deterministic key, the
results gathered in fold order.  Each task runs the same function the
estimator runs in-process, so the model is the same, bit for bit.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from dask.base import tokenize

from ..solvers.config import TrainConfig

__all__ = ["fold_tasks"]

FoldFit = Callable[[TrainConfig, Any, np.ndarray, np.ndarray, int], dict]


def fold_tasks(client, fit_fold: FoldFit) -> Callable[[TrainConfig, Any, np.ndarray, np.ndarray], list[dict]]:
    """A ``map_folds`` (:meth:`nsdist.NonDecomposableClassifier.fit`) that runs ``fit_fold(cfg, X, y, fold, f)``
    for ``f = 0 .. K-1`` as Dask tasks of ``client`` and returns their results in fold order."""
    def map_folds(cfg: TrainConfig, X, y: np.ndarray, fold: np.ndarray) -> list[dict]:
        token = tokenize(cfg.params(), X, y, fold)
        rows = client.scatter({"X": X, "y": y, "fold": fold}, hash=False)
        futures = [client.submit(fit_fold, cfg, rows["X"], rows["y"], rows["fold"], f,
                                 key=f"nsdist-fold-{token}-{f}") for f in range(cfg.validation_folds)]
        return client.gather(futures)
    return map_folds
