"""Streaming chunk readers for LIBSVM/SVMlight and CSV text (plain, .gz, .bz2, .xz).

Reading is split in two so that it can run on Dask:

1. :func:`text_blocks` (cheap, sequential: compressed text cannot be split)
   cuts the decompressed byte stream into :class:`TextBlock` s of at most
   ``chunk_rows`` lines, remembering the line number of each block's first line;
2. :func:`parse_svmlight` / :func:`parse_csv` (the CPU work, run in tasks)
   turn one block into arrays, validating every field.

Every error is a ``ValueError`` naming the file and the 1-based line number
(and, for CSV, the column). :func:`read_svmlight` and :func:`read_csv` chain
both steps for in-process use.

SVMlight: ``<label> [qid:<n>] <index>:<value> ... [# comment]``; indices are
1-based and strictly increasing within a line; ``qid`` tokens are ignored;
blank and comment-only lines are skipped; a line with a label and no features
is a row of zeros.

CSV: comma-separated, double-quote quoting, one record per line (a quoted field
may not contain a newline); blank lines are skipped. Every field is stripped of
surrounding spaces and single/double quotes before use, so ``'1'`` reads as ``1``.
"""
from __future__ import annotations

import csv
import io
import lzma
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from fsspec.spec import AbstractFileSystem

from nsdist._sparse import scipy_sparse
from nsdist.data.fs import DataNotFoundError, display, resolve
from nsdist.data.labels import LabelRule, LabelValues, as_number, clean_strings

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = [
    "DEFAULT_CHUNK_ROWS", "TextBlock", "text_blocks", "check_chunk_rows",
    "SvmlightRows", "parse_svmlight", "read_svmlight",
    "CsvLayout", "CsvRows", "parse_csv", "read_csv",
    "parse_numbers",
]

DEFAULT_CHUNK_ROWS = 20_000
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class TextBlock:
    """Up to ``chunk_rows`` consecutive raw lines of a text file.

    Attributes
    ----------
    source : str
        The file, as named in messages.
    first_line : int
        1-based line number of ``lines[0]``.
    lines : list of bytes
        The raw lines (with their line terminators).
    """

    source: str
    first_line: int
    lines: list[bytes]

    def decoded(self, k: int) -> str:
        """Line ``k`` of the block as text (without its terminator)."""
        try:
            return self.lines[k].decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.source}: line {self.first_line + k}: not valid UTF-8 text "
                             f"({exc.reason} at byte {exc.start})") from None


