"""The training history every solver keeps: one :class:`HistoryRecord` per step.

A step is an epoch for 1PMB/2PMB, a round for FTRL and an iteration for PSG
and CP.  What ``loss`` holds depends on the solver (each solver's docstring
says which rows and which iterate); ``measure`` is the validation measure of
the model the solver would return at that point, when validation data is given.
``time`` counts training seconds only: scoring the validation rows is not timed.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import numpy as np

__all__ = ["HistoryRecord", "History", "Recorder", "Validate"]

#: a validation hook: the measure of the model ``(w, b)`` on held-out rows
Validate = Callable[[np.ndarray, float], float]


@dataclass(frozen=True)
class HistoryRecord:
    """One point of a learning curve.

    Attributes
    ----------
    time : float
        Training seconds since the solver started (validation excluded).
    rows_seen : int
        Rows streamed (1PMB/2PMB, FTRL) or processed (PSG, CP: ``n`` per iteration).
    step : int
        Epoch ``e`` (1PMB/2PMB), round ``t`` (FTRL) or iteration (PSG, CP).
    loss : float
        The solver's surrogate loss at this step.
    measure : float or None
        The validation measure, if validation data was given.
    """

    time: float
    rows_seen: int
    step: int
    loss: float
    measure: float | None = None

    def to_dict(self) -> dict:
        """Plain JSON-able values."""
        return asdict(self)


class History(list):
    """A list of :class:`HistoryRecord`, convertible to plain data."""

    def to_dicts(self) -> list[dict]:
        return [r.to_dict() for r in self]

    def to_json(self) -> str:
        return json.dumps(self.to_dicts())

    @classmethod
    def from_dicts(cls, records: list[dict]) -> "History":
        return cls(HistoryRecord(**r) for r in records)

    def column(self, name: str) -> np.ndarray:
        """One field over all records, e.g. ``history.column("loss")``."""
        return np.array([getattr(r, name) for r in self], dtype=float)


class Recorder:
    """Appends records to a history, keeping the training clock.

    Parameters
    ----------
    validate : callable ``(w, b) -> float``, optional
        The validation measure of a model; called only when recording.
    history : History, optional
        History to extend (``partial_fit``); the clock resumes from its last time.
    """

    def __init__(self, validate: Validate | None = None,
                 history: History | None = None) -> None:
        self.validate = validate
        self.history = History() if history is None else history
        self._offset = self.history[-1].time if self.history else 0.0
        self._start = time.perf_counter()
        self._untimed = 0.0
        self._paused_at: float | None = None

    def elapsed(self) -> float:
        """Training seconds so far."""
        return self._offset + time.perf_counter() - self._start - self._untimed

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Work done inside is left off the training clock (validating, measuring on monitor rows)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._untimed += time.perf_counter() - t0

    def pause(self) -> None:
        """Stop the clock until :meth:`resume` (a fold fit waiting for the other folds at a check)."""
        self._paused_at = time.perf_counter()

    def resume(self) -> None:
        """Restart the clock stopped by :meth:`pause` (no-op if it runs)."""
        if self._paused_at is not None:
            self._untimed += time.perf_counter() - self._paused_at
            self._paused_at = None

    def record(self, step: int, rows_seen: int, loss: float,
               model: Callable[[], tuple[np.ndarray, float]] | None = None, *,
               at: float | None = None) -> HistoryRecord:
        """Append a record; ``model()`` gives the ``(w, b)`` to validate (called only if needed).

        ``at``: the record's training time, when it is not now (a step timed
        inside a longer call); default :meth:`elapsed`.
        """
        t = self.elapsed() if at is None else at
        measure = None
        if self.validate is not None:
            with self.untimed():
                measure = float(self.validate(*model()))
        rec = HistoryRecord(float(t), int(rows_seen), int(step), float(loss), measure)
        self.history.append(rec)
        return rec
