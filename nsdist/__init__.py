"""nsdist: stochastic optimisation of non-decomposable measures (pAUC, Prec@k, PRBEP, F1) on Dask.

The public surface (docs/engine.md §Public surface): :class:`NonDecomposableClassifier`, :func:`ingest`,
:func:`train`, :func:`evaluate`, :func:`load_model`, and the modules
:mod:`nsdist.metrics` and :mod:`nsdist.losses`.

The exports are loaded on first use (PEP 562), so ``import nsdist.metrics``
and ``nsdist --help`` do not pay for importing Dask.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: exported name -> the module defining it
_EXPORTS = {"NonDecomposableClassifier": "nsdist.estimator", "ingest": "nsdist.api", "train": "nsdist.api",
            "evaluate": "nsdist.api", "load_model": "nsdist.api"}

__all__ = ["NonDecomposableClassifier", "ingest", "train", "evaluate", "load_model", "__version__"]

if TYPE_CHECKING:
    from .api import evaluate, ingest, load_model, train
    from .estimator import NonDecomposableClassifier


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nsdist' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
