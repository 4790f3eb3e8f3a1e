"""Scoring inputs without ingesting them (``nsdist predict``, ``nsdist evaluate``).

**Sparse inputs**: svmlight files and sparse Parquet datasets.

A wide model is never given one column per feature: its rows come as an
svmlight/LIBSVM text file (plain, ``.gz``, ``.bz2``, ``.xz``) or as a Parquet
dataset in the sparse layout (``indices`` / ``values``, see
:mod:`nsdist.data.layout`).  :func:`sparse_rows` recognises both and streams
``(copied columns, CSR matrix)`` chunks; :func:`score_sparse` scores them, chunk by chunk, with
any object that has ``decision_function`` and ``n_features`` (a
:class:`~nsdist.model.LinearModel`), never densifying.

svmlight rows: column ``j`` of the matrix is index ``j + 1`` in the file (as
ingest writes it; a model trained on an svmlight file's ingested dataset scores
that file); an index above the model's dimension is an error naming the line.
The output copies the label as ``label`` (+1/-1; label > 0 is positive).
Sparse Parquet: the label column and ``keep`` columns are copied; its other columns are not read.

**Tables**: a CSV file or a dense Parquet file/dataset whose columns are the
model's features (:func:`table_rows`, :func:`score_table`).  A model of columns
one-hot encoded at ingest (``categorical=``: the features ``COL=value``) takes
the raw column ``COL``, encoded as ingest encoded it (its values stripped of
spaces and quotes as ingest strips them); a value the model never saw sets none
of its features, and a warning counts such rows.  A CSV file's header line is
detected as ingest detects it; without one its columns are ``col0, col1, ...``.
Every column of a table is a feature, the label, a ``keep`` column (copied) or a
``drop`` column (left out, never read): any other is refused, naming it, so that a
column added upstream is never taken for a feature or silently ignored.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import warnings

import numpy as np
import pyarrow as pa

from nsdist._threads import one_blas_thread
from nsdist.data.dataset import Dataset, _read_footer, file_parts
from nsdist.data.dense import checked_columns
from nsdist.data.fs import display, is_there, resolve
from nsdist.data.labels import LabelRule, LabelValues
from nsdist.data.readers import DEFAULT_CHUNK_ROWS, parse_svmlight, text_blocks
from nsdist.data.sources import category_codes, category_text, infer_format

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["is_svmlight", "is_table_file", "file_input_format", "sparse_input_format", "sparse_rows", "score_sparse",
           "open_sparse", "table_rows", "score_table", "unseen_message", "scorer", "output_format", "write_tables",
           "write_scores", "OUTPUT_ROW_GROUP"]

_OUTPUT_COLUMNS = ("score", "prediction")
#: :func:`table_rows` decodes batches of about this many bytes as float64 (at least 1024 rows), one batch ahead, of
#: one file at a time, so that scoring holds a few batches whatever the input's size.  Arrow's defaults (batches
#: of 131,072 rows, 16 batches and 4 files ahead, every row group pre-buffered) held 6.9 GB scoring one 3.6 GB
#: Parquet file of 6M x 100 float32 in 23 s; these settings 0.6 GB in 10 s (2026-11-30), 4.1-4.5 s once a batch
#: was copied column by column into an F-ordered matrix (2026-12-01)
SCAN_BYTES = 16 * 2**20


def _text_format(src: str, storage_options: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """The format ``src``'s name and kind tell (``"svmlight"`` only for a file), opening no dataset; and the
    name without its compression suffix."""
    fs, path = resolve(src, storage_options)
    name = path.lower().rstrip("/")
    for ext in (".gz", ".bz2", ".xz", ".zst"):
        name = name.removesuffix(ext)
    if name.endswith(".csv"):
        return "csv", name
    try:
        fmt = infer_format(fs, path)
    except ValueError:
        return None, name
    return (None if fmt == "svmlight" and not fs.isfile(path) else fmt), name


def is_svmlight(src: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """``src`` is an svmlight/LIBSVM file (by its name; no Parquet footer is read)."""
    return _text_format(src, storage_options)[0] == "svmlight"


def is_table_file(src: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """``src`` is a CSV file (by its name: ``.csv``, optionally compressed)."""
    return _text_format(src, storage_options)[0] == "csv"


def file_input_format(src: str, storage_options: Mapping[str, Any] | None = None,
                      format: str | None = None) -> str | None:
    """``"svmlight"`` or ``"csv"`` for a file that ``nsdist evaluate`` scores in this process (``format`` as
    given, else told from the name); None for a Parquet dataset, which streams through the cluster."""
    if format is not None:
        return format if format in ("svmlight", "csv") else None
    return "svmlight" if is_svmlight(src, storage_options) else "csv" if is_table_file(src, storage_options) else None


def sparse_input_format(src: str, storage_options: Mapping[str, Any] | None = None, *,
                        format: str | None = None) -> str | None:
    """``"svmlight"`` or ``"sparse-parquet"`` if ``src`` is such an input, else ``None``
    (CSV, a dense Parquet dataset, or a name that does not tell).  ``format``: the input's format as the user
    gave it (``"svmlight"``, ``"csv"``, ``"parquet"``), instead of the one its name tells."""
    fmt, name = _text_format(src, storage_options)
    if format is not None:
        fmt = format
    if fmt in ("svmlight", "csv", None):
        return "svmlight" if fmt == "svmlight" else None
    if fmt == "parquet" or name.endswith((".parquet", ".parq", ".pq")):
        try:
            ds = Dataset.open(src, storage_options=storage_options)
        except ValueError:
            return None
        return "sparse-parquet" if ds.is_sparse else None
    return None


def sparse_rows(src: str, n_features: int, *, label_column: str = "label", keep: Sequence[str] = (),
                drop: Sequence[str] = (), storage_options: Mapping[str, Any] | None = None,
                chunk_rows: int = DEFAULT_CHUNK_ROWS, positive: LabelValues = None, format: str | None = None,
                part: tuple[tuple[int, int], int] | None = None) -> Iterator[tuple[pa.Table, sp.csr_matrix]]:
    """Stream a sparse input as ``(copied columns, X)`` chunks, ``X`` CSR of ``n_features`` columns.

    ``part``: only the partition of the Parquet file ``src`` that reads its row groups ``range(*part[0])``
    (the file's partitions are :meth:`~nsdist.data.Dataset.open`'s, so those of the dataset it came from).

    ``positive``: the label value(s) of the positive class (default: svmlight labels ``> 0``, Parquet labels
    ``{-1, +1}``, ``{0, 1}`` or bool); the label comes out in ``{-1, +1}``.

    Raises
    ------
    ValueError
        If ``src`` is not a sparse input, its dimension differs from (svmlight: exceeds)
        ``n_features``, a ``keep`` or ``drop`` column is missing (svmlight has none), or a row is
        malformed (naming the file and line, or the partition and row).
    """
    fmt = sparse_input_format(src, storage_options, format=format)
    if fmt is None:
        raise ValueError(f"{src} is neither an svmlight file nor a sparse Parquet dataset")
    if fmt == "svmlight":
        if keep or drop:
            raise ValueError(f"--{'keep' if keep else 'drop'} does not apply to svmlight input {src} (it has no "
                             "named columns)")
        fs, path = resolve(src, storage_options)
        rule = LabelRule.create(positive, default="sign")
        for block in text_blocks(fs, path, chunk_rows):
            rows = parse_svmlight(block, rule, n_features=n_features)
            yield pa.table({"label": pa.array(rows.labels, pa.int8())}), rows.to_csr(n_features)
        return
    ds = open_sparse(src, n_features, label_column=label_column, keep=keep, drop=drop,
                     storage_options=storage_options, positive=positive)
    chosen = [p.index for p in ds.partitions if part is None or p.row_groups == tuple(part[0])]
    if part is not None and not chosen:
        raise ValueError(f"{src}: no partition of it reads the row groups {tuple(part[0])} (its partitions: "
                         f"{[p.row_groups for p in ds.partitions]})")
    for i in chosen:
        X, y = ds.read_partition(i)
        copied = {label_column: pa.array(y, pa.int8())}
        if keep:
            table, _ = ds._read(i, list(keep))
            copied.update({c: table.column(c) for c in keep if c != label_column})
        yield pa.table(copied), X


def open_sparse(src: str, n_features: int, *, label_column: str = "label", keep: Sequence[str] = (),
                drop: Sequence[str] = (), storage_options: Mapping[str, Any] | None = None,
                positive: LabelValues = None) -> Dataset:
    """The sparse Parquet dataset ``src``, checked as :func:`sparse_rows` checks it before it reads a row: its
    dimension is ``n_features``, and the ``keep`` and ``drop`` columns are some of its own
    (:func:`check_named`; its other columns are never read, so ``drop`` changes nothing else)."""
    ds = Dataset.open(src, label_column=label_column, storage_options=storage_options, positive=positive)
    if ds.n_features != n_features:
        raise ValueError(f"{src} has {ds.n_features} features, the model expects {n_features}")
    check_named(_read_footer(ds.fs, ds.partitions[0].path)[1].names, src, label_column, keep, drop)
    extra = [c for c in keep if c in _OUTPUT_COLUMNS]
    if extra:
        raise ValueError(f"{src} has a column {extra[0]!r}, which the output uses for the model's {extra[0]}s")
    return ds


def csv_names(src: str, storage_options: Mapping[str, Any] | None, label_column: int | str, keep: Sequence,
              drop: Sequence) -> tuple[str, list[str], list[str]]:
    """``label_column``, ``keep`` and ``drop`` of a CSV file with its columns given by position -- an integer, or
    its text (``"41"``, as a command line gives it) that is no column's name -- as their names (``col41`` in a
    file without a header line), as ingest takes a CSV's columns; names as given."""
    from nsdist.data.readers import CsvLayout, is_position

    if not any(is_position(c, ()) for c in (label_column, *keep, *drop)):  # names: read where the file is scored
        return label_column, list(keep), list(drop)
    fs, path = resolve(src, storage_options)
    layout = CsvLayout.detect(fs, path, label_column=0)          # the names, header line or not

    def name(column: int | str) -> str:
        return layout.names[layout.index(column)] if is_position(column, layout.names) else column

    return name(label_column), [name(c) for c in keep], [name(c) for c in drop]


