"""nsdist: stochastic optimisation of non-decomposable measures (pAUC, Prec@k, PRBEP, F1) on Dask.

The public surface (SPEC §6): :class:`NonDecomposableClassifier`, :func:`ingest`,
:func:`train`, :func:`evaluate`, :func:`load_model`, and the modules
:mod:`nsdist.metrics` and :mod:`nsdist.losses`.
"""
__version__ = "0.1.0"

from .estimator import NonDecomposableClassifier  # noqa: E402
from .api import evaluate, ingest, load_model, train  # noqa: E402

__all__ = ["NonDecomposableClassifier", "ingest", "train", "evaluate", "load_model", "__version__"]
