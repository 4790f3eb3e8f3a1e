r"""Follow the regularised leader for non-decomposable losses (seed, eq. (FTRL), Theorem 2).

This is the seed's FTRL, not McMahan's per-coordinate FTRL-Proximal.  In round
``t`` the batch ``Z_t`` (``b_t`` rows) arrives, the current model ``w_t``
(``w_1 = 0``) pays the penalty of eq. (lt)

.. math::

    \mathcal L_t(w_t) = \ell(x_{1:t}, w_t) - \ell(x_{1:t-1}, w_t),

and the leader is recomputed on everything seen so far:

.. math::

    w_{t+1} = \arg\min_{w \in W} \; \ell(x_{1:t}, w) + \frac{\eta}{2}\|w\|^2 .

**Normalisation.** The seed's ``l`` is a *sum* over points (pairs); the losses
of :mod:`nsdist.losses` are averages ``lbar`` (docs/surrogates.md).  We take
``l(x_{1:t}, w) = n_t lbar(x_{1:t}, w)``, ``n_t`` the rows seen after round
``t``, so that ``sum_t L_t(w) = n_T lbar(x_{1:T}, w)`` exactly as in the seed.
Then ``w_{t+1} = argmin lbar(x_{1:t}, w) + (eta / (2 n_t)) ||w||^2``: a
regularised batch problem with ``lambda_t = eta / n_t``.  The *average
penalty* ``(1 / n_T) sum_t L_t(w_t)`` (:meth:`FTRL.average_penalty`) minus the
batch optimum ``min_W lbar(x_{1:T}, w)`` is the seed's average regret ``R(T)``,
``O(1/sqrt(T))`` for Prec@k and pAUC when ``eta`` grows like ``sqrt(T)``
(Theorems 2 and 4).

**Inner solver.** Each leader is computed by the cutting-plane method
(:func:`~nsdist.solvers.cp.cutting_plane`) warm-started at ``w_t``: the FTRL
objective is exactly CP's regularised 1-slack problem, CP certifies its gap
(``tol``, on the averaged scale above, i.e. ``n_t tol`` on the seed's) and
stops after ``max_iter`` loss evaluations.  Its first evaluation, at ``w_t`` on
``x_{1:t}``, is the first term of the penalty; the second, ``lbar(x_{1:t-1},
w_t)``, is the loss at the point the previous round returned.  (A subgradient
method with steps ``1/(lambda_t k)`` was rejected: with ``lambda_t = eta/n_t``
small its first step ``1/lambda_t`` discards the warm start, and it has no
stopping certificate.)
"""
from __future__ import annotations

import numpy as np

from ..losses.base import Loss
from .cp import cutting_plane
from .history import History, Recorder, Validate
from .kernel import epoch_slices
from .order import row_order

__all__ = ["FTRL", "ftrl"]


