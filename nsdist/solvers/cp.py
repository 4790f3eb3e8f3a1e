r"""The 1-slack structural-SVM cutting-plane method (CP; Joachims 2005/2006, SVMperf).

CP minimises the regularised surrogate over the same ball ``W`` as the
stochastic solvers,

.. math::

    J(w) = \frac{\lambda}{2}\|w\|^2 + \ell(x_{1:n}, w), \qquad \|w\| \le R,

written as the 1-slack problem ``min (lambda/2)||w||^2 + xi`` subject to
``xi >= Delta_t + a_t . w`` for every added constraint.  Iteration ``t``
evaluates the loss at ``w_t`` by its exact maximisation (docs/surrogates.md), which gives
the most violated constraint ``(Delta_t, a_t) = (l(w_t) - g_t . w_t, g_t)``:
each surrogate is a maximum of functions linear in ``w`` (the structural
losses over labellings; the hinge pAUC over pairs and top sets), so this is
SVMperf's (and SVMpAUC's) separation oracle.  The dual of the small QP is
solved by :class:`~nsdist.solvers.planes.PlaneModel`.  CP stops when
``min_t J(w_t) - D <= tol``, ``D`` the dual value of the model (a certified
lower bound on ``min J``); this is SVMperf's test "the new constraint is
violated by at most ``tol``", applied to the best iterate.

**Matching the other solvers.** 1PMB, 2PMB and PSG minimise ``l`` over
``W`` without a penalty.  CP keeps the same ``W`` and adds
``(lambda/2)||w||^2``, which the method needs (its iteration count grows as
``O(1/(lambda tol))``); with ``lambda -> 0`` its optimum tends to theirs.
``lambda`` plays the role of SVMperf's ``1 / C``, up to SVMperf's scaling of
``Delta`` (by 100) and of its joint feature map (a sum, not a mean, over the rows).

**Intercept.** With ``fit_intercept`` the model is ``z = (w, b)`` on the
features ``(x, 1)``: ``b`` is regularised and inside the ball, SVMperf's bias
feature.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..losses.base import Loss
from .history import History, Recorder, Validate
from .planes import PlaneModel

__all__ = ["CPResult", "cutting_plane", "loss_and_grad"]


@dataclass
class CPResult:
    """What :func:`cutting_plane` returns.

    Attributes
    ----------
    coef, intercept :
        The best iterate ``w_t`` (lowest ``J``).
    loss : float
        ``l(x_{1:n}, w)`` at the returned model.
    objective : float
        ``J`` at the returned model.
    gap : float
        ``objective - D``, an upper bound on ``J(w) - min J``.
    n_iter : int
        Loss evaluations (iterations) made.
    converged : bool
        ``gap <= tol``.
    history : History
        One record per iteration: ``loss = l(x_{1:n}, w_t)`` at the evaluated
        iterate (the first record is at the starting point), ``rows_seen = t n``,
        and the validation measure of that iterate; with ``validate``, a run
        stopped by ``max_iter`` has one more record, for the last iterate.
    last_coef, last_intercept :
        The last iterate, the solution of the final cutting-plane QP -- what
        SVMperf returns (the best iterate can be the start ``w = 0``, whose
        ``J`` a hinge surrogate often cannot beat on hard data).
    """

    coef: np.ndarray
    intercept: float
    loss: float
    objective: float
    gap: float
    n_iter: int
    converged: bool
    history: History
    last_coef: np.ndarray | None = None
    last_intercept: float = 0.0


def loss_and_grad(X: np.ndarray, y: np.ndarray, loss: Loss, z: np.ndarray,
                  fit_intercept: bool) -> tuple[float, np.ndarray]:
    """``l(z)`` and a subgradient with respect to ``z = (w, b)`` (``z = w`` without intercept)."""
    w, b = (z[:-1], z[-1]) if fit_intercept else (z, 0.0)
    s = X @ w.astype(X.dtype, copy=False)
    if fit_intercept:
        s = s + X.dtype.type(b)
    value, dscore = loss.value_and_dscore(s, y)
    g = (X.T @ dscore.astype(X.dtype, copy=False)).astype(np.float64, copy=False)
    return value, (np.append(g, dscore.sum()) if fit_intercept else g)


def cutting_plane(X: np.ndarray, y: np.ndarray, loss: Loss, *, lam: float, radius: float | None = None,
                  fit_intercept: bool = False, tol: float = 1e-3, max_iter: int = 200,
                  coef0: np.ndarray | None = None, intercept0: float = 0.0,
                  validate: Validate | None = None) -> CPResult:
    """Minimise ``(lam/2)||w||^2 + l(x_{1:n}, w)`` over ``||w|| <= radius`` by cutting planes.

    Parameters
    ----------
    X : ndarray of shape (n, d); y : ndarray of shape (n,) in {-1, +1}
    loss : Loss
    lam : float > 0
        The regularisation ``lambda``.
    radius : float or None
        Radius of ``W`` (None: unconstrained).
    fit_intercept : bool
        Add the bias feature (module doc).
    tol : float
        Target gap ``min_t J(w_t) - D`` (absolute, in units of the loss).
    max_iter : int
        Maximum number of loss evaluations.
    coef0, intercept0 :
        Starting point ``w_1`` (FTRL warm start); default 0.
    validate : callable ``(w, b) -> float``, optional
        Validation measure of the last iterate (what the estimator returns, as SVMperf does), recorded every
        iteration -- and once more for the iterate that ``max_iter`` leaves unevaluated.
    """
    d = X.shape[1]
    z = np.zeros(d + fit_intercept)
    if coef0 is not None:
        z[:d] = coef0
        if fit_intercept:
            z[d] = intercept0
    planes = PlaneModel(z.shape[0], lam, radius)
    recorder = Recorder(validate)
    best = (np.inf, np.inf, z)              # (J, l, z)
    dual, gap = -np.inf, np.inf

    def split(v: np.ndarray) -> tuple[np.ndarray, float]:
        return (v[:d].copy(), float(v[d])) if fit_intercept else (v.copy(), 0.0)

    for t in range(1, max_iter + 1):
        value, g = loss_and_grad(X, y, loss, z, fit_intercept)
        J = lam / 2.0 * float(z @ z) + value
        if J < best[0]:
            best = (J, value, z)
        recorder.record(t, t * X.shape[0], value, lambda: split(z))
        gap = best[0] - dual
        if gap <= tol:
            break
        planes.add(g, value - float(g @ z))
        z, dual, _ = planes.solve(tol / 4.0)
    else:                                   # max_iter: the last iterate, returned below, is not evaluated yet
        if validate is not None:
            recorder.record(max_iter + 1, (max_iter + 1) * X.shape[0], loss_and_grad(X, y, loss, z, fit_intercept)[0],
                            lambda: split(z))
    gap = best[0] - dual
    w, b = split(best[2])
    w_last, b_last = split(z)
    return CPResult(w, b, best[1], best[0], gap, t, gap <= tol, recorder.history, w_last, b_last)
