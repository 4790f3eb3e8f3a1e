"""Scoring sparse inputs (``nsdist predict``): svmlight files and sparse Parquet datasets.

A wide model is never given one column per feature: its rows come as an
svmlight/LIBSVM text file (plain, ``.gz``, ``.bz2``, ``.xz``) or as a Parquet
dataset in the sparse layout (``indices`` / ``values``, see
:mod:`nsdist.data.layout`).  :func:`sparse_rows` recognises both and streams
``(copied columns, CSR matrix)`` chunks; :func:`score_sparse` scores them with
any object that has ``decision_function`` and ``n_features`` (a
:class:`~nsdist.model.LinearModel`), never densifying.

svmlight rows: column ``j`` of the matrix is index ``j + 1`` in the file (as
ingest writes it; a model trained on an svmlight file's ingested dataset scores
that file); an index above the model's dimension is an error naming the line.
The output copies the label as ``label`` (+1/-1; label > 0 is positive).
Sparse Parquet: the label column and ``keep`` columns are copied.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from nsdist.data.dataset import Dataset, _read_footer
from nsdist.data.fs import resolve
from nsdist.data.labels import LabelRule, LabelValues
from nsdist.data.readers import DEFAULT_CHUNK_ROWS, parse_svmlight, text_blocks
from nsdist.data.sources import infer_format

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["is_svmlight", "sparse_input_format", "sparse_rows", "score_sparse"]

_OUTPUT_COLUMNS = ("score", "prediction")


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
                storage_options: Mapping[str, Any] | None = None,
                chunk_rows: int = DEFAULT_CHUNK_ROWS, positive: LabelValues = None, format: str | None = None
                ) -> Iterator[tuple[pa.Table, sp.csr_matrix]]:
    """Stream a sparse input as ``(copied columns, X)`` chunks, ``X`` CSR of ``n_features`` columns.

    ``positive``: the label value(s) of the positive class (default: svmlight labels ``> 0``, Parquet labels
    ``{-1, +1}``, ``{0, 1}`` or bool); the label comes out in ``{-1, +1}``.

    Raises
    ------
    ValueError
        If ``src`` is not a sparse input, its dimension differs from (svmlight: exceeds)
        ``n_features``, a ``keep`` column is missing (svmlight has none), or a row is
        malformed (naming the file and line, or the partition and row).
    """
    fmt = sparse_input_format(src, storage_options, format=format)
    if fmt is None:
        raise ValueError(f"{src} is neither an svmlight file nor a sparse Parquet dataset")
    if fmt == "svmlight":
        if keep:
            raise ValueError(f"--keep does not apply to svmlight input {src} (it has no named columns)")
        fs, path = resolve(src, storage_options)
        rule = LabelRule.create(positive, default="sign")
        for block in text_blocks(fs, path, chunk_rows):
            rows = parse_svmlight(block, rule, n_features=n_features)
            yield pa.table({"label": pa.array(rows.labels, pa.int8())}), rows.to_csr(n_features)
        return
    ds = Dataset.open(src, label_column=label_column, storage_options=storage_options, positive=positive)
    if ds.n_features != n_features:
        raise ValueError(f"{src} has {ds.n_features} features, the model expects {n_features}")
    names = _read_footer(ds.fs, ds.partitions[0].path)[1].names
    absent = [c for c in keep if c not in names]
    if absent:
        raise ValueError(f"--keep column(s) {', '.join(map(repr, absent))} not in {src} "
                         f"(columns: {', '.join(names)})")
    extra = [c for c in keep if c in _OUTPUT_COLUMNS]
    if extra:
        raise ValueError(f"{src} has a column {extra[0]!r}, which the output uses for the model's {extra[0]}s")
    for i in range(len(ds.partitions)):
        X, y = ds.read_partition(i)
        copied = {label_column: pa.array(y, pa.int8())}
        if keep:
            table, _ = ds._read(i, list(keep))
            copied.update({c: table.column(c) for c in keep if c != label_column})
        yield pa.table(copied), X


def score_sparse(model, src: str, *, label_column: str = "label", keep: Sequence[str] = (),
                 threshold: float = 0.0, storage_options: Mapping[str, Any] | None = None,
                 format: str | None = None) -> pa.Table:
    """The copied columns plus ``score`` and ``prediction`` (+1 where score > threshold) of every row
    (``format``: as :func:`sparse_input_format`)."""
    parts = []
    for copied, X in sparse_rows(src, model.n_features, label_column=label_column, keep=keep,
                                 storage_options=storage_options, format=format):
        scores = model.decision_function(X) if X.shape[0] else np.zeros(0)
        parts.append(copied.append_column("score", pa.array(scores, pa.float64()))
                     .append_column("prediction", pa.array(np.where(scores > threshold, 1, -1).astype(np.int8))))
    if not parts:
        return pa.table({label_column: pa.array([], pa.int8()), "score": pa.array([], pa.float64()),
                         "prediction": pa.array([], pa.int8())})
    return pa.concat_tables(parts)
