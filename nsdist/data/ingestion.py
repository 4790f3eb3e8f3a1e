"""``ingest``: convert svmlight, CSV or Parquet input into an nsdist Parquet dataset.

Pipeline (steps 1, 3 and 4 run as Dask tasks):

1. **scan** - the driver cuts the input into chunks of ``chunk_rows`` lines
   (compressed text cannot be split, so reading is sequential; a Parquet input
   gives one chunk per partition); each task
   parses and validates one chunk and returns a small summary (rows,
   positives, largest svmlight index, CSV categories). At most two chunks per
   worker thread are in flight, so the driver never holds more than that.
2. **plan** - the driver fixes the dimension, categories and partition sizes,
   and draws how many rows of each chunk go to each partition
   (:func:`nsdist.data.shuffle.assign_rows`).
3. **scatter** - the input is read again; each task encodes one chunk densely,
   shuffles it and writes its slices for every partition to one Arrow IPC file
   (lz4) in a work directory.
4. **gather** - each task reads its partition's slices from those files,
   shuffles them and writes ``part-NNNNN.parquet``.

No task holds more than ``chunk_rows`` input lines or one partition; the
sidecar records the largest number of rows any task held
(``ingest.max_task_rows``). Everything is written into a hidden staging
directory beside ``dst`` (``.<name>.tmp-<token>``; the work directory in it
holds a compressed dense copy of the data until the partitions are written)
that replaces ``dst`` only at the end: a failed ingest leaves ``dst`` as it
was and nothing else behind.
"""
from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from distributed import Client, Future, as_completed
from fsspec.spec import AbstractFileSystem

from nsdist._connect import connect
from nsdist._faults import MAX_RESTARTS, STOP_WAIT, is_transient, redo_lost, running_tasks, wait_for_tasks
from nsdist.data import metadata as meta
from nsdist.data.dataset import Dataset
from nsdist.data.fs import access, check_absent, resolve, staging_directory
from nsdist._names import names_to_json
from nsdist.data.labels import LabelValues
from nsdist.data.layout import arrow_schema, check_layout, choose_layout, parquet_options, record_batch
from nsdist.data.layout import partition_rows as layout_partition_rows
from nsdist.data.readers import DEFAULT_CHUNK_ROWS, TextBlock, check_chunk_rows
from nsdist.data.shuffle import assign_rows, partition_sizes, rng
from nsdist.data.sources import Categorical, Source, open_source

log = logging.getLogger("nsdist.data")

__all__ = ["ingest", "IngestProgress", "PARTITION_BYTES", "stream_calls"]

PARTITION_BYTES = 64 * 2**20
_PARTITION_ROWS_RANGE = (1_000, 1_000_000)
_LABEL = "label"
#: the work directory's chunk files, read once by the gather: lz4 (a 125,000 x 100 float64 chunk of measured
#: values: written in 260 ms and read in 62 ms, 72 MB; zstd 469 / 211 ms, 57 MB; none 42 / 2 ms, 96 MB)
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


@dataclass(frozen=True)
class IngestProgress:
    """What :func:`ingest` reports to ``on_progress`` after each task of its three stages.

    Attributes
    ----------
    stage : {"read", "shuffle", "write"}
        1. read and check the input (the scan), 2. encode and shuffle it into the work directory
        (the scatter), 3. write the partitions (the gather): the steps of the module docstring.
    stage_index : int
        1, 2 or 3.
    done, total : int
        Tasks of the stage finished, and its tasks (``total`` None while a text input's chunks are
        still being counted: the first read of a text file finds them).
    rows : int
        Rows that the stage's finished tasks hold.
    """

    stage: str
    stage_index: int
    done: int
    total: int | None
    rows: int


