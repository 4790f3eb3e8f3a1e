"""Ingest inputs: format detection and, per format, how to scan and encode a chunk.

A source is a small picklable object. Ingest calls, in this order:

``blocks(chunk_rows)``   on the driver: the input cut into chunks (text blocks,
                         or partition indices for Parquet);
``scan(block)``          in a task: validate a chunk and summarise it (rows,
                         positives, largest svmlight index, CSV/Parquet categories);
``planned(summaries)``   on the driver: fix the dimension / categories;
``encode(block, dtype)`` in a task: the chunk as ``(X, y)``, ``X`` a dense
                         Fortran-ordered array or a ``scipy.sparse.csr_matrix``
                         (svmlight always; CSV or Parquet with categorical columns;
                         a sparse Parquet dataset); ingest writes it in the layout
                         chosen (:mod:`nsdist.data.layout`).

Each summary also counts the chunk's non-zeros (``nnz``: exact for svmlight and
sparse Parquet input, an upper bound for CSV), from which ingest chooses the
layout and sizes sparse partitions.

Feature names: CSV header names (``col0, col1, ...`` without a header, by the
0-based field position), ``"<column>=<category>"`` for one-hot columns;
``x1 ... x{d}`` for svmlight (the file's own 1-based indices, kept as a compact
:class:`~nsdist._names.NameRange`); the source's names for Parquet (``"<column>=<category>"``
for its one-hot columns).

One-hot encoding: each categorical column becomes one 0/1 column per category,
in sorted order, in place of the column. Pass the ``categories`` recorded in a
training set's metadata as ``categorical=`` to encode test data the same way:
a category not in that list encodes as all zeros.
"""
from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec.spec import AbstractFileSystem
from fsspec.utils import infer_compression

from nsdist._names import NameRange
from nsdist._sparse import issparse, scipy_sparse
from nsdist.data.columns import check_drop, check_numbers
from nsdist.data.dataset import Dataset, feature_candidates
from nsdist.data.fs import DataNotFoundError, display, resolve
from nsdist.data.labels import LabelRule, LabelValues, clean_strings
from nsdist.data.readers import CsvLayout, TextBlock, parse_csv, parse_svmlight, text_blocks

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["FORMATS", "infer_format", "open_source", "category_text", "category_codes", "one_hot_csr", "Summary",
           "Source", "SvmlightSource", "CsvSource", "ParquetSource"]

FORMATS = ("svmlight", "csv", "parquet")
_SUFFIX_FORMATS = {**dict.fromkeys((".svm", ".libsvm", ".svmlight", ".t", ".tr", ".trn", ".tst", ".val"),
                                   "svmlight"),
                   ".csv": "csv", **dict.fromkeys((".parquet", ".parq", ".pq"), "parquet")}

Categorical = Sequence[int | str] | Mapping[int | str, Sequence[str]]


def infer_format(fs: AbstractFileSystem, path: str) -> str:
    """``"svmlight"``, ``"csv"`` or ``"parquet"`` from the name (after any compression suffix).

    A directory or glob is Parquet; a name without extension (LIBSVM's ``a9a``,
    ``w8a``, ``ijcnn1``) is svmlight.

    Raises
    ------
    ValueError
        If the name does not tell, asking for ``format=``.
    """
    if any(c in path for c in "*?[") or fs.isdir(path):
        return "parquet"
    name = posixpath.basename(path)
    if infer_compression(name):
        name = name.rsplit(".", 1)[0]
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        return "svmlight"
    fmt = _SUFFIX_FORMATS.get(f".{ext.lower()}")
    if fmt is None:
        raise ValueError(f"cannot tell the format of {display(fs, path)} from its name; "
                         "pass format='svmlight', 'csv' or 'parquet'")
    return fmt


@dataclass(frozen=True)
class Summary:
    """What the first pass learns from one chunk.

    ``lines``: raw lines (or rows) the task held; ``max_index``: largest svmlight
    index; ``categories``: distinct values per CSV categorical column;
    ``negative_forms``: negative label encodings seen -> first line;
    ``nnz``: entries the chunk stores in the sparse layout (CSV: an upper bound).
    """

    rows: int
    positives: int
    dropped: int
    lines: int
    max_index: int = 0
    categories: tuple[tuple[str, ...], ...] = ()
    negative_forms: dict[str, int] = field(default_factory=dict)
    nnz: int = 0


