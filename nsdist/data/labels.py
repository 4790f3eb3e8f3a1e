"""Mapping the label field of text files to the internal ``{-1, +1}`` encoding (docs/measures.md §Labels).

A :class:`LabelRule` turns label strings (already stripped of spaces and quotes)
into codes ``+1`` (positive), ``-1`` (negative) or ``0`` (row dropped).

- ``positive`` given: a label equal to one of the ``positive`` values is ``+1``.
  Equality is string equality, or numeric equality when both sides are numbers
  (``positive=1`` matches ``1``, ``1.0`` and ``'1'``). If ``negative`` is also
  given, labels equal to one of those values are ``-1`` and every other row is
  dropped (e.g. KDD Cup 99: R2L+U2R attacks against ``normal.`` only);
  otherwise every non-positive label is ``-1``.
- no ``positive``, ``default="sign"`` (svmlight): the label must be a number;
  ``> 0`` is positive.
- no ``positive``, ``default="binary"`` (CSV): the label must be ``1`` / ``true``
  (positive) or ``-1`` / ``0`` / ``false`` (negative), as in docs/measures.md §Labels.

An empty or NaN/inf label is always an error.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np
import pyarrow as pa

__all__ = ["LabelRule", "LabelValues", "clean_strings", "as_number"]

LabelValues = Union[str, int, float, Sequence[Union[str, int, float]], None]

_STRIP = " \t'\""
_INVALID = 2  # code of a label that fits no rule


def clean_strings(values: pa.Array) -> pa.Array:
    """Strip surrounding spaces, tabs and single/double quotes from every string."""
    import pyarrow.compute as pc      # not at import: a fresh worker of a numeric job never needs it (30 ms)

    return pc.utf8_trim(values, characters=_STRIP)


def as_number(text: str) -> float | None:
    """``float(text)``, or ``None`` if ``text`` is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def _normalise(values: LabelValues, name: str) -> tuple[str, ...] | None:
    if values is None:
        return None
    items = [values] if isinstance(values, (str, int, float)) else list(values)
    if not items:
        raise ValueError(f"{name} must name at least one label value")
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(f"{name} values must be strings or numbers, got {v!r}")
    return tuple(sorted({str(v).strip(_STRIP) for v in items}))


def _matcher(values: tuple[str, ...]) -> Callable[[str, float | None], bool]:
    texts = set(values)
    numbers = {x for x in map(as_number, values) if x is not None}
    return lambda text, number: text in texts or (number is not None and number in numbers)


@dataclass(frozen=True)
class LabelRule:
    """How label strings map to ``+1`` / ``-1`` / dropped (see the module docstring)."""

    positive: tuple[str, ...] | None = None
    negative: tuple[str, ...] | None = None
    default: Literal["sign", "binary"] = "binary"

    @classmethod
    def create(cls, positive: LabelValues = None, negative: LabelValues = None, *,
               default: Literal["sign", "binary"] = "binary") -> LabelRule:
        """Validate user options and build a rule.

        Raises
        ------
        ValueError
            If a value is not a string or number, a list is empty, ``negative``
            is given without ``positive``, or a value is both positive and negative.
        """
        pos, neg = _normalise(positive, "positive"), _normalise(negative, "negative")
        if neg is not None and pos is None:
            raise ValueError("negative= needs positive= (which labels are positive?)")
        if pos is not None and neg is not None:
            both = [v for v in neg if _matcher(pos)(v, as_number(v))]
            if both:
                raise ValueError(f"label value(s) {both} are listed as both positive and negative")
        return cls(pos, neg, default)

    def describe(self) -> dict:
        """JSON-ready description recorded in dataset metadata."""
        if self.positive is None:
            rule = ("a numeric label > 0 is positive, any other number negative" if self.default == "sign"
                    else "label 1/true is positive, -1/0/false negative")
            return {"positive": None, "negative": None, "rule": rule}
        rule = ("other labels are dropped" if self.negative is not None
                else "every other label is negative")
        return {"positive": list(self.positive), "negative": None if self.negative is None
                else list(self.negative), "rule": rule}

    def _code(self, text: str) -> tuple[int, str | None]:
        """Code of one label string, and its negative form (binary default only)."""
        number = as_number(text)
        if not text or (number is not None and not math.isfinite(number)):
            return _INVALID, None
        if self.positive is not None:
            if _matcher(self.positive)(text, number):
                return 1, None
            if self.negative is None or _matcher(self.negative)(text, number):
                return -1, None
            return 0, None
        if self.default == "sign":
            return (_INVALID, None) if number is None else (1 if number > 0 else -1, None)
        lowered = text.lower()
        if number == 1 or lowered == "true":
            return 1, None
        if number in (0.0, -1.0) or lowered == "false":
            return -1, "false" if lowered == "false" else str(int(number))
        return _INVALID, None

    def classify(self, labels: pa.Array, where: Callable[[int], str]
                 ) -> tuple[np.ndarray, dict[str, int]]:
        """Map cleaned label strings to ``int8`` codes ``+1`` / ``-1`` / ``0`` (drop).

        Parameters
        ----------
        labels : pyarrow.Array of strings (cleaned with :func:`clean_strings`).
        where : callable giving the location of row ``i`` for messages
            (e.g. ``"file.csv: line 12"``).

        Returns
        -------
        codes : ndarray of int8
        negative_forms : dict
            For the binary default: each negative encoding seen (``"-1"``, ``"0"``,
            ``"false"``) and the first row index using it, so that callers can
            reject files that mix encodings (docs/measures.md §Labels). Empty otherwise.

        Raises
        ------
        ValueError
            Naming ``where(i)`` and the value of the first invalid label.
        """
        encoded = labels.dictionary_encode()
        values = encoded.dictionary.to_pylist()
        codes_forms = [self._code(v) for v in values]
        lookup = np.array([c for c, _ in codes_forms], dtype=np.int8)
        index = encoded.indices.to_numpy(zero_copy_only=False)
        codes = lookup[index]
        bad = np.flatnonzero(codes == _INVALID)
        if bad.size:
            i = int(bad[0])
            hint = ("use 1 for positive and -1 or 0 for negative, or pass positive= to name the "
                    "positive label(s)" if self.default == "binary" else "labels must be finite numbers")
            value = labels[i].as_py()
            what = "is missing" if not value else f"{value!r} is not valid"
            raise ValueError(f"{where(i)}: label {what}; {hint}")
        forms = {form: int(np.argmax(index == k)) for k, (_, form) in enumerate(codes_forms)
                 if form is not None}
        return codes, forms