def ingest(src: str | os.PathLike, dst: str | os.PathLike, *, format: str | None = None,
           label_column: int | str = "label", positive: LabelValues = None,
           negative: LabelValues = None, categorical: Categorical = (),
           feature_columns: Sequence[str] | None = None, drop: Sequence[int | str] = (),
           header: bool | None = None,
           n_features: int | None = None, rows_per_partition: int | None = None,
           chunk_rows: int = DEFAULT_CHUNK_ROWS, shuffle: bool = True, random_state: int = 0,
           dtype: str = "float64", layout: str = "auto", overwrite: bool = False,
           storage_options: Mapping[str, Any] | None = None,
           client: Client | str | None = None,
           on_progress: Callable[[IngestProgress], None] | None = None) -> Dataset:
    """Convert ``src`` into a Parquet dataset at ``dst`` and open it.

    Parameters
    ----------
    src, dst : str or path
        Local paths or fsspec URLs. ``src`` is a svmlight or CSV file (plain,
        ``.gz``, ``.bz2``, ``.xz``) or a Parquet dataset.
    format : {"svmlight", "csv", "parquet"}, optional
        Default: from the name. ``.svm .libsvm .svmlight .t .tr .trn .tst .val``
        and names without extension (``a9a``, ``w8a``) are svmlight, ``.csv`` is
        CSV, a directory, glob or ``.parquet`` is Parquet; anything else needs
        ``format=``.
    label_column : str or int
        CSV: the label field, by header name or 0-based index (negative counts
        from the end); without a header fields are named ``col0, col1, ...``.
        Parquet: the label column. Not used for svmlight (the first token).
    positive, negative : label value or list of them, optional
        ``positive``: the label(s) meaning the positive class (compared as
        strings after stripping quotes, or as numbers). ``negative``: if given,
        the label(s) meaning negative; rows with any other label are dropped.
        Defaults: svmlight label ``> 0`` is positive; CSV labels must be
        ``1``/``true`` or ``-1``/``0``/``false``. Parquet input takes ``positive``
        only (every other label is negative), as :meth:`Dataset.open
        <nsdist.data.Dataset.open>` does.
    categorical : sequence of column names/indices, or mapping column -> categories
        CSV or Parquet columns to one-hot encode (Parquet: by name; strings,
        dictionaries or integer codes, read as text; a null is an error naming
        its partition and row). With a sequence the categories are found
        in the first pass (sorted); with a mapping (e.g. ``metadata["categories"]``
        of a training set) they are fixed and an unseen value encodes as zeros.
    feature_columns : sequence of str, optional
        Parquet: the feature columns, in order (the ``categorical`` ones among
        them or added); default every column but the label. Other columns
        (identifiers, timestamps) are left out.
    drop : sequence of column names (CSV: or indices), optional
        CSV or Parquet columns that are neither features nor the label (an id,
        a timestamp): left out, never parsed (not with ``feature_columns``).
    header : bool, optional
        CSV: whether the first line names the columns. Default: it does iff
        none of its fields is a number.
    n_features : int, optional
        svmlight: the dimension (default: the largest index). Give the training
        set's dimension when ingesting a test set.
    rows_per_partition : int, optional
        Rows per output file (the last one may be smaller). Default: about
        ``PARTITION_BYTES`` (64 MiB) of dense features per file, within
        [1 000, 1 000 000] rows: large enough that per-file overhead is small,
        small enough that several partitions fit in a worker's memory while
        the engine streams them.
    chunk_rows : int
        Input lines per task (bounds task memory: about
        ``chunk_rows * n_features * itemsize`` bytes when encoding).
    shuffle : bool
        Write the rows in a uniformly random order (deterministic for
        ``random_state``, ``chunk_rows`` and ``rows_per_partition``); else in input
        order.
    random_state : int
        Seed (>= 0).
    dtype : {"float64", "float32"}
        Type of the feature columns.
    layout : {"auto", "dense", "sparse"}
        ``"dense"``: one float column per feature; ``"sparse"``: CSR-style list
        columns ``indices`` / ``values`` with the dimension in the metadata (see
        :mod:`nsdist.data.layout`); ``"auto"``: sparse when that takes at most
        half the memory of dense (svmlight files such as w8a and a9a, CSV with
        one-hot categorical columns of many levels). Sparse partitions and row groups
        are sized by non-zeros.
    overwrite : bool
        Replace an existing ``dst`` (only once the new dataset is complete).
    storage_options : mapping, optional
        fsspec options for both ``src`` and ``dst``.
    client : distributed.Client or scheduler address, optional
        Where the tasks run. Default: the scheduler at ``DASK_SCHEDULER_ADDRESS``
        if set, else an in-process ``LocalCluster`` (``processes=False``: one
        worker, up to 4 threads, logging silenced - task errors are raised
        here), closed afterwards (see :func:`nsdist.engine.cluster.connect`).
    on_progress : callable, optional
        Called with an :class:`IngestProgress` after each task (``nsdist ingest``
        draws its progress bar with it, :class:`nsdist.progress.IngestBar`).

    Returns
    -------
    Dataset
        The written dataset, opened.

    Notes
    -----
    Output: ``dst/part-00000.parquet, ...`` with one float column per feature
    (named as in :mod:`nsdist.data.sources`), or for the sparse layout the list
    columns ``indices`` (int32, 0-based) and ``values``, and an ``int8`` column
    ``label`` in {-1, +1}, plus ``dst/_nsdist.json``. Every file's schema metadata holds,
    under key ``b"nsdist"``, the JSON object::

        format ("nsdist-dataset"), format_version (1), nsdist_version,
        layout ("columns" or "sparse"), label_column ("label"),
        feature_names (a list, or {prefix, start, n} for svmlight's x1 .. xd), n_features,
        num_rows, positives, dropped_rows, num_partitions,
        label_mapping {column (CSV/Parquet), positive, negative, rule},
        categories {column: [sorted categories]},
        source {format, url, [columns, header] (CSV), [fingerprint] (Parquet)},
        ingest {shuffle, random_state, rows_per_partition, chunk_rows, dtype, nnz}

    The sidecar holds the same object plus ``partitions`` (``path``,
    ``num_rows``, ``positives``, ``sha256`` of the file), ``content_sha256``
    (SHA-256 over the files' hashes, in order) and ``ingest.chunks`` /
    ``ingest.max_task_rows``. Same input and options give byte-identical files.

    Raises
    ------
    ValueError
        For bad options or input, naming the file, line (1-based) and column
        or field; see :mod:`nsdist.data.readers`.
    FileExistsError
        If ``dst`` exists and ``overwrite`` is false.

        If every row is negative or every row positive (usually a wrong
        ``positive=``), naming the label values found.
    """
    options = _Options.check(rows_per_partition, chunk_rows, shuffle, random_state, dtype)
    layout = check_layout(layout)
    source = open_source(src, format=format, label_column=label_column, positive=positive,
                         negative=negative, categorical=categorical, header=header,
                         n_features=n_features, storage_options=storage_options, feature_columns=feature_columns,
                         drop=drop)
    fs, out = resolve(dst, storage_options)
    check_absent(fs, out, overwrite=overwrite)
    with _dask_client(client) as dask, staging_directory(fs, out, overwrite=overwrite) as staging:
        report = _Reporter(on_progress)
        blocks = source.blocks(options.chunk_rows)
        n_blocks = len(blocks) if isinstance(blocks, Sized) else None
        summaries = stream_calls(dask, source.scan, ((b,) for b in blocks),
                                 report("read", 1, n_blocks, lambda s: s.rows))
        source = source.planned(summaries)
        n_rows, positives = sum(s.rows for s in summaries), sum(s.positives for s in summaries)
        if n_rows == 0:
            raise ValueError(f"{source.name}: no rows to ingest")
        if positives in (0, n_rows):
            raise ValueError(_one_class(source, n_rows, positives, options.chunk_rows))
        nnz, d = sum(s.nnz for s in summaries), len(source.feature_names)
        options = replace(options, layout=choose_layout(layout, n_rows, nnz, d, options.dtype.itemsize),
                          nnz_per_row=nnz / n_rows)
        sizes = partition_sizes(n_rows, options.partition_rows(d))
        counts = assign_rows([s.rows for s in summaries], sizes, shuffle=options.shuffle,
                             random_state=options.random_state)
        header_meta = _metadata(source, summaries, options, len(sizes))
        job = _Job(source, fs, staging, options, arrow_schema(options.layout, source.feature_names,
                                                               options.dtype), header_meta)
        fs.makedirs(job.work, exist_ok=True)
        scattered = stream_calls(dask, job.scatter,
                                 zip(range(len(counts)), source.blocks(options.chunk_rows), counts),
                                 report("shuffle", 2, len(counts), int))
        parts = stream_calls(dask, job.gather, ((b, _slices(counts, b)) for b in range(len(sizes))),
                             report("write", 3, len(sizes), lambda part: part["num_rows"]))
        fs.rm(job.work, recursive=True)
        sidecar = {**header_meta, "partitions": parts,
                   "content_sha256": meta.sha256_json([p["sha256"] for p in parts])}
        sidecar["ingest"] = {**header_meta["ingest"], "chunks": len(summaries),
                             "max_task_rows": max(max(s.lines for s in summaries), max(scattered),
                                                  max(p["num_rows"] for p in parts))}
        with fs.open(posixpath.join(staging, meta.SIDECAR), "w") as f:
            f.write(meta.dumps(sidecar, indent=1))
    return Dataset.open(dst, storage_options=storage_options)


