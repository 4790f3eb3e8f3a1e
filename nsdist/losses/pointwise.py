r"""The point-wise logistic loss: logistic regression's surrogate, as a ranking candidate.

.. math::

    \ell(w) = \frac{1}{n} \sum_i \log\bigl(1 + e^{-y_i w^\top x_i}\bigr),
    \qquad \partial \ell / \partial s_i = -\frac{y_i}{n} \sigma(-y_i s_i).

It is decomposable -- a sum over rows, not over pairs or labellings -- so it is
no surrogate of a non-decomposable measure; a model that minimises it is a
good *ranking* (its scores estimate the class probability), and a ranking plus
the measure's own cut or the F1-optimal threshold is consistent for Prec@k,
PRBEP and F1 (Narasimhan et al. 2014; Koyejo et al. 2014).  The in-fit
selection trains it beside the measure's own surrogates, so that where plain
logistic regression is the better model the selection can find it.
"""
from __future__ import annotations

import numpy as np

from .base import Loss

__all__ = ["LogLoss"]


class LogLoss(Loss):
    """Mean logistic loss ``log(1 + exp(-y s))`` of the scores (convex, smooth)."""

    name = "logloss"
    smooth = True
    shift_invariant = False

    def value_and_dscore(self, s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        s = np.asarray(s, dtype=np.float64)
        n = s.shape[0]
        if n == 0:
            return 0.0, np.zeros(0)
        z = -np.asarray(y, dtype=np.float64) * s
        value = float(np.logaddexp(0.0, z).sum() / n)
        sig = 0.5 * (1.0 + np.tanh(0.5 * z))            # sigma(z), stable for any z
        return value, -np.asarray(y, dtype=np.float64) * sig / n

    def value_and_dscore_many(self, S: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`value_and_dscore` of every column of ``S`` (n, M), bit for bit, vectorised."""
        T = np.ascontiguousarray(np.asarray(S, dtype=np.float64).T)
        n = T.shape[1]
        if n == 0:
            return np.zeros(T.shape[0]), np.zeros((0, T.shape[0]))
        neg_y = -np.asarray(y, dtype=np.float64)
        Z = neg_y * T
        values = np.logaddexp(0.0, Z).sum(axis=1) / n
        dscore = np.tanh(0.5 * Z)                       # the single call's operations, in place:
        dscore += 1.0                                   # -y * (0.5 * (1 + tanh(z / 2))) / n
        dscore *= 0.5
        dscore *= neg_y
        dscore /= n
        return values, dscore.T
