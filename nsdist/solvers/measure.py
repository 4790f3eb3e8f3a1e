"""What a measure name stands for: its surrogate loss, its metric and its cut-off.

=========  ==========================================  ==========================
measure    surrogate (:func:`nsdist.losses.get`)        metric (:mod:`nsdist.metrics`)
=========  ==========================================  ==========================
"pauc"     ``"pauc"`` (beta, surrogate)                 ``partial_auc(y, s, beta)``
"auc"      ``"auc"`` (surrogate)                        ``auc(y, s)``
"prec@k"   ``"prec@k"`` (k)                             ``precision_at_k(y, s, k)``
"prbep"    ``"prbep"``                                  ``prbep(y, s)``
"f1"       ``"f1"``                                     ``f1_score(y, s, 0.0)``
=========  ==========================================  ==========================

Only F1 looks at the sign of the scores; the other four measures are *ranking*
measures, unchanged when every score moves by the same amount.  Their
surrogates either ignore an intercept (pAUC, AUC, PRBEP: ``sum(dl/ds) = 0``) or
are linear in it (Prec@k with ``K != n+``: ``sum(dl/ds) = 2 (K - n+) / n``, so a
learned intercept would drift without bound).  The solvers therefore learn an
intercept for F1 only (:func:`learns_intercept`); a ranking model gets its
intercept from :func:`cut_intercept`, which places ``predict``'s threshold at
the measure's own cut-off on the training scores.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import losses, metrics
from .._validation import check_beta, resolve_k
from ..losses.base import Loss

__all__ = ["MEASURES", "make_loss", "measure_function", "learns_intercept", "cut_intercept"]

#: the measures a model can be trained for
MEASURES = ("pauc", "auc", "prec@k", "prbep", "f1")

def _check_measure(measure) -> str:
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}; valid: {', '.join(map(repr, MEASURES))}")
    return measure


def make_loss(measure: str, *, beta: float = 0.1, k: int | float | None = None,
              surrogate: str = "hinge") -> Loss:
    """The surrogate loss that a model trained for ``measure`` minimises.

    Parameters
    ----------
    measure : {"pauc", "auc", "prec@k", "prbep", "f1"}
    beta : float in (0, 1]
        pAUC's false-positive range (checked for every measure).
    k : int >= 1 or float in (0, 1]
        Prec@k's ``k`` (required for ``"prec@k"``, ignored otherwise).
    surrogate : {"hinge", "logistic", "squared_hinge"}
        ``phi`` of the pairwise surrogates (pauc, auc).  The structural
        surrogates (prec@k, prbep, f1) are hinge-type by construction
        (Joachims 2005) and accept only ``"hinge"``.

    Raises
    ------
    ValueError
        Unknown measure or surrogate, bad ``beta`` or ``k``, a non-hinge
        surrogate for a structural measure.
    """
    _check_measure(measure)
    beta = check_beta(beta)
    if surrogate not in losses.SURROGATES:
        raise ValueError(f"unknown surrogate {surrogate!r}; valid: {', '.join(map(repr, losses.SURROGATES))}")
    if measure == "pauc":
        return losses.get("pauc", beta=beta, surrogate=surrogate)
    if measure == "auc":
        return losses.get("auc", surrogate=surrogate)
    if surrogate != "hinge":
        raise ValueError(f"surrogate={surrogate!r} applies to the pairwise measures (pauc, auc) only; "
                         f"measure={measure!r} uses the structural hinge surrogate: leave surrogate='hinge'")
    if measure == "prec@k":
        if k is None:
            raise ValueError("measure='prec@k' needs k (an int >= 1 or a float in (0, 1])")
        return losses.get("prec@k", k=k)
    return losses.get(measure)


def measure_function(measure: str, *, beta: float = 0.1,
                     k: int | float | None = None) -> Callable[[np.ndarray, np.ndarray], float]:
    """``P(y, s)``: the :mod:`nsdist.metrics` function of ``measure`` with its parameters bound."""
    _check_measure(measure)
    if measure == "pauc":
        return lambda y, s: metrics.partial_auc(y, s, beta)
    if measure == "auc":
        return metrics.auc
    if measure == "prec@k":
        return lambda y, s: metrics.precision_at_k(y, s, k)
    if measure == "prbep":
        return metrics.prbep
    return lambda y, s: metrics.f1_score(y, s, threshold=0.0)


def learns_intercept(measure: str) -> bool:
    """True when the solvers should learn an intercept for ``measure`` (F1 only; see module doc)."""
    return _check_measure(measure) == "f1"


def cut_intercept(measure: str, y: np.ndarray, s: np.ndarray, *, k: int | float | None = None) -> float:
    """Intercept that puts the decision threshold of a ranking model at its measure's cut-off.

    The ``c`` highest training scores get ``s + b > 0``: ``c = K`` for Prec@k
    (``K`` resolved on these ``n`` rows, as :func:`nsdist.metrics.precision_at_k`
    does), ``c = n+`` otherwise (the break-even cut of PRBEP, also used for
    pAUC and AUC, whose measures have no threshold of their own).  With the
    scores sorted decreasingly, ``b = -(s_(c) + s_(c+1)) / 2``; ``b = -s_(1) - 1``
    when ``c = 0``, ``b = 1 - s_(n)`` when ``c = n``.

    Parameters
    ----------
    measure : one of the ranking measures ("pauc", "auc", "prec@k", "prbep")
    y : ndarray of shape (n,), labels in {-1, +1}
    s : ndarray of shape (n,), training scores ``X @ w``
    k : Prec@k's ``k``
    """
    if learns_intercept(measure):
        raise ValueError("cut_intercept is for the ranking measures; F1 learns its intercept")
    n = s.shape[0]
    c = resolve_k(k, n) if measure == "prec@k" else int(np.count_nonzero(y > 0))
    desc = np.sort(np.asarray(s, dtype=np.float64))[::-1]
    if c == 0:
        return float(-desc[0] - 1.0)
    if c == n:
        return float(1.0 - desc[-1])
    return float(-(desc[c - 1] + desc[c]) / 2.0)