class Source(Protocol):
    """Interface of an ingest input (see the module docstring)."""

    @property
    def name(self) -> str:
        """The input, as named in messages."""

    def blocks(self, chunk_rows: int) -> Iterable[Any]:
        """The input cut into chunks of at most ``chunk_rows`` rows (Parquet: one per partition)."""

    def scan(self, block: Any) -> Summary:
        """Validate and summarise one chunk."""

    def planned(self, summaries: Sequence[Summary]) -> Source:
        """This source with the encoding fixed from all chunk summaries."""

    @property
    def feature_names(self) -> list[str]:
        """Names of the encoded features (after :meth:`planned`)."""

    def encode(self, block: Any, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """One chunk as ``(X, y)``: ``X`` ``(n, d)`` of ``dtype`` (Fortran-ordered ndarray or CSR), ``y`` int8 ±1."""

    def describe(self) -> dict:
        """``{"source": ..., "label_mapping": ..., "categories": ...}`` for the metadata."""


@dataclass(frozen=True)
class TextFileSource:
    """A text file read in line blocks: what the svmlight and CSV sources share."""

    fs: AbstractFileSystem
    path: str

    @property
    def name(self) -> str:
        return display(self.fs, self.path)

    def blocks(self, chunk_rows: int) -> Iterator[TextBlock]:
        return text_blocks(self.fs, self.path, chunk_rows)


@dataclass(frozen=True)
class SvmlightSource(TextFileSource):
    """An svmlight/LIBSVM text file (``n_features`` fixed by :meth:`planned`)."""

    rule: LabelRule
    n_features: int | None = None

    def scan(self, block: TextBlock) -> Summary:
        rows = parse_svmlight(block, self.rule, n_features=self.n_features)
        return Summary(len(rows.labels), int((rows.labels > 0).sum()), rows.dropped, len(block.lines),
                       max_index=rows.max_index, nnz=len(rows.indices))

    def planned(self, summaries: Sequence[Summary]) -> SvmlightSource:
        d = self.n_features or max((s.max_index for s in summaries), default=0)
        if d == 0:
            raise ValueError(f"{self.name}: no feature index:value pairs; pass n_features= for "
                             "a file of empty rows")
        return replace(self, n_features=d)

    @property
    def feature_names(self) -> NameRange:
        return NameRange("x", 1, self.n_features)

    def encode(self, block: TextBlock, dtype: np.dtype) -> tuple[sp.csr_matrix, np.ndarray]:
        rows = parse_svmlight(block, self.rule, n_features=self.n_features)
        return rows.to_csr(self.n_features, dtype), rows.labels

    def describe(self) -> dict:
        return {"source": {"format": "svmlight", "url": self.name},
                "label_mapping": self.rule.describe(), "categories": {}}


@dataclass(frozen=True)
class CsvSource(TextFileSource):
    """A CSV text file (``categories`` fixed by :meth:`planned` unless given)."""

    layout: CsvLayout
    rule: LabelRule
    categories: tuple[tuple[str, ...], ...] | None = None

    def scan(self, block: TextBlock) -> Summary:
        rows = parse_csv(block, self.layout, self.rule, numeric=False)
        n_fields = len(self.layout.numeric) + len(self.layout.categorical)
        return Summary(len(rows.labels), int((rows.labels > 0).sum()), rows.dropped, len(block.lines),
                       categories=tuple(tuple(pc.unique(c).to_pylist()) for c in rows.categorical),
                       negative_forms=rows.negative_forms, nnz=len(rows.labels) * n_fields)

    def planned(self, summaries: Sequence[Summary]) -> CsvSource:
        forms: dict[str, int] = {}
        for s in summaries:
            for form, line in s.negative_forms.items():
                forms.setdefault(form, line)
        if len(forms) > 1:
            seen = ", ".join(f"{form!r} (line {line})"
                             for form, line in sorted(forms.items(), key=lambda item: item[1]))
            raise ValueError(f"{self.name}: negative labels use several encodings: {seen}; "
                             "pass positive= (and negative=) to say which labels are which")
        if self.categories is not None:
            return self
        found = [sorted({v for s in summaries for v in s.categories[k]})
                 for k in range(len(self.layout.categorical))]
        return replace(self, categories=tuple(tuple(values) for values in found))

    @property
    def feature_names(self) -> list[str]:
        names, layout = [], self.layout
        for j in layout.features:
            name = layout.names[j]
            if j in layout.categorical:
                names += [f"{name}={value}" for value in self.categories[layout.categorical.index(j)]]
            else:
                names.append(name)
        return names

    def encode(self, block: TextBlock, dtype: np.dtype) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
        rows = parse_csv(block, self.layout, self.rule)
        if self.layout.categorical:
            return self._encode_sparse(rows, dtype), rows.labels
        return np.asarray(rows.numeric, dtype=dtype, order="F"), rows.labels      # the fields in file order

    def _encode_sparse(self, rows, dtype: np.dtype) -> sp.csr_matrix:
        """One-hot and numeric fields straight into CSR (many categories never densify)."""
        layout, fields = self.layout, []
        for j in layout.features:
            if j in layout.categorical:
                k = layout.categorical.index(j)
                fields.append((category_codes(rows.categorical[k], self.categories[k]), len(self.categories[k])))
            else:
                fields.append((rows.numeric[:, layout.numeric.index(j)], None))
        return one_hot_csr(len(rows.labels), fields, dtype)

    def describe(self) -> dict:
        layout = self.layout
        return {"source": {"format": "csv", "url": self.name, "columns": list(layout.names),
                           "header": layout.header_line > 0,
                           **({"dropped": [layout.names[j] for j in layout.dropped]} if layout.dropped else {})},
                "label_mapping": {"column": layout.names[layout.label], **self.rule.describe()},
                "categories": {layout.names[j]: list(values)
                               for j, values in zip(layout.categorical, self.categories)}}


@dataclass(frozen=True)
class ParquetSource:
    """A Parquet dataset (labels in {-1,+1}/{0,1}/bool, or any values with ``positive=``); one chunk per
    partition.  ``dataset`` reads the label and the numeric features; the ``categorical`` columns (any type
    Arrow casts to text: strings, dictionaries, integer codes) are read beside them and one-hot encoded, each
    in its place in ``columns``, the feature columns in order (``categories`` fixed by :meth:`planned`
    unless given)."""

    dataset: Dataset
    categorical: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    categories: tuple[tuple[str, ...], ...] | None = None

    @property
    def name(self) -> str:
        return self.dataset.url

    def blocks(self, chunk_rows: int) -> range:
        return range(len(self.dataset.partitions))

    def scan(self, block: int) -> Summary:
        if self.dataset.is_sparse:
            X, y = self.dataset.read_partition(block)
            return Summary(len(y), int((y > 0).sum()), 0, len(y), nnz=X.nnz)
        y = self.dataset.read_labels(block)
        found = tuple(tuple(pc.unique(text).to_pylist()) for text in
                      (self._category_text(block) if self.categorical else ()))
        return Summary(len(y), int((y > 0).sum()), 0, len(y), categories=found,
                       nnz=len(y) * (self.dataset.n_features + len(self.categorical)))

    def planned(self, summaries: Sequence[Summary]) -> ParquetSource:
        if self.categories is not None or not self.categorical:
            return self
        return replace(self, categories=tuple(tuple(sorted({v for s in summaries for v in s.categories[k]}))
                                              for k in range(len(self.categorical))))

    @property
    def feature_names(self) -> list[str]:
        if not self.categorical:
            return self.dataset.feature_names
        names: list[str] = []
        for column in self.columns:
            if column in self.categorical:
                names += [f"{column}={v}" for v in self.categories[self.categorical.index(column)]]
            else:
                names.append(column)
        return names

    def encode(self, block: int, dtype: np.dtype) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
        X, y = self.dataset.read_partition(block, dtype=dtype)
        if not self.categorical:
            return (X if issparse(X) else np.asfortranarray(X)), y
        texts, numeric = self._category_text(block), {c: j for j, c in enumerate(self.dataset.feature_names)}
        fields = []
        for column in self.columns:
            if column in numeric:
                fields.append((X[:, numeric[column]], None))
            else:
                k = self.categorical.index(column)
                fields.append((category_codes(texts[k], self.categories[k]), len(self.categories[k])))
        return one_hot_csr(len(y), fields, dtype), y

    def _category_text(self, block: int) -> list[pa.Array]:
        """Partition ``block``'s categorical columns as text, cleaned as CSV fields are (a null names its row)."""
        table, out = self.dataset.read_table(block, self.categorical), []
        for column in self.categorical:
            values = table.column(column).combine_chunks()
            if values.null_count:
                row = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
                raise ValueError(f"{self.dataset.partition_name(block)}: row {row}: categorical column {column!r} "
                                 "is missing (null)")
            try:
                out.append(category_text(values))
            except pa.ArrowException as exc:
                raise ValueError(f"{self.dataset.partition_name(block)}: categorical column {column!r} of type "
                                 f"{values.type} cannot be read as text ({exc})") from None
        return out

    def describe(self) -> dict:
        source = {"format": "parquet", "url": self.name, "fingerprint": self.dataset.fingerprint}
        return {"source": {**source, "columns": list(self.columns)} if self.categorical else source,
                "label_mapping": {"column": self.dataset.label_column,
                                  **LabelRule(self.dataset.schema.positive).describe()},
                "categories": {c: list(v) for c, v in zip(self.categorical, self.categories or ())}}


def category_text(values: pa.Array) -> pa.Array:
    """A column of categories as the text ingest compares (any type Arrow casts to text; spaces and quotes
    around it stripped, as CSV fields are)."""
    return clean_strings(pc.cast(values, pa.string()))


def category_codes(text: pa.Array, categories: Sequence[str]) -> np.ndarray:
    """Each row's position in ``categories`` (NaN: none of them)."""
    return pc.index_in(text, value_set=pa.array(categories, pa.string())).to_numpy(zero_copy_only=False)


def one_hot_csr(n: int, fields: Sequence[tuple[np.ndarray, int | None]], dtype: np.dtype) -> sp.csr_matrix:
    """``n`` rows of feature fields side by side as CSR: ``(values, None)`` a numeric column (its zeros not
    stored), ``(codes, m)`` a one-hot column of ``m`` categories (a row's 1 at its code; NaN: all zeros)."""
    rr, cc, vv = [], [], []
    column = 0
    for values, width in fields:
        if width is None:
            nz = np.flatnonzero(values)
            rr.append(nz)
            cc.append(np.full(len(nz), column, dtype=np.int64))
            vv.append(values[nz])
            column += 1
        else:
            seen = np.flatnonzero(~np.isnan(values))
            rr.append(seen)
            cc.append(column + values[seen].astype(np.int64))
            vv.append(np.ones(len(seen)))
            column += width
    X = scipy_sparse().csr_matrix((np.concatenate(vv).astype(dtype), (np.concatenate(rr), np.concatenate(cc))),
                                  shape=(n, column))
    X.sort_indices()
    return X


def open_source(src: str, *, format: str | None = None, label_column: int | str = "label",
                positive: LabelValues = None, negative: LabelValues = None,
                categorical: Categorical = (), header: bool | None = None,
                n_features: int | None = None, storage_options: Mapping[str, Any] | None = None,
                feature_columns: Sequence[str] | None = None, drop: Sequence[int | str] = ()) -> Source:
    """Resolve ``src`` and the format options of :func:`nsdist.data.ingestion.ingest` into a source.

    Raises
    ------
    ValueError
        For an unknown format, options that do not apply to the format, a
        missing file (:class:`~nsdist.data.fs.DataNotFoundError`), or bad
        option values.
    """
    fs, path = resolve(src, storage_options)
    fmt = format if format is not None else infer_format(fs, path)
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    given = {"categorical": bool(categorical), "header": header is not None,
             "positive": positive is not None, "negative": negative is not None,
             "n_features": n_features is not None, "label_column": label_column != "label",
             "feature_columns": feature_columns is not None, "drop": bool(drop)}
    allowed = {"csv": {"categorical", "header", "positive", "negative", "label_column", "drop"},
               "svmlight": {"positive", "negative", "n_features"},
               "parquet": {"label_column", "positive", "categorical", "feature_columns", "drop"}}[fmt]
    wrong = [option for option, used in given.items() if used and option not in allowed]
    if wrong:
        raise ValueError(f"option(s) {wrong} do not apply to {fmt} input {display(fs, path)}")
    if fmt == "parquet":
        return _parquet_source(src, label_column, positive, categorical, feature_columns, storage_options, drop)
    if not fs.isfile(path):
        raise DataNotFoundError(f"no such file: {display(fs, path)}")
    if fmt == "svmlight":
        if n_features is not None and (isinstance(n_features, bool) or not isinstance(n_features, int)
                                       or n_features < 1):
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        return SvmlightSource(fs, path, LabelRule.create(positive, negative, default="sign"), n_features)
    fixed = isinstance(categorical, Mapping)
    layout = CsvLayout.detect(fs, path, label_column=label_column,
                              categorical=list(categorical), header=header, drop=drop)
    categories = None
    if fixed:
        by_index = {layout.index(k): v for k, v in categorical.items()}
        categories = tuple(tuple(str(v) for v in by_index[j]) for j in layout.categorical)
    return CsvSource(fs, path, layout, LabelRule.create(positive, negative, default="binary"), categories)


def _parquet_source(src: str, label_column, positive: LabelValues, categorical: Categorical,
                    feature_columns: Sequence[str] | None, storage_options, drop: Sequence[str] = ()
                    ) -> ParquetSource:
    """A Parquet source: the numeric feature columns read by a :class:`Dataset`, the ``categorical`` ones (names;
    or a mapping name -> categories) beside it, in the order of ``feature_columns`` (default: every column but
    the label and ``drop``, in the file's order)."""
    if not isinstance(label_column, str):
        raise ValueError(f"label_column must be a column name for Parquet input, got {label_column!r}")
    if not categorical:
        return ParquetSource(Dataset.open(src, label_column=label_column, storage_options=storage_options,
                                          positive=positive, feature_columns=feature_columns, drop=drop))
    schema, candidates = feature_candidates(src, label_column=label_column, storage_options=storage_options)
    check_drop(drop, schema.names, label_column, f"Parquet input {src}", feature_columns=feature_columns,
               categorical=list(categorical))
    candidates = [c for c in candidates if c not in drop]
    names = list(categorical)
    for name in names:
        if not isinstance(name, str) or name not in candidates:
            what = "the label" if name == label_column else "not a column"
            raise ValueError(f"categorical column {name!r} of Parquet input {src}: {what} (the columns: "
                             f"{', '.join(schema.names)})")
    columns = list(dict.fromkeys(list(feature_columns) + names)) if feature_columns is not None else candidates
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise ValueError(f"Parquet input {src}: no column {missing[0]!r} (the columns: {', '.join(schema.names)})")
    check_numbers({f.name: f.type for f in schema}, columns, f"Parquet input {src}", offer=feature_columns is None,
                  categorical=names)
    numeric = [c for c in columns if c not in names]
    if not numeric:
        raise ValueError(f"Parquet input {src}: no numeric feature column besides the categorical ones {names}; "
                         "ingest needs at least one")
    dataset = Dataset.open(src, label_column=label_column, storage_options=storage_options, positive=positive,
                           feature_columns=numeric)
    if dataset.is_sparse:
        raise ValueError(f"Parquet input {src}: categorical= applies to a dataset of feature columns, not to "
                         "the sparse layout")
    fixed = (tuple(tuple(str(v) for v in categorical[c]) for c in names)
             if isinstance(categorical, Mapping) else None)
    return ParquetSource(dataset, tuple(names), tuple(columns), fixed)
