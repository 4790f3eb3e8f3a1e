r"""The partial-AUC surrogate and its AUC special case (seed, eq. ``pauc_cvx``).

.. math::

    \ell_{\mathrm{pAUC}}(w) = \frac{1}{n_+ m} \sum_{i : y_i > 0} \sum_{j \in J(w)}
        \phi(w^\top x_i - w^\top x_j),
    \qquad m = \lceil \beta n_- \rceil,

where ``J(w)`` holds the ``m`` highest-scored negatives.  For a decreasing
``phi`` the sum over ``J(w)`` is the maximum over all ``m``-subsets of
negatives, so by Danskin's theorem (seed, appendix "Methodology") a subgradient
is the gradient of the pair sum with ``J`` held fixed at the maximiser.  Ties
among negatives at the cut give the same value for any choice of ``J``.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_beta
from ..metrics import n_top_negatives
from ._ranking import split_classes, top_indices
from .base import Loss
from .pairs import PAIR_SUMS, PAIR_SUMS_MANY

__all__ = ["PartialAUCLoss", "AUCLoss", "SURROGATES", "check_surrogate"]

#: valid values of ``surrogate``
SURROGATES = tuple(PAIR_SUMS)


def check_surrogate(surrogate) -> str:
    """``surrogate`` must name one of :data:`SURROGATES`."""
    if surrogate not in SURROGATES:
        valid = ", ".join(map(repr, SURROGATES))
        raise ValueError(f"unknown surrogate {surrogate!r}; valid: {valid}")
    return surrogate


class PartialAUCLoss(Loss):
    """Surrogate of ``1 - pAUC`` over the top ``beta`` fraction of negatives.

    Parameters
    ----------
    beta : float in (0, 1], default 0.1
        False-positive range ``[0, beta]``: the top ``m = ceil(beta * n-)`` negatives
        count (the same ``m`` as :func:`nsdist.metrics.partial_auc`).
    surrogate : {"hinge", "logistic", "squared_hinge", "sigmoid"}, default "hinge"
        ``phi(c) = max(0, 1 - c)``, ``log(1 + exp(-c))``, ``max(0, 1 - c)^2``, or
        the bounded, non-convex squared hinge on squashed scores
        (:func:`~nsdist.losses.pairs.sigmoid_pairs`).

    Notes
    -----
    Cost per call: a linear-time selection of ``J``, then for the hinge and
    the squared hinge O((n+ + m) log(n+ + m)) (no pair matrix); the logistic
    loss touches all ``n+ m`` pairs, in bounded memory.
    """

    name = "pauc"

    def __init__(self, beta: float = 0.1, surrogate: str = "hinge") -> None:
        self.beta = check_beta(beta)
        self.surrogate = check_surrogate(surrogate)

    def params(self) -> dict:
        return {"beta": self.beta, "surrogate": self.surrogate}

    @property
    def smooth(self) -> bool:  # type: ignore[override]
        """Every ``phi`` but the hinge is smooth (for ``beta < 1``, between changes of the top negatives)."""
        return self.surrogate != "hinge"

    @property
    def shift_invariant(self) -> bool:  # type: ignore[override]
        """A function of the score differences, except the squashed scores' ``sigma(s + b)`` (``"sigmoid"``)."""
        return self.surrogate != "sigmoid"

    def value_and_dscore(self, s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        s = np.asarray(s, dtype=np.float64)
        dscore = np.zeros(s.shape[0])
        pos, neg = split_classes(y)
        if pos.size == 0 or neg.size == 0:
            return 0.0, dscore
        m = n_top_negatives(self.beta, neg.size)
        top = neg[top_indices(s[neg], m)]
        value, dp, dq = PAIR_SUMS[self.surrogate](s[pos], s[top])
        scale = 1.0 / (pos.size * m)
        dscore[pos] = scale * dp
        dscore[top] = scale * dq
        return scale * value, dscore

    def value_and_dscore_many(self, S: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`value_and_dscore` of every column of ``S`` (n, M), vectorised over the columns."""
        S = np.asarray(S, dtype=np.float64)
        n, M = S.shape
        dscore = np.zeros((M, n))
        pos, neg = split_classes(y)
        if pos.size == 0 or neg.size == 0:
            return np.zeros(M), dscore.T
        SP = np.ascontiguousarray(S.take(pos, axis=0).T)
        SN = np.ascontiguousarray(S.take(neg, axis=0).T)
        m = n_top_negatives(self.beta, neg.size)
        scale = 1.0 / (pos.size * m)
        if m >= neg.size:
            value, DP, DQ = PAIR_SUMS_MANY[self.surrogate](SP, SN)
            dscore[:, neg] = scale * DQ
        else:
            r = np.arange(M)[:, None]
            top = SN.argpartition(neg.size - m, axis=1)[:, neg.size - m:]
            value, DP, DQ = PAIR_SUMS_MANY[self.surrogate](SP, SN[r, top])
            dscore[r, neg[top]] = scale * DQ
        dscore[:, pos] = scale * DP
        return scale * value, dscore.T


class AUCLoss(PartialAUCLoss):
    """Surrogate of ``1 - AUC``: :class:`PartialAUCLoss` with ``beta = 1`` (all negatives).

    Parameters
    ----------
    surrogate : {"hinge", "logistic", "squared_hinge", "sigmoid"}, default "hinge"
    """

    name = "auc"

    def __init__(self, surrogate: str = "hinge") -> None:
        super().__init__(beta=1.0, surrogate=surrogate)

    def params(self) -> dict:
        return {"surrogate": self.surrogate}
