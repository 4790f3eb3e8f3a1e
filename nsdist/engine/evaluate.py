"""Exact out-of-core evaluation of every measure of docs/measures.md on a Parquet dataset.

Scores ``s = X @ w + b`` are computed once per partition and stay on the
workers.  Then:

1. each partition reports its class counts and its positives' scores (the
   rare class: ``n+`` floats in all);
2. the cut values — the ``m``-th highest negative score for pAUC, the ``K``-th
   and ``n+``-th highest scores for Prec@k and PRBEP — are found by a
   distributed radix selection on the scores' order-preserving 64-bit keys
   (8 rounds of 256-bin histograms; only histograms travel);
3. each partition counts, against the sorted positive scores, the doubled
   pair credits ``2 [s_i > s_j] + [s_i = s_j]`` of its negatives (exact
   integers: of all of them for AUC, of those above the pAUC cut-off for
   pAUC) and the items above / at each cut; the driver adds them as Python
   integers and applies the tie expectation of docs/measures.md §Ties through the same
   functions as :mod:`nsdist.metrics` (:func:`~nsdist.metrics.pauc_from_counts`,
   :func:`~nsdist.metrics.expected_top_sum`), so the numbers are identical.

No step gathers the scores of the negatives on the driver.
"""
from __future__ import annotations

import numpy as np
from distributed import Client

from .._threads import on_one_blas_thread
from .._validation import check_beta, resolve_k
from ..data import Dataset
from ..metrics import expected_top_sum, f1_from_counts, n_top_negatives, pair_credit2, pauc_from_counts

__all__ = ["evaluate_dataset", "cut_intercept_dataset", "check_both_classes", "sortable_keys"]

_SIGN = np.uint64(1 << 63)


def sortable_keys(s: np.ndarray) -> np.ndarray:
    """Map float64 scores to uint64 keys with the same order (``-0.0`` is ``0.0``)."""
    bits = (np.asarray(s, dtype=np.float64) + 0.0).view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _key_to_float(key: int) -> float:
    k = np.uint64(key)
    bits = k & ~_SIGN if k & _SIGN else ~k
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


@on_one_blas_thread
def _scores(dataset: Dataset, partition: int, w: np.ndarray, b: float, dtype: str):
    X, y = dataset.read_partition(partition, dtype=dtype)
    s = (X @ w.astype(X.dtype, copy=False)).astype(np.float64) + b
    return sortable_keys(s), s, y


def _score_parts(client: Client, dataset: Dataset, w: np.ndarray, b: float, dtype: str) -> list:
    """One future per partition holding ``(keys, scores, labels)`` on a worker.

    ``w`` is scattered once, not embedded in every task: a wide model (2^14
    features and more) as a task argument stalled the scheduler.
    """
    w_future = client.scatter(np.asarray(w, dtype=np.float64), broadcast=True, hash=False)
    return client.map(_scores, [dataset] * len(dataset.partitions), range(len(dataset.partitions)),
                      w=w_future, b=float(b), dtype=dtype, pure=False)


def _class_counts(dataset: Dataset, counted: list) -> tuple[int, int]:
    n_pos, n_neg = sum(c[0] for c in counted), sum(c[1] for c in counted)
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"dataset {dataset.url!r} has no {'positive' if n_pos == 0 else 'negative'} "
                         "rows; the measures need both classes")
    return n_pos, n_neg


def _positives(part) -> tuple[int, int, np.ndarray]:
    _, s, y = part
    pos = y > 0
    return int(pos.sum()), int((~pos).sum()), s[pos]