def check_named(names: Sequence[str], src: str, label_column: str, keep: Sequence[str], drop: Sequence[str]) -> None:
    """Raise ValueError unless every ``keep`` and ``drop`` column is one of the input's ``names``, and no column is
    both copied (the label, ``keep``) and dropped: a misspelt name is named, never silently ignored."""
    for option, wanted in (("--keep", keep), ("--drop", drop)):
        absent = [c for c in wanted if c not in names]
        if absent:
            raise ValueError(f"{option} column(s) {', '.join(map(repr, absent))} not in {src} "
                             f"(columns: {', '.join(names)})")
    both = [c for c in drop if c in keep or c == label_column]
    if both:
        how = "the label" if both[0] == label_column else "--keep"
        raise ValueError(f"column {both[0]!r} of {src} is both copied ({how}) and left out (--drop)")


def score_sparse(model, src: str, *, label_column: str = "label", keep: Sequence[str] = (),
                 drop: Sequence[str] = (), threshold: float = 0.0, storage_options: Mapping[str, Any] | None = None,
                 format: str | None = None, unseen_out: dict[str, list] | None = None,
                 part: tuple[tuple[int, int], int] | None = None,
                 columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
    """The copied columns plus ``score`` and ``prediction`` (+1 where score > threshold) of every row, chunk by
    chunk (an input without rows: one table without rows; ``format``: as :func:`sparse_input_format`).
    ``drop``, ``unseen_out``, ``part`` and ``columns`` as :func:`score_table`'s (sparse rows have no raw one-hot
    columns, so ``unseen_out`` stays empty; only the sparse columns, the label and ``keep`` are read, whatever
    ``columns`` and ``drop``)."""
    empty = True
    for copied, X in sparse_rows(src, model.n_features, label_column=label_column, keep=keep, drop=drop,
                                 storage_options=storage_options, format=format, part=part):
        empty = False
        yield _scored(copied, model.decision_function(X) if X.shape[0] else np.zeros(0), threshold)
    if empty:
        yield pa.table({label_column: pa.array([], pa.int8()), "score": pa.array([], pa.float64()),
                        "prediction": pa.array([], pa.int8())})


def _scored(copied: pa.Table, scores: np.ndarray, threshold: float) -> pa.Table:
    """``copied`` plus the columns ``score`` and ``prediction`` (+1 where score > threshold)."""
    return (copied.append_column("score", pa.array(scores, pa.float64()))
            .append_column("prediction", pa.array(np.where(scores > threshold, 1, -1).astype(np.int8))))


def table_rows(model, src: str, *, label_column: str = "label", keep: Sequence[str] = (),
               drop: Sequence[str] = (), storage_options: Mapping[str, Any] | None = None, format: str | None = None,
               unseen_out: dict[str, list] | None = None, part: tuple[tuple[int, int], int] | None = None,
               columns: Sequence[str] | None = None) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """Stream a CSV or dense Parquet input as ``(copied columns, scores)`` batches (module doc).

    ``columns``: the input's only columns read besides the copied ones (a :class:`~nsdist.data.Dataset`'s
    :attr:`~nsdist.data.columns.FeatureSchema.read_columns`: opened with ``feature_columns``, its other columns
    are not features); None: every column is a feature or copied.  ``drop``: columns of the input that are
    neither features nor copied (an id left out of the output, a timestamp), never read.

    ``part``: ``((start, stop), first row)``: only the row groups ``range(start, stop)`` of the Parquet file
    ``src``, whose first row is the file's row ``first row`` (a :class:`~nsdist.data.dataset.FilePart`).

    ``unseen_out``: where to put, at the end, ``{column: [rows, first value]}`` of the one-hot values the model
    never saw, instead of warning (:func:`unseen_message`): a worker's caller warns on the driver.

    ``model``: anything with ``feature_names``, ``measure`` and ``decision_function``
    (a :class:`~nsdist.model.LinearModel`).  ``format``: ``"csv"`` or ``"parquet"``
    (None: ``.csv`` names are CSV, others Parquet).  The label column (when present)
    and the ``keep`` columns are copied as they are.

    Raises
    ------
    ValueError
        If the input's feature columns differ from the model's (naming the difference), a
        feature column is not numeric, or a ``keep`` or ``drop`` column is missing.
    """
    import pyarrow.csv as pacsv
    import pyarrow.dataset as pads

    from nsdist.model import check_feature_names

    fs, path = resolve(src, storage_options)
    fmt = format or ("csv" if _text_format(src, storage_options)[0] == "csv" else "parquet")
    if fmt == "csv":
        from nsdist.data.readers import CsvLayout

        layout = CsvLayout.detect(fs, path, label_column=0)         # the names, header line or not
        names = list(layout.names)
    else:               # the files Dataset.open would read (a directory, a glob), or the one part
        parquet = pads.ParquetFileFormat(     # pre-buffering kept a file's row groups read so far (SCAN_BYTES)
            default_fragment_scan_options=pads.ParquetFragmentScanOptions(pre_buffer=False))
        if part is None:
            files = _alike(fs, file_parts(src, storage_options)[2])
            data = pads.dataset(files, filesystem=fs, format=parquet)
        else:                                  # a run of one file's row groups
            whole = pads.dataset(path, filesystem=fs, format=parquet)
            fragment = next(whole.get_fragments()).subset(row_group_ids=list(range(*part[0])))
            data = pads.FileSystemDataset([fragment], whole.schema, parquet, filesystem=fragment.filesystem)
        names = data.schema.names
    check_named(names, src, label_column, keep, drop)
    stored, names = names, [c for c in names if c not in drop]       # every column of the input; those read
    if columns is not None:
        names = [c for c in names if c in columns or c == label_column or c in keep]
    copied = [c for c in names if c == label_column or c in keep]
    clash = [c for c in _OUTPUT_COLUMNS if c in copied]
    if clash:
        raise ValueError(f"{src} has a column {clash[0]!r}, which the output uses for the model's {clash[0]}s")
    features = list(model.feature_names)
    onehot = _one_hot_columns(features, [c for c in names if c not in copied])
    encoded = {f for c in onehot for f in onehot[c]}
    plain = [f for f in features if f not in encoded]
    try:                # the other columns must be the model's other features
        check_feature_names([c for c in names if c not in copied and c not in onehot],
                            plain if onehot else model.feature_names, where=f"input {src}")
    except ValueError as exc:
        raise ValueError(f"{exc} (a column that is not a feature can be copied with --keep, or left out with "
                         "--drop)") from None
    if fmt == "csv":
        data = pads.dataset(path, filesystem=fs, format=pads.CsvFileFormat(
            read_options=pacsv.ReadOptions(column_names=stored, skip_rows=layout.header_line),
            convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in onehot})))
    for name in plain:
        kind = data.schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise ValueError(f"column {name!r} of {src} is {kind}, not numeric")
    position = {f: j for j, f in enumerate(features)}
    # float32 columns are checked as they are stored and widened as they are copied into X (exact either way)
    read_as = np.float32 if {data.schema.field(c).type for c in plain} == {pa.float32()} else np.float64
    unseen: dict[str, list] = {}
    yield pa.table({c: pa.array([], data.schema.field(c).type) for c in copied}), np.zeros(0)
    read = {} if part is None else {path: part[1]}       # rows read so far of each file, for messages
    for tagged in data.scanner(columns=copied + [c for c in names if c not in copied], batch_readahead=1,
                               fragment_readahead=1,
                               batch_size=max(1024, SCAN_BYTES // (8 * len(names)))).scan_batches():
        batch, file = tagged.record_batch, tagged.fragment.path
        first_row = read.get(file, 0)
        read[file] = first_row + batch.num_rows
        values = checked_columns(pa.Table.from_batches([batch]), plain, plain, read_as, display(fs, file),
                                 first_row)
        X = np.empty((batch.num_rows, len(values)), order="F")   # column by column: contiguous copies
        for j, v in enumerate(values):
            X[:, j] = v
        if onehot:          # CSR: a column of many categories is never densified
            X = _with_one_hot(X, batch, onehot, [position[f] for f in plain], position, len(features), unseen)
        scores = model.decision_function(X) if batch.num_rows else np.zeros(0)
        yield pa.table({c: batch.column(c) for c in copied}), scores
    if unseen_out is not None:
        unseen_out.update(unseen)
        return
    for column, (count, example) in unseen.items():
        warnings.warn(unseen_message(src, column, count, example), stacklevel=3)


def unseen_message(src: str, column: str, count: int, example: str) -> str:
    """What a scorer says of ``count`` rows of ``src`` whose value of the one-hot ``column`` the model was not
    trained on (``example`` the first such value)."""
    return (f"{src}: {count} row{'s hold' if count != 1 else ' holds'} a value of {column!r} the model was not "
            f"trained on (e.g. {example!r}): {'their' if count != 1 else 'its'} {column} features are 0")


def score_table(model, src: str, *, label_column: str = "label", keep: Sequence[str] = (),
                drop: Sequence[str] = (), threshold: float = 0.0, storage_options: Mapping[str, Any] | None = None,
                format: str | None = None, unseen_out: dict[str, list] | None = None,
                part: tuple[tuple[int, int], int] | None = None,
                columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
    """The copied columns plus ``score`` and ``prediction`` (+1 where score > threshold) of every row of a CSV or
    dense Parquet input, batch by batch (:func:`table_rows`; the first table has no rows)."""
    for copied, scores in table_rows(model, src, label_column=label_column, keep=keep, drop=drop,
                                     storage_options=storage_options, format=format, unseen_out=unseen_out,
                                     part=part, columns=columns):
        yield _scored(copied, scores, threshold)


def scorer(src: str, storage_options: Mapping[str, Any] | None = None, format: str | None = None):
    """:func:`score_sparse` for a sparse input (:func:`sparse_input_format`), else :func:`score_table`."""
    return score_sparse if sparse_input_format(src, storage_options, format=format) else score_table


#: the output name endings of a single scored file, by format; any other name is a directory of part files
_OUTPUT_SUFFIXES = {"csv": (".csv",), "parquet": (".parquet", ".parq", ".pq")}


def output_format(url: str) -> str | None:
    """``"csv"`` for a ``.csv`` name (optionally compressed), ``"parquet"`` for ``.parquet`` / ``.parq`` /
    ``.pq``, None for any other name: a directory of part files (:func:`nsdist.predict`)."""
    name = url.lower().rstrip("/") if not url.endswith("/") else ""
    for ext in (".gz", ".bz2", ".xz", ".zst"):
        name = name.removesuffix(ext)
    return next((fmt for fmt, suffixes in _OUTPUT_SUFFIXES.items() if name.endswith(suffixes)), None)


#: scored output is written in Parquet row groups of at least this many rows
OUTPUT_ROW_GROUP = 1 << 20


def write_tables(f, first: pa.Table, rest: Iterator[pa.Table], fmt: str) -> int:
    """Write ``first`` and then every table of ``rest`` (the same columns) to the binary file ``f`` as one CSV
    or Parquet file (row groups of at least :data:`OUTPUT_ROW_GROUP` rows, each written once it is full);
    the number of rows."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    rows, held = 0, []
    with (pacsv.CSVWriter(f, first.schema) if fmt == "csv" else pq.ParquetWriter(f, first.schema)) as writer:
        for table in itertools.chain([first], rest):
            held.append(table)
            rows += table.num_rows
            if sum(t.num_rows for t in held) >= OUTPUT_ROW_GROUP:
                writer.write_table(pa.concat_tables(held))
                held = []
        if held or rows == 0:
            writer.write_table(pa.concat_tables(held or [first]))
    return rows


def write_scores(model, src: str | Dataset, dst: str, *, label_column: str = "label", keep: Sequence[str] = (),
                 drop: Sequence[str] = (), threshold: float = 0.0, storage_options: Mapping[str, Any] | None = None,
                 format: str | None = None, atomic: bool = True, unseen_out: dict[str, list] | None = None,
                 part: tuple[tuple[int, int], int] | None = None, columns: Sequence[str] | None = None) -> int:
    """Score every row of the input ``src`` and write the copied columns, ``score`` and ``prediction`` to the
    file ``dst`` (CSV for a ``.csv`` name, else Parquet), streaming: one batch in memory at a time.

    ``src`` as :func:`score_sparse` or :func:`score_table` read it (told apart by :func:`scorer`), or a
    :class:`~nsdist.data.Dataset`: its partitions in order (a selection: those rows), each read as a task of
    :func:`nsdist.engine.predict.predict_files` reads it, and only its columns (``columns``: its
    ``schema.read_columns``).  The input's columns are checked before ``dst`` is touched, so a bad input
    leaves it as it was; ``atomic``: written to a sibling and published whole at the end
    (:func:`~nsdist.data.fs.atomic_writer`), else written in place (a part file of a directory published
    whole, :func:`nsdist.engine.predict.predict_files`).
    ``drop``, ``unseen_out``, ``part`` (a run of the file's row groups) and ``columns``: as
    :func:`table_rows`'s.  The scores are computed on one BLAS thread (:mod:`nsdist._threads`), so that a row's
    score has the same bits wherever it is computed: in this process or in a worker, whose BLAS has one thread.
    Returns the number of rows.
    """
    from nsdist.data.fs import access, atomic_writer

    if isinstance(src, Dataset):
        storage_options = storage_options or src.fs.storage_options
        columns = src.schema.read_columns       # its features and label: not the other columns of its files
        units = [(display(src.fs, p.path), None if p.row_groups is None else (p.row_groups, p.file_row))
                 for p in src.file_parts()]
    else:
        fs, path = resolve(src, storage_options)
        with access(fs, path, "read"):
            if not any(c in path for c in "*?[") and not is_there(fs, path):
                raise FileNotFoundError(2, "No such file or directory", src)
        units = [(src, part)]
    score = scorer(units[0][0], storage_options, format)
    tables = itertools.chain.from_iterable(
        score(model, url, label_column=label_column, keep=keep, drop=drop, threshold=threshold,
              storage_options=storage_options, format=format, unseen_out=unseen_out, part=run, columns=columns)
        for url, run in units)
    with one_blas_thread():
        first = next(tables)              # before dst is touched: a bad input leaves it as it was
        fmt = output_format(dst) or "parquet"
        if atomic:
            with atomic_writer(dst, storage_options) as f:
                return write_tables(f, first, tables, fmt)
        out_fs, out = resolve(dst, storage_options)
        with access(out_fs, out, "write"), out_fs.open(out, "wb") as f:
            return write_tables(f, first, tables, fmt)


def _alike(fs, parts: Sequence) -> list[str]:
    """The files of ``parts`` (:class:`~nsdist.data.dataset.FilePart`), in order, once each; a ``ValueError``
    naming the first whose columns are not the first file's (one scan reads them with the first file's)."""
    files = list(dict.fromkeys(p.path for p in parts))
    first = parts[0]
    for p in parts:
        if p.columns != first.columns:
            missing = [c for c in first.columns if c not in p.columns]
            extra = [c for c in p.columns if c not in first.columns]
            raise ValueError(f"{display(fs, p.path)}: its columns are not those of {display(fs, first.path)}"
                             + (f"; it lacks {missing}" if missing else "") + (f"; it adds {extra}" if extra else "")
                             + ("" if missing or extra else "; they come in another order")
                             + ": score the files apart, or write them alike")
    return files


def _one_hot_columns(features: Sequence[str], columns: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{column: {feature: value}}`` for the model's one-hot features ``column=value`` (as ingest names them)
    whose ``column`` is an input column and which are not input columns themselves."""
    present, out = set(columns), {}
    for f in features:
        if f in present:
            continue
        for k in (k for k, ch in enumerate(f) if ch == "="):
            if f[:k] in present:
                out.setdefault(f[:k], {})[f] = f[k + 1:]
                break
    return out


def _with_one_hot(X: np.ndarray, batch: pa.RecordBatch, onehot: dict[str, dict[str, str]], numeric: list[int],
                  position: dict[str, int], d: int, unseen: dict[str, list]):
    """The batch's rows as a CSR matrix of the model's ``d`` features: the numeric columns ``X`` at the positions
    ``numeric``, and a 1 for each row's category of each one-hot column (``unseen``: per column, the rows whose
    value the model never saw, and the first such value)."""
    import scipy.sparse as sp

    n = X.shape[0]
    rows, cols, vals = [np.repeat(np.arange(n), len(numeric))], [np.tile(numeric, n)], [X.ravel()]
    for column, values in onehot.items():
        codes, new = _one_hot_codes(batch.column(column), list(values.values()))
        seen = np.flatnonzero(codes >= 0)
        rows.append(seen)
        cols.append(np.asarray([position[f] for f in values], dtype=np.int64)[codes[seen]])
        vals.append(np.ones(seen.size))
        if new:
            count, example = unseen.get(column, [0, new[1]])
            unseen[column] = [count + new[0], example]
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, d))


def _one_hot_codes(column: pa.Array, values: list[str]) -> tuple[np.ndarray, tuple[int, str] | None]:
    """Each row's position in ``values`` (-1: none) of its text, cleaned as ingest cleans it; and
    ``(rows with a value not in values, the first such value)``, or None."""
    text = category_text(column)
    codes = category_codes(text, values)
    codes = np.where(np.isnan(codes), -1, codes).astype(np.int64)
    missing = np.flatnonzero(codes < 0)
    return codes, ((int(missing.size), text[int(missing[0])].as_py()) if missing.size else None)
