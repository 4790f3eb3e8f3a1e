"""``scipy.sparse``, imported where sparse rows are made, never merely to ask whether rows are sparse.

A fresh Dask worker imports every module its first task names before that task
runs; the chain's first loads wait for it.  ``import scipy.sparse`` takes about
90 ms there (scipy 1.17's array-API layer walks the whole ``numpy`` namespace,
importing ``numpy.f2py``, ``numpy.testing`` and ``numpy.ma``), and a job on
dense rows needs none of it.  :func:`issparse` answers without importing scipy:
rows that are a scipy sparse matrix were built by ``scipy.sparse``, so it is
loaded already.  :func:`scipy_sparse` imports it, for the code that builds CSR rows.
:func:`writeable` gives rows, dense or sparse, whose values may be changed in place.
"""
from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["issparse", "scipy_sparse", "writeable"]


def issparse(X: object) -> bool:
    """``scipy.sparse.issparse(X)``, without importing scipy when it is not loaded (then ``X`` is not sparse)."""
    module = sys.modules.get("scipy.sparse")
    return module is not None and module.issparse(X)


def scipy_sparse() -> ModuleType:
    """The ``scipy.sparse`` module, imported on the first call."""
    import scipy.sparse

    return scipy.sparse


def writeable(X):
    """``X``, or a copy of it if its values are read-only (rows as they came back from a worker may be)."""
    return X if (X.data if issparse(X) else X).flags.writeable else X.copy()
