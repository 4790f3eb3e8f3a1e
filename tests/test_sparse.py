"""Sparse, high-dimensional data end to end (issue 12): the CSR-style layout, reading as CSR,
malformed rows, scale-only standardisation, wide models, the gradient on CSR."""
from __future__ import annotations

import json
import pickle
import lzma
import re
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.preprocessing import StandardScaler

from nsdist._names import NameRange
from nsdist.data import Dataset, ingest
from nsdist.data.layout import DICTIONARY_PAGE_BYTES, choose_layout, parquet_options, sparse_matrix
from nsdist.engine.evaluate import evaluate_dataset
from nsdist.engine.scaling import Scaling, feature_scaling
from nsdist.engine.scores import evaluate_sparse_input
from nsdist.losses.base import weight_gradient
from nsdist.model import LinearModel, load_model

RNG = np.random.default_rng(12)

SVMLIGHT = """\
# a comment line
+1 1:0.5 7:-2.25 1000:3e-07
-1 qid:3 2:1
-1
+1 3:0 4:1e+30 # an explicit zero is kept
-1 999:-0.125 1000:8
"""


def _svmlight_rows(text: str) -> list[tuple[int, list[tuple[int, float]]]]:
    """The rows of an svmlight text, read with plain string handling (the reference)."""
    rows = []
    for line in text.splitlines():
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        pairs = [t.split(":") for t in tokens[1:] if not t.startswith("qid:")]
        rows.append((1 if float(tokens[0]) > 0 else -1, [(int(i), float(v)) for i, v in pairs]))
    return rows


def _csr_rows(X: sp.csr_matrix, y: np.ndarray) -> list[tuple[int, list[tuple[int, float]]]]:
    """The same from a CSR partition (0-based columns back to svmlight's 1-based indices)."""
    return [(int(y[r]), [(int(j) + 1, float(v)) for j, v in
                         zip(X.indices[X.indptr[r]:X.indptr[r + 1]], X.data[X.indptr[r]:X.indptr[r + 1]])])
            for r in range(X.shape[0])]


def _sparse_file(path, indices, values, labels, n_features=5, **meta) -> None:
    types = [pa.list_(pa.int32()), pa.list_(pa.float64())]
    table = pa.table({"indices": pa.array(indices, types[0]), "values": pa.array(values, types[1]),
                      "label": pa.array(labels, pa.int8())})
    metadata = {b"nsdist": json.dumps({"n_features": n_features, **meta}).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path)


# ----------------------------------------------------------------------------- format


def test_svmlight_round_trips_exactly_through_the_sparse_layout(tmp_path, dask_client):
    src = tmp_path / "small.svm"
    src.write_text(SVMLIGHT)
    ds = ingest(src, tmp_path / "ds", layout="sparse", shuffle=False, rows_per_partition=2,
                n_features=1000, client=dask_client)
    assert ds.schema.layout == "sparse" and ds.is_sparse and ds.n_features == 1000
    assert [p.num_rows for p in ds.partitions] == [2, 2, 1]
    schema = pq.read_schema(ds.partitions[0].path)
    assert schema.names == ["indices", "values", "label"]
    assert schema.field("indices").type == pa.list_(pa.int32())
    assert schema.field("values").type == pa.list_(pa.float64())
    stored = json.loads(schema.metadata[b"nsdist"])
    assert stored["layout"] == "sparse" and stored["n_features"] == 1000
    assert stored["feature_names"] == {"prefix": "x", "start": 1, "n": 1000}
    assert ds.feature_names == NameRange("x", 1, 1000) and ds.feature_names[:2] == ["x1", "x2"]
    # docs: zstd, and a dictionary for each column whose few distinct values fit one dictionary page
    columns = pq.ParquetFile(ds.partitions[0].path).metadata.row_group(0)
    encodings = {columns.column(i).path_in_schema: columns.column(i).encodings for i in range(columns.num_columns)}
    assert {columns.column(i).compression for i in range(columns.num_columns)} == {"ZSTD"}
    assert all(any("DICTIONARY" in e for e in encodings[c]) for c in encodings)
    rows = []
    for i in range(len(ds.partitions)):
        X, y = ds.read_partition(i)
        assert isinstance(X, sp.csr_matrix) and X.dtype == np.float64 and X.indices.dtype == np.int32
        rows += _csr_rows(X, y)
    assert rows == _svmlight_rows(SVMLIGHT)        # every index and value, the explicit zero, the empty row
    X32, _ = ds.read_partition(0, dtype=np.float32)
    assert X32.dtype == np.float32
    dense, _ = ds.read_partition(0, sparse=False)
    assert isinstance(dense, np.ndarray) and dense[0, 999] == 3e-07 and dense[0, 6] == -2.25