_FOUND_LIMIT = 10          # label values named in the error
_FOUND_LINES = 2_000_000   # input lines read again to find them


def _one_class(source: Source, n_rows: int, positives: int, chunk_rows: int) -> str:
    """The error of an input whose rows are all of one class, naming the label values it holds."""
    which = "negative" if positives == 0 else "positive"
    mapping = source.describe()["label_mapping"]
    if getattr(source, "rule", None) is None:     # Parquet input: labels +1/-1, 1/0, bool, or positive=
        given = "" if mapping.get("positive") is None else f", with positive={mapping['positive']}"
        return (f"{source.name}: all {n_rows} rows are {which} (label column {mapping.get('column')!r}{given}): "
                "a dataset needs both classes")
    found, complete = _label_values(source, chunk_rows)
    shown = ", ".join(repr(v) for v in found[:_FOUND_LIMIT]) + (", ..." if len(found) > _FOUND_LIMIT else "")
    where = "" if complete else f" in the first {_FOUND_LINES:,} lines"
    rule = (f"positive={mapping['positive']}" if mapping.get("positive") is not None
            else f"no positive= ({mapping['rule']})")
    return (f"{source.name}: all {n_rows} rows are {which}, with {rule}; the label values found{where} are "
            f"{shown or 'none'}: a dataset needs both classes, so pass positive= with the positive class's "
            f"value(s)")


