"""Where the features of a Parquet file live, and turning a table into ``(X, y)``.

Three layouts (docs/engine.md §Dataset format):

``"columns"``
    one numeric (integer, float, bool or decimal) column per feature; with
    ``feature_columns=None`` every column except the label (and a pandas index)
    is a feature, in file order;
``"vector"``
    one ``fixed_size_list<number, d>`` column holding all ``d`` features;
``"sparse"``
    CSR-style list columns ``indices`` (0-based) and ``values``, with the
    dimension ``n_features`` in the ``nsdist`` schema metadata.

Feature names: the column names (``"columns"``), else ``metadata["feature_names"]``
if present (a list, or a compact ``{"prefix": "x", "start": 1, "n": d}`` range:
see :mod:`nsdist._names`), else ``x0 ... x{d-1}`` (a :class:`~nsdist._names.NameRange`,
so a 2^24-feature dataset does not carry 2^24 strings).

Matrices: ``"columns"`` and ``"vector"`` partitions load as dense C-ordered
ndarrays, ``"sparse"`` partitions as ``scipy.sparse.csr_matrix`` (int32 indices
while they fit, sorted within each row, explicit entries kept as stored).
Every sparse row is checked: ``indices`` and ``values`` present and of equal
length, every index in ``[0, n_features)``, strictly increasing within the row
(unsorted or duplicate indices are refused), every value finite; an error
names the partition and the 0-based row.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from nsdist._names import NameRange, names_from_json, names_to_json
from nsdist._sparse import scipy_sparse
from nsdist._validation import as_pm1_labels
from nsdist.data.dense import column_numpy, missing_feature
from nsdist.data.labels import LabelRule, LabelValues, clean_strings

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["FeatureSchema", "check_numbers", "candidate_columns"]

_SPARSE = ("indices", "values")
#: up to this many numeric columns, a message on the others lists them all, as a ``feature_columns=`` to paste
LISTED = 30


def _is_number(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t))


def _kind(t: pa.DataType) -> str:
    """A coarse type: partitions may differ in exact numeric type but not in kind."""
    if _is_number(t):
        return "number"
    if pa.types.is_fixed_size_list(t) and _is_number(t.value_type):
        return f"fixed_size_list<number, {t.list_size}>"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_number(t.value_type):
        return "list<integer>" if pa.types.is_integer(t.value_type) else "list<number>"
    return str(t)


def check_numbers(types: Mapping[str, pa.DataType], columns: Sequence[str], where: str, *, offer: bool,
                  categorical: Sequence[str] = ()) -> None:
    """Raise ValueError if a feature column of ``columns`` (but the ``categorical`` ones, which ingest one-hot
    encodes) is not a number: which are not, the ``feature_columns=`` that keeps the others (whole, so that it can
    be pasted, up to :data:`LISTED` names; ``offer``: the columns were not chosen by the caller), for text
    columns the ingest option that one-hot encodes them, and (``offer``) the ``drop=`` that leaves every column
    that is not a number out."""
    other = [name for name in columns if name not in categorical and _kind(types[name]) != "number"]
    if not other:
        return
    kept = [name for name in columns if name not in other]
    what = "numeric and categorical" if categorical else "numeric"
    shown = ", ".join(f"{n!r} ({types[n]})" for n in other[:5]) + (", ..." if len(other) > 5 else "")
    text = [n for n in other if pa.types.is_string(types[n]) or pa.types.is_large_string(types[n])
            or pa.types.is_dictionary(types[n])]
    message = (f"{where}: column {other[0]!r} has type {types[other[0]]}, not a number"
               + (f" (the columns that are not: {shown})" if len(other) > 1 else ""))
    if offer and kept and len(kept) <= LISTED:
        message += f"; to keep the {len(kept)} {what} ones, pass feature_columns={kept!r}"
    elif offer and kept:
        message += (f"; pass feature_columns= to choose the features (the {len(kept)} {what} ones: "
                    f"{repr(kept[:6])[:-1]}, ...])")
    else:
        message += "; pass feature_columns= to choose the numeric features"
    if text:
        message += f"; to use the text columns as categories, one-hot encode them at ingest: categorical={text!r}"
    if offer:
        message += f"; to leave the columns that are not numbers out (an id, a timestamp): drop={other!r}"
    raise ValueError(message)


def check_drop(drop: Sequence[str], names: Sequence[str], label_column: str, where: str, *,
               feature_columns: object = None, categorical: Sequence[str] = ()) -> None:
    """Refuse a ``drop=`` that would leave out what it must not: a name that is no column of ``names``
    (a typo is never ignored), the label, a ``categorical`` column, or any name beside ``feature_columns``
    (which already names every feature); the message names the column and ``where``."""
    for name in drop:
        why = ("it is categorical" if name in categorical else
               "it is the label; it cannot be dropped" if name == label_column else
               None if name in names else f"no such column; the columns are {list(names)}")
        if why:
            raise ValueError(f"{where}: column {name!r} to drop: {why}")
    if drop and feature_columns is not None:
        raise ValueError(f"{where}: give feature_columns or drop, not both (drop leaves columns out of "
                         "every other column)")


def candidate_columns(schema: pa.Schema, label_column: str) -> list[str]:
    """The columns that may be features, in the file's order: all but the label and the columns pandas wrote
    for a non-default index (what ``feature_columns=None`` starts from)."""
    index = {c for c in (schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)}
    return [n for n in schema.names if n != label_column and n not in index]


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _is_text(t: pa.DataType) -> bool:
    """Labels stored as strings (class names), plain or dictionary-encoded."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def class_names_error(where: str, label: str, names: Sequence[str]) -> ValueError:
    """The error for class names in a label column read without ``positive=``: names them, says what to pass."""
    names = sorted(names)
    shown = ", ".join(repr(v) for v in names[:3]) + (", ..." if len(names) > 3 else "")
    example = repr(names[0]) if names else "'<the positive class>'"
    return ValueError(f"{where}: label column {label!r} holds class names ({shown}), not labels in "
                      f"{{-1,+1}}, {{0,1}} or bool: pass positive={example} to name the positive class "
                      "(every other label is then negative)")