def test_list_columns_get_a_dictionary_only_when_their_distinct_values_fit_one_page(tmp_path):
    """docs/engine.md §Dataset format: a sparse partition's list column is dictionary-encoded when its
    distinct values fit one dictionary page; past that (here 140,000 distinct float64 values, 1.1 MB) it is
    written plain -- pyarrow would otherwise write dictionary pages and then fall back -- and the rows read
    back the same either way."""
    rng = np.random.default_rng(0)
    n_rows, per_row = 2000, 70
    cols = np.sort(np.stack([rng.choice(500, per_row, replace=False) for _ in range(n_rows)]), axis=1)
    offsets = pa.array(np.arange(0, n_rows * per_row + 1, per_row, dtype=np.int32))
    distinct = rng.permutation(n_rows * per_row).astype(np.float64) + 0.5     # every value different
    assert distinct.nbytes > DICTIONARY_PAGE_BYTES
    for values, dictionary in ((distinct, False), (np.ones(n_rows * per_row), True)):
        table = pa.table({"indices": pa.ListArray.from_arrays(offsets, pa.array(cols.ravel().astype(np.int32))),
                          "values": pa.ListArray.from_arrays(offsets, pa.array(values)),
                          "label": pa.array(np.where(np.arange(n_rows) % 7 == 0, 1, -1).astype(np.int8))})
        options = parquet_options(table, "sparse")
        assert options["use_dictionary"] == ["label", "indices.list.element"] + (
            ["values.list.element"] if dictionary else [])
        path = tmp_path / f"dict-{dictionary}.parquet"
        pq.write_table(table, path, **options)
        meta = pq.ParquetFile(path).metadata.row_group(0)
        encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
        assert any("DICTIONARY" in e for e in encodings["indices.list.element"])
        assert any("DICTIONARY" in e for e in encodings["values.list.element"]) == dictionary
        assert pq.read_table(path).equals(table)


def test_w8a_and_a9a_both_layouts_equal_sklearn(shared_data, tmp_path, dask_client):
    for name in ("w8a", "a9a"):
        src = shared_data / name / f"{name}.xz"
        with lzma.open(src) as f:
            X_ref, y_ref = load_svmlight_file(f)
        auto = ingest(src, tmp_path / f"{name}-auto", shuffle=False, client=dask_client)
        dense = ingest(src, tmp_path / f"{name}-dense", shuffle=False, layout="dense", client=dask_client)
        assert auto.schema.layout == "sparse" and dense.schema.layout == "columns"
        assert auto.feature_names == dense.feature_names   # x1 .. xd in both layouts
        X = sp.vstack([auto.read_partition(i)[0] for i in range(len(auto.partitions))])
        assert (X != X_ref).nnz == 0
        Xd = np.vstack([dense.read_partition(i)[0] for i in range(len(dense.partitions))])
        np.testing.assert_array_equal(Xd, X_ref.toarray())
        assert auto.metadata["ingest"]["nnz"] == X_ref.nnz
        # sparse partitions are sized by their non-zeros: far more rows per file than dense ones
        assert auto.metadata["ingest"]["rows_per_partition"] > dense.metadata["ingest"]["rows_per_partition"]