def _label_values(source: Source, chunk_rows: int) -> tuple[list[str], bool]:
    """The distinct raw label values of a text source (read again, here), and whether all were read."""
    rule = getattr(source, "rule", None)
    seen: set = set()

    class Collect(type(rule)):
        def classify(self, labels, where):
            seen.update(v for v in pc.unique(labels).to_pylist() if v is not None)
            return super().classify(labels, where)

    collecting = replace(source, rule=Collect(rule.positive, rule.negative, rule.default))
    lines = 0
    for block in collecting.blocks(chunk_rows):
        collecting.scan(block)
        lines += len(block.lines)
        if lines >= _FOUND_LINES:
            return sorted(seen, key=_label_order), False
    return sorted(seen, key=_label_order), True


def _label_order(value: str):
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


@dataclass(frozen=True)
class _Options:
    rows_per_partition: int | None
    chunk_rows: int
    shuffle: bool
    random_state: int
    dtype: np.dtype
    layout: str = "columns"          # as written: "columns" or "sparse" (fixed after the scan)
    nnz_per_row: float = 0.0

    @classmethod
    def check(cls, rows_per_partition: int | None, chunk_rows: int, shuffle: bool, random_state: int,
              dtype: str) -> _Options:
        """Validate the numeric options of :func:`ingest`."""
        if rows_per_partition is not None and not _is_int(rows_per_partition, 1):
            raise ValueError(f"rows_per_partition must be a positive integer, got {rows_per_partition!r}")
        if not _is_int(random_state, 0):
            raise ValueError(f"random_state must be a non-negative integer, got {random_state!r}")
        if str(dtype) not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
        return cls(rows_per_partition, check_chunk_rows(chunk_rows), bool(shuffle), int(random_state),
                   np.dtype(str(dtype)))

    def partition_rows(self, n_features: int) -> int:
        """``rows_per_partition``, or the default for ``n_features`` (see :func:`ingest`)."""
        if self.rows_per_partition is not None:
            return int(self.rows_per_partition)
        return layout_partition_rows(self.layout, n_features, self.nnz_per_row, self.dtype.itemsize,
                                     PARTITION_BYTES, _PARTITION_ROWS_RANGE)


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low


def _schema(feature_names: Sequence[str], dtype: np.dtype) -> pa.Schema:
    if _LABEL in feature_names:
        raise ValueError(f"a feature is named {_LABEL!r}, the name of the output label column; "
                         "rename it in the input")
    float_type = pa.from_numpy_dtype(dtype)
    return pa.schema([pa.field(name, float_type, nullable=False) for name in feature_names]
                     + [pa.field(_LABEL, pa.int8(), nullable=False)])


