"""nsdist: stochastic optimisation of non-decomposable measures (pAUC, Prec@k, PRBEP, F1) on Dask.

The public surface (docs/engine.md §Public surface): :class:`NonDecomposableClassifier`, :func:`ingest`,
:func:`train`, :func:`evaluate`, :func:`predict`, :func:`load_model`, and the modules
:mod:`nsdist.metrics` and :mod:`nsdist.losses`.

The exports are loaded on first use (PEP 562), so ``import nsdist.metrics``
and ``nsdist --help`` do not pay for importing Dask.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

__all__ = ["NonDecomposableClassifier", "ingest", "train", "evaluate", "predict", "load_model", "__version__"]

if TYPE_CHECKING:
    from .api import evaluate, ingest, load_model, predict, train
    from .estimator import NonDecomposableClassifier

__getattr__ = lazy_exports(globals(), {"NonDecomposableClassifier": "nsdist.estimator", "ingest": "nsdist.api",
                                       "train": "nsdist.api", "evaluate": "nsdist.api", "predict": "nsdist.api",
                                       "load_model": "nsdist.api"})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