def test_layout_choice():
    assert choose_layout("auto", 1000, 12_000, 300, 8) == "sparse"      # w8a-like
    assert choose_layout("auto", 1000, 13_000, 22, 8) == "columns"      # ijcnn1-like: nearly dense
    assert choose_layout("sparse", 10, 100, 10, 8) == "sparse"
    assert choose_layout("dense", 10, 1, 10**6, 8) == "columns"
    with pytest.raises(ValueError, match="layout must be one of"):
        choose_layout("csr", 10, 1, 10, 8)


def test_csv_with_many_categorical_levels_goes_sparse_without_densifying(tmp_path, dask_client):
    n, levels = 3000, 2000
    users = RNG.integers(0, levels, n)
    amount = np.round(RNG.normal(size=n), 3)
    amount[::7] = 0.0
    labels = np.where(users % 50 == 0, 1, -1)
    lines = ["label,user,amount,site"] + [f"{y},u{u},{a},s{u % 3}" for y, u, a in zip(labels, users, amount)]
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n")
    ds = ingest(tmp_path / "events.csv", tmp_path / "ds", categorical=["user", "site"], shuffle=False,
                client=dask_client)
    assert ds.schema.layout == "sparse"
    X, y = ds.read_partition(0)
    assert isinstance(X, sp.csr_matrix)
    d = ds.n_features
    assert d == len(set(users)) + 1 + 3 and X.nnz == 2 * n + np.count_nonzero(amount)
    dense = ingest(tmp_path / "events.csv", tmp_path / "dense", categorical=["user", "site"], shuffle=False,
                   layout="dense", client=dask_client)
    assert dense.feature_names == ds.feature_names
    np.testing.assert_array_equal(X.toarray(), dense.read_partition(0)[0])
    np.testing.assert_array_equal(y, labels)


def test_sparse_parquet_input_is_reingested_sparse(tmp_path, dask_client):
    _sparse_file(tmp_path / "in.parquet", [[0, 3], [], [1, 49]], [[1.5, -2.0], [], [4.0, 1.0]], [1, -1, -1],
                 n_features=50)
    ds = ingest(tmp_path / "in.parquet", tmp_path / "out", shuffle=False, client=dask_client)
    assert ds.schema.layout == "sparse" and ds.n_features == 50
    expected = np.zeros((3, 50))
    expected[0, [0, 3]], expected[2, [1, 49]] = [1.5, -2.0], [4.0, 1.0]
    np.testing.assert_array_equal(ds.read_partition(0)[0].toarray(), expected)
    dense = ingest(tmp_path / "in.parquet", tmp_path / "dense", shuffle=False, layout="dense", client=dask_client)
    np.testing.assert_array_equal(dense.read_partition(0)[0], expected)


# ----------------------------------------------------------------------------- bad input

BAD_ROWS = [
    ([[0, 1], [2, 5]], [[1.0, 1.0], [1.0, 1.0]], "row 1: feature index 5 is outside [0, 5)"),
    ([[0, 1], [-1]], [[1.0, 1.0], [1.0]], "row 1: feature index -1 is outside [0, 5)"),
    ([[0, 1], [], [3, 2]], [[1.0, 1.0], [], [1.0, 1.0]], "row 2: unsorted feature indices: 2 after 3"),
    ([[0], [2, 2]], [[1.0], [1.0, 2.0]], "row 1: duplicate feature index 2 after 2"),
    ([[0, 1], [2, 3]], [[1.0, 1.0], [1.0]], "row 1: 'indices' has 2 entries but 'values' 1"),
    ([[0, 1], None], [[1.0, 1.0], [1.0]], "row 1: 'indices' is missing (null)"),
    ([[0, 1], [2, None]], [[1.0, 1.0], [1.0, 1.0]], "row 1: 'indices' holds a missing (null) entry"),
    ([[0, 1], [2]], [[1.0, float("nan")], [1.0]], "row 0: feature 'x1' = nan is not finite"),
    ([[3, 1], [], [0, 7]], [[1.0, 1.0], [], [1.0, 1.0]], "row 2: feature index 7 is outside [0, 5)"),
    ([[0, 9, 2]], [[1.0, 1.0, 1.0]], "row 0: feature index 9 is outside [0, 5)"),
    ([[4], [], [0, 3, 3]], [[1.0], [], [1.0, 1.0, 1.0]], "row 2: duplicate feature index 3 after 3"),
]