class FTRL:
    """An FTRL learner fed one batch per :meth:`round`.

    Parameters
    ----------
    loss : Loss
    n_features : int
    eta : float > 0
        The regulariser scale ``eta`` of eq. (FTRL), on the seed's (summed) scale.
    radius : float or None
        Radius of ``W`` (None: unconstrained).
    fit_intercept : bool
        Learn ``b`` as CP does (a regularised bias feature).
    tol, max_iter :
        The inner CP's gap tolerance (averaged scale) and evaluation budget.
    average : bool
        :meth:`model` returns the average of the leaders ``w_2 .. w_{t+1}``
        (the online-to-batch model of Theorem 5, computed like 1PMB's average)
        or the last leader ``w_{t+1}``.
    validate : callable ``(w, b) -> float``, optional
        Validation measure of :meth:`model`, recorded every round.

    Attributes
    ----------
    w, b : the current leader ``w_{t+1}``
    penalties : list of float
        ``L_t(w_t)`` per round, on the seed's (summed) scale.
    inner_iterations : list of int
        CP evaluations per round.
    history : History
        One record per round: ``rows_seen = n_t``, ``loss = L_t(w_t) / b_t``
        (the penalty per arriving row).
    """

    def __init__(self, loss: Loss, n_features: int, *, eta: float, radius: float | None = None,
                 fit_intercept: bool = False, tol: float = 1e-3, max_iter: int = 200,
                 average: bool = True, validate: Validate | None = None) -> None:
        self.loss, self.eta, self.radius = loss, float(eta), radius
        self.fit_intercept, self.tol, self.max_iter, self.average = fit_intercept, tol, max_iter, average
        self.w, self.b = np.zeros(n_features), 0.0
        self.w_sum, self.b_sum, self.t = np.zeros(n_features), 0.0, 0
        self.X: np.ndarray | None = None
        self.y: np.ndarray | None = None
        self.penalties: list[float] = []
        self.inner_iterations: list[int] = []
        self._recorder = Recorder(validate)
        self._loss_prev = 0.0          # lbar(x_{1:t-1}, w_t)

    @property
    def history(self) -> History:
        return self._recorder.history

    @property
    def n_rows(self) -> int:
        return 0 if self.y is None else self.y.shape[0]

    def model(self) -> tuple[np.ndarray, float]:
        """``(w, b)``: the averaged leaders or the last one (see ``average``)."""
        if self.average and self.t > 0:
            return self.w_sum / self.t, self.b_sum / self.t
        return self.w.copy(), self.b

    def average_penalty(self) -> float:
        """``(1 / n_T) sum_t L_t(w_t)``, to compare with ``min_W lbar(x_{1:T}, w)``."""
        return float(np.sum(self.penalties)) / max(self.n_rows, 1)

    def round(self, X_t: np.ndarray, y_t: np.ndarray) -> float:
        """Play one round on the batch ``(X_t, y_t)``; returns the penalty ``L_t(w_t)``."""
        n_prev = self.n_rows
        self.X = X_t if self.X is None else np.concatenate([self.X, X_t])
        self.y = y_t if self.y is None else np.concatenate([self.y, y_t])
        n_t = self.n_rows
        res = cutting_plane(self.X, self.y, self.loss, lam=self.eta / n_t, radius=self.radius,
                            fit_intercept=self.fit_intercept, tol=self.tol, max_iter=self.max_iter,
                            coef0=self.w, intercept0=self.b)
        penalty = n_t * res.history[0].loss - n_prev * self._loss_prev
        self.w, self.b, self._loss_prev = res.coef, res.intercept, res.loss
        self.w_sum += self.w
        self.b_sum += self.b
        self.t += 1
        self.penalties.append(penalty)
        self.inner_iterations.append(res.n_iter)
        self._recorder.record(self.t, n_t, penalty / (n_t - n_prev), self.model)
        return penalty


def ftrl(X: np.ndarray, y: np.ndarray, loss: Loss, *, buffer_size: int, eta: float,
         radius: float | None = None, shuffle: bool = True, random_state: int = 0,
         fit_intercept: bool = False, tol: float = 1e-3, max_iter: int = 200, average: bool = True,
         validate: Validate | None = None) -> FTRL:
    """Run FTRL over one pass of ``(X, y)`` in batches.

    The stream is the rows in ``row_order(random_state, 0, 0, n, shuffle)``,
    cut into batches by ``epoch_slices(n, buffer_size)`` -- the same rows that
    form 1PMB's first-pass epochs.  Other parameters: see :class:`FTRL`.
    """
    learner = FTRL(loss, X.shape[1], eta=eta, radius=radius, fit_intercept=fit_intercept, tol=tol,
                   max_iter=max_iter, average=average, validate=validate)
    order = row_order(random_state, 0, 0, X.shape[0], shuffle)
    for sl in epoch_slices(X.shape[0], buffer_size):
        learner.round(X[order[sl]], y[order[sl]])
    return learner
