"""The driver's progress bars: while a model trains (one tick per partition step, or per K-fold fit), while
``nsdist ingest`` converts its input (one tick per task of each of its three stages), and while ``nsdist predict``
scores a dataset on the cluster (one tick per file)."""
from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, TextIO

from tqdm import tqdm

from .engine.chain import ChainProgress

if TYPE_CHECKING:           # not at import: `nsdist train` draws its bar without loading the ingest
    from .data.ingestion import IngestProgress

__all__ = ["TrainingBar", "IngestBar", "FileBar", "progress_text"]


def progress_text(p: ChainProgress) -> str:
    """What a step says of the fit: the selection's best validation value and the candidates alive (before
    its first check: how many train), or the surrogate loss."""
    if p.best is not None:
        return f"best on validation {p.best:.4g}, {p.alive} alive"
    if p.alive is not None:
        return f"{p.alive} candidates, first check to come"
    return "loss " + ("-" if math.isnan(p.loss) else f"{p.loss:.4g}")


class _Bar:
    """What the bars share: where they draw (default ``sys.stderr``), drawn only on a terminal unless ``enabled``
    says otherwise, and the ``with`` block that closes them."""

    def __init__(self, file: TextIO | None = None, enabled: bool | None = None) -> None:
        self.file = file or sys.stderr
        self.enabled = self.file.isatty() if enabled is None else enabled
        self._bar: tqdm | None = None

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TrainingBar(_Bar):
    """A tqdm bar fed by :class:`~nsdist.engine.chain.ChainProgress` reports.

    It shows the pass, the partition, rows per second and, while a population
    is selected, the best validation value so far and the candidates alive, else
    the surrogate loss (the mean over the partition's epochs); for K-fold
    selection (``unit="check"``) the folds' checks, the best mean validation
    value and the candidates alive.  Use it as the
    ``on_step`` callback of :func:`nsdist.train`, inside a ``with`` block.

    Parameters
    ----------
    n_passes : int
        Passes over the data (for the ``pass p/P`` field).
    file : file object, optional
        Where to draw (default ``sys.stderr``).
    enabled : bool, optional
        ``None`` (default): draw only when ``file`` is a terminal.
    """

    def __init__(self, n_passes: int, *, file: TextIO | None = None, enabled: bool | None = None) -> None:
        super().__init__(file, enabled)
        self.n_passes = n_passes
        self._origin = (0, 0.0)

    def __call__(self, p: ChainProgress) -> None:
        if self._bar is None:
            # the first report of a resumed chain carries the rows of the earlier run
            self._origin = (0, 0.0) if p.step == 1 else (p.rows_seen, p.elapsed)
            self._bar = tqdm(total=p.n_steps, initial=p.step - 1, unit=p.unit,
                             desc="K-fold selection" if p.unit == "check" else "training",
                             file=self.file, disable=not self.enabled, dynamic_ncols=True)
        if p.unit == "check":          # the folds checked together: no partition, pass or loss to show
            self._bar.set_postfix_str(progress_text(p), refresh=False)
        else:
            rows, seconds = p.rows_seen - self._origin[0], p.elapsed - self._origin[1]
            rate = f"{rows / seconds:,.0f}" if seconds > 0 else "-"
            self._bar.set_postfix_str(f"pass {p.pass_index + 1}/{self.n_passes}, partition {p.partition}, "
                                      f"{rate} rows/s, {progress_text(p)}", refresh=False)
        self._bar.update(p.step - self._bar.n)


class IngestBar(_Bar):
    """A tqdm bar per stage of an ingest, fed by :class:`~nsdist.data.ingestion.IngestProgress` reports.

    ``ingest 1/3: reading``, ``2/3: shuffling``, ``3/3: writing``: the stage's tasks
    (chunks of the input; partitions written) out of its total (the first read of a
    text input counts them as it goes) and the rows they hold.  Use it as the
    ``on_progress`` callback of :func:`nsdist.ingest`, inside a ``with`` block.
    ``file`` and ``enabled`` as :class:`TrainingBar`'s.
    """

    LABELS = {"read": ("reading", "chunk"), "shuffle": ("shuffling", "chunk"), "write": ("writing", "partition")}

    def __init__(self, *, file: TextIO | None = None, enabled: bool | None = None) -> None:
        super().__init__(file, enabled)
        self._stage: str | None = None

    def __call__(self, p: IngestProgress) -> None:
        if p.stage != self._stage:
            self.close()
            label, unit = self.LABELS[p.stage]
            self._bar = tqdm(total=p.total, unit=unit, desc=f"ingest {p.stage_index}/3: {label}",
                             file=self.file, disable=not self.enabled, dynamic_ncols=True)
            self._stage = p.stage
        self._bar.set_postfix_str(f"{p.rows:,} rows", refresh=False)
        self._bar.update(p.done - self._bar.n)


class FileBar(_Bar):
    """A tqdm bar of the files that :func:`nsdist.predict` scores on the cluster: files done of the total and the
    rows they held.  Use it as its ``on_file`` callback, inside a ``with`` block; ``file`` and ``enabled`` as
    :class:`TrainingBar`'s."""

    def __call__(self, done: int, total: int, rows: int) -> None:
        if self._bar is None:
            self._bar = tqdm(total=total, unit="file", desc="scoring", file=self.file, disable=not self.enabled,
                             dynamic_ncols=True)
        self._bar.set_postfix_str(f"{rows:,} rows", refresh=False)
        self._bar.update(done - self._bar.n)