@pytest.mark.parametrize("indices, values, message", BAD_ROWS)
def test_malformed_sparse_rows_are_refused_with_their_location(tmp_path, indices, values, message):
    _sparse_file(tmp_path / "part-00000.parquet", [[1]], [[1.0]], [1])
    _sparse_file(tmp_path / "part-00001.parquet", indices, values, [1] * len(indices))
    ds = Dataset.open(tmp_path)
    ds.read_partition(0)
    where = f"part-00001.parquet (partition 1): {message}"
    with pytest.raises(ValueError, match=re.escape(where)):
        ds.read_partition(1)
    with pytest.raises(ValueError, match=re.escape(where)):
        ds.read_partition(1, sparse=False)


def _chunked_table(batches, index_type, value_type) -> pa.Table:
    """A table of one record batch per ``(indices, values)`` pair: list columns of several chunks."""
    return pa.Table.from_batches([
        pa.record_batch([pa.array(i, pa.list_(index_type)), pa.array(v, pa.list_(value_type))],
                        names=["indices", "values"]) for i, v in batches])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_type", [pa.int32(), pa.int64()])
def test_sparse_matrix_of_several_chunks_and_other_types(index_type, dtype):
    """Chunks are joined, int64 indices and float32 values cast; the matrix is canonical (sorted, no
    duplicates), its indices int32, its values ``dtype``."""
    table = _chunked_table([([[0, 4], []], [[1.5, -2.0], []]), ([[1], [2, 3, 4]], [[3.0], [0.25, 4.0, -1.0]])],
                           index_type, pa.float32())
    X = sparse_matrix(table, 5, dtype, "t")
    expected = np.array([[1.5, 0, 0, 0, -2], [0] * 5, [0, 3, 0, 0, 0], [0, 0, 0.25, 4, -1]])
    np.testing.assert_array_equal(X.toarray(), expected)
    assert X.dtype == dtype and X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    assert X.has_sorted_indices and X.has_canonical_format


@pytest.mark.parametrize("index_type", [pa.int32(), pa.int64()])
@pytest.mark.parametrize("batches, message", [
    ([([[0, 1]], [[1.0, 1.0]]), ([[3], [2, 1]], [[1.0], [1.0, 1.0]])], "t: row 2: unsorted feature indices: 1 after 2"),
    ([([[2, 1]], [[1.0, 1.0]]), ([[3], [5]], [[1.0], [1.0]])], "t: row 2: feature index 5 is outside [0, 5)"),
    ([([[0]], [[1.0]]), ([[1], [2]], [[1.0], [float("inf")]])], "t: row 2: feature 'x2' = inf is not finite"),
])
def test_sparse_matrix_names_the_row_across_chunks(index_type, batches, message):
    """Rows are counted over the chunks."""
    with pytest.raises(ValueError, match=re.escape(message)):
        sparse_matrix(_chunked_table(batches, index_type, pa.float64()), 5, np.float64, "t")


def test_an_int64_index_that_int32_would_wrap_is_refused():
    """2^32 + 1 is 1 in int32: the range is checked before the indices are cast."""
    table = _chunked_table([([[0, 1]], [[1.0, 1.0]]), ([[4], [2, 2**32 + 1]], [[1.0], [1.0, 1.0]])],
                           pa.int64(), pa.float64())
    with pytest.raises(ValueError, match=re.escape("t: row 2: feature index 4294967297 is outside [0, 5)")):
        sparse_matrix(table, 5, np.float64, "t")


def test_sparse_metadata_name_range_and_its_checks(tmp_path):
    _sparse_file(tmp_path / "a.parquet", [[0]], [[1.0]], [1], n_features=3,
                 feature_names={"prefix": "f", "start": 10, "n": 3})
    assert Dataset.open(tmp_path / "a.parquet").feature_names == ["f10", "f11", "f12"]
    _sparse_file(tmp_path / "b.parquet", [[0]], [[1.0]], [1], n_features=3, feature_names=["a", "b"])
    with pytest.raises(ValueError, match="metadata lists 2 feature names for 3 features"):
        Dataset.open(tmp_path / "b.parquet")


