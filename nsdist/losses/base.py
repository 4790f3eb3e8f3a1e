"""The one interface every surrogate loss implements (docs/surrogates.md).

Every surrogate here is a function of the scores ``s = X @ w`` only, so a loss
is written once on scores::

    value, dscore = loss.value_and_dscore(s, y)      # dscore = d l / d s, shape (n,)

and the chain rule gives the (sub)gradient in weight space with one more
mat-vec, ``X.T @ dscore``.  The solvers use ``value_and_dscore`` directly (it also
gives the intercept's subgradient, ``dscore.sum()``); ``value`` and
``value_and_grad`` are the docs/surrogates.md §Interface entry points on ``(X, y, w)``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Loss(ABC):
    """A convex surrogate ``l(w)`` of ``1 - P`` for a performance measure ``P``.

    Subclasses implement :meth:`value_and_dscore`, one exact maximisation that
    yields the value and a subgradient with respect to the scores.  When the
    buffer lacks one of the classes, every loss here returns ``(0.0, zeros)``:
    the solvers then skip the epoch and count it (docs/surrogates.md §Missing class).
    """

    #: registry name, e.g. ``"pauc"``
    name: str = ""
    #: the loss has a Lipschitz gradient in the scores (the selection steps such candidates with a
    #: constant step; docs/solvers.md §Selection)
    smooth: bool = False
    #: adding a constant to every score leaves the subgradient ``dl/ds`` unchanged, so training an
    #: intercept adds nothing (the pairwise losses of score differences; Prec@k's and PRBEP's
    #: structural losses, whose labellings all have the same number of positives).  False where the
    #: level of the scores matters: F1, the point-wise logistic loss, the squared hinge on squashed
    #: scores ``sigma(s)``; a candidate of such a loss learns an intercept (docs/solvers.md §Selection)
    shift_invariant: bool = True

    @abstractmethod
    def value_and_dscore(self, s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Value and subgradient w.r.t. the scores.

        Parameters
        ----------
        s : ndarray of shape (n,)
            Scores ``X @ w`` (float32 or float64).
        y : ndarray of shape (n,)
            Labels in ``{-1, +1}`` (already validated).

        Returns
        -------
        value : float
        dscore : ndarray of shape (n,), float64
            A subgradient of the loss with respect to ``s``.
        """

    def value_and_dscore_many(self, S: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`value_and_dscore` for every column of ``S`` (``M`` models on one buffer).

        Parameters
        ----------
        S : ndarray of shape (n, M)
            Scores of ``M`` models.
        y : ndarray of shape (n,)

        Returns
        -------
        values : ndarray of shape (M,)
        dscore : ndarray of shape (n, M), float64
            Column ``j`` is bit for bit ``value_and_dscore(S[:, j], y)`` (the
            losses that override this vectorise over the columns, and a test
            holds them to the loop).  This default loops over the columns.
        """
        S = np.asarray(S)
        values, dscore = np.empty(S.shape[1]), np.empty(S.shape, dtype=np.float64)
        for j in range(S.shape[1]):
            values[j], dscore[:, j] = self.value_and_dscore(S[:, j], y)
        return values, dscore

    def params(self) -> dict:
        """The loss's parameters (for model metadata and ``repr``)."""
        return {}

    def value(self, X: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
        """``l(w)`` on the buffer ``(X, y)``."""
        X, y, w = _check_xyw(X, y, w)
        return self.value_and_dscore(X @ w.astype(X.dtype, copy=False), y)[0]

    def value_and_grad(self, X: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
        """``l(w)`` and a subgradient ``X.T @ dl/ds`` from one maximisation.

        ``X`` keeps its dtype: a float32 buffer is multiplied in float32.
        """
        X, y, w = _check_xyw(X, y, w)
        s = X @ w.astype(X.dtype, copy=False)
        value, dscore = self.value_and_dscore(s, y)
        return value, weight_gradient(X, dscore)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def used_rows(dscore: np.ndarray) -> np.ndarray:
    """Positions of the rows with a non-zero ``dscore`` (shape ``(n,)``, or ``(n, M)``: any of a row's
    ``M`` entries; NaN counts as non-zero) -- the only rows a (sub)gradient step touches."""
    # a row's "any of its M entries", as einsum's sum over bools (logical or): half the time of
    # any(axis=1), whose reduction over a short last axis pays a per-row cost
    return (dscore != 0 if dscore.ndim == 1 else np.einsum("ij->i", dscore != 0)).nonzero()[0]


def weight_gradient(X, dscore: np.ndarray) -> np.ndarray:
    """The chain rule ``X.T @ dscore`` over the rows with a non-zero ``dscore`` only.

    Every surrogate here puts weight on few rows of a buffer (the positives and
    the top ``m`` negatives for pAUC; the rows whose label ``ybar*`` flips for
    the structural losses), so the product costs ``O(nnz * d)``, not ``O(n d)``
    (docs/surrogates.md).  ``X`` is a dense ndarray or a scipy sparse matrix (CSR: the
    product then costs ``O(non-zeros of the rows used)``) and keeps its dtype.
    ``dscore`` has shape ``(n,)`` (one model) or ``(n, M)`` (a population of
    ``M`` models: a row is used if any of its ``M`` entries is non-zero).

    Returns
    -------
    ndarray of float64, shape ``(d,)`` or ``(d, M)`` like ``dscore``.
    """
    dscore = np.asarray(dscore)
    nz = used_rows(dscore)
    if 4 * nz.shape[0] >= dscore.shape[0]:
        rows, coeffs = X, dscore
    else:
        rows, coeffs = X[nz], dscore.take(nz, axis=0)
    g = rows.T @ coeffs.astype(X.dtype, copy=False)
    return np.asarray(g).astype(np.float64, copy=False)


def _check_xyw(X, y, w):
    from .._validation import as_pm1_labels, check_matrix

    X = check_matrix(X)
    y = as_pm1_labels(y)
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (X.shape[1],):
        raise ValueError(f"w has shape {w.shape}, expected ({X.shape[1]},) to match X")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y has {y.shape[0]} labels but X has {X.shape[0]} rows")
    return X, y, w
