"""Compact feature names for wide models and datasets.

A model or dataset with 10^6 features must not carry 10^6 strings around (in
every Parquet footer, in every Dask task, in ``model.json``).  Generated names
``<prefix><start>, <prefix><start+1>, ...`` are therefore kept as a
:class:`NameRange`: a read-only sequence of strings of known length, stored in
JSON as ``{"prefix": "x", "start": 1, "n": d}``.  A list of names is still
accepted everywhere a :class:`NameRange` is.

Imports nothing from nsdist (both the data layer and the model use it).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["NameRange", "names_from_json", "names_to_json", "same_names"]


class NameRange(Sequence):
    """The names ``f"{prefix}{start + j}"`` for ``j = 0 .. n - 1`` (a sequence of str)."""

    __slots__ = ("prefix", "start", "n")

    def __init__(self, prefix: str, start: int, n: int):
        if not isinstance(prefix, str) or isinstance(start, bool) or not isinstance(start, int) \
                or isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"bad name range prefix={prefix!r} start={start!r} n={n!r}")
        self.prefix, self.start, self.n = prefix, int(start), int(n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self.n))]
        if j < 0:
            j += self.n
        if not 0 <= j < self.n:
            raise IndexError(j)
        return f"{self.prefix}{self.start + j}"

    def index(self, name: str, *args) -> int:  # O(1), unlike Sequence.index
        if isinstance(name, str) and name.startswith(self.prefix):
            tail = name[len(self.prefix):]
            if tail.isdigit() and (tail == "0" or not tail.startswith("0")):
                j = int(tail) - self.start
                if 0 <= j < self.n:
                    return j
        raise ValueError(f"{name!r} is not in the names")

    def __contains__(self, name) -> bool:
        try:
            self.index(name)
        except ValueError:
            return False
        return True

    def __eq__(self, other) -> bool:
        if isinstance(other, NameRange):
            return (self.n == other.n and (self.n == 0 or (self.prefix, self.start) == (other.prefix, other.start)))
        if isinstance(other, (list, tuple)):
            return len(other) == self.n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.prefix, self.start, self.n))

    def __repr__(self) -> str:
        if self.n == 0:
            return "NameRange([])"
        return f"NameRange({self[0]!r} .. {self[-1]!r}, n={self.n})"

    def __reduce__(self):
        return (NameRange, (self.prefix, self.start, self.n))

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "start": self.start, "n": self.n}


def names_to_json(names: Sequence[str]) -> list[str] | dict:
    """A list of names as a list; a :class:`NameRange` as its compact dict."""
    return names.to_json() if isinstance(names, NameRange) else list(names)


def names_from_json(obj: Any, n: int | None = None, where: str = "") -> Sequence[str]:
    """Inverse of :func:`names_to_json` (``n`` fills a dict without ``"n"``).

    Raises
    ------
    ValueError
        If ``obj`` is neither a list of strings nor a ``{"prefix", "start"}`` dict.
    """
    if isinstance(obj, dict):
        try:
            return NameRange(obj["prefix"], obj.get("start", 0), obj.get("n", n))
        except (KeyError, ValueError, TypeError):
            raise ValueError(f"{where}: feature_names {obj!r} must be a list of names or "
                             "{\"prefix\": str, \"start\": int, \"n\": int}") from None
    if isinstance(obj, (list, tuple)) and all(isinstance(s, str) for s in obj):
        return list(obj)
    raise ValueError(f"{where}: feature_names must be a list of strings or a name range")


def same_names(a: Sequence[str], b: Sequence[str]) -> bool:
    """``list(a) == list(b)`` without building lists of ranges."""
    if isinstance(a, NameRange):
        return a == b
    if isinstance(b, NameRange):
        return b == a
    return list(a) == list(b)