# ----------------------------------------------------------------------------- scaling, gradient


def test_scale_only_standardisation_of_sparse_data(tmp_path, dask_client):
    X = sp.random(400, 30, density=0.1, format="csr", random_state=3, dtype=np.float64)
    X.data = np.round(X.data * 10, 2)
    X = sp.hstack([X, sp.csr_matrix((400, 2))], format="csr")      # two features never present
    y = np.where(RNG.random(400) < 0.2, 1, -1)
    for k, rows in enumerate((slice(0, 150), slice(150, 400))):
        part = X[rows]
        _sparse_file(tmp_path / f"part-{k}.parquet",
                     [part.indices[part.indptr[r]:part.indptr[r + 1]].tolist() for r in range(part.shape[0])],
                     [part.data[part.indptr[r]:part.indptr[r + 1]].tolist() for r in range(part.shape[0])],
                     y[rows], n_features=32)
    ds = Dataset.open(tmp_path)
    scaling = feature_scaling(dask_client, ds)
    reference = StandardScaler(with_mean=False).fit(X)
    assert not scaling.centered and not scaling.mean.any() and scaling.scale[-2:].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(scaling.scale, reference.scale_, rtol=1e-12)
    block, _ = ds.read_partition(1)
    nnz = block.nnz
    scaled = scaling.apply(block)
    assert sp.issparse(scaled) and scaled.nnz == nnz
    np.testing.assert_allclose(scaled.toarray(), reference.transform(X[150:400]).toarray(), rtol=1e-12)
    w, b = RNG.normal(size=32), 0.3
    coef, intercept = scaling.fold(w, b)
    np.testing.assert_allclose(X @ coef + intercept, reference.transform(X) @ w + b, rtol=1e-10)
    with pytest.raises(ValueError, match="centring would densify"):
        feature_scaling(dask_client, ds, center=True)
    with pytest.raises(ValueError, match="cannot centre a sparse matrix"):
        Scaling(mean=np.ones(32), scale=np.ones(32)).apply(X.copy())


def test_weight_gradient_on_csr_and_a_population():
    X = sp.random(200, 50, density=0.05, format="csr", random_state=4)
    dense = X.toarray()
    d1 = np.zeros(200)
    d1[[3, 17, 150]] = [0.5, -1.0, 2.0]
    np.testing.assert_allclose(weight_gradient(X, d1), dense.T @ d1)          # few rows: X[nz]
    D = np.zeros((200, 6))
    D[[5, 9]] = RNG.normal(size=(2, 6))
    g = weight_gradient(X, D)
    assert g.shape == (50, 6) and g.dtype == np.float64 and isinstance(g, np.ndarray)
    np.testing.assert_allclose(g, dense.T @ D)
    D = RNG.normal(size=(200, 6))                                               # every row: X.T @ D
    np.testing.assert_allclose(weight_gradient(X, D), dense.T @ D)
    np.testing.assert_allclose(weight_gradient(dense.astype(np.float32), D), dense.T @ D, atol=1e-5)
    np.testing.assert_allclose(weight_gradient(X.astype(np.float32), D[:, 0]), dense.T @ D[:, 0], atol=1e-5)


# ----------------------------------------------------------------------------- wide models


