"""nsdist: stochastic optimisation of non-decomposable measures on Dask."""
__version__ = "0.1.0"
