"""What a run leaves in its output directory, and how measures are shown.

A training run directory holds::

    model/              the model (see :mod:`nsdist.model`)
    job.yaml            the resolved job (defaults and --set applied); rerun or
                        resume with ``nsdist train <dir>/job.yaml [--resume]``
    metrics.json        every measure on the evaluation data, training time,
                        rows/s, dataset and model information
    learning_curve.png  the evaluation measure of the averaged model after each
                        partition against training time, and the surrogate loss
    run.log             what happened: cluster, dataset, passes, skipped epochs,
                        checkpoints, timings
    checkpoint.json     the driver checkpoint (``--resume``)

Every file is written atomically (temporary file + rename; one ``PUT`` on
object stores) with the storage options of the run directory.  No secret
reaches these files: ``storage_options`` in ``job.yaml`` are redacted
(``<redacted>``), and any secret value the process has seen is scrubbed from
every text written (see :func:`nsdist.data.fs.scrub`).
"""
from __future__ import annotations

import io
import json
import logging
import math
from typing import Any

import numpy as np
import yaml

from . import __version__
from .solvers.measure import MEASURES, RESULT_KEYS, all_measures
from .data.fs import atomic_write_bytes, read_bytes, redact_job, scrub

__all__ = ["RunDir", "RunLog", "MEASURE_KEYS", "measure_label", "measures_table", "measures_of", "curve_png",
           "folds_curve_png", "to_json"]

#: the key of each measure in :func:`nsdist.evaluate`'s result (the measure table's)
MEASURE_KEYS = RESULT_KEYS
_COLUMNS = tuple(MEASURE_KEYS.values())
_BY_KEY = {m.result_key: m for m in MEASURES.values()}


def measure_label(key: str, *, beta: float | None = None, k: int | float | None = None) -> str:
    """A short title for a result key (``partial_auc`` with ``beta=0.1`` -> ``pAUC(0,0.1)``)."""
    return _BY_KEY[key].title(beta=beta, k=k)


