"""Surrogate losses (docs/surrogates.md): ``nsdist.losses.get(name, **params)``.

========== ===================== ====================================================
name       parameters            surrogate of
========== ===================== ====================================================
"pauc"     beta=0.1,             ``1 - pAUC(beta)`` (:class:`PartialAUCLoss`)
           surrogate="hinge"
"auc"      surrogate="hinge"     ``1 - AUC`` (:class:`AUCLoss`, pAUC with beta 1)
"prec@k"   k (required)          ``1 - Prec@k`` (:class:`PrecisionAtKLoss`)
"prbep"    --                    ``1 - PRBEP`` (:class:`PRBEPLoss`)
"f1"       --                    ``1 - F1`` (:class:`F1Loss`)
"logloss"  --                    a ranking (:class:`LogLoss`, logistic regression's)
========== ===================== ====================================================
"""
from __future__ import annotations

import inspect

from .base import Loss
from .pauc import SURROGATES, AUCLoss, PartialAUCLoss
from .pointwise import LogLoss
from .structural import F1Loss, PrecisionAtKLoss, PRBEPLoss

__all__ = [
    "get", "NAMES", "SURROGATES", "Loss",
    "PartialAUCLoss", "AUCLoss", "PrecisionAtKLoss", "PRBEPLoss", "F1Loss", "LogLoss",
]

_LOSSES: dict[str, type[Loss]] = {
    cls.name: cls for cls in (PartialAUCLoss, AUCLoss, PrecisionAtKLoss, PRBEPLoss, F1Loss, LogLoss)
}

#: valid loss names for :func:`get`
NAMES = tuple(_LOSSES)


def get(name: str, **params) -> Loss:
    """The surrogate loss called ``name``, built with ``params``.

    Parameters
    ----------
    name : {"pauc", "auc", "prec@k", "prbep", "f1"}
    **params
        The loss's parameters (see the table above).

    Returns
    -------
    Loss

    Raises
    ------
    ValueError
        For an unknown name, an unknown or missing parameter, or a bad value;
        the message names it and lists the valid choices.
    """
    if not isinstance(name, str) or name not in _LOSSES:
        raise ValueError(f"unknown loss {name!r}; valid: {', '.join(map(repr, NAMES))}")
    signature = inspect.signature(_LOSSES[name])
    valid = ", ".join(map(repr, signature.parameters)) or "none"
    for param in params:
        if param not in signature.parameters:
            raise ValueError(f"unknown parameter {param!r} for loss {name!r}; valid parameters: {valid}")
    for param, spec in signature.parameters.items():
        if spec.default is inspect.Parameter.empty and param not in params:
            raise ValueError(f"loss {name!r} needs the parameter {param!r}")
    return _LOSSES[name](**params)
