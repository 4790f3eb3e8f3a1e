"""nsdist: stochastic optimisation of non-decomposable measures on Dask."""
__version__ = "0.1.0"

from .estimator import NonDecomposableClassifier  # noqa: E402

__all__ = ["NonDecomposableClassifier", "__version__"]