def check_chunk_rows(chunk_rows: int) -> int:
    """Validate the ``chunk_rows`` option (a positive integer)."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    return int(chunk_rows)


def text_blocks(fs: AbstractFileSystem, path: str, chunk_rows: int) -> Iterator[TextBlock]:
    """Stream a (possibly compressed) text file as blocks of at most ``chunk_rows`` lines.

    Compression is inferred from the file name (``.gz``, ``.bz2``, ``.xz``, ...).
    Only one block is held at a time. A leading UTF-8 byte-order mark is dropped.

    Raises
    ------
    ValueError
        If the file does not exist (a :class:`DataNotFoundError`) or cannot be
        read or decompressed (naming the file and the last line read).
    """
    chunk_rows = check_chunk_rows(chunk_rows)
    name = display(fs, path)
    if not fs.isfile(path):
        raise DataNotFoundError(f"{name}: no such file")
    lines: list[bytes] = []
    first, number = 1, 0
    try:
        with fs.open(path, "rb", compression="infer") as stream:
            for number, line in enumerate(stream, 1):
                if number == 1 and line.startswith(_BOM):
                    line = line[len(_BOM):]
                lines.append(line)
                if len(lines) == chunk_rows:
                    yield TextBlock(name, first, lines)
                    first, lines = number + 1, []
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise ValueError(f"{name}: cannot read the file after line {number}: {exc}") from exc
    if lines:
        yield TextBlock(name, first, lines)


class NotANumber(ValueError):
    """A text that should be a number is not one (:func:`parse_numbers`)."""


def parse_numbers(strings: pa.Array, type_: pa.DataType, where: Callable[[int], str],
                  what: str) -> np.ndarray:
    """Convert cleaned strings to numbers of ``type_``; NaN/inf are rejected.

    Raises
    ------
    NotANumber
        ``"<where(i)>: <what> '<text>' is not a number"`` for the first offending entry ``i``.
    ValueError
        ``"<where(i)>: <what> '<text>' is not finite"``.
    """
    try:
        out = pc.cast(strings, type_).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        lo, hi = 0, len(strings)  # strings[lo:hi] holds a value that does not convert
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                pc.cast(strings.slice(lo, mid - lo), type_)
                lo = mid
            except pa.ArrowInvalid:
                hi = mid
        kind = "an integer" if pa.types.is_integer(type_) else "a number"
        raise NotANumber(f"{where(lo)}: {what} {strings[lo].as_py()!r} is not {kind}") from None
    if out.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(out))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{where(i)}: {what} {strings[i].as_py()!r} is not finite")
    return out


# ----------------------------------------------------------------------------- svmlight


@dataclass(frozen=True)
class SvmlightRows:
    """Parsed svmlight rows in CSR form.

    Attributes
    ----------
    labels : ndarray of int8 in {-1, +1}
    lines : ndarray of int64, the 1-based line number of each row
    indptr : ndarray of int64, shape (n + 1,)
    indices : ndarray of int64, the 1-based feature indices as in the file
    values : ndarray of float64
    dropped : int, rows dropped by a ``negative=`` rule
    """

    labels: np.ndarray
    lines: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dropped: int = 0

    @property
    def max_index(self) -> int:
        """The largest feature index used (0 if there are no features)."""
        return int(self.indices.max()) if self.indices.size else 0

    def to_csr(self, n_features: int, dtype=np.float64) -> sp.csr_matrix:
        """``(n, n_features)`` CSR matrix with 0-based columns ``indices - 1``; the file's
        entries exactly as written (an explicit ``j:0`` stays a stored zero)."""
        itype = np.int32 if max(n_features, len(self.indices)) < 2**31 else np.int64
        return scipy_sparse().csr_matrix((self.values.astype(dtype), (self.indices - 1).astype(itype),
                              self.indptr.astype(itype)), shape=(len(self.labels), n_features), copy=False)

    def to_dense(self, n_features: int, dtype=np.float64) -> np.ndarray:
        """Dense ``(n, n_features)`` matrix (Fortran order: one contiguous column per feature)."""
        n = len(self.labels)
        out = np.zeros((n, n_features), dtype=dtype, order="F")
        rows = np.repeat(np.arange(n), np.diff(self.indptr))
        out[rows, self.indices - 1] = self.values
        return out


def parse_svmlight(block: TextBlock, rule: LabelRule | None = None, *,
                   n_features: int | None = None) -> SvmlightRows:
    """Parse one block of svmlight lines.

    Parameters
    ----------
    block : TextBlock
    rule : LabelRule, optional
        Default: a numeric label ``> 0`` is positive.
    n_features : int, optional
        If given, an index above it is an error.

    Raises
    ------
    ValueError
        Naming the file and line: a token that is not ``index:value``, a
        non-integer or non-positive index, indices not strictly increasing,
        an index above ``n_features``, a non-finite value, an invalid label.
    """
    rule = rule or LabelRule(default="sign")
    labels: list[str] = []
    lines: list[int] = []
    indptr = [0]
    indices: list[str] = []
    values: list[str] = []
    for k in range(len(block.lines)):
        tokens = block.decoded(k).split("#", 1)[0].split()
        if not tokens:
            continue
        if not labels and "," in tokens[0] and ":" not in block.decoded(k):
            raise ValueError(f"{block.source}: line {block.first_line + k}: comma-separated fields and no "
                             "index:value pair: not svmlight. A CSV file whose name does not say so? Name it "
                             ".csv, or pass format='csv'")
        labels.append(tokens[0])
        lines.append(block.first_line + k)
        for token in tokens[1:]:
            index, sep, value = token.partition(":")
            if not sep:
                raise ValueError(f"{block.source}: line {block.first_line + k}: "
                                 f"{token!r} is not an index:value pair")
            if index != "qid":
                indices.append(index)
                values.append(value)
        indptr.append(len(indices))
    line_of_row = np.array(lines, dtype=np.int64)
    ptr = np.array(indptr, dtype=np.int64)

    def at_token(t: int) -> str:
        return f"{block.source}: line {line_of_row[np.searchsorted(ptr, t, side='right') - 1]}"

    idx = parse_numbers(pa.array(indices, pa.string()), pa.int64(), at_token, "feature index")
    val = parse_numbers(pa.array(values, pa.string()), pa.float64(), at_token, "feature value")
    row_of_token = np.repeat(np.arange(len(lines)), np.diff(ptr))
    checks = [(idx < 1, "is not a positive integer (svmlight indices are 1-based)")]
    if n_features is not None:
        checks.append((idx > n_features, f"exceeds n_features = {n_features}"))
    for bad, why in checks:
        if bad.any():
            t = int(np.argmax(bad))
            raise ValueError(f"{at_token(t)}: feature index {idx[t]} {why}")
    unsorted = (np.diff(idx) <= 0) & (row_of_token[1:] == row_of_token[:-1])
    if unsorted.any():
        t = int(np.argmax(unsorted)) + 1
        raise ValueError(f"{at_token(t)}: feature index {idx[t]} follows {idx[t - 1]}; "
                         "indices must be strictly increasing within a line")
    codes, _ = rule.classify(clean_strings(pa.array(labels, pa.string())),
                             lambda i: f"{block.source}: line {line_of_row[i]}")
    keep = codes != 0
    if keep.all():
        return SvmlightRows(codes, line_of_row, ptr, idx, val)
    token_kept = np.repeat(keep, np.diff(ptr))
    kept_ptr = np.concatenate([[0], np.cumsum(np.diff(ptr)[keep])])
    return SvmlightRows(codes[keep], line_of_row[keep], kept_ptr, idx[token_kept], val[token_kept],
                        dropped=int((~keep).sum()))


def read_svmlight(url: str, *, positive: LabelValues = None, negative: LabelValues = None,
                  n_features: int | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                  storage_options: dict | None = None) -> Iterator[SvmlightRows]:
    """Stream an svmlight/LIBSVM file as :class:`SvmlightRows` chunks of at most ``chunk_rows`` lines.

    ``positive`` / ``negative`` as in :class:`~nsdist.data.labels.LabelRule`
    (default: label ``> 0`` is positive).
    """
    rule = LabelRule.create(positive, negative, default="sign")
    fs, path = resolve(url, storage_options)
    for block in text_blocks(fs, path, chunk_rows):
        yield parse_svmlight(block, rule, n_features=n_features)


# ----------------------------------------------------------------------------- CSV


def _split_fields(text: str, where: str) -> list[str]:
    try:
        return next(csv.reader([text], strict=True))
    except csv.Error as exc:
        raise ValueError(f"{where}: malformed CSV ({exc})") from None


def is_position(column: int | str, names: Sequence[str]) -> bool:
    """Whether ``column`` gives a column by its position: an integer, or a text that is no column's name but an
    integer (``"3"``, as a command line gives it)."""
    if isinstance(column, str):
        return column not in names and column.lstrip("-").isdigit()
    return isinstance(column, (int, np.integer)) and not isinstance(column, bool)


def _resolve_column(column: int | str, names: Sequence[str], what: str, source: str) -> int:
    """Index of a column given by name or position (:func:`is_position`; negative counts from the end)."""
    m = len(names)
    if isinstance(column, str) and is_position(column, names):
        column = int(column)
    if isinstance(column, (int, np.integer)) and not isinstance(column, bool):
        if not -m <= column < m:
            raise ValueError(f"{source}: {what} {column} is out of range for {m} columns")
        return int(column) % m
    if isinstance(column, str):
        if column in names:
            return names.index(column)
        raise ValueError(f"{source}: {what} {column!r} is not a column; the columns are {list(names)} "
                         "(files without a header line name them col0, col1, ... or take an integer index)")
    raise ValueError(f"{what} must be a column name or integer index, got {column!r}")


@dataclass(frozen=True)
class CsvLayout:
    """The fields of a CSV file: their names, which is the label, which are categorical.

    Attributes
    ----------
    source : str
        The file, for messages.
    names : tuple of str
        One per field: from the header line, else ``col0, col1, ...``.
    label : int
        Index of the label field.
    categorical : tuple of int
        Indices of the categorical fields (sorted).
    header_line : int
        1-based line number of the header line, 0 if the file has none.
    dropped : tuple of int
        Indices of the fields that are neither features nor the label (an id, a
        timestamp): never parsed.
    """

    source: str
    names: tuple[str, ...]
    label: int
    categorical: tuple[int, ...]
    header_line: int
    dropped: tuple[int, ...] = ()

    @property
    def features(self) -> tuple[int, ...]:
        """Indices of the feature fields (numeric and categorical), in file order."""
        return tuple(j for j in range(len(self.names)) if j != self.label and j not in self.dropped)

    @property
    def numeric(self) -> tuple[int, ...]:
        """Indices of the numeric feature fields, in file order."""
        return tuple(j for j in self.features if j not in self.categorical)

    def index(self, column: int | str) -> int:
        """Index of a column given by name or integer position (negative counts from the end)."""
        return _resolve_column(column, self.names, "column", self.source)

    @classmethod
    def detect(cls, fs: AbstractFileSystem, path: str, *, label_column: int | str = "label",
               categorical: Sequence[int | str] = (), header: bool | None = None,
               drop: Sequence[int | str] = ()) -> CsvLayout:
        """Read the first non-blank line of a CSV file and resolve the column options.

        ``header=None`` detects a header line: the first line is a header iff
        none of its fields is a number.

        Raises
        ------
        ValueError
            If the file has no lines, the header has duplicate names, the label, a
            categorical or a ``drop`` column does not exist, the label is
            categorical or dropped, or a column is both categorical and dropped.
        """
        source = display(fs, path)
        for block in text_blocks(fs, path, 1):
            text = block.decoded(0)
            if text.strip():
                break
        else:
            raise ValueError(f"{source}: the file has no data lines")
        first = block.first_line
        fields = clean_strings(pa.array(_split_fields(text, f"{source}: line {first}"), pa.string())
                               ).to_pylist()
        if header is None:
            header = all(as_number(f) is None for f in fields)
        names = tuple(f or f"col{j}" for j, f in enumerate(fields)) if header else \
            tuple(f"col{j}" for j in range(len(fields)))
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"{source}: line {first}: duplicate column names {duplicates}")
        label = _resolve_column(label_column, names, "label_column", source)
        cats = sorted({_resolve_column(c, names, "categorical column", source) for c in categorical})
        if label in cats:
            raise ValueError(f"{source}: the label column {names[label]!r} cannot be categorical")
        dropped = sorted({_resolve_column(c, names, "column to drop", source) for c in drop})
        for j in dropped:
            if j == label or j in cats:
                raise ValueError(f"{source}: column {names[j]!r} is the label" if j == label else
                                 f"{source}: column {names[j]!r} is both categorical and dropped")
        return cls(source, names, label, tuple(cats), first if header else 0, tuple(dropped))


@dataclass(frozen=True)
class CsvRows:
    """Parsed CSV rows.

    Attributes
    ----------
    labels : ndarray of int8 in {-1, +1}
    lines : ndarray of int64, the 1-based line number of each row
    numeric : ndarray of float64, shape (n, len(layout.numeric)), Fortran order
        (``None`` when parsed with ``numeric=False``)
    categorical : tuple of pyarrow string arrays, one per ``layout.categorical``
    dropped : int, rows dropped by a ``negative=`` rule
    negative_forms : dict, negative label encodings seen -> first line (binary default)
    """

    labels: np.ndarray
    lines: np.ndarray
    numeric: np.ndarray | None
    categorical: tuple[pa.Array, ...]
    dropped: int
    negative_forms: dict[str, int]


def _csv_failure(block: TextBlock, kept: Sequence[int], n_fields: int, reason: str) -> ValueError:
    """Find the line the Arrow CSV parser choked on (error path only)."""
    for k in kept:
        where = f"{block.source}: line {block.first_line + k}"
        found = len(_split_fields(block.decoded(k), where))
        if found != n_fields:
            return ValueError(f"{where}: expected {n_fields} fields, found {found}")
    lines = f"lines {block.first_line + kept[0]}-{block.first_line + kept[-1]}"
    return ValueError(f"{block.source}: {lines}: cannot parse CSV ({reason})")


def parse_csv(block: TextBlock, layout: CsvLayout, rule: LabelRule | None = None, *,
              numeric: bool = True) -> CsvRows:
    """Parse one block of CSV lines (the header line, if in the block, is skipped).

    Parameters
    ----------
    block : TextBlock
    layout : CsvLayout
    rule : LabelRule, optional
        Default: label ``1`` positive, ``-1`` / ``0`` negative.
    numeric : bool
        Convert and validate the numeric feature fields (the first ingest pass
        only needs labels and categories).

    Raises
    ------
    ValueError
        Naming the file, line and (for values) column: wrong number of fields,
        malformed quoting, invalid UTF-8, a value that is not a finite number,
        an invalid label.
    """
    rule = rule or LabelRule()
    kept = [k for k, raw in enumerate(block.lines)
            if raw.strip() and block.first_line + k > layout.header_line]
    m = len(layout.names)
    columns = [f"c{j}" for j in range(m)]
    needed = [layout.label, *layout.categorical, *(layout.numeric if numeric else ())]
    table = pa.table({columns[j]: pa.array([], pa.string()) for j in needed})
    if kept:
        data = b"\n".join(block.lines[k].rstrip(b"\r\n") for k in kept) + b"\n"
        try:
            table = pacsv.read_csv(
                io.BytesIO(data),
                read_options=pacsv.ReadOptions(column_names=columns, use_threads=False),
                parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False),
                convert_options=pacsv.ConvertOptions(
                    column_types={c: pa.string() for c in columns},
                    include_columns=[columns[j] for j in needed],
                    strings_can_be_null=False, quoted_strings_can_be_null=False))
        except pa.ArrowException as exc:
            raise _csv_failure(block, kept, m, str(exc)) from None
        if table.num_rows != len(kept):
            raise _csv_failure(block, kept, m, "a quoted field runs past the end of its line")
    line_of_row = block.first_line + np.array(kept, dtype=np.int64)
    codes, forms = rule.classify(clean_strings(table.column(columns[layout.label]).combine_chunks()),
                                 lambda i: f"{block.source}: line {line_of_row[i]}")
    keep = codes != 0
    table, line_of_row = table.filter(pa.array(keep)), line_of_row[keep]

    def cells(j: int) -> pa.Array:
        return clean_strings(table.column(columns[j]).combine_chunks())

    matrix = None
    if numeric:
        matrix = np.empty((table.num_rows, len(layout.numeric)), dtype=np.float64, order="F")
        text: list[tuple[str, NotANumber]] = []         # the columns holding text, all named at once
        for col, j in enumerate(layout.numeric):
            try:
                matrix[:, col] = parse_numbers(
                    cells(j), pa.float64(),
                    lambda i, j=j: f"{block.source}: line {line_of_row[i]}, column {layout.names[j]!r}", "value")
            except NotANumber as exc:
                text.append((layout.names[j], exc))
        if text:
            names = [name for name, _ in text]
            raise ValueError(f"{text[0][1]} ({'a column' if len(text) == 1 else f'{len(text)} columns'} of "
                             f"categories? one-hot encode {'it' if len(text) == 1 else 'them'}: "
                             f"categorical={names!r})") from None
    return CsvRows(labels=codes[keep], lines=line_of_row, numeric=matrix,
                   categorical=tuple(cells(j) for j in layout.categorical),
                   dropped=int((~keep).sum()),
                   negative_forms={form: int(block.first_line + kept[i]) for form, i in forms.items()})


def read_csv(url: str, *, label_column: int | str = "label", positive: LabelValues = None,
             negative: LabelValues = None, categorical: Sequence[int | str] = (),
             header: bool | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
             storage_options: dict | None = None) -> Iterator[CsvRows]:
    """Stream a CSV file as :class:`CsvRows` chunks of at most ``chunk_rows`` lines.

    Options as in :meth:`CsvLayout.detect` and :class:`~nsdist.data.labels.LabelRule`.
    Categorical fields are returned as (cleaned) strings.
    """
    rule = LabelRule.create(positive, negative, default="binary")
    fs, path = resolve(url, storage_options)
    layout = CsvLayout.detect(fs, path, label_column=label_column, categorical=categorical,
                              header=header)
    for block in text_blocks(fs, path, chunk_rows):
        yield parse_csv(block, layout, rule)