def test_wide_model_saves_loads_and_predicts(tmp_path):
    d = 2**22
    coef = np.zeros(d)
    coef[RNG.integers(0, d, 5000)] = RNG.normal(size=5000)
    model = LinearModel(coef=coef, intercept=-0.25, measure="prec@k", params={"k": 0.01})
    assert isinstance(model.feature_names, NameRange) and model.n_features == d
    start = time.perf_counter()
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, elapsed            # about 0.2 s here; generous for a loaded CI machine
    saved = json.loads((tmp_path / "m" / "model.json").read_text())
    assert saved["n_features"] == d and saved["feature_names"] == {"prefix": "x", "start": 0, "n": d}
    assert (tmp_path / "m" / "model.json").stat().st_size < 2000
    np.testing.assert_array_equal(loaded.coef, coef)
    assert loaded.intercept == -0.25 and loaded.feature_names == model.feature_names
    loaded.coef[0] = 1.0                      # a loaded model's weights are writeable
    loaded.check_features(NameRange("x", 0, d))
    with pytest.raises(ValueError, match="4194303 features where the model has 4194304"):
        loaded.check_features(NameRange("x", 0, d - 1))
    rows = np.repeat(np.arange(100), 100)
    cols = RNG.integers(0, d, size=10_000)
    X = sp.csr_matrix((RNG.normal(size=10_000), (rows, cols)), shape=(100, d))
    scores = model.decision_function(X)
    assert scores.shape == (100,) and scores.dtype == np.float64
    np.testing.assert_allclose(scores, X @ coef - 0.25)
    np.testing.assert_allclose(model.decision_function(X.tocsc().astype(np.float32)), scores, rtol=1e-5)
    np.testing.assert_array_equal(model.predict(X), np.where(scores > 0, 1, -1))
    bad = X.copy()
    bad.data[5] = np.inf
    with pytest.raises(ValueError, match=r"X\[0, \d+\] = inf is not finite"):
        model.decision_function(bad)
    with pytest.raises(ValueError, match="X has 10 features, the model expects"):
        model.decision_function(sp.csr_matrix((2, 10)))


def test_small_models_keep_their_names_and_old_files_load(tmp_path):
    model = LinearModel(coef=[1.0, -2.0], intercept=0.5, measure="auc", feature_names=["a", "b"])
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    assert loaded.feature_names == ["a", "b"]
    assert json.loads((tmp_path / "m" / "model.json").read_text())["feature_names"] == ["a", "b"]
    np.testing.assert_allclose(loaded.decision_function(sp.csr_matrix([[1.0, 1.0]])), [-0.5])
    default = LinearModel(coef=np.ones(3), intercept=0.0, measure="auc")
    assert default.feature_names == ["x0", "x1", "x2"]
    default.check_features(["x0", "x1", "x2"])
    with pytest.raises(ValueError, match="'y1' where the model has 'x1'"):
        default.check_features(["x0", "y1", "x2"])


# ----------------------------------------------------------------------------- evaluation


def test_evaluate_sparse_equals_dense(tmp_path, dask_client, shared_data):
    src = shared_data / "a9a" / "a9a.t.xz"
    sparse_ds = ingest(src, tmp_path / "s", rows_per_partition=5000, n_features=123, client=dask_client)
    dense_ds = ingest(src, tmp_path / "d", rows_per_partition=5000, n_features=123, layout="dense",
                      client=dask_client)
    assert sparse_ds.is_sparse and not dense_ds.is_sparse
    w = RNG.normal(size=123)
    a = evaluate_dataset(dask_client, sparse_ds, w, 0.1)
    b = evaluate_dataset(dask_client, dense_ds, w, 0.1)
    assert a == pytest.approx(b, rel=1e-12)
    # the svmlight file itself, scored in process as CSR: the same measures
    model = LinearModel(coef=w, intercept=0.1, measure="pauc")
    c = evaluate_sparse_input(model, str(src))
    assert c == pytest.approx(a, rel=1e-12)
    assert evaluate_sparse_input(model, sparse_ds.url, beta=0.05, k=100) == pytest.approx(
        evaluate_dataset(dask_client, sparse_ds, w, 0.1, beta=0.05, k=100), rel=1e-12)


