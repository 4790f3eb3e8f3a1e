"""Default hyper-parameters, as functions of what is known before training.

The defaults need nothing but the measure and the number of features ``d``,
so the Dask engine resolves them exactly as the in-memory estimator does.
They were chosen by ``bench/defaults.py`` on the six bundled data sets with
standardised features (70/30 splits, 5 seeds; ``bench/results/defaults.md``):

* **eta = c / d** (1PMB, 2PMB, PSG).  With standardised features
  ``||x||^2 ~ d`` and a first step moves the scores by about
  ``eta ||g||^2 ~ eta d``, so ``eta d`` is the scale-free quantity; the best
  ``c`` was the same from ``d = 6`` to ``d = 1617``.  ``c = 10`` for the
  pairwise surrogates (pAUC, AUC), ``c = 1000`` for the structural ones
  (Prec@k, PRBEP, F1): their subgradient ``(1/n) sum (ybar_i - y_i) x_i`` is
  non-zero only on the misranked rows, and their scores must reach the order
  of ``n / n+`` to compete with ``Delta``, both about two orders of magnitude
  from the pairwise hinge with margin 1.
* **n_passes = 10**: 10 passes beat 5 on every measure family (mean gain over
  logistic regression); 20 helped the structural measures a little more and
  pAUC not at all, at twice the cost.
* **FTRL eta = 1** (regulariser ``eta / (2 n_t)`` on the averaged loss, see
  :mod:`~nsdist.solvers.ftrl`): about CP's ``lambda = 1e-4`` after 10^4 rows.
* **buffer_size = 500**, the seed's setting.
"""
from __future__ import annotations

__all__ = ["BUFFER_SIZE", "N_PASSES", "default_eta"]

#: epoch length / buffer size ``s`` (the seed's experiments use 500)
BUFFER_SIZE = 500

#: passes of 1PMB/2PMB over the data
N_PASSES = 10

_STEP_SCALE = {"pauc": 10.0, "auc": 10.0, "prec@k": 1000.0, "prbep": 1000.0, "f1": 1000.0}


def default_eta(solver: str, measure: str, n_features: int) -> float:
    """The default ``eta`` of ``solver`` for ``measure`` and ``d = n_features`` standardised features.

    ``c / d`` with ``c = 10`` (pauc, auc) or ``1000`` (prec@k, prbep, f1) for
    the step scale of 1PMB, 2PMB and PSG; ``1`` for FTRL's regulariser (CP
    does not use ``eta``).
    """
    if solver == "ftrl":
        return 1.0
    return _STEP_SCALE[measure] / n_features
