"""Scheduled retraining (``nsdist retrain JOB``): new partitions in, a better model out, or none.

A retrain job file has the sections of a training job (:mod:`nsdist.jobs`):
``dataset`` (``url`` is the directory into which partitions arrive, e.g.
hive-style ``date=2026-11-25/part-0.parquet``), ``measure``, ``solver``,
``cluster``, and ``output.dir``, which is the model registry
(:mod:`nsdist.registry`); plus a ``retrain`` section (:class:`RetrainSpec`).

One run:

1. List the partitions (path, size, ETag or mtime) and compare them with the
   manifest of the registry's newest version: partitions not seen before, or
   changed since, are *new*.  None: nothing is written (``no_new_data``).
2. Take the registry's lock.  Another run holds it: exit 75, nothing written.
3. Hold out the newest ``holdout_partitions`` *fresh* partitions (path order;
   hive dates sort chronologically): new paths, or paths held out by the last
   run (*pending*).  A partition rewritten (or only touched) under a path seen
   before is new and trained on, but never held out, since a model may have
   trained on its earlier contents; when every new partition is such a one,
   the run waits for a fresh one (``no_new_data``).  Neither model has seen the
   held-out partitions, so they are a fair, deterministic exam; they are
   trained on at the next run (*pending*).
4. Train the candidate as ``nsdist train`` would train on the same job
   (``dataset.standardize`` included), warm-started from the current model
   (``warm_start``), on the pending and the other new partitions, or, with
   ``window_partitions`` / ``window_days``, on the newest partitions of the
   whole dataset except the held-out ones.
5. Score the candidate and the current model on the held-out partitions by the
   candidate's measure.  The candidate is promoted if it is worse by at most
   ``tolerance`` (absolute), else refused; with no current model it is promoted.
6. Commit the version (``model/``, ``manifest.json``, ``run.log``, then
   ``metrics.json``) and, if promoted, point ``CURRENT`` at it.

Every outcome is a JSON summary (printed, and written to ``--summary``) whose
``status`` is ``promoted``, ``refused`` or ``no_new_data`` (exit 0),
``locked`` (exit 75) or ``error`` (exit 1; 2 for a bad job file).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import logging
import posixpath
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import __version__
from ._signals import TERMINATED_STATUS, Terminated, terminate_as_interrupt
from .data import DataNotFoundError
from .data.fs import atomic_write_bytes, display, resolve, scrub
from .jobs import JobError, TrainJob, apply_overrides, job_from_dict, parse_overrides, parse_storage_options, \
    read_job_file, with_storage_options
from .model import LinearModel, load_model
from .registry import LockHeld, Registry
from .report import MEASURE_KEYS, to_json

__all__ = ["RetrainSpec", "RetrainJob", "Plan", "load_retrain_job", "plan", "run_retrain", "add_arguments",
           "run", "main", "EXIT_LOCKED"]

log = logging.getLogger("nsdist.retrain")

#: exit code when another run holds the registry's lock (``EX_TEMPFAIL``: try again later)
EXIT_LOCKED = 75


class RetrainSpec(BaseModel):
    """The ``retrain`` section of a retrain job file."""

    model_config = ConfigDict(extra="forbid")

    holdout_partitions: int = Field(1, ge=1, description="newest new partitions held out to compare the models")
    window_partitions: int | None = Field(None, ge=1, description="train on the newest N partitions "
                                          "(None: on the new and pending ones)")
    window_days: int | None = Field(None, ge=1, description="train on the partitions of the newest N days "
                                    "(hive key date_key=YYYY-MM-DD)")
    date_key: str = Field("date", description="hive key holding a partition's date, for window_days")
    tolerance: float = Field(0.005, ge=0, description="promote unless the candidate is worse by more than this")
    warm_start: bool = Field(True, description="start the candidate from the current model's weights "
                             "(1pmb/2pmb; other solvers train from zero)")
    initial_model: str | None = Field(None, description="model adopted as v0001 when the registry is empty "
                                      "(it counts as trained on every partition present)")
    lock_stale_hours: float | None = Field(24.0, gt=0, description="a lock older than this is stale")

    @model_validator(mode="after")
    def _one_window(self) -> "RetrainSpec":
        if self.window_partitions is not None and self.window_days is not None:
            raise ValueError("give window_partitions or window_days, not both")
        return self


@dataclass
class RetrainJob:
    """A validated retrain job: the training sections and the ``retrain`` section."""

    job: TrainJob
    retrain: RetrainSpec

    @property
    def registry(self) -> Registry:
        """The model registry at ``output.dir``, opened with the output's storage options.

        Those are ``output.storage_options`` (else the dataset's) merged over the
        job's top-level ``storage_options`` (see :meth:`TrainJob.output_options`).
        """
        return Registry(self.job.output.dir, self.job.output_options() or None)


def load_retrain_job(path: str, overrides: Sequence[str] = (), storage_options: dict | None = None) -> RetrainJob:
    """Read, override (``KEY.PATH=VALUE``) and validate a retrain job file.

    ``path`` may be an fsspec URL; ``storage_options`` (``--storage-options``)
    are used to read it and merged over the job's top-level ``storage_options``.

    Raises
    ------
    JobError
        One line per problem, naming the key path.
    """
    source = path + (" with --set" if overrides else "")
    raw = read_job_file(path, "a retrain job is a mapping of sections (dataset, measure, solver, cluster, "
                              "output, retrain)", storage_options)
    raw = with_storage_options(apply_overrides(raw, parse_overrides(overrides), source), storage_options)
    section = raw.pop("retrain", None) or {}
    job = job_from_dict(raw, source)
    if job.dataset.test_url is not None or job.dataset.holdout is not None:
        raise JobError(source, ["dataset.test_url / dataset.holdout: not used by retrain, which holds out "
                                "the newest new partitions (retrain.holdout_partitions)"])
    try:
        spec = RetrainSpec.model_validate(section)
    except ValidationError as exc:
        raise JobError(source, [_problem(err) for err in exc.errors(include_url=False)]) from None
    return RetrainJob(job, spec)


def _problem(err: dict) -> str:
    where = ".".join(["retrain", *map(str, err["loc"])])
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key (valid keys: {', '.join(RetrainSpec.model_fields)})"
    return f"{where}: {err['msg'].removeprefix('Value error, ')}"


# ------------------------------------------------------------------ planning
@dataclass
class Plan:
    """What a run does, worked out from the listing and the registry's manifest.

    Attributes
    ----------
    new : list of str
        Partitions (paths relative to the dataset root) not seen before or changed.
    holdout, train : list of str
        The partitions the models are compared on, and the candidate trains on.
    manifest : dict
        The manifest after the run: ``seen`` (path -> identity) and ``pending``.
    """

    new: list[str]
    holdout: list[str]
    train: list[str]
    manifest: dict


def plan(listing: dict[str, dict], manifest: dict, spec: RetrainSpec) -> Plan:
    """Split the dataset's partitions for one run (pure: no I/O).

    Parameters
    ----------
    listing : dict
        Relative path -> identity (size, tag) of every partition, in path order.
    manifest : dict
        The registry's manifest (``seen``, ``pending``); ``{}`` for a new registry.
    spec : RetrainSpec
    """
    seen, pending = manifest.get("seen", {}), set(manifest.get("pending", []))
    new = [path for path, ident in listing.items() if seen.get(path) != ident]
    # A rewritten (or touched) partition is new, but a model may have trained on its earlier contents:
    # only fresh paths, and pending ones (held out before, so trained on by no model), can be the exam.
    fresh = [path for path in new if path not in seen or path in pending]
    holdout = fresh[-spec.holdout_partitions:] if fresh else []
    pool = [path for path in listing if path not in holdout]
    if spec.window_partitions is not None:
        train = pool[-spec.window_partitions:]
    elif spec.window_days is not None:
        train = _newest_days(pool, spec.window_days, spec.date_key)
    else:
        train = [path for path in pool if path in pending or path in new]
    return Plan(new, holdout, train, {"seen": {**seen, **{p: listing[p] for p in new}}, "pending": holdout})


def _newest_days(paths: list[str], days: int, key: str) -> list[str]:
    dates = {path: _date_of(path, key) for path in paths}
    if not dates:
        return []
    first = max(dates.values()) - _dt.timedelta(days=days - 1)
    return [path for path in paths if dates[path] >= first]


def _date_of(path: str, key: str) -> _dt.date:
    for part in path.split("/")[:-1]:
        name, _, value = part.partition("=")
        if name == key:
            try:
                return _dt.date.fromisoformat(value)
            except ValueError:
                raise ValueError(f"partition {path}: {key}={value!r} is not a date (YYYY-MM-DD)") from None
    raise ValueError(f"partition {path} has no {key}=YYYY-MM-DD directory, which retrain.window_days needs")


def _identity(info: dict) -> dict:
    """What tells a partition apart from a rewritten one: size and ETag (object stores) or mtime."""
    tag = next((info[k] for k in ("ETag", "etag", "md5Hash", "mtime", "LastModified", "created") if k in info),
               None)
    return {"size": int(info.get("size") or 0), "tag": None if tag is None else str(tag)}


# ------------------------------------------------------------------- running
def run_retrain(rjob: RetrainJob, *, client=None) -> dict:
    """Run one retraining cycle (see the module docstring) and return its summary.

    Parameters
    ----------
    rjob : RetrainJob
    client : None, str or distributed.Client
        Where to train and evaluate; None: ``cluster.scheduler`` of the job
        (else ``DASK_SCHEDULER_ADDRESS``, else an embedded cluster).

    Raises
    ------
    LockHeld
        Another run holds the registry's lock (nothing was written).
    """
    t0 = time.perf_counter()
    spec, registry = rjob.retrain, rjob.registry
    ds, where, listing = _open(rjob.job)
    summary = {"registry": registry.url, "dataset": where}
    if ds is None:
        return _finish(summary, t0, status="no_new_data", current=registry.current(),
                       message=f"no partitions in {where} yet; nothing to do")
    if _settled(registry, listing, spec):
        return _finish(summary, t0, status="no_new_data", current=registry.current(),
                       message=f"no new partitions in {where}; nothing to do")
    with registry.lock(None if spec.lock_stale_hours is None else spec.lock_stale_hours * 3600):
        outcome = _run_locked(rjob, registry, ds, where, listing, client)
    return _finish(summary, t0, current=registry.current(), **outcome)


def _run_locked(rjob: RetrainJob, registry: Registry, ds, where: str, listing: dict, client) -> dict:
    """Steps 3-6 of a run, under the registry's lock; returns the summary's outcome fields."""
    spec = rjob.retrain
    _roll_forward(registry)
    latest = registry.latest()                 # read again: another run may have committed meanwhile
    state = registry.manifest(latest) if latest else {}
    if state and state["dataset"] != where:
        raise ValueError(f"registry {registry.url} tracks the dataset {state['dataset']}, not {where}; "
                         "give another output.dir")
    p = plan(listing, state, spec)
    if not p.new:
        return {"status": "no_new_data", "message": "another run consumed the new partitions; nothing to do"}
    adopt = latest is None and spec.initial_model is not None
    if not (p.holdout or adopt):
        return {"status": "no_new_data", "message": f"{_count(len(p.new), 'partition')} changed since "
                                                    f"seen ({', '.join(p.new)}) and none is fresh: a changed partition "
                                                    "is never the exam, since the current model may have trained "
                                                    "on it; waiting for a new partition"}
    if not (p.train or adopt):
        return {"status": "no_new_data", "message": f"{_count(len(p.new), 'new partition')}, all held out for "
                                                    "evaluation; waiting for more before training"}
    version = registry.next_version()
    runlog = registry.version_dir(version).log()
    logging.getLogger("nsdist").addHandler(runlog)
    try:
        log.info("nsdist %s retrain: %s in %s; registry %s, version %s",
                 __version__, _count(len(p.new), "new partition"), where, registry.url, version)
        record = {"version": version, "created": _now(), "nsdist": __version__, "dataset": where,
                  "new": p.new, "holdout": p.holdout, "train": p.train, "tolerance": spec.tolerance}
        if adopt:
            model, record, manifest = _adopt(rjob, ds, p, record)
        else:
            model, record = _compete(rjob, registry, ds, list(listing), p, record, client)
            manifest = p.manifest
        runlog.save()
        registry.commit(version, model, {"dataset": where, **manifest}, record)
        if record["decision"] != "refused":
            registry.promote(version, record)
    finally:
        logging.getLogger("nsdist").removeHandler(runlog)
    return {"status": "refused" if record["decision"] == "refused" else "promoted", "version": version,
            "message": record["reason"],
            **{k: record[k] for k in ("measure", "candidate", "incumbent", "incumbent_version", "tolerance",
                                      "new", "train", "holdout")}}


def _open(job: TrainJob):
    """The dataset (None while its directory holds no partition yet), its root as shown, and its listing.

    The listing maps each partition's path relative to the root to its identity, in partition order.
    """
    from . import api

    spec, options = job.dataset, job.data_options()
    fs, root = resolve(spec.url, options)
    where = display(fs, root)
    if not fs.isdir(root):
        raise ValueError(f"retrain needs dataset.url to be a directory into which partitions arrive; "
                         f"{where} is not")
    try:
        ds = api.open_dataset(spec.url, **spec.read_options(), storage_options=options or None)
    except DataNotFoundError:
        return None, where, {}
    infos = fs.find(root, detail=True)
    return ds, where, {posixpath.relpath(p.path, root): _identity(infos[p.path]) for p in ds.partitions}


def _settled(registry: Registry, listing: dict, spec: RetrainSpec) -> bool:
    """No new partition and no promotion to finish: a run would change nothing (read-only check)."""
    latest = registry.latest()
    if latest is None:
        return False
    return not plan(listing, registry.manifest(latest), spec).new and not _unfinished(registry, latest)


def _unfinished(registry: Registry, latest: str) -> bool:
    return registry.record(latest)["decision"] != "refused" and registry.current() != latest


def _roll_forward(registry: Registry) -> None:
    """Finish a promotion that a crash interrupted between ``metrics.json`` and ``CURRENT``."""
    latest = registry.latest()
    if latest is not None and _unfinished(registry, latest):
        log.warning("%s was promoted but CURRENT was not updated (interrupted run); pointing CURRENT at it",
                    latest)
        registry.promote(latest, registry.record(latest))


def _adopt(rjob: RetrainJob, ds, p: Plan, record: dict) -> tuple[LinearModel, dict, dict]:
    """The first version of an empty registry from ``retrain.initial_model``, trained on everything present."""
    path = rjob.retrain.initial_model
    model = load_model(path, rjob.job.data_options() or None)
    model.check_features(ds.feature_names, where=f"dataset {ds.url}")
    log.info("empty registry: adopting %s (it counts as trained on all %d partitions)", path, len(p.new))
    record = {**record, "holdout": [], "train": [], "decision": "adopted", "measure": None, "candidate": None,
              "incumbent": None, "incumbent_version": None, "reason": f"adopted {path} as the first version"}
    return model, record, {**p.manifest, "pending": []}


def _compete(rjob: RetrainJob, registry: Registry, ds, names: list[str], p: Plan, record: dict,
             client) -> tuple[LinearModel, dict]:
    """Train the candidate, score it and the current model on the held-out partitions, decide.

    ``names`` are the relative paths of ``ds.partitions``, in order.
    """
    from . import api
    from .engine.cluster import connect
    from .estimator import NonDecomposableClassifier
    from .run import train_options

    job, tolerance = rjob.job, rjob.retrain.tolerance
    train_ds, holdout_ds = _select(ds, names, p.train, "train"), _select(ds, names, p.holdout, "holdout")
    incumbent_version = registry.current()
    cluster = job.cluster
    with connect(client or cluster.scheduler, n_workers=cluster.n_workers,
                 memory_limit=cluster.memory_limit) as c:
        log.info("training the candidate on %d partitions (%d rows): %s", len(p.train), train_ds.num_rows,
                 ", ".join(p.train))
        options = train_options(job)       # what `nsdist train` passes for the same job
        incumbent = registry.load_model(incumbent_version) if incumbent_version is not None else None
        warm = (rjob.retrain.warm_start and incumbent is not None
                and options.get("solver", NonDecomposableClassifier().solver) in ("1pmb", "2pmb"))
        if warm:
            log.info("warm start from %s", incumbent_version)
        model = api.train(train_ds, client=c, init_model=incumbent if warm else None, **options)
        log.info("scoring on %d held-out partitions (%d rows): %s", len(p.holdout), holdout_ds.num_rows,
                 ", ".join(p.holdout))
        scores = {"candidate": api.evaluate(model, holdout_ds, client=c, threshold=job.measure.threshold)}
        if incumbent is not None:
            scores["incumbent"] = api.evaluate(_scored_as(incumbent, model), holdout_ds, client=c,
                                               threshold=job.measure.threshold)
    key = MEASURE_KEYS[model.measure]
    cand = scores["candidate"][key]
    if incumbent_version is None:
        decision, reason = "promoted", f"first version: candidate {key} {cand:.4f} on the held-out partitions"
    else:
        inc = scores["incumbent"][key]
        decision = "promoted" if cand >= inc - tolerance else "refused"
        reason = (f"candidate {key} {cand:.4f} {'>=' if decision == 'promoted' else '<'} "
                  f"{incumbent_version}'s {inc:.4f} - tolerance {tolerance:g} on the held-out partitions")
    log.info("%s: %s", decision, reason)
    return model, {**record, "decision": decision, "reason": reason, "measure": key,
                   "candidate": scores["candidate"], "incumbent": scores.get("incumbent"),
                   "incumbent_version": incumbent_version}


def _scored_as(model: LinearModel, reference: LinearModel) -> LinearModel:
    """``model`` with ``reference``'s measure definition (beta, k), so both are scored alike."""
    params = {**model.params, "beta": reference.params.get("beta"), "k": reference.params.get("k")}
    return dataclasses.replace(model, measure=reference.measure, params=params)


def _select(ds, names: list[str], paths: list[str], label: str):
    """``ds`` restricted to the partitions at ``paths`` (``names``: the relative path of each partition)."""
    keep = set(paths)
    return ds.select([part.index for part, name in zip(ds.partitions, names) if name in keep], label)


def _count(n: int, noun: str) -> str:
    """``1 partition``, ``2 partitions``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _finish(summary: dict, t0: float, **fields) -> dict:
    out = {"status": fields.pop("status"), **summary, **fields, "seconds": round(time.perf_counter() - t0, 3)}
    log.info("retrain %s: %s", out["status"], out["message"])
    return out


# ----------------------------------------------------------- command line
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nsdist retrain`` (defined with the command line, :mod:`nsdist.cli`)."""
    from .cli import add_retrain_arguments

    add_retrain_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``nsdist retrain`` from parsed arguments: print the summary, return the exit code.

    0 for ``promoted``, ``refused`` and ``no_new_data``; :data:`EXIT_LOCKED`
    when another run holds the lock.  Errors are raised (after writing an
    ``error`` summary to ``--summary``).
    """
    overrides = [*args.overrides, *([f"cluster.scheduler={args.scheduler}"] if args.scheduler else [])]
    options = parse_storage_options(getattr(args, "storage_options", None))
    args.summary_options = options
    try:
        rjob = load_retrain_job(args.job, overrides, options)
        args.summary_options = rjob.job.storage_options
        summary, code = run_retrain(rjob), 0
    except LockHeld as exc:
        summary, code = {"status": "locked", "message": str(exc), "holder": exc.holder}, EXIT_LOCKED
    except KeyboardInterrupt as exc:      # Ctrl-C, or SIGTERM (nsdist._signals): the lock is released, nothing promoted
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        _write_summary(args.summary, {"status": how, "message": f"{how} before the end: the lock released, nothing "
                                      "promoted"}, args.summary_options)
        raise
    except Exception as exc:
        _write_summary(args.summary, {"status": "error", "message": " ".join(str(exc).split()),
                                      "error": type(exc).__name__}, args.summary_options)
        raise
    print(scrub(to_json(summary).decode()))
    print(scrub(f"nsdist retrain: {summary['status']}: {summary['message']}"), file=sys.stderr)
    _write_summary(args.summary, summary, args.summary_options)
    return code


def _write_summary(url: str | None, summary: dict, storage_options: dict | None = None) -> None:
    """Write the summary to ``--summary`` (with the job's top-level storage options), secrets scrubbed."""
    if url:
        atomic_write_bytes(url, scrub(to_json(summary).decode()).encode(), storage_options or None)


def main(argv: Sequence[str] | None = None) -> int:
    """``nsdist retrain`` as a stand-alone program (``python -m pipelines.retrain``); errors raise."""
    parser = argparse.ArgumentParser(prog="nsdist retrain", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="nsdist: %(message)s", stream=sys.stderr)
    with terminate_as_interrupt():      # a scheduler's time limit unwinds the run: the registry's lock released
        try:
            return run(args)
        except Terminated:
            print("nsdist retrain: terminated (SIGTERM): the lock released, nothing promoted", file=sys.stderr)
            return TERMINATED_STATUS