def _metadata(source: Source, summaries, options: _Options, n_partitions: int) -> dict:
    names = source.feature_names
    return {"format": meta.FORMAT, "format_version": meta.FORMAT_VERSION,
            "nsdist_version": meta.library_version(), "layout": options.layout, "label_column": _LABEL,
            "feature_names": names_to_json(names), "n_features": len(names),
            "num_rows": sum(s.rows for s in summaries), "positives": sum(s.positives for s in summaries),
            "dropped_rows": sum(s.dropped for s in summaries), "num_partitions": n_partitions,
            **source.describe(),
            "ingest": {"shuffle": options.shuffle, "random_state": options.random_state,
                       "rows_per_partition": options.partition_rows(len(names)),
                       "chunk_rows": options.chunk_rows, "dtype": options.dtype.name,
                       "nnz": int(sum(s.nnz for s in summaries))}}


def _slices(counts: np.ndarray, b: int) -> list[tuple[int, int]]:
    """``(chunk, batch)`` pairs holding partition ``b``'s rows (chunk files hold only non-empty slices)."""
    return [(int(c), int(np.count_nonzero(counts[c, :b]))) for c in np.flatnonzero(counts[:, b])]


@dataclass(frozen=True)
class _Job:
    """What the scatter and gather tasks share (small: no data)."""

    source: Source
    fs: AbstractFileSystem
    staging: str
    options: _Options
    schema: pa.Schema
    header_meta: dict

    @property
    def work(self) -> str:
        return posixpath.join(self.staging, "_work")

    def chunk_path(self, c: int) -> str:
        return posixpath.join(self.work, f"chunk-{c:08d}.arrow")

    def scatter(self, c: int, block: Any, counts: np.ndarray) -> int:
        """Encode chunk ``c`` and write its slice for every partition; returns its row count."""
        X, y = self.source.encode(block, self.options.dtype)
        if len(y) != counts.sum():
            raise ValueError(f"{self.source.name}: chunk {c} has {len(y)} rows in the second pass but "
                             f"{counts.sum()} in the first: the input changed during ingest")
        batch = record_batch(X, y, self.schema)
        if self.options.shuffle:
            batch = batch.take(pa.array(rng(self.options.random_state, 1, c).permutation(len(y))))
        starts = np.concatenate([[0], np.cumsum(counts)])
        with access(self.fs, self.chunk_path(c), "write"), self.fs.open(self.chunk_path(c), "wb") as f, \
                pa.ipc.new_file(f, self.schema, options=_IPC_OPTIONS) as writer:
            for b in np.flatnonzero(counts):
                writer.write_batch(batch.slice(starts[b], counts[b]))
        return len(y)

    def gather(self, b: int, slices: Sequence[tuple[int, int]]) -> dict:
        """Assemble, shuffle and write partition ``b``; returns its sidecar entry."""
        batches = []
        for c, k in slices:
            with access(self.fs, self.chunk_path(c), "read"), self.fs.open(self.chunk_path(c), "rb") as f:
                batches.append(pa.ipc.open_file(f).get_batch(k))
        table = pa.Table.from_batches(batches, self.schema)
        if self.options.shuffle:
            table = table.take(pa.array(rng(self.options.random_state, 2, b).permutation(table.num_rows)))
        table = table.replace_schema_metadata({meta.META_KEY: meta.dumps(self.header_meta)})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **parquet_options(table, self.options.layout))
        data = sink.getvalue()
        name = f"part-{b:05d}.parquet"
        with access(self.fs, posixpath.join(self.staging, name), "write"), \
                self.fs.open(posixpath.join(self.staging, name), "wb") as f:
            f.write(data)
        return {"path": name, "num_rows": table.num_rows,
                "positives": int(pc.sum(pc.equal(table.column(_LABEL), 1)).as_py() or 0),
                "sha256": hashlib.sha256(data).hexdigest()}


def _dask_client(client: Client | str | None):
    """The given client, a client of the given (or ``DASK_SCHEDULER_ADDRESS``'s) scheduler, or a temporary
    in-process cluster: :func:`nsdist._connect.connect`, the one connection logic of every entry point."""
    return connect(client, processes=False, n_workers=1, threads_per_worker=min(4, os.cpu_count() or 1),
                   quiet=True)


class _Reporter:
    """Makes the ``on_result`` callbacks of one ingest's :func:`stream_calls` calls, which count the finished tasks
    and their rows and report them to ``on_progress`` (None: callbacks that do nothing)."""

    def __init__(self, on_progress: Callable[[IngestProgress], None] | None) -> None:
        self.on_progress = on_progress

    def __call__(self, stage: str, index: int, total: int | None,
                 rows_of: Callable[[Any], int]) -> Callable[[Any], None] | None:
        if self.on_progress is None:
            return None
        done = rows = 0

        def on_result(result: Any) -> None:
            nonlocal done, rows
            done, rows = done + 1, rows + rows_of(result)
            self.on_progress(IngestProgress(stage, index, done, total, rows))
        return on_result