@dataclass(frozen=True)
class FeatureSchema:
    """The feature layout of a dataset, fixed by its first partition.

    Attributes
    ----------
    layout : {"columns", "vector", "sparse"}
    label : str
        Label column name.
    columns : tuple of (name, kind)
        The Parquet columns read for features, with their kind.
    names : tuple of str or NameRange
        Feature names, ``len(names) == n_features``.
    all_columns : tuple of str or None
        Every column of the first partition when the features were inferred
        (another partition with extra columns then differs); ``None`` when the
        caller chose ``feature_columns``.
    positive : tuple of str or None
        The label values of the positive class (``positive=``; matched as
        :class:`~nsdist.data.labels.LabelRule` does: as strings, or as numbers when
        both sides are numbers); every other label is negative.  ``None``: the
        labels are ``{-1, +1}``, ``{0, 1}`` or bool.
    """

    layout: str
    label: str
    columns: tuple[tuple[str, str], ...]
    names: tuple[str, ...] | NameRange
    all_columns: tuple[str, ...] | None
    positive: tuple[str, ...] | None = None

    @property
    def n_features(self) -> int:
        """Number of features ``d``."""
        return len(self.names)

    @property
    def read_columns(self) -> list[str]:
        """The columns ``to_arrays`` needs."""
        return [name for name, _ in self.columns] + [self.label]

    def describe(self) -> dict:
        """JSON-ready description (part of the dataset fingerprint; ``positive`` only when given, so that a
        dataset read as before keeps its fingerprint)."""
        return {"layout": self.layout, "label_column": self.label,
                "columns": [list(c) for c in self.columns], "feature_names": names_to_json(self.names),
                **({} if self.positive is None else {"positive": list(self.positive)})}

    @classmethod
    def infer(cls, schema: pa.Schema, *, label_column: str = "label",
              feature_columns: str | Sequence[str] | None = None, metadata: dict | None = None,
              where: str = "", positive: LabelValues = None,
              label_names: Sequence[str] = (), drop: Sequence[str] = ()) -> FeatureSchema:
        """Work out the layout from one file's Arrow schema.

        Parameters
        ----------
        schema : pyarrow.Schema
        label_column : str
        feature_columns : str, sequence of str or None
            A single name selects a list column (``"vector"``); a sequence
            selects numeric columns; ``None`` infers (see the module docstring).
        metadata : dict, optional
            The ``nsdist`` schema metadata (feature names, ``n_features``).
        where : str
            The file, for messages.
        positive : str, number, sequence of them, or None
            The label value(s) of the positive class (see the class's ``positive``).
        label_names : sequence of str
            Some of the label column's values, for the message when it holds
            strings and ``positive`` is not given (the footer's statistics).
        drop : sequence of str
            Columns that are neither features nor the label (an id, a timestamp),
            left out of what ``feature_columns=None`` infers from; every file may
            hold them.  Each must be a column of the file.

        Raises
        ------
        ValueError
            If the label or a feature column is missing or not numeric, the
            labels are strings and ``positive`` is not given, or no feature can
            be found; naming the file and the column.
        """
        metadata = metadata or {}
        types = {f.name: f.type for f in schema}
        if label_column not in types:
            raise ValueError(f"{where}: no label column {label_column!r}; the columns are {schema.names} "
                             "(pass label_column=)")
        if positive is None and _is_text(types[label_column]):
            raise class_names_error(where, label_column, label_names)
        positive = LabelRule.create(positive).positive
        check_drop(drop, schema.names, label_column, where, feature_columns=feature_columns)
        if feature_columns is None:
            every = candidate_columns(schema, label_column)
            candidates = [n for n in every if n not in drop]
            listed = [n for n in candidates if _kind(types[n]).startswith(("list", "fixed"))]
            if set(_SPARSE) <= set(candidates) and len(candidates) == 2:
                selected: Sequence[str] = _SPARSE
            elif len(candidates) == 1 and listed:
                selected = candidates[0]
            else:
                selected = candidates
            all_columns: tuple[str, ...] | None = tuple(every)
        else:
            selected, all_columns = feature_columns, None
        recorded = metadata.get("label_column")          # the label ingest wrote, if it did
        chosen = [selected] if isinstance(selected, str) else list(selected)
        for name in dict.fromkeys((label_column, recorded)):
            if name is not None and name in chosen:
                hint = (f"; ingest recorded it as the label: pass label_column={recorded!r}"
                        if name == recorded != label_column else "")
                raise ValueError(f"{where}: column {name!r} is the label, not a feature{hint}")
        if isinstance(selected, str):
            return replace(cls._vector(selected, types, label_column, metadata, all_columns, where),
                           positive=positive)
        for name in selected:
            if name not in types:
                raise ValueError(f"{where}: no feature column {name!r}; the columns are {schema.names}")
        if tuple(selected) == _SPARSE and _kind(types["indices"]) == "list<integer>":
            return replace(cls._sparse(types, label_column, metadata, all_columns, where), positive=positive)
        if not selected:
            raise ValueError(f"{where}: no feature columns besides the label {label_column!r}")
        check_numbers(types, selected, where, offer=bool(all_columns))
        return cls("columns", label_column, tuple((n, "number") for n in selected), tuple(selected),
                   all_columns, positive)

    @classmethod
    def _vector(cls, name, types, label, metadata, all_columns, where) -> FeatureSchema:
        if name not in types:
            raise ValueError(f"{where}: no feature column {name!r}")
        kind = _kind(types[name])
        if not kind.startswith("fixed_size_list"):
            raise ValueError(f"{where}: column {name!r} has type {types[name]}; a feature vector column must "
                             "be a fixed-size list of numbers (pyarrow: pa.list_(pa.float64(), d))")
        d = types[name].list_size
        return cls("vector", label, ((name, kind),), _names(metadata, d, where), all_columns)

    @classmethod
    def _sparse(cls, types, label, metadata, all_columns, where) -> FeatureSchema:
        if _kind(types["values"]) not in ("list<integer>", "list<number>"):
            raise ValueError(f"{where}: column 'values' has type {types['values']}, not a list of numbers")
        d = metadata.get("n_features")
        if not isinstance(d, int) or d < 1:
            raise ValueError(f"{where}: sparse columns 'indices'/'values' need the dimension in the schema "
                             "metadata: key b'nsdist' holding JSON {\"n_features\": d}")
        columns = (("indices", "list<integer>"), ("values", _kind(types["values"])))
        return cls("sparse", label, columns, _names(metadata, d, where), all_columns)

    def check(self, schema: pa.Schema, where: str) -> None:
        """Raise if a partition's schema differs from the first one (naming file and column)."""
        types = {f.name: f.type for f in schema}
        prefix = f"{where}: schema differs from the first partition:"
        for name, kind in (*self.columns, (self.label, None)):
            if name not in types:
                raise ValueError(f"{prefix} column {name!r} is missing")
            if kind is not None and _kind(types[name]) != kind and not (
                    kind == "list<number>" and _kind(types[name]) == "list<integer>"):
                raise ValueError(f"{prefix} column {name!r} has type {types[name]}, expected {kind}")
        if self.all_columns is not None:
            extra = [n for n in candidate_columns(schema, self.label) if n not in self.all_columns]
            if extra:
                raise ValueError(f"{prefix} column {extra[0]!r} is not in the first partition")

    def labels(self, table: pa.Table, where: str) -> np.ndarray:
        """The label column as ``int8`` in ``{-1, +1}`` (docs/measures.md §Labels encodings; with
        ``positive``, ``+1`` where the label is one of those values and ``-1`` elsewhere)."""
        column = table.column(self.label)
        if column.null_count:
            row = _first(column.is_null().to_numpy(zero_copy_only=False))
            raise ValueError(f"{where}: row {row}: label column {self.label!r} is missing (null)")
        if self.positive is None and _is_text(column.type):
            raise class_names_error(where, self.label, column.slice(0, 10_000).unique().to_pylist())
        return self.codes(column, lambda i: f"{where}: row {i}", name=self.label, where=where)

    def codes(self, values: pa.Array | pa.ChunkedArray, row: Callable[[int], str], *, name: str,
              where: str = "") -> np.ndarray:
        """Label values (no nulls) as ``int8`` in ``{-1, +1}``, read as this schema reads its label column: the
        ``positive`` values against the rest, else the encodings ``{-1, +1}``, ``{0, 1}``, bool.  ``row(i)``
        names row ``i`` in a message about it, ``name`` the values' array, ``where`` their file."""
        if self.positive is not None:
            text = values.cast(pa.string())
            text = clean_strings(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text)
            return LabelRule(self.positive).classify(text, row)[0]
        try:
            return as_pm1_labels(column_numpy(values) if isinstance(values, pa.ChunkedArray)
                                 else values.to_numpy(zero_copy_only=False), name=name)
        except ValueError as exc:
            codes = "; or pass positive= naming the positive class's code" if "use {-1,+1}" in str(exc) else ""
            raise ValueError(f"{where}: {exc}{codes}" if where else f"{exc}{codes}") from None

    def features(self, table: pa.Table, dtype=np.float64, where: str = "", *,
                 sparse: bool | None = None) -> np.ndarray | sp.csr_matrix:
        """The ``(n, d)`` feature matrix.

        ``sparse=None`` gives the layout's own form: a dense C-ordered ndarray for
        ``"columns"`` / ``"vector"``, a ``scipy.sparse.csr_matrix`` for
        ``"sparse"``; ``True`` / ``False`` force CSR / dense.

        Raises
        ------
        ValueError
            ``"<where>: row r: feature 'name' ..."`` for a null, NaN or infinite
            value; for the sparse layout also missing or unequal-length
            ``indices``/``values``, an index outside ``[0, d)``, unsorted or
            duplicate indices (see the module docstring).
        """
        dtype = np.dtype(dtype)
        if self.layout == "sparse":
            X = self._sparse_matrix(table, dtype, where)
            return X.toarray() if sparse is False else X
        out = np.empty((table.num_rows, self.n_features), dtype=dtype)
        target = pa.from_numpy_dtype(dtype)
        if self.layout == "columns":
            for j, (name, _) in enumerate(self.columns):
                offset = 0
                for chunk in table.column(name).chunks:
                    if chunk.null_count:
                        row = offset + _first(chunk.is_null().to_numpy(zero_copy_only=False))
                        raise missing_feature(where, row, name)
                    out[offset:offset + len(chunk), j] = chunk.cast(target, safe=False).to_numpy()
                    offset += len(chunk)
        else:
            self._fill_vector(table.column(self.columns[0][0]), out, target, where)
        finite = np.isfinite(out)
        if not finite.all():
            row, j = np.argwhere(~finite)[0]
            raise ValueError(f"{where}: row {row}: feature {self.names[j]!r} = {out[row, j]} is not finite")
        return scipy_sparse().csr_matrix(out) if sparse else out

    def _fill_vector(self, column: pa.ChunkedArray, out: np.ndarray, target: pa.DataType,
                     where: str) -> None:
        d, offset = self.n_features, 0
        for chunk in column.chunks:
            values = chunk.flatten()
            if chunk.null_count or values.null_count:
                nulls = chunk.is_null().to_numpy(zero_copy_only=False)
                row = _first(nulls) if nulls.any() else \
                    _first(values.is_null().to_numpy(zero_copy_only=False)) // d
                raise ValueError(f"{where}: row {offset + row}: feature vector {column._name!r} "
                                 "holds a missing (null) value")
            out[offset:offset + len(chunk)] = values.cast(target, safe=False).to_numpy().reshape(-1, d)
            offset += len(chunk)

    def _sparse_matrix(self, table: pa.Table, dtype: np.dtype, where: str) -> sp.csr_matrix:
        """The CSR matrix of the ``indices``/``values`` columns, every row checked
        (:func:`nsdist.data.layout.sparse_matrix`)."""
        from nsdist.data.layout import sparse_matrix

        return sparse_matrix(table, self.n_features, dtype, where, names=self.names)


def _names(metadata: dict, d: int, where: str) -> tuple[str, ...] | NameRange:
    names = metadata.get("feature_names")
    if names is None:
        return NameRange("x", 0, d)
    names = names_from_json(names, d, where)
    if len(names) != d:
        raise ValueError(f"{where}: metadata lists {len(names)} feature names for {d} features")
    return names if isinstance(names, NameRange) else tuple(names)
