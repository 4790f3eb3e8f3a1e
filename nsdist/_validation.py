"""Input checks shared by every layer (docs/measures.md §Labels).

Every function here either returns a clean array / number or raises a
``ValueError`` whose message says *what* is wrong and *where* (the argument
name, and the first offending position).
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

__all__ = ["as_pm1_labels", "check_scores", "check_matrix", "ceil9", "resolve_k", "check_beta"]


def ceil9(x: float) -> int:
    """``ceil`` of ``x`` after rounding to 9 decimals (docs/measures.md §Rounding: ``ceil(0.1 * 30) == 3``)."""
    return int(math.ceil(round(float(x), 9)))


def _show(v) -> str:
    """``repr`` of a numpy scalar as the plain Python value (``nan``, not ``np.float64(nan)``)."""
    return repr(v.item() if isinstance(v, np.generic) else v)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def as_pm1_labels(y, *, name: str = "y") -> np.ndarray:
    """Validate labels and map them to ``int8`` values in ``{-1, +1}``.

    Accepted encodings (docs/measures.md §Labels): ``{-1, +1}``, ``{0, 1}`` or bool; ``+1`` / ``1`` /
    ``True`` is the positive class.

    Raises
    ------
    ValueError
        If ``y`` is not 1-D, is empty, holds NaN/inf or any other value.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    if y.size == 0:
        raise ValueError(f"{name} is empty")
    if y.dtype == bool:
        return np.where(y, 1, -1).astype(np.int8)
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        if y.dtype.kind in "OUS":           # class names: say which, and how to say which one is positive
            names = sorted({str(v) for v in y[:10_000]})
            shown = ", ".join(repr(v) for v in names[:3]) + (", ..." if len(names) > 3 else "")
            raise ValueError(f"{name} holds class names ({shown}), not labels in {{-1,+1}}, {{0,1}} or bool: "
                             f"write the label as bool, e.g. {name} == {names[0]!r} for that class as the positive "
                             "one (data files: nsdist.train / evaluate / ingest take positive=)")
        raise ValueError(f"{name} must hold labels in {{-1,+1}}, {{0,1}} or bool; got dtype {y.dtype}")
    if np.issubdtype(y.dtype, np.floating) and not np.all(np.isfinite(y)):
        i = _first_bad(~np.isfinite(y))
        raise ValueError(f"{name}[{i}] = {_show(y[i])} is not a valid label (NaN/inf)")
    is_pos = y == 1
    if np.all(is_pos | (y == -1)):
        return np.where(is_pos, 1, -1).astype(np.int8)
    if np.all(is_pos | (y == 0)):
        return np.where(is_pos, 1, -1).astype(np.int8)
    bad = ~(is_pos | (y == -1) | (y == 0))
    if bad.any():
        i = _first_bad(bad)
        raise ValueError(f"{name}[{i}] = {_show(y[i])} is not a valid label; use {{-1,+1}}, {{0,1}} or bool")
    raise ValueError(f"{name} mixes the encodings {{-1,+1}} and {{0,1}} (it holds -1, 0 and 1)")


def check_scores(s, n: int, *, name: str = "s") -> np.ndarray:
    """Validate a 1-D finite score vector of length ``n``."""
    s = np.asarray(s)
    if s.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {s.shape}")
    if s.shape[0] != n:
        raise ValueError(f"{name} has {s.shape[0]} entries but the labels have {n}")
    if not (np.issubdtype(s.dtype, np.floating) or np.issubdtype(s.dtype, np.integer)) or s.dtype == bool:
        raise ValueError(f"{name} must be numeric, got dtype {s.dtype}")
    if np.issubdtype(s.dtype, np.floating):
        finite = np.isfinite(s)
        if not finite.all():
            i = _first_bad(~finite)
            raise ValueError(f"{name}[{i}] = {_show(s[i])} is not finite")
    return s


def check_matrix(X, *, name: str = "X") -> np.ndarray:
    """Validate a 2-D finite numeric feature matrix (dtype is kept for floats)."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.floating):
        if np.issubdtype(X.dtype, np.integer) or X.dtype == bool:
            X = X.astype(np.float64)
        else:
            raise ValueError(f"{name} must be numeric, got dtype {X.dtype}")
    finite = np.isfinite(X)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ValueError(f"{name}[{r}, {c}] = {_show(X[r, c])} is not finite (row {r}, feature {c})")
    return X


def check_beta(beta) -> float:
    """``beta`` must be a real number in (0, 1]."""
    if isinstance(beta, bool) or not isinstance(beta, Real) or not (0.0 < float(beta) <= 1.0):
        raise ValueError(f"beta must be a number in (0, 1], got {beta!r}")
    return float(beta)


def resolve_k(k, n: int) -> int:
    """Number of top items ``K`` for Prec@k (docs/measures.md §Precision at k).

    ``K = k`` for an integer ``1 <= k <= n``; ``K = ceil9(k * n)`` for a float in (0, 1].
    """
    if isinstance(k, bool):
        raise ValueError(f"k must be an int >= 1 or a float in (0, 1], got {k!r}")
    if isinstance(k, Integral):
        if not 1 <= int(k) <= n:
            raise ValueError(f"k = {k} is out of range: need 1 <= k <= n = {n}")
        return int(k)
    if isinstance(k, Real) and 0.0 < float(k) <= 1.0:
        return max(1, ceil9(float(k) * n))
    raise ValueError(f"k must be an int >= 1 or a float in (0, 1], got {k!r}")