def name_list(names: list[str], limit: int = 8) -> str:
    """``a, b, c``, or the first ``limit`` names and how many there are in all."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def measures_table(results: dict[str, dict], extra: dict[str, dict[str, str]] | None = None) -> str:
    """A plain-text table: one row per named result of :func:`nsdist.evaluate`.

    ``extra`` adds columns (e.g. training time) as already formatted strings.
    """
    extra = extra or {}
    first = next(iter(results.values()))
    titles = [measure_label(key, beta=first.get("beta"), k=first.get("k")) for key in _COLUMNS]
    extra_titles = list(dict.fromkeys(title for row in extra.values() for title in row))
    width = max(len(name) for name in results) + 2
    header = "".ljust(width) + "".join(f"{t:>14}" for t in titles + extra_titles)
    lines = [header, "-" * len(header)]
    for name, res in results.items():
        cells = [f"{res[key]:14.4f}" for key in _COLUMNS]
        cells += [f"{extra.get(name, {}).get(t, ''):>14}" for t in extra_titles]
        lines.append(name.ljust(width) + "".join(cells))
    return "\n".join(lines)


def measures_of(y, s, *, beta: float, k: int | float, threshold: float = 0.0) -> dict:
    """Every measure of scores ``s`` on labels ``y`` in memory, keyed as :func:`nsdist.evaluate` keys them."""
    return {**all_measures(y, s, beta=beta, k=k, threshold=threshold), "n_rows": int(len(y)),
            "n_positives": int(np.sum(np.asarray(y) > 0)), "beta": beta, "k": k}


def to_json(obj: Any) -> bytes:
    """Strict JSON (non-finite floats as ``null``), indented."""
    return json.dumps(_finite(obj), indent=2, allow_nan=False).encode()


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _finite(obj.item())
    return obj


def curve_png(history: dict, *, measure: str, title: str, monitor: str | None = None) -> bytes:
    """The learning curve of a streamed training run as PNG bytes.

    Top panel, against training time (as in the figures of Kar et al. 2014):
    the measure recorded at the partitions after which the selection checked
    the candidates -- the best validation value so far -- and, where the run
    had ``monitor=`` rows (``nsdist train``: a sample of the evaluation data),
    the measure on them of the model the run would have returned there.  Bottom
    panel: for one candidate, the mean surrogate loss of each partition's
    epochs; for a population, the candidates still alive at each check (the
    per-epoch loss of a population averages different surrogates, diverging
    ones among them, and says nothing).  Dotted lines mark the start of each
    pass.  The plotted points are stored in the PNG's ``nsdist-curve`` text
    chunk as JSON (``time``, ``measure``, ``monitor`` if any, and ``loss`` or
    ``alive``).

    Parameters
    ----------
    history : dict
        ``LinearModel.history`` with a ``curve`` list.
    measure : str
        Legend of the validation line (``"best pAUC(0,0.1) on the validation rows"`` ...).
    title : str
    monitor : str, optional
        Legend of the monitor line (``"pAUC(0,0.1) on 6,000 test rows"``).
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    curve = history["curve"]
    population = len(history.get("selection") or ()) > 1
    below = "alive" if population else "loss"
    data = {"time": [p["time"] for p in curve],
            "measure": [p.get("measure") for p in curve],
            below: [p.get(below) for p in curve]}
    if any(p.get("monitor") is not None for p in curve):
        data["monitor"] = [p.get("monitor") for p in curve]
    fig = Figure(figsize=(7, 6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    lines = [(key, label, color) for key, label, color in (("measure", measure, "C0"), ("monitor", monitor, "C2"))
             if any(v is not None for v in data.get(key, ()))]
    for key, label, color in lines:     # a series recorded at some points: drawn through them
        points = [(t, v) for t, v in zip(data["time"], data[key]) if v is not None]
        top.plot([t for t, _ in points], [v for _, v in points], marker=".", color=color, label=label)
    if not lines:
        top.text(0.5, 0.5, f"{measure}: not evaluated while training", ha="center", va="center",
                 transform=top.transAxes)
    elif len(lines) > 1:
        top.legend(loc="lower right", fontsize="small")
    if len(lines) < 2:
        top.set_ylabel(lines[0][1] if lines else measure)
    top.set_title(title)
    if population:
        checked = [(t, a) for t, a in zip(data["time"], data["alive"]) if a is not None]
        bottom.plot([t for t, _ in checked], [a for _, a in checked], marker=".", color="C1", drawstyle="steps-post")
        bottom.set_ylabel("live candidates")
    else:
        bottom.plot(data["time"], [math.nan if v is None else v for v in data["loss"]], marker=".", color="C1")
        bottom.set_ylabel("surrogate loss")
    bottom.set_xlabel("training time (s)")
    pass_starts = [p["time"] for prev, p in zip(curve, curve[1:]) if p["pass"] != prev["pass"]]
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
        for start in pass_starts:
            axis.axvline(start, color="0.6", linestyle=":", linewidth=1)
    return _png(fig, title, data)


def folds_curve_png(history: dict, *, measure: str, title: str, monitor: str | None = None) -> bytes:
    """The learning curve of a K-fold selection (``history["folds"]``) as PNG bytes.

    No partition streams: each fold trains the population on its own.  Top
    panel, against each fold's training time (its steps for a history
    without times): each fold's best validation measure so far (solid) and,
    where the run had ``monitor=`` rows, the measure on them of that fold's
    winner so far (dashed), with the returned model -- the mean of the
    winner's fold models -- as a star after the last check.  Bottom panel: the
    candidates still alive (successive halving, early stopping).  The plotted
    points are stored in the PNG's ``nsdist-curve`` text chunk as JSON
    (``fold``, ``epoch``, ``best``, ``alive``, and ``time``, ``monitor``,
    ``returned`` where recorded).

    Parameters
    ----------
    history : dict
        ``LinearModel.history`` with ``folds`` and the folds' ``validation_curve``.
    measure : str
        Legend (axis label) of the validation lines.
    title : str
    monitor : str, optional
        Legend of the monitor lines (``"pAUC(0,0.1) on 6,000 test rows"``).
    """
    from matplotlib.figure import Figure

    curve = history["validation_curve"]
    timed = all("time" in p for p in curve)
    x_key = "time" if timed else "epoch"
    data = {key: [p[key] for p in curve] for key in ("fold", "epoch", "best", "alive")}
    if timed:
        data["time"] = [p["time"] for p in curve]
    watched = monitor is not None and any(p.get("monitor") is not None for p in curve)
    if watched:
        data["monitor"] = [p.get("monitor") for p in curve]
        data["returned"] = history.get("monitor_returned")
    fig = Figure(figsize=(7, 6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    for f in range(history["folds"]):
        points = [p for p in curve if p["fold"] == f]
        xs = [p[x_key] for p in points]
        top.plot(xs, [p["best"] for p in points], marker=".", color=f"C{f}")
        if watched:
            shown = [(x, p["monitor"]) for x, p in zip(xs, points) if p.get("monitor") is not None]
            top.plot([x for x, _ in shown], [v for _, v in shown], linestyle="--", color=f"C{f}")
        bottom.plot(xs, [p["alive"] for p in points], marker=".", color=f"C{f}", label=f"fold {f + 1}")
    if watched:
        from matplotlib.lines import Line2D
        handles = [Line2D([], [], color="0.3", marker=".", label=measure),
                   Line2D([], [], color="0.3", linestyle="--", label=f"the fold's winner so far: {monitor}")]
        if data["returned"] is not None:
            end = max(p[x_key] for p in curve)
            top.plot([end], [data["returned"]], marker="*", markersize=12, color="k", linestyle="none")
            handles.append(Line2D([], [], color="k", marker="*", markersize=10, linestyle="none",
                                  label=f"returned model (the folds' mean): {data['returned']:.4f}"))
        top.legend(handles=handles, loc="best", fontsize="small")
    else:
        top.set_ylabel(measure)
    top.set_title(title)
    bottom.legend(loc="upper right", ncols=min(5, history["folds"]))   # where the halving leaves room
    bottom.set_ylabel("live candidates")
    bottom.set_xlabel("each fold's training time (s)" if timed else "training steps (epochs)")
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
    return _png(fig, title, data)


def _png(fig, title: str, data: dict) -> bytes:
    """``fig`` as PNG bytes, its plotted ``data`` in the ``nsdist-curve`` text chunk."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100,
                metadata={"Title": title, "Software": f"nsdist {__version__}",
                          "nsdist-curve": json.dumps(_finite(data))})
    return buf.getvalue()


class RunLog(logging.Handler):
    """Collects log records of a run and saves them, whole, to ``run.log`` (atomically).

    With ``append`` (a resumed run), the lines already in the file are kept
    above the new ones.  Secrets are scrubbed from every line.
    """

    def __init__(self, url: str, *, append: bool = False, storage_options: dict | None = None) -> None:
        super().__init__(logging.INFO)
        self.url = url
        self.storage_options = storage_options
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%Y-%m-%d %H:%M:%S"))
        self.lines: list[str] = []
        if append:
            try:
                self.lines = read_bytes(url, storage_options).decode("utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                pass

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(scrub(self.format(record)))

    def save(self) -> None:
        atomic_write_bytes(self.url, scrub("\n".join(self.lines) + "\n").encode(), self.storage_options)


class RunDir:
    """The files of one run directory (a local path or an fsspec URL, with its fsspec ``storage_options``)."""

    def __init__(self, url: str, storage_options: dict | None = None) -> None:
        self.url = url.rstrip("/")
        self.storage_options = storage_options or None

    def path(self, name: str) -> str:
        return f"{self.url}/{name}"

    @property
    def model(self) -> str:
        return self.path("model")

    @property
    def checkpoint(self) -> str:
        return self.path("checkpoint.json")

    def write_json(self, name: str, obj: Any) -> str:
        """Write ``obj`` as strict JSON (secret values scrubbed)."""
        self.write_bytes(name, scrub(to_json(obj).decode()).encode())
        return self.path(name)

    def write_yaml(self, name: str, obj: Any) -> str:
        """Write ``obj`` (a job) as YAML, its ``storage_options`` redacted and secret values scrubbed."""
        self.write_bytes(name, scrub(yaml.safe_dump(redact_job(obj), sort_keys=False)).encode())
        return self.path(name)

    def write_bytes(self, name: str, data: bytes) -> str:
        atomic_write_bytes(self.path(name), data, self.storage_options)
        return self.path(name)

    def read_bytes(self, name: str) -> bytes:
        """The content of the file ``name`` (``FileNotFoundError`` if there is none)."""
        return read_bytes(self.path(name), self.storage_options)

    def log(self, *, append: bool = False) -> RunLog:
        return RunLog(self.path("run.log"), append=append, storage_options=self.storage_options)