# a selection: (which items, rank k counted from the top); items: "neg" or "all"
def _histograms(part, prefixes: list[int], shift: int, items: list[str]) -> np.ndarray:
    keys, _, y = part
    out = np.zeros((len(items), 256), dtype=np.int64)
    for r, (prefix, which) in enumerate(zip(prefixes, items)):
        k = keys[y < 0] if which == "neg" else keys
        if shift < 56:
            k = k[(k >> np.uint64(shift + 8)) == np.uint64(prefix)]
        out[r] = np.bincount(((k >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.int64), minlength=256)
    return out


def _radix_select(client: Client, parts, ranks: list[int], items: list[str]) -> list[float]:
    """The ``rank``-th largest score (1-based) of each selection, exactly."""
    prefixes, remaining = [0] * len(ranks), list(ranks)
    for shift in range(56, -8, -8):
        hists = client.gather(client.map(_histograms, parts, prefixes=prefixes, shift=shift,
                                         items=items, pure=False))
        total = np.sum(hists, axis=0)
        for r in range(len(ranks)):
            above = np.cumsum(total[r][::-1])            # counts from the highest bin down
            digit_from_top = int(np.searchsorted(above, remaining[r]))
            digit = 255 - digit_from_top
            remaining[r] -= int(above[digit_from_top - 1]) if digit_from_top else 0
            prefixes[r] = (prefixes[r] << 8) | digit
    return [_key_to_float(p) for p in prefixes]


def _counts(part, sorted_pos: np.ndarray, v_neg: float, cuts: list[float], threshold: float) -> list[int]:
    """Per partition, as Python ints: doubled pair credits (all negatives; those above the pAUC cut),
    negatives above / at the cut, counts at each other cut, TP/FP."""
    _, s, y = part
    neg, pos = s[y < 0], y > 0
    credit2 = pair_credit2(sorted_pos, neg)
    top, tied = neg > v_neg, neg == v_neg
    row = [credit2.sum(), credit2[top].sum(), top.sum(), tied.sum()]
    for v in cuts:
        row += [(s > v).sum(), (pos & (s > v)).sum(), (s == v).sum(), (pos & (s == v)).sum()]
    row += [(pos & (s > threshold)).sum(), (~pos & (s > threshold)).sum()]
    return [int(x) for x in row]


def evaluate_dataset(client: Client, dataset: Dataset, w: np.ndarray, b: float, *, beta: float = 0.1,
                     k: int | float | None = None, threshold: float = 0.0,
                     dtype: str = "float64") -> dict[str, float]:
    """Every measure of docs/measures.md of the scorer ``(w, b)`` on ``dataset``, exact.

    ``k`` defaults to the positive rate (so Prec@k is then PRBEP).
    """
    beta = check_beta(beta)
    parts = _score_parts(client, dataset, w, b, dtype)
    try:
        counted = client.gather(client.map(_positives, parts, pure=False))
        n_pos, n_neg = _class_counts(dataset, counted)
        n = n_pos + n_neg
        sorted_pos = np.sort(np.concatenate([c[2] for c in counted]))
        m = n_top_negatives(beta, n_neg)
        K = resolve_k(n_pos / n if k is None else k, n)
        v_neg, v_k, v_b = _radix_select(client, parts, [m, K, n_pos], ["neg", "all", "all"])
        pos_future = client.scatter(sorted_pos, broadcast=True, hash=False)   # a fresh key (engine/chain.py)
        rows = client.gather(client.map(_counts, parts, sorted_pos=pos_future, v_neg=v_neg,
                                        cuts=[v_k, v_b], threshold=threshold, pure=False))
    finally:
        client.cancel(parts)
    tot = [sum(column) for column in zip(*rows)]          # Python ints: exact at any size
    auc_credit2, above_credit2, n_above, n_tied = tot[:4]
    pos_at_most = int(np.searchsorted(sorted_pos, v_neg, side="right"))
    pos_below = int(np.searchsorted(sorted_pos, v_neg, side="left"))

    def precision(K: int, n_above, pos_above, n_tied, pos_tied) -> float:
        return expected_top_sum(pos_above, pos_tied, n_above, n_tied, K) / K

    tp, fp = tot[12], tot[13]
    return {
        # the same rational as metrics.auc's, one correctly rounded ratio of integers
        "auc": auc_credit2 / (2 * n_pos * n_neg),
        "partial_auc": pauc_from_counts(above_credit2, n_above, n_tied, n_pos - pos_at_most,
                                        pos_at_most - pos_below, n_pos, m),
        "precision_at_k": precision(K, *tot[4:8]),
        "prbep": precision(n_pos, *tot[8:12]),
        "f1_score": f1_from_counts(tp, fp, n_pos - tp),
        "n_rows": int(n), "n_positives": int(n_pos), "beta": beta, "k": int(K),
    }


def cut_intercept_dataset(client: Client, dataset: Dataset, w: np.ndarray, measure: str, *,
                          k: int | float | None = None, dtype: str = "float64") -> float:
    """Out-of-core :func:`nsdist.solvers.measure.cut_intercept` of the scores ``X @ w``.

    The decision threshold of a ranking model goes between the ``c``-th and
    ``(c+1)``-th highest training scores (``c = K`` for Prec@k, else ``n+``),
    found by the same distributed radix selection as the evaluation.
    """
    parts = _score_parts(client, dataset, w, 0.0, dtype)
    try:
        n_pos, n_neg = _class_counts(dataset, client.gather(client.map(_positives, parts, pure=False)))
        n = n_pos + n_neg
        c = resolve_k(k, n) if measure == "prec@k" else n_pos
        if c == n:
            return 1.0 - _radix_select(client, parts, [n], ["all"])[0]
        hi, lo = _radix_select(client, parts, [max(c, 1), c + 1], ["all", "all"])
    finally:
        client.cancel(parts)
    return -hi - 1.0 if c == 0 else -(hi + lo) / 2.0


def _label_counts(dataset: Dataset, partition: int) -> tuple[int, int]:
    y = dataset.read_labels(partition)
    n_pos = int(np.count_nonzero(y > 0))
    return n_pos, y.shape[0] - n_pos


def check_both_classes(client: Client, dataset: Dataset) -> tuple[int, int]:
    """``(n+, n-)`` from the label column alone; a ``ValueError`` naming the dataset if a class is absent.

    Run before training, so a dataset that cannot train fails at once instead
    of after a whole pass of skipped epochs.
    """
    counts = client.gather(client.map(_label_counts, [dataset] * len(dataset.partitions),
                                      range(len(dataset.partitions)), pure=False))
    return _class_counts(dataset, [(p, n, None) for p, n in counts])
