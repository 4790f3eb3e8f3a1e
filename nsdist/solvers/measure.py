"""The one table of measures: name -> surrogate, metric, result key, intercept rule.

=========  ==============================  ==========================  ================  ==========
measure    own surrogate                   metric (:mod:`nsdist.metrics`)  result key       threshold
=========  ==============================  ==========================  ================  ==========
"pauc"     ``"pauc"`` (beta, surrogate)    ``partial_auc(y, s, beta)``  ``partial_auc``    cut
"auc"      ``"auc"`` (surrogate)           ``auc(y, s)``                ``auc``            cut
"prec@k"   ``"prec@k"`` (k)                ``precision_at_k(y, s, k)``  ``precision_at_k`` cut
"prbep"    ``"prbep"``                     ``prbep(y, s)``              ``prbep``          cut
"f1"       ``"f1"``                        ``f1_score(y, s, 0.0)``      ``f1_score``       learned
=========  ==============================  ==========================  ================  ==========

Only F1 looks at the sign of the scores; the other four measures are *ranking*
measures, unchanged when every score moves by the same amount.  Their
surrogates either ignore an intercept (pAUC, AUC, PRBEP: ``sum(dl/ds) = 0``) or
are linear in it (Prec@k with ``K != n+``: ``sum(dl/ds) = 2 (K - n+) / n``, so a
learned intercept would drift without bound).  The solvers therefore learn an
intercept for F1's own surrogate only (:func:`learns_intercept`); a ranking
model gets its intercept from :func:`cut_intercept`, which places
``predict``'s threshold at the measure's own cut-off.

``pairwise`` marks the measures whose own surrogate is a pairwise one
(``phi`` of score differences; ``surrogate`` selects ``phi``); the others use a
structural surrogate (Joachims 2005).  Definitions: ``docs/measures.md``,
``docs/surrogates.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import losses, metrics
from .._validation import check_beta, resolve_k
from ..losses.base import Loss

__all__ = ["Measure", "MEASURES", "RESULT_KEYS", "get_measure", "make_loss", "measure_function", "value_on",
           "learns_intercept", "cut_intercept", "f1_threshold", "result_key", "all_measures"]

Metric = Callable[[np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class Measure:
    """What a measure name stands for (one row of the module's table).

    Attributes
    ----------
    name : str
        ``"pauc"``, ``"auc"``, ``"prec@k"``, ``"prbep"`` or ``"f1"``.
    result_key : str
        Its key in :func:`nsdist.evaluate`'s result and in ``metrics.json``.
    pairwise : bool
        Its own surrogate is pairwise (``phi`` selectable) rather than structural.
    thresholded : bool
        The measure looks at ``s > 0`` (F1): the model's intercept matters,
        and is learned or placed by the plug-in rule; otherwise the intercept is
        the measure's cut (:func:`cut_intercept`).
    """

    name: str
    result_key: str
    pairwise: bool
    thresholded: bool

    def title(self, *, beta: float | None = None, k: int | float | None = None) -> str:
        """A short title: ``pAUC(0,0.1)``, ``AUC``, ``Prec@10``, ``PRBEP``, ``F1``."""
        if self.name == "pauc":
            return f"pAUC(0,{beta:g})" if beta is not None else "pAUC"
        if self.name == "prec@k":
            return f"Prec@{k:g}" if k is not None else "Prec@k"
        return {"auc": "AUC", "prbep": "PRBEP", "f1": "F1"}[self.name]

    def loss(self, *, beta: float = 0.1, k: int | float | None = None, surrogate: str = "hinge") -> Loss:
        """The measure's own surrogate loss (see :func:`make_loss`)."""
        return make_loss(self.name, beta=beta, k=k, surrogate=surrogate)

    def metric(self, *, beta: float = 0.1, k: int | float | None = None) -> Metric:
        """``P(y, s)`` with the parameters bound (see :func:`measure_function`)."""
        return measure_function(self.name, beta=beta, k=k)


#: the measures a model can be trained for, by name
MEASURES: dict[str, Measure] = {m.name: m for m in (
    Measure("pauc", "partial_auc", pairwise=True, thresholded=False),
    Measure("auc", "auc", pairwise=True, thresholded=False),
    Measure("prec@k", "precision_at_k", pairwise=False, thresholded=False),
    Measure("prbep", "prbep", pairwise=False, thresholded=False),
    Measure("f1", "f1_score", pairwise=False, thresholded=True),
)}


#: measure name -> its key in evaluation results
RESULT_KEYS: dict[str, str] = {m.name: m.result_key for m in MEASURES.values()}


def all_measures(y: np.ndarray, s: np.ndarray, *, beta: float, k: int | float,
                 threshold: float = 0.0) -> dict[str, float]:
    """Every measure of the scores ``s`` in memory, keyed by result key (F1 of ``s > threshold``)."""
    out = {}
    for m in MEASURES.values():
        if m.thresholded:
            out[m.result_key] = metrics.f1_score(y, s, threshold)
        else:
            out[m.result_key] = measure_function(m.name, beta=beta, k=k)(y, s)
    return out


def get_measure(measure) -> Measure:
    """The table row of ``measure``; a clear ``ValueError`` (with a suggestion) for an unknown name."""
    if isinstance(measure, Measure):
        return measure
    if not isinstance(measure, str) or measure not in MEASURES:
        hint = ""
        if isinstance(measure, str) and measure.lower() in MEASURES:
            hint = f" (did you mean {measure.lower()!r}?)"
        raise ValueError(f"unknown measure {measure!r}{hint}; valid: {', '.join(map(repr, MEASURES))}")
    return MEASURES[measure]


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
    surrogate : {"hinge", "logistic", "squared_hinge", "sigmoid"} (see :data:`nsdist.losses.SURROGATES`)
        ``phi`` of the pairwise surrogates (pauc, auc).  The structural
        surrogates (prec@k, prbep, f1) are hinge-type by construction
        (Joachims 2005) and accept only ``"hinge"``.

    Raises
    ------
    ValueError
        Unknown measure or surrogate, bad ``beta`` or ``k``, a non-hinge
        surrogate for a structural measure.
    """
    m = get_measure(measure)
    beta = check_beta(beta)
    if surrogate not in losses.SURROGATES:
        raise ValueError(f"unknown surrogate {surrogate!r}; valid: {', '.join(map(repr, losses.SURROGATES))}")
    if m.name == "pauc":
        return losses.get("pauc", beta=beta, surrogate=surrogate)
    if m.name == "auc":
        return losses.get("auc", surrogate=surrogate)
    if surrogate != "hinge":
        raise ValueError(f"surrogate={surrogate!r} applies to the pairwise measures (pauc, auc) only; "
                         f"measure={m.name!r} uses the structural hinge surrogate: leave surrogate unset")
    if m.name == "prec@k":
        if k is None:
            raise ValueError("measure='prec@k' needs k (an int >= 1 or a float in (0, 1])")
        return losses.get("prec@k", k=k)
    return losses.get(m.name)


def measure_function(measure: str, *, beta: float = 0.1, k: int | float | None = None) -> Metric:
    """``P(y, s)``: the :mod:`nsdist.metrics` function of ``measure`` with its parameters bound."""
    name = get_measure(measure).name
    if name == "pauc":
        return lambda y, s: metrics.partial_auc(y, s, beta)
    if name == "auc":
        return metrics.auc
    if name == "prec@k":
        return lambda y, s: metrics.precision_at_k(y, s, k)
    if name == "prbep":
        return metrics.prbep
    return lambda y, s: metrics.f1_score(y, s, threshold=0.0)


def value_on(P: Metric, X, y: np.ndarray, w: np.ndarray, b: float) -> float | None:
    """``P(y, X @ w + b)``: a model's measure on rows it is watched on (a learning curve's monitor rows);
    None when a score is not finite (a diverged model has no value)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.asarray(X @ w, dtype=np.float64) + b
    return float(P(y, s)) if np.all(np.isfinite(s)) else None