def test_nsdist_evaluate_takes_an_svmlight_file(tmp_path, dask_client, shared_data):
    """``nsdist evaluate MODEL test.svm.xz`` scores the file as ``nsdist.evaluate`` does (it named it 'not a
    readable Parquet file'), in this process, with no cluster; ``--positive -1`` makes the other class positive."""
    import os
    import subprocess
    import sys

    src = shared_data / "a9a" / "a9a.t.xz"
    model = LinearModel(coef=RNG.normal(size=123), intercept=0.1, measure="pauc")
    model.save(str(tmp_path / "m"))
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:9"}    # nothing listens: none is asked
    for extra, positive in (([], None), (["--positive", "-1"], ["-1"])):
        out = tmp_path / f"e{len(extra)}.json"
        proc = subprocess.run([sys.executable, "-m", "nsdist", "evaluate", str(tmp_path / "m"), str(src),
                               "--out", str(out), *extra], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(out.read_text())
        expected = evaluate_sparse_input(model, str(src), positive=positive)
        assert {k: got[k] for k in expected} == expected
    assert got["n_positives"] == 16281 - 3846       # a9a.t: 3,846 rows labelled +1


# ----------------------------------------------------------------------------- predict


def test_predict_scores_svmlight_files_and_sparse_datasets(tmp_path, dask_client):
    from nsdist.data.scoring import write_scores

    src = tmp_path / "small.svm"
    src.write_text(SVMLIGHT)
    coef = RNG.normal(size=1000)
    model = LinearModel(coef=coef, intercept=0.1, measure="prec@k")
    n = write_scores(model, str(src), str(tmp_path / "scores.parquet"))
    out = pq.read_table(tmp_path / "scores.parquet")
    rows = _svmlight_rows(SVMLIGHT)
    expected = [sum(coef[i - 1] * v for i, v in pairs) + 0.1 for _, pairs in rows]
    assert n == 5 and out.column_names == ["label", "score", "prediction"]
    assert out.column("label").to_pylist() == [y for y, _ in rows]
    np.testing.assert_allclose(out.column("score").to_numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(out.column("prediction").to_numpy(), np.where(np.array(expected) > 0, 1, -1))

    ds = ingest(src, tmp_path / "ds", layout="sparse", shuffle=False, n_features=1000, client=dask_client)
    assert write_scores(model, ds.url, str(tmp_path / "scores.csv")) == 5
    csv_scores = np.loadtxt(tmp_path / "scores.csv", delimiter=",", skiprows=1, usecols=1)
    np.testing.assert_allclose(csv_scores, expected, rtol=1e-9)

    narrow = LinearModel(coef=np.ones(10), intercept=0.0, measure="auc")
    with pytest.raises(ValueError, match="small.svm: line 2: feature index 1000 exceeds n_features = 10"):
        write_scores(narrow, str(src), str(tmp_path / "x.parquet"))
    with pytest.raises(ValueError, match="has 1000 features, the model expects 10"):
        write_scores(narrow, ds.url, str(tmp_path / "x.parquet"))
    with pytest.raises(ValueError, match="--keep column"):
        write_scores(model, ds.url, str(tmp_path / "x.parquet"), keep=["id"])
    assert not (tmp_path / "x.parquet").exists()


def test_a_million_feature_svmlight_file_ingests_sparse(tmp_path, dask_client):
    d, n = 2**22, 3000
    cols = [np.sort(RNG.choice(d, size=20, replace=False)) for _ in range(n)]
    labels = np.where(RNG.random(n) < 0.05, 1, -1)
    lines = [f"{y} " + " ".join(f"{j + 1}:{v:.3g}" for j, v in zip(c, RNG.random(20) + 0.5))
             for y, c in zip(labels, cols)]
    (tmp_path / "wide.svm").write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    ds = ingest(tmp_path / "wide.svm", tmp_path / "ds", n_features=d, client=dask_client)
    assert time.perf_counter() - start < 60
    assert ds.is_sparse and ds.n_features == d and ds.num_rows == n
    sidecar = json.loads((tmp_path / "ds" / "_nsdist.json").read_text())
    assert sidecar["layout"] == "sparse" and sidecar["ingest"]["nnz"] == 20 * n
    assert len(json.dumps(sidecar)) < 10_000                  # no per-feature list anywhere
    X, y = ds.read_partition(0)
    assert X.shape == (n, d) and X.nnz == 20 * n and sorted(y.tolist()) == sorted(labels.tolist())
    assert len(pickle.dumps(ds)) < 10_000                     # cheap to send to every Dask task
