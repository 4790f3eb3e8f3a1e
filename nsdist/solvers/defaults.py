"""The fixed step scale of the batch and online baselines (PSG, FTRL).

1PMB and 2PMB choose their step size inside the fit (:mod:`nsdist.solvers.config`).
The baselines keep one fixed default each, a function of the measure and the
number of features ``d`` only:

* **PSG: eta = c / d**.  With standardised features ``||x||^2 ~ d`` and a
  first step moves the scores by about ``eta ||g||^2 ~ eta d``, so ``eta d`` is
  the scale-free quantity; ``c = 10`` for the pairwise surrogates (pAUC, AUC),
  ``c = 1000`` for the structural ones (Prec@k, PRBEP, F1), whose subgradient
  is non-zero on the misranked rows only.  These were chosen on the bundled data
  sets by an earlier sweep (in the history of ``bench/defaults.py``), so they
  are *not* claimed to generalise: pass ``eta`` for a baseline that matters.
* **FTRL eta = 1** (regulariser ``eta / (2 n_t)`` on the averaged loss, see
  :mod:`~nsdist.solvers.ftrl`): about CP's ``lambda = 1e-4`` after 10^4 rows.
"""
from __future__ import annotations

__all__ = ["default_eta"]

_STEP_SCALE = {"pauc": 10.0, "auc": 10.0, "prec@k": 1000.0, "prbep": 1000.0, "f1": 1000.0}


def default_eta(solver: str, measure: str, n_features: int) -> float:
    """The default ``eta`` of the baseline ``solver`` ("psg" or "ftrl") for ``measure`` on ``d`` features."""
    if solver == "ftrl":
        return 1.0
    return _STEP_SCALE[measure] / n_features
