"""Projected subgradient on the whole training set (PSG; the baseline of the seed's experiments).

The batch method of Narasimhan & Agarwal (2013) for pAUC, for any surrogate:
iteration ``t = 1, 2, ...`` takes one step on the loss of *all* ``n`` rows::

    w_{t+1} = Proj_W( w_t - (eta / sqrt(t)) * grad l(x_{1:n}, w_t) ).

That is 1PMB with a single epoch holding the whole training set, so each
iteration is one :func:`~nsdist.solvers.kernel.run_epochs` call with
``buffer_size = n`` (the state carries ``t``, the iterate sums and the
intercept).  The loss the kernel reports is ``l(x_{1:n}, w_t)``, the exact
objective at the iterate before the step, so the best iterate comes for free.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..losses.base import Loss
from .history import History, Recorder, Validate
from .kernel import Population, SGDState, aligned, run_epochs

__all__ = ["PSGResult", "psg"]


@dataclass
class PSGResult:
    """What :func:`psg` returns.

    Attributes
    ----------
    coef, intercept :
        The returned model (averaged or best iterate).
    state : SGDState
        Kernel state after the last iteration.
    best_loss : float
        Lowest ``l(x_{1:n}, w_t)`` seen (``inf`` if every iteration was skipped).
    history : History
        One record per iteration: ``loss = l(x_{1:n}, w_t)``, ``rows_seen = t n``.
    """

    coef: np.ndarray
    intercept: float
    state: SGDState
    best_loss: float
    history: History


def psg(X: np.ndarray, y: np.ndarray, loss: Loss, *, eta: float, radius: float | None = None,
        max_iter: int = 100, fit_intercept: bool = False, average: bool = True,
        validate: Validate | None = None) -> PSGResult:
    """Run ``max_iter`` projected-subgradient iterations from ``w_1 = 0``.

    Parameters
    ----------
    X, y, loss, eta, radius, fit_intercept :
        As for :func:`~nsdist.solvers.sgd.one_pass_mb`.
    max_iter : int
        Iterations ``T`` (each one pass over the data).
    average : bool
        True: the average of the iterates ``w_2 .. w_{T+1}`` (the kernel's
        average, as in 1PMB).  False: the *best* iterate, the ``w_t``
        (``t <= T``) with the lowest ``l(x_{1:n}, w_t)`` -- the usual output of
        a subgradient method, whose objective is not monotone.
    validate : callable ``(w, b) -> float``, optional
        Validation measure, recorded after every iteration.
    """
    n = X.shape[0]
    X = aligned(X)            # the kernel's layout once, not a copy per iteration (kernel.aligned)
    state = SGDState.zeros(X.shape[1])
    population = Population.single(loss, eta, fit_intercept)
    best_loss, best = np.inf, state.model(0, average=False)
    recorder = Recorder(validate)

    def model() -> tuple[np.ndarray, float]:
        return state.model(0, average=True) if average else (best[0].copy(), best[1])

    for _ in range(max_iter):
        w_t, b_t = state.model(0, average=False)
        state, stats = run_epochs(state, X, y, population, buffer_size=n, radius=radius)
        if stats["skipped"][0]:   # the training set lacks a class: every iteration would be
            break                 # skipped (docs/surrogates.md §Missing class), the model stays w_1 = 0
        value = float(stats["loss"][0])
        if value < best_loss:
            best_loss, best = value, (w_t, b_t)
        recorder.record(state.epoch, state.rows_seen, value, model)
    w, b = model()
    return PSGResult(w, b, state, best_loss, recorder.history)
