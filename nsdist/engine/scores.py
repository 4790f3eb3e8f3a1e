"""Evaluating a model on an svmlight file (or any sparse input) without ingesting it.

An svmlight file is not a Parquet dataset, so :func:`~nsdist.engine.evaluate.evaluate_dataset`
cannot stream it through the cluster.  Its rows are scored here in the calling
process, chunk by chunk, as CSR (:func:`nsdist.data.scoring.sparse_rows`: nothing is
densified, only the ``n`` scores and labels are kept), and every measure of docs/measures.md is
computed exactly by :mod:`nsdist.metrics` -- the same values, ties included, that
:func:`~nsdist.engine.evaluate.evaluate_dataset` gives on the ingested dataset (the scores on one BLAS
thread, as the cluster's tasks compute them: :mod:`nsdist._threads`).

``nsdist.evaluate(model, "test.svm")`` can use :func:`evaluate_sparse_input` when
:func:`nsdist.data.scoring.is_svmlight` says so.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._threads import on_one_blas_thread
from ..solvers.measure import all_measures
from .._validation import check_beta, resolve_k
from ..data.scoring import sparse_rows, table_rows

__all__ = ["evaluate_scores", "evaluate_sparse_input", "evaluate_table_input"]


def evaluate_scores(y: np.ndarray, s: np.ndarray, *, beta: float = 0.1, k: int | float | None = None,
                    threshold: float = 0.0, where: str = "the data") -> dict:
    """The dict of :func:`~nsdist.engine.evaluate.evaluate_dataset` from labels and scores in memory.

    Raises
    ------
    ValueError
        If a class is absent (naming ``where``).
    """
    beta = check_beta(beta)
    y = np.asarray(y)
    s = np.asarray(s, dtype=np.float64)
    n, n_pos = y.shape[0], int(np.count_nonzero(y > 0))
    if n_pos in (0, n):
        raise ValueError(f"{where} has no {'positive' if n_pos == 0 else 'negative'} rows; the measures "
                         "need both classes")
    K = resolve_k(n_pos / n if k is None else k, n)
    return {**all_measures(y, s, beta=beta, k=K, threshold=threshold),
            "n_rows": int(n), "n_positives": n_pos, "beta": beta, "k": int(K)}


@on_one_blas_thread
def evaluate_sparse_input(model, src: str, *, beta: float = 0.1, k: int | float | None = None,
                          threshold: float = 0.0, label_column: str = "label",
                          storage_options: Mapping[str, Any] | None = None, positive=None,
                          format: str | None = None, drop: Sequence[str] = ()) -> dict:
    """Every measure of ``model`` (a :class:`~nsdist.model.LinearModel`) on an svmlight file or a
    sparse Parquet dataset, scored in this process as CSR (``positive``, ``format``, ``drop``:
    :func:`nsdist.data.scoring.sparse_rows`)."""
    ys, ss = [], []
    for copied, X in sparse_rows(src, model.n_features, label_column=label_column, drop=drop,
                                 storage_options=storage_options, positive=positive, format=format):
        ys.append(copied.column(label_column).to_numpy())
        ss.append(model.decision_function(X) if X.shape[0] else np.zeros(0))
    y = np.concatenate(ys) if ys else np.zeros(0, np.int8)
    s = np.concatenate(ss) if ss else np.zeros(0)
    return evaluate_scores(y, s, beta=beta, k=k, threshold=threshold, where=src)


@on_one_blas_thread
def evaluate_table_input(model, src: str, *, beta: float = 0.1, k: int | float | None = None,
                         threshold: float = 0.0, label_column: str = "label",
                         storage_options: Mapping[str, Any] | None = None, positive=None,
                         format: str | None = None, drop: Sequence[str] = ()) -> dict:
    """Every measure of ``model`` on a CSV file (or a dense Parquet input) of raw rows, scored in this process
    (:func:`nsdist.data.scoring.table_rows`: one-hot columns encoded as ingest encoded them, the ``drop``
    columns left out); its labels read as ingest reads them (``positive``: the positive label value(s), else
    1/-1, 1/0 or true/false)."""
    import pyarrow as pa

    from ..data.labels import LabelRule, clean_strings

    rule = LabelRule.create(positive)
    ys, ss, rows = [], [], 0
    for copied, scores in table_rows(model, src, label_column=label_column, drop=drop,
                                     storage_options=storage_options, format=format):
        if label_column not in copied.column_names:
            raise ValueError(f"{src} has no label column {label_column!r} to evaluate against (label_column=)")
        labels = clean_strings(copied.column(label_column).combine_chunks().cast(pa.string()))
        codes, _ = rule.classify(labels, lambda i, first=rows: f"{src}: row {first + i + 1}")
        keep = codes != 0
        ys.append(codes[keep])
        ss.append(scores[keep])
        rows += len(codes)
    return evaluate_scores(np.concatenate(ys), np.concatenate(ss), beta=beta, k=k, threshold=threshold, where=src)