def stream_calls(client: Client, fn: Callable[..., Any], calls: Iterable[tuple],
                 on_result: Callable[[Any], None] | None = None, name: str = "ingest") -> list:
    """Run ``fn(*args)`` for each tuple of ``calls`` on ``client``, results in order (``on_result`` is called
    with each result as it arrives; the tasks' keys start ``nsdist-<name>``).

    At most two calls per worker thread are in flight; text blocks are
    scattered to the cluster rather than embedded in the task.  A call lost
    with a worker (or with the worker holding its scattered block) is
    submitted again, its block scattered again, up to
    :data:`~nsdist._faults.MAX_RESTARTS` times: every call reads its input
    and writes the same file, so a redo gives the same dataset.  When a call
    fails otherwise, the calls in flight are waited for (so that none writes
    after the caller cleans up) and the error of the earliest call that
    failed is raised -- the first bad line of the input, whichever block's
    check ended first.  On an interrupt (Ctrl-C, SIGTERM) the calls not yet
    started are cancelled and the running ones waited for, :data:`~nsdist._faults.STOP_WAIT`
    seconds at most: Dask cannot stop a running task, and one that ended after
    the caller cleaned up would write into the output's place (on an object
    store, which has no directories to remove, a stray object).  A second
    interrupt leaves at once.
    """
    limit = 2 * max(1, sum(client.nthreads().values()))
    token = uuid.uuid4().hex[:8]
    index: dict[Future, int] = {}            # in flight: future -> call
    pending: dict[int, tuple] = {}           # the arguments of the calls in flight, kept for a redo
    restarts: dict[int, int] = {}
    results: dict[int, Any] = {}
    errors: dict[int, Exception] = {}        # the calls that failed for good
    running = as_completed(loop=client.loop)

    def submit(i: int) -> None:
        r = restarts.get(i, 0)
        args = redo_lost(          # the scatter itself can meet a worker that just died
            lambda _: tuple(client.scatter(a, hash=False) if isinstance(a, TextBlock) else a for a in pending[i]),
            lambda exc, again: log.warning("ingest: scattering block %d failed (%s: %s); again (restart %d/%d)",
                                           i, type(exc).__name__, exc, again, MAX_RESTARTS))
        future = client.submit(fn, *args, key=f"nsdist-{name}-{token}-{i}" + (f"-redo{r}" if r else ""))
        index[future] = i
        running.add(future)

    def collect(future: Future) -> None:
        i = index.pop(future)
        try:
            results[i] = future.result()
        except Exception as exc:  # a lost worker, lost block, dropped connection: redone; else raised
            if not is_transient(exc) or restarts.get(i, 0) >= MAX_RESTARTS:
                errors[i] = exc
                raise
            restarts[i] = restarts.get(i, 0) + 1
            log.warning("ingest: call %d was lost (%s: %s); redoing it (restart %d/%d)",
                        i, type(exc).__name__, exc, restarts[i], MAX_RESTARTS)
            submit(i)
            return
        del pending[i]
        if on_result is not None:
            on_result(results[i])

    n = 0
    try:
        for n, args in enumerate(calls, start=1):
            if running.count() >= limit:
                collect(next(running))
            pending[n - 1] = args
            submit(n - 1)
        for future in running:                # includes the redone calls added while iterating
            collect(future)
    except Exception as exc:
        for future in running:                # wait for the calls in flight: an earlier one may fail too
            i = index.pop(future, None)
            if i is not None and future.status == "error" and not is_transient(future.exception()):
                errors.setdefault(i, future.exception())
        earliest = errors[min(errors)] if errors else exc
        if earliest is exc:
            raise
        raise earliest from None
    except BaseException:
        client.cancel(list(index))                  # queued calls never start; running ones run on
        prefix = f"nsdist-{name}-{token}-"
        if running := running_tasks(client, prefix):
            log.warning("%s: stopped; waiting for %d running task(s) to end before it cleans up (%g s at most: a "
                        "running task cannot be stopped, and it would write after the cleanup)",
                        name, len(running), STOP_WAIT)
            if left := wait_for_tasks(client, prefix):
                log.warning("%s: %d task(s) still running after %g s; what they write is left behind: %s",
                            name, len(left), STOP_WAIT, ", ".join(left))
        raise
    return [results[i] for i in range(n)]
