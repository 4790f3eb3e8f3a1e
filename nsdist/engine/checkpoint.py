"""Driver checkpoints: resume a killed training job where it stopped (docs/engine.md §Checkpoints).

A checkpoint is one JSON document, replaced atomically, holding the model
state (iterate, running sums, epoch counter), the chain's cursor (the next
step of the schedule: pass and position), 2PMB's reservoir, the per-epoch
history and the learning curve so far, and the job's identity (dataset fingerprint and a token of the
training configuration).  The stream order needs no random-generator state:
it is a pure function of ``(random_state, pass, partition)``
(:mod:`nsdist.solvers.order`), so resuming from step ``i`` replays exactly the
uninterrupted run.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import numpy as np

from ..data.fs import atomic_write_bytes, read_bytes
from ..solvers.kernel import EPOCH_STATS, SGDState
from .reservoir import Reservoir

__all__ = ["Checkpoint", "Checkpointer"]

_FORMAT = 2

log = logging.getLogger("nsdist.engine")


@dataclass
class Checkpoint:
    """Everything needed to continue a chain from step ``position``."""

    job: str
    dataset_fingerprint: str
    position: int
    n_steps: int
    state: SGDState
    reservoir: Reservoir | None
    stats: np.ndarray
    elapsed: float
    selection: dict | None = None
    #: the job's learning curve up to ``position`` (one point per step, as ``history["curve"]``); None in a
    #: checkpoint written before it was kept: the resumed job's curve then starts at ``position``
    curve: list[dict] | None = None

    def to_json(self) -> bytes:
        return json.dumps({
            "format": _FORMAT, "job": self.job, "dataset_fingerprint": self.dataset_fingerprint,
            "position": self.position, "n_steps": self.n_steps, "state": self.state.to_dict(),
            "reservoir": None if self.reservoir is None else self.reservoir.to_dict(),
            "stats": {name: self.stats[name].tolist() for name in EPOCH_STATS.names},
            "elapsed": self.elapsed, "selection": self.selection, "curve": self.curve,
        }).encode()

    @classmethod
    def load(cls, url: str, *, job: str, dataset_fingerprint: str, dtype: str = "float64",
             storage_options: dict | None = None) -> "Checkpoint":
        """Read a checkpoint (with the ``storage_options`` of its URL), refusing one of another job or dataset."""
        try:
            d = json.loads(read_bytes(url, storage_options))
            if d.get("format") != _FORMAT:
                raise ValueError(f"unknown checkpoint format {d.get('format')!r}")
        except FileNotFoundError:
            raise ValueError(f"no checkpoint at {url} to resume from") from None
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
            raise ValueError(f"checkpoint {url} is truncated or corrupt ({exc})") from None
        if d["dataset_fingerprint"] != dataset_fingerprint:
            raise ValueError(f"checkpoint {url} was written for another dataset "
                             f"(fingerprint {d['dataset_fingerprint'][:12]}, this one {dataset_fingerprint[:12]}); "
                             "refusing to resume")
        if d["job"] != job:
            raise ValueError(f"checkpoint {url} was written by a job with other training parameters; "
                             "refusing to resume (start without --resume, or use the original parameters)")
        stats = np.zeros(len(d["stats"]["epoch"]), dtype=EPOCH_STATS)
        for name in EPOCH_STATS.names:
            stats[name] = d["stats"][name]
        return cls(job=d["job"], dataset_fingerprint=d["dataset_fingerprint"], position=int(d["position"]),
                   n_steps=int(d["n_steps"]), state=SGDState.from_dict(d["state"]),
                   reservoir=None if d["reservoir"] is None else Reservoir.from_dict(d["reservoir"], dtype),
                   stats=stats, elapsed=float(d["elapsed"]), selection=d.get("selection"), curve=d.get("curve"))


@dataclass
class Checkpointer:
    """Write a checkpoint every ``every_steps`` steps or ``every_seconds`` seconds."""

    url: str
    job: str
    dataset_fingerprint: str
    every_steps: int = 10
    every_seconds: float = 60.0
    storage_options: dict | None = None

    def __post_init__(self) -> None:
        self._last_step, self._last_time = 0, time.monotonic()

    def due(self, step: int) -> bool:
        return (step - self._last_step >= self.every_steps
                or time.monotonic() - self._last_time >= self.every_seconds)

    def write(self, ckpt: Checkpoint) -> None:
        atomic_write_bytes(self.url, ckpt.to_json(), self.storage_options)
        self._last_step, self._last_time = ckpt.position, time.monotonic()
        log.info("checkpoint written to %s at step %d of %d", self.url, ckpt.position, ckpt.n_steps)