def result_key(measure: str) -> str:
    """The key of ``measure`` in evaluation results (``"pauc"`` -> ``"partial_auc"``)."""
    return get_measure(measure).result_key


def learns_intercept(measure: str) -> bool:
    """True when the measure's own surrogate learns an intercept (F1 only; see module doc)."""
    return get_measure(measure).thresholded


def f1_threshold(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """The largest F1 of a labelling ``s > t`` over all ``t``, and a ``t`` that attains it.

    With the scores sorted decreasingly, cutting after each group of tied
    scores gives every labelling a threshold can make: cut after the group
    of score ``u`` ending at rank ``k``, ``TP`` is the number of positives
    scoring at least ``u`` (a binary search among the sorted positive scores)
    and ``F1 = 2 TP / (k + n+)``.  ``t`` is the midpoint to the next lower
    score (or 1 below the lowest).  Labelling nothing positive (F1 = 0) is
    the fallback, ``t`` above the top score.  O(n log n): two sorts of
    values, no sort of positions.
    """
    s = np.asarray(s, dtype=np.float64)
    is_pos = y > 0
    n_pos = int(np.count_nonzero(is_pos))
    if s.shape[0] == 0 or n_pos == 0:
        return 0.0, float(s.max() + 1.0) if s.size else 0.0
    ss = np.sort(s)[::-1]
    last = np.flatnonzero(np.append(ss[1:] != ss[:-1], True))     # group ends
    tp = n_pos - np.searchsorted(np.sort(s[is_pos]), ss[last], side="left")
    f1 = 2.0 * tp / (last + 1 + n_pos)
    i = int(np.argmax(f1))
    if f1[i] <= 0:
        return 0.0, float(ss[0] + 1.0)
    j = last[i]
    t = ss[j] - 1.0 if j + 1 == ss.shape[0] else (ss[j] + ss[j + 1]) / 2.0
    if not ss[j] > t:          # midpoint rounded onto the upper score: step below it
        t = np.nextafter(ss[j], -np.inf)
    return float(f1[i]), float(t)


def cut_intercept(measure: str, y: np.ndarray, s: np.ndarray, *, k: int | float | None = None) -> float:
    """Intercept that puts the decision threshold of a ranking model at its measure's cut-off.

    F1: ``-t`` for the F1-optimal threshold ``t`` on these rows (:func:`f1_threshold`, the
    plug-in rule of the selection, docs/solvers.md §Selection).

    The ``c`` highest scores get ``s + b > 0``: ``c = K`` for Prec@k
    (``K`` resolved on these ``n`` rows, as :func:`nsdist.metrics.precision_at_k`
    does), ``c = n+`` otherwise (the break-even cut of PRBEP, also used for
    pAUC and AUC, whose measures have no threshold of their own).  With the
    scores sorted decreasingly, ``b = -(s_(c) + s_(c+1)) / 2``; ``b = -s_(1) - 1``
    when ``c = 0``, ``b = 1 - s_(n)`` when ``c = n``.

    Parameters
    ----------
    measure : a measure name
    y : ndarray of shape (n,), labels in {-1, +1}
    s : ndarray of shape (n,), scores ``X @ w``
    k : Prec@k's ``k``
    """
    if learns_intercept(measure):
        return -f1_threshold(y, s)[1]
    n = s.shape[0]
    c = resolve_k(k, n) if measure == "prec@k" else int(np.count_nonzero(y > 0))
    desc = np.sort(np.asarray(s, dtype=np.float64))[::-1]
    if c == 0:
        return float(-desc[0] - 1.0)
    if c == n:
        return float(1.0 - desc[-1])
    return float(-(desc[c - 1] + desc[c]) / 2.0)
