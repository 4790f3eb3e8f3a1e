"""ingest: real data sets round trip, determinism, out-of-core bounds, atomic failure."""
from __future__ import annotations

import bz2
import csv
import gzip
import itertools
import json
import lzma
import re
import time

import fsspec
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import load_svmlight_file

from nsdist.data import DataNotFoundError, Dataset, ingest


def _read_all(ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
    parts = [ds.read_partition(i, sparse=False) for i in range(len(ds.partitions))]
    return np.vstack([X for X, _ in parts]), np.concatenate([y for _, y in parts])


def _sorted_rows(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    rows = np.column_stack([X, y])
    return rows[np.lexsort(rows.T[::-1])]


def _sklearn(path, opener=open):
    with opener(path, "rb") as f:
        X, y = load_svmlight_file(f)
    return X.toarray(), np.where(y > 0, 1, -1)


def _letter_reference(repo_data) -> tuple[np.ndarray, np.ndarray]:
    """Letter read with the csv module, positive = 'N'."""
    with open(repo_data / "letter" / "letter-recognition.data", newline="") as f:
        rows = list(csv.reader(f))
    return np.array([r[1:] for r in rows], float), np.array([1 if r[0] == "N" else -1 for r in rows])


def _letter(repo_data, dst, client, **kwargs) -> Dataset:
    options = {"format": "csv", "label_column": 0, "positive": "N", **kwargs}
    return ingest(repo_data / "letter" / "letter-recognition.data", dst, client=client, **options)


# ----------------------------------------------------------------------------- real data sets


def test_svmlight_xz_in_order_equals_sklearn(shared_data, tmp_path, dask_client):
    src = shared_data / "a9a" / "a9a.xz"
    ds = ingest(src, tmp_path / "a9a", shuffle=False, rows_per_partition=10_000, client=dask_client)
    X_ref, y_ref = _sklearn(src, lzma.open)
    X, y = _read_all(ds)
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)
    assert [p.num_rows for p in ds.partitions] == [10_000, 10_000, 10_000, 2561]
    assert ds.feature_names[:2] == ["x1", "x2"] and ds.n_features == 123
    meta = ds.metadata
    assert (meta["num_rows"], meta["positives"], meta["n_features"]) == (32561, 7841, 123)
    assert meta["source"] == {"format": "svmlight", "url": str(src)}
    assert meta["label_mapping"]["positive"] is None and meta["ingest"]["shuffle"] is False
    assert [p["positives"] for p in meta["partitions"]] == [int((y[k:k + 10_000] > 0).sum())
                                                          for k in range(0, 32561, 10_000)]


def test_svmlight_bz2_shuffled_is_a_permutation(shared_data, tmp_path, dask_client):
    src = shared_data / "ijcnn1" / "ijcnn1.trn.bz2"
    ds = ingest(src, tmp_path / "ijcnn1", rows_per_partition=20_000, client=dask_client)
    X_ref, y_ref = _sklearn(src, bz2.open)
    X, y = _read_all(ds)
    assert [p.num_rows for p in ds.partitions] == [20_000, 20_000, 9990]
    np.testing.assert_array_equal(_sorted_rows(X, y), _sorted_rows(X_ref, y_ref))
    assert not np.array_equal(y, y_ref)
    assert ds.metadata["positives"] == 4853 and ds.n_features == 22


def test_svmlight_empty_rows_w8a(shared_data, tmp_path, dask_client):
    ds = ingest(shared_data / "w8a" / "w8a.xz", tmp_path / "w8a", dtype="float32", layout="dense",
                client=dask_client)
    assert (ds.num_rows, ds.n_features, ds.metadata["positives"]) == (49749, 300, 1479)
    assert pq.read_schema(ds.partitions[0].path).field("x1").type == "float"
    X, y = ds.read_partition(0, dtype=np.float32)
    assert X.dtype == np.float32 and (X.sum(axis=1) == 0).any() and (y > 0).sum() == 1479


def test_csv_letter_positive_n(repo_data, tmp_path):
    """The bundled copy of Letter, with the default in-process cluster."""
    ds = ingest(repo_data / "letter" / "letter-recognition.data", tmp_path / "letter", format="csv",
                label_column=0, positive="N")
    assert (ds.num_rows, ds.n_features, ds.metadata["positives"]) == (20_000, 16, 783)
    assert ds.feature_names == [f"col{j}" for j in range(1, 17)]
    assert ds.metadata["label_mapping"] == {"column": "col0", "positive": ["N"], "negative": None,
                                            "rule": "every other label is negative"}
    np.testing.assert_array_equal(_sorted_rows(*_read_all(ds)), _sorted_rows(*_letter_reference(repo_data)))


def test_csv_quoted_labels_mammography(shared_data, tmp_path, dask_client):
    ds = ingest(shared_data / "mammography" / "mammography.csv", tmp_path / "mammo", label_column=-1,
                shuffle=False, client=dask_client)
    assert (ds.num_rows, ds.n_features, ds.metadata["positives"]) == (11183, 6, 260)
    X, y = _read_all(ds)
    ref = pd.read_csv(shared_data / "mammography" / "mammography.csv", header=None, quotechar="'")
    np.testing.assert_array_equal(X, ref.iloc[:, :6].to_numpy())
    np.testing.assert_array_equal(y, np.where(ref.iloc[:, 6] == 1, 1, -1))


R2L_U2R = ["buffer_overflow.", "loadmodule.", "perl.", "rootkit.", "ftp_write.", "guess_passwd.", "imap.",
           "multihop.", "phf.", "spy.", "warezclient.", "warezmaster."]


def _head_gz(src, dst, n_lines: int) -> list[list[str]]:
    with gzip.open(src, "rt", newline="") as f:
        lines = list(itertools.islice(f, n_lines))
    with gzip.open(dst, "wt", newline="") as f:
        f.writelines(lines)
    return list(csv.reader(lines))


def test_csv_one_hot_kddcup_slice(shared_data, tmp_path, dask_client):
    """Train on a head of the 10% file; encode a head of the test file with the train categories."""
    train = _head_gz(shared_data / "kddcup99" / "kddcup.data_10_percent.gz", tmp_path / "train.csv.gz", 30_000)
    test = _head_gz(shared_data / "kddcup99" / "corrected.gz", tmp_path / "test.csv.gz", 9000)
    options = dict(label_column=-1, positive=R2L_U2R, negative="normal.", client=dask_client)
    ds = ingest(tmp_path / "train.csv.gz", tmp_path / "train", categorical=[1, 2, 3], chunk_rows=7000, **options)

    kept = [r for r in train if r[-1] in R2L_U2R or r[-1] == "normal."]
    categories = {f"col{j}": sorted({r[j] for r in kept}) for j in (1, 2, 3)}
    assert ds.metadata["categories"] == categories
    assert ds.n_features == 38 + sum(map(len, categories.values()))
    assert ds.num_rows == len(kept) and ds.metadata["dropped_rows"] == len(train) - len(kept)
    assert ds.metadata["positives"] == sum(r[-1] in R2L_U2R for r in kept) > 0
    assert "col2=http" in ds.feature_names and ds.feature_names.index("col1=" + categories["col1"][0]) == 1

    encoded = ingest(tmp_path / "test.csv.gz", tmp_path / "test", categorical=ds.metadata["categories"],
                     shuffle=False, **options)
    assert encoded.feature_names == ds.feature_names
    X, _ = _read_all(encoded)
    test_kept = [r for r in test if r[-1] in R2L_U2R or r[-1] == "normal."]
    services = categories["col2"]
    block = [ds.feature_names.index(f"col2={s}") for s in services]
    expected = np.array([[float(r[2] == s) for s in services] for r in test_kept])
    np.testing.assert_array_equal(X[:, block], expected)
    unseen = [i for i, r in enumerate(test_kept) if r[2] not in services]
    assert unseen and (X[unseen][:, block] == 0).all()


def test_parquet_to_parquet(tmp_path, dask_client):
    rng = np.random.default_rng(1)
    (tmp_path / "user").mkdir()
    frames = [pd.DataFrame({"u": rng.normal(size=n), "v": rng.integers(0, 5, n), "label": rng.random(n) < 0.2})
              for n in (700, 400)]
    for k, df in enumerate(frames):
        df.to_parquet(tmp_path / "user" / f"p{k}.parquet")
    ds = ingest(tmp_path / "user", tmp_path / "out", rows_per_partition=500, client=dask_client)
    assert [p.num_rows for p in ds.partitions] == [500, 500, 100]
    df = pd.concat(frames)
    np.testing.assert_array_equal(_sorted_rows(*_read_all(ds)),
                                  _sorted_rows(df[["u", "v"]].to_numpy(float), np.where(df["label"], 1, -1)))
    assert ds.metadata["source"]["format"] == "parquet"
    for df in frames:
        df["label"] = np.where(df["label"], "fraud", "ok")
    for k, df in enumerate(frames):
        df.to_parquet(tmp_path / "user" / f"p{k}.parquet")
    with pytest.raises(ValueError, match="option\\(s\\) \\['negative'\\] do not apply to parquet input"):
        ingest(tmp_path / "user", tmp_path / "out2", positive="fraud", negative="ok", client=dask_client)
    named = ingest(tmp_path / "user", tmp_path / "out2", positive="fraud", rows_per_partition=500,
                   client=dask_client)
    np.testing.assert_array_equal(_sorted_rows(*_read_all(named)), _sorted_rows(*_read_all(ds)))
    assert named.metadata["label_mapping"]["positive"] == ["fraud"]
    with pytest.raises(ValueError, match="all 1100 rows are negative \\(label column 'label', with positive="
                                         "\\['fruad'\\]\\)"):
        ingest(tmp_path / "user", tmp_path / "out3", positive="fruad", client=dask_client)


@pytest.mark.parametrize("source", ["csv", "parquet"])
def test_progress_is_reported_task_by_task_for_each_stage(repo_data, tmp_path, dask_client, source):
    """on_progress: every task of the read, shuffle and write stages, in that order, with the rows they hold;
    the read's total is known for Parquet input (its partitions) and counted as it goes for text."""
    src = repo_data / "letter" / "letter-recognition.data"
    if source == "parquet":
        src = ingest(src, tmp_path / "first", format="csv", label_column=0, positive="N", rows_per_partition=3000,
                     client=dask_client).url
    reports = []
    ds = ingest(src, tmp_path / "out", format="csv" if source == "csv" else None,
                **({"label_column": 0, "positive": "N", "chunk_rows": 6000} if source == "csv" else {}),
                rows_per_partition=2500, client=dask_client, on_progress=reports.append)
    stages = [r.stage for r in reports]
    assert stages == sorted(stages, key=["read", "shuffle", "write"].index)         # stage after stage
    for stage, index in (("read", 1), ("shuffle", 2), ("write", 3)):
        mine = [r for r in reports if r.stage == stage]
        assert [r.done for r in mine] == list(range(1, len(mine) + 1)) and {r.stage_index for r in mine} == {index}
        assert mine[-1].rows == 20_000 and all(a.rows < b.rows for a, b in zip(mine, mine[1:]))
    chunks = 7 if source == "parquet" else 4               # 7 partitions of the first ingest; 20,000 / 6,000 lines
    assert {r.total for r in reports if r.stage == "read"} == ({chunks} if source == "parquet" else {None})
    assert len([r for r in reports if r.stage == "read"]) == chunks
    assert {r.total for r in reports if r.stage == "shuffle"} == {chunks}
    assert {r.total for r in reports if r.stage == "write"} == {len(ds.partitions)} == {8}


def test_dense_columns_keep_a_dictionary_only_when_their_values_repeat(repo_data, tmp_path, dask_client):
    """Letter's integer features (16 values) are dictionary-encoded; measured values of many distinct floats are
    written plain (a dictionary page then plain pages would be larger and slower); the rows read back the same."""
    from nsdist.data.layout import DENSE_SAMPLE

    letter = ingest(repo_data / "letter" / "letter-recognition.data", tmp_path / "letter", format="csv",
                    label_column=0, positive="N", client=dask_client)
    rng = np.random.default_rng(4)
    n = 3 * DENSE_SAMPLE
    frame = pd.DataFrame({"measured": rng.normal(size=n), "count": rng.integers(0, 50, n).astype(float),
                          "half": np.repeat(rng.normal(size=n // 4), 4), "label": rng.random(n) < 0.1})
    frame.to_parquet(tmp_path / "in.parquet")
    mixed = ingest(tmp_path / "in.parquet", tmp_path / "mixed", client=dask_client, shuffle=False)
    for ds, expected in ((letter, {f"col{j}" for j in range(1, 17)} | {"label"}),
                         (mixed, {"count", "half", "label"})):
        for part in ds.partitions:
            meta = pq.ParquetFile(part.path).metadata.row_group(0)
            encoded = {meta.column(i).path_in_schema for i in range(meta.num_columns)
                       if any("DICTIONARY" in e for e in meta.column(i).encodings)}
            assert encoded == expected
    np.testing.assert_array_equal(_read_all(mixed)[0], frame[["measured", "count", "half"]].to_numpy())


def test_memory_urls_both_sides(repo_data, memory_url, dask_client):
    src = f"{memory_url}/in/letter.csv.xz"
    with fsspec.open(src, "wb", compression="xz") as f:
        f.write((repo_data / "letter" / "letter-recognition.data").read_bytes())
    ds = ingest(src, f"{memory_url}/out", label_column=0, positive=["N", "Q"], rows_per_partition=8000,
                client=dask_client)
    assert ds.num_rows == 20_000 and ds.metadata["positives"] == 783 * 2
    assert [p.num_rows for p in ds.partitions] == [8000, 8000, 4000]
    fs = fsspec.filesystem("memory")
    assert sorted(fs.ls(f"{memory_url}/out", detail=False)) == [
        f"{memory_url[len('memory://'):]}/out/{name}"
        for name in ("_nsdist.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet")]
    assert fs.ls(memory_url, detail=False) == [f"{memory_url[len('memory://'):]}/{d}" for d in ("in", "out")]


# ----------------------------------------------------------------------------- shuffle


def test_deterministic_for_a_seed(repo_data, tmp_path, dask_client):
    options = dict(rows_per_partition=6000, chunk_rows=3000)
    a = _letter(repo_data, tmp_path / "a", dask_client, random_state=7, **options)
    b = _letter(repo_data, tmp_path / "b", dask_client, random_state=7, **options)
    c = _letter(repo_data, tmp_path / "c", dask_client, random_state=8, **options)
    names = [f"part-0000{k}.parquet" for k in range(4)]
    assert [(tmp_path / "a" / n).read_bytes() for n in names] == [(tmp_path / "b" / n).read_bytes() for n in names]
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert a.metadata["content_sha256"] == b.metadata["content_sha256"] != c.metadata["content_sha256"]
    rows_a, rows_c = _read_all(a), _read_all(c)
    assert not np.array_equal(rows_a[0], rows_c[0])
    np.testing.assert_array_equal(_sorted_rows(*rows_a), _sorted_rows(*rows_c))


def test_out_of_core_bounds(repo_data, tmp_path, dask_client):
    """20 chunks of 1000 lines scattered to 7 partitions: no task holds more than 3000 rows."""
    ds = _letter(repo_data, tmp_path / "ooc", dask_client, chunk_rows=1000, rows_per_partition=3000)
    info = ds.metadata["ingest"]
    assert (info["chunks"], info["chunk_rows"], info["max_task_rows"]) == (20, 1000, 3000)
    assert [p.num_rows for p in ds.partitions] == [3000] * 6 + [2000]
    X, y = _read_all(ds)
    X_in, y_in = _letter_reference(repo_data)
    first_chunk = {tuple(r) for r in X_in[:1000]}
    from_first_chunk = [sum(tuple(r) in first_chunk for r in X[k:k + 3000]) for k in range(0, 20_000, 3000)]
    assert all(from_first_chunk)  # every partition draws rows from the first chunk
    np.testing.assert_array_equal(_sorted_rows(X, y), _sorted_rows(X_in, y_in))


# ----------------------------------------------------------------------------- failures


def _listing(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _user_frames(rng, sizes=(700, 400)) -> list[pd.DataFrame]:
    """Parquet as users have it: numbers, a text column, integer codes, a pandas categorical, a timestamp."""
    return [pd.DataFrame({"u": rng.normal(size=n), "country": rng.choice([" de", "fr", "'us'"], n),
                          "mcc": rng.choice([5411, 7995], n),
                          "channel": pd.Categorical(rng.choice(["web", "app"], n)),
                          "v": rng.integers(0, 5, n), "when": pd.Timestamp("2026-01-01") + pd.to_timedelta(
                              rng.integers(0, 10**6, n), unit="s"),
                          "label": rng.random(n) < 0.2}) for n in sizes]


def test_parquet_categorical_columns_are_one_hot_encoded_as_pandas_does(tmp_path, dask_client):
    """``categorical=`` on Parquet input: text, integer-code and dictionary columns become one 0/1 feature per
    category (sorted, in the column's place, text cleaned as CSV fields are), equal to pandas' ``get_dummies``;
    ``feature_columns`` leaves the timestamp out; a test set encoded with the training set's categories gets the
    same features (a category it never had: zeros); the sparse layout holds the same rows."""
    rng = np.random.default_rng(5)
    (tmp_path / "user").mkdir()
    frames = _user_frames(rng)
    for k, df in enumerate(frames):
        df.to_parquet(tmp_path / "user" / f"p{k}.parquet")
    columns = ["u", "country", "mcc", "channel", "v"]
    ds = ingest(tmp_path / "user", tmp_path / "out", categorical=["country", "mcc", "channel"],
                feature_columns=columns, shuffle=False, layout="dense", client=dask_client)
    df = pd.concat(frames, ignore_index=True)
    df["country"] = df["country"].str.strip(" '")
    expected = pd.get_dummies(df[columns].astype({"mcc": str}), columns=["country", "mcc", "channel"],
                              prefix_sep="=", dtype=float)
    assert ds.feature_names == ["u", "country=de", "country=fr", "country=us", "mcc=5411", "mcc=7995",
                                "channel=app", "channel=web", "v"]
    X, y = _read_all(ds)
    np.testing.assert_array_equal(X, expected[ds.feature_names].to_numpy())
    np.testing.assert_array_equal(y, np.where(df["label"], 1, -1))
    assert ds.metadata["categories"] == {"country": ["de", "fr", "us"], "mcc": ["5411", "7995"],
                                         "channel": ["app", "web"]}
    assert ds.metadata["source"]["columns"] == columns
    test = frames[1].head(4).assign(country=["fr", "it", "de", "fr"], label=[True, False, False, True])
    test.to_parquet(tmp_path / "test.parquet")
    encoded = ingest(tmp_path / "test.parquet", tmp_path / "test", categorical=ds.metadata["categories"],
                     feature_columns=columns, shuffle=False, layout="dense", client=dask_client)
    assert encoded.feature_names == ds.feature_names
    Xt, _ = _read_all(encoded)
    np.testing.assert_array_equal(Xt[:, 1:4], [[0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]])
    sparse = ingest(tmp_path / "user", tmp_path / "sparse", categorical=["country", "mcc", "channel"],
                    feature_columns=columns, shuffle=False, layout="sparse", client=dask_client)
    assert sparse.is_sparse and sparse.feature_names == ds.feature_names
    np.testing.assert_array_equal(_read_all(sparse)[0], X)


def test_drop_leaves_an_id_and_a_timestamp_out_of_a_csv_and_a_parquet_ingest(tmp_path, dask_client):
    """The users' frames with a transaction id beside the timestamp: ``drop=["txn", "when"]`` ingests the rest --
    the same dataset as ``feature_columns=`` naming the other columns, from Parquet (one-hot columns too) and
    from the same rows as CSV (whose timestamp text would otherwise be refused), with the values pandas gives;
    the CSV's provenance records what was dropped.  A name that is no column, the label, a categorical column,
    and ``drop`` beside ``feature_columns`` are refused, naming them; svmlight has no columns to drop."""
    rng = np.random.default_rng(8)
    (tmp_path / "user").mkdir()
    frames = [df.assign(txn=np.arange(len(df)) + 10_000 * k) for k, df in enumerate(_user_frames(rng))]
    for k, df in enumerate(frames):
        df.to_parquet(tmp_path / "user" / f"p{k}.parquet")
    columns, cats = ["u", "country", "mcc", "channel", "v"], ["country", "mcc", "channel"]
    common = dict(categorical=cats, shuffle=False, layout="dense", client=dask_client)
    dropped = ingest(tmp_path / "user", tmp_path / "dropped", drop=["txn", "when"], **common)
    named = ingest(tmp_path / "user", tmp_path / "named", feature_columns=columns, **common)
    assert dropped.feature_names == named.feature_names
    np.testing.assert_array_equal(_read_all(dropped)[0], _read_all(named)[0])
    plain = ingest(tmp_path / "user", tmp_path / "plain", drop=["txn", "when", "country", "mcc", "channel"],
                   shuffle=False, layout="dense", client=dask_client)
    assert plain.feature_names == ["u", "v"]
    df = pd.concat(frames, ignore_index=True)
    df.assign(label=np.where(df["label"], 1, -1)).to_csv(tmp_path / "user.csv", index=False)
    from_csv = ingest(tmp_path / "user.csv", tmp_path / "csv", drop=["txn", "when", "country", "channel"],
                      categorical=["mcc"], shuffle=False, layout="dense", client=dask_client)
    assert from_csv.feature_names == ["u", "mcc=5411", "mcc=7995", "v"]
    X, y = _read_all(from_csv)
    np.testing.assert_array_equal(X[:, [0, 3]], df[["u", "v"]].to_numpy())
    np.testing.assert_array_equal(X[:, 1], (df["mcc"] == 5411).astype(float))
    np.testing.assert_array_equal(y, np.where(df["label"], 1, -1))
    assert from_csv.metadata["source"]["dropped"] == ["country", "channel", "when", "txn"]    # file order
    for src, options, message in (
            ("user.csv", {"drop": ["txm"]}, "column to drop 'txm' is not a column"),
            ("user.csv", {"drop": ["label"]}, "column 'label' is the label"),
            ("user.csv", {"drop": ["mcc", "when", "txn"], "categorical": ["mcc"]}, "both categorical and dropped"),
            ("user", {"drop": ["txm"]}, "column 'txm' to drop: no such column"),
            ("user", {"drop": ["when"], "feature_columns": ["u"]}, "give feature_columns or drop, not both"),
            ("user", {"drop": ["mcc", "when", "txn"], "categorical": ["mcc"]}, "column 'mcc' to drop: it is "
                                                                                "categorical")):
        with pytest.raises(ValueError, match=re.escape(message)):
            ingest(tmp_path / src, tmp_path / "refused", client=dask_client, **options)
    (tmp_path / "rows.svm").write_text("1 1:0.5\n-1 2:1\n")
    with pytest.raises(ValueError, match=r"\['drop'\] do not apply to svmlight input"):
        ingest(tmp_path / "rows.svm", tmp_path / "refused", drop=["x"], client=dask_client)
    assert not (tmp_path / "refused").exists()


def test_parquet_categorical_input_errors_name_what_to_do(tmp_path, dask_client):
    """A column that is neither a number nor categorical: the error gives the ``feature_columns=`` that keeps the
    others, which then ingests; a null category names its partition and row; a categorical column that does not
    exist lists the columns."""
    rng = np.random.default_rng(6)
    (tmp_path / "user").mkdir()
    frames = _user_frames(rng, (30, 20))
    for k, df in enumerate(frames):
        df.to_parquet(tmp_path / "user" / f"p{k}.parquet")
    with pytest.raises(ValueError) as info:
        ingest(tmp_path / "user", tmp_path / "out", categorical=["country", "mcc"], client=dask_client)
    message = str(info.value)
    assert "column 'channel' has type dictionary" in message and "'when' (timestamp" in message
    listed = ["u", "country", "mcc", "v"]
    assert f"to keep the 4 numeric and categorical ones, pass feature_columns={listed!r}" in message
    assert "one-hot encode them at ingest: categorical=['channel']" in message
    assert not (tmp_path / "out").exists()
    ds = ingest(tmp_path / "user", tmp_path / "out", categorical=["country", "mcc"], feature_columns=listed,
                client=dask_client)
    assert ds.num_rows == 50 and ds.n_features == 1 + 3 + 2 + 1
    frames[1].loc[7, "country"] = None
    frames[1].to_parquet(tmp_path / "user" / "p1.parquet")
    with pytest.raises(ValueError, match=r"p1.parquet \(partition 1\): row 7: categorical column 'country' is "
                                         r"missing \(null\)"):
        ingest(tmp_path / "user", tmp_path / "out2", categorical=["country"], feature_columns=["u", "country"],
               client=dask_client)
    with pytest.raises(ValueError, match=r"categorical column 'city' of Parquet input .*: not a column \(the "
                                         r"columns: u, country, mcc, channel, v, when, label\)"):
        ingest(tmp_path / "user", tmp_path / "out2", categorical=["city"], client=dask_client)
    frames[1].drop(columns=["country"]).to_parquet(tmp_path / "user" / "p1.parquet")
    with pytest.raises(ValueError, match=r"p1.parquet \(partition 1\): no column 'country' \(its columns: u, mcc, "):
        ingest(tmp_path / "user", tmp_path / "out2", categorical=["country"], feature_columns=["u", "country"],
               client=dask_client)
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("name, text, options, message", [
    ("bad.csv", "a,b,label\n1,2,1\n3,nan,0\n", {}, "bad.csv: line 3, column 'b': value 'nan' is not finite"),
    ("bad.csv", "a,b,label\n1,2,1\n3,4\n", {}, "bad.csv: line 3: expected 3 fields, found 2"),
    ("bad.csv", "a,b,label\n1,2,1\n3,4,yes\n", {}, "bad.csv: line 3: label 'yes' is not valid"),
    ("bad.csv", "a,b,label\n1,2,1\n3,4,0\n5,6,-1\n", {},
     "bad.csv: negative labels use several encodings: '0' (line 3), '-1' (line 4)"),
    ("bad.svm", "1 1:1\n-1 2:1\n1 1:x\n", {}, "bad.svm: line 3: feature value 'x' is not a number"),
    ("bad.svm", "1 1:1\n-1 2:1\n? 1:1\n", {}, "bad.svm: line 3: label '?' is not valid"),
    ("bad.svm", "1 1:1\n-1 2:1 oops\n", {}, "bad.svm: line 2: 'oops' is not an index:value pair"),
    ("bad.txt", "1 1:1\n", {}, "cannot tell the format of"),
    ("bad.svm", "1 1:1\n", {"categorical": [1]}, "option(s) ['categorical'] do not apply to svmlight input"),
    ("bad.csv", "a,label\n1,0\n", {"n_features": 3}, "option(s) ['n_features'] do not apply to csv input"),
    ("bad.csv", "a,label\n", {}, "bad.csv: no rows to ingest"),
    ("bad.csv", "label,x\n1,0\n2,1\n", {"label_column": "x"}, "a feature is named 'label'"),
])
def test_bad_input_leaves_existing_dst_untouched(tmp_path, dask_client, name, text, options, message):
    src = tmp_path / "in" / name
    src.parent.mkdir()
    src.write_text(text)
    dst = tmp_path / "out" / "ds"
    dst.mkdir(parents=True)
    (dst / "part-00000.parquet").write_bytes(b"previous content")
    with pytest.raises(ValueError, match=re.escape(message)):
        ingest(src, dst, overwrite=True, chunk_rows=2, client=dask_client, **options)
    assert _listing(tmp_path / "out") == ["ds", "ds/part-00000.parquet"]
    assert (dst / "part-00000.parquet").read_bytes() == b"previous content"


def test_bad_input_in_several_blocks_names_the_first_bad_line(tmp_path, dask_client):
    """Blocks are checked in parallel: whichever block's check ends first, the error names the input's first
    bad line (five runs, blocks of two lines, bad values on lines 3, 9 and 13)."""
    src = tmp_path / "bad.csv"
    lines = ["a,b,label"] + [f"{i},{'x' if i in (2, 8, 12) else i},{i % 2}" for i in range(1, 15)]
    src.write_text("\n".join(lines) + "\n")
    for run in range(5):
        with pytest.raises(ValueError, match=re.escape("bad.csv: line 3, column 'b': value 'x' is not a number")):
            ingest(src, tmp_path / f"out{run}", chunk_rows=2, client=dask_client)


def _fail_in_turn(i: int, event: str) -> int:
    """Call 3 fails at once; call 1 (out of its worker's thread pool while it waits) a second after call 3 has,
    so that the driver holds call 3's error first."""
    from distributed import Event, secede
    if i == 1:
        secede()
        Event(event).wait(timeout=60)
        time.sleep(1.0)
        raise ValueError("call 1 failed")
    if i == 3:
        Event(event).set()
        raise ValueError("call 3 failed")
    return i


def test_stream_raises_the_earliest_failed_calls_error(dask_client):
    """``stream_calls`` waits for the calls in flight when one fails and raises the error of the earliest call that
    failed: call 3's error arrives first, call 1's is raised."""
    import uuid

    from nsdist.data.ingestion import stream_calls
    event = f"nsdist-test-{uuid.uuid4().hex}"
    with pytest.raises(ValueError, match="call 1 failed"):
        stream_calls(dask_client, _fail_in_turn, [(i, event) for i in range(6)])


def test_one_class_is_an_error_naming_the_labels_found(repo_data, tmp_path, dask_client):
    with pytest.raises(ValueError, match=r"all 20000 rows are negative, with positive=\['n'\]; the label values "
                       r"found are 'A', 'B', .*'J', \.\.\.: a dataset needs both classes"):
        _letter(repo_data, tmp_path / "x", dask_client, positive="n")
    assert not (tmp_path / "x").exists()


def test_existing_dst_needs_overwrite(tmp_path, dask_client):
    src = tmp_path / "in.csv"
    src.write_text("a,label\n1,0\n2,1\n")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        ingest(src, tmp_path / "dst", client=dask_client)
    assert _listing(tmp_path / "dst") == ["keep.txt"]
    ds = ingest(src, tmp_path / "dst", overwrite=True, client=dask_client)
    assert _listing(tmp_path / "dst") == ["_nsdist.json", "part-00000.parquet"] and ds.num_rows == 2
    assert _listing(tmp_path) == ["dst", "dst/_nsdist.json", "dst/part-00000.parquet", "in.csv"]


def test_missing_source_and_bad_options(tmp_path):
    with pytest.raises(DataNotFoundError, match="no such file"):
        ingest(tmp_path / "nope.csv", tmp_path / "x")
    with pytest.raises(DataNotFoundError, match=re.escape("no such file: memory:///nsdist-absent.svm")):
        ingest("memory://nsdist-absent.svm", tmp_path / "x")
    with pytest.raises(DataNotFoundError, match=re.escape("no Parquet files (*.parquet, *.parq, *.pq) found at "
                                                          "'memory://absent/*.pq'")):
        ingest("memory://absent/*.pq", tmp_path / "x")
    src = tmp_path / "in.csv"
    src.write_text("a,label\n1,0\n")
    for bad, message in [({"dtype": "int8"}, "dtype must be"), ({"chunk_rows": 0}, "chunk_rows must be"),
                         ({"rows_per_partition": -1}, "rows_per_partition must be"),
                         ({"random_state": -1}, "random_state must be"), ({"format": "json"}, "format must be"),
                         ({"client": 3}, "client must be")]:
        with pytest.raises(ValueError, match=message):
            ingest(src, tmp_path / "x", **bad)
    assert not (tmp_path / "x").exists()


def test_sidecar_and_schema_metadata_agree(repo_data, tmp_path, dask_client):
    ds = _letter(repo_data, tmp_path / "l", dask_client, rows_per_partition=12_000)
    sidecar = json.loads((tmp_path / "l" / "_nsdist.json").read_text())
    embedded = json.loads(pq.read_schema(tmp_path / "l" / "part-00001.parquet").metadata[b"nsdist"])
    assert {k: v for k, v in sidecar.items() if k not in ("partitions", "content_sha256", "ingest")} == \
        {k: v for k, v in embedded.items() if k != "ingest"}
    assert sidecar["partitions"][1]["num_rows"] == 8000
    assert sum(p["positives"] for p in sidecar["partitions"]) == 783
    assert ds.metadata["nsdist_version"] and ds.metadata["format"] == "nsdist-dataset"


def test_metadata_counts_only_while_the_files_match(repo_data, tmp_path, dask_client):
    ds = _letter(repo_data, tmp_path / "l", dask_client, rows_per_partition=12_000)
    assert ds.metadata["positives"] == 783 and len(ds.metadata["partitions"]) == 2
    single = Dataset.open(ds.partitions[0].path)
    assert "positives" not in single.metadata and single.metadata["label_mapping"]["positive"] == ["N"]
    assert single.metadata["num_rows"] == 12_000
    (tmp_path / "l" / "part-00001.parquet").unlink()
    with pytest.warns(UserWarning, match="_nsdist.json does not match the Parquet files present; ignored"):
        remaining = Dataset.open(tmp_path / "l")
    assert "positives" not in remaining.metadata and remaining.num_rows == 12_000


def test_predict_encodes_raw_categories_as_ingest_did(tmp_path, dask_client):
    """A model of one-hot features (``categorical=`` at ingest) scores the raw CSV -- with a header line or
    without one -- as it scores the ingested rows (values stripped of spaces and quotes as ingest strips them);
    a category the model never saw leaves its features 0, and a warning counts such rows."""
    from nsdist.model import LinearModel
    from nsdist.data.scoring import write_scores

    rng = np.random.default_rng(0)
    n = 60
    proto, service = rng.choice(["tcp", "udp", "icmp"], n), rng.choice(["http", "ftp", '"smtp"'], n)
    a, b, label = rng.normal(size=n).round(3), rng.integers(0, 5, n), (rng.random(n) < 0.3).astype(int)
    lines = [f"{a[i]},{proto[i]},{b[i]}, {service[i]},{label[i]}" for i in range(n)]
    raw = tmp_path / "raw.csv"
    raw.write_text("a,proto,b,service,label\n" + "\n".join(lines) + "\n")
    ds = ingest(raw, tmp_path / "ds", categorical=["proto", "service"], shuffle=False, layout="dense",
                client=dask_client)
    assert list(ds.feature_names) == ["a", "proto=icmp", "proto=tcp", "proto=udp", "b", "service=ftp",
                                      "service=http", "service=smtp"]
    model = LinearModel(rng.normal(size=ds.n_features), 0.25, "pauc", feature_names=list(ds.feature_names))
    assert write_scores(model, ds.url, str(tmp_path / "ingested.parquet")) == n
    expected = pd.read_parquet(tmp_path / "ingested.parquet")["score"].to_numpy()
    assert write_scores(model, str(raw), str(tmp_path / "raw.parquet")) == n
    got = pd.read_parquet(tmp_path / "raw.parquet")
    np.testing.assert_allclose(got["score"], expected, rtol=1e-12, atol=1e-12)
    assert list(got.columns) == ["label", "score", "prediction"] and list(got["label"]) == list(label)
    # the same raw rows as a Parquet file (strings in the one-hot columns)
    frame = pd.DataFrame({"a": a, "proto": proto, "b": b, "service": [" " + v.strip('"') for v in service],
                          "label": label})
    frame.to_parquet(tmp_path / "raw.parquet")
    write_scores(model, str(tmp_path / "raw.parquet"), str(tmp_path / "from_parquet.parquet"))
    np.testing.assert_allclose(pd.read_parquet(tmp_path / "from_parquet.parquet")["score"], expected, rtol=1e-12,
                               atol=1e-12)
    # evaluate on the raw rows: the measures of the ingested dataset, streamed through the cluster
    from nsdist.api import evaluate
    on_raw, on_ingested = evaluate(model, str(raw)), evaluate(model, ds.url, client=dask_client)
    assert on_raw["n_rows"] == n and on_raw["n_positives"] == int(label.sum())
    assert on_raw == pytest.approx(on_ingested, rel=1e-12)
    # no header line: the columns are col0, col1, ... as ingest names them
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(lines) + "\n")
    named = ingest(bare, tmp_path / "ds2", label_column=4, categorical=[1, 3], shuffle=False, layout="dense",
                   client=dask_client)
    assert list(named.feature_names)[:2] == ["col0", "col1=icmp"]
    model2 = LinearModel(model.coef, 0.25, "pauc", feature_names=list(named.feature_names))
    write_scores(model2, str(bare), str(tmp_path / "bare.parquet"), label_column="col4")
    np.testing.assert_allclose(pd.read_parquet(tmp_path / "bare.parquet")["score"], expected, rtol=1e-12, atol=1e-12)
    # a category the model never saw: its one-hot features 0
    new = tmp_path / "new.csv"
    new.write_text("a,proto,b,service,label\n1.5,sctp,2,http,0\n1.5,tcp,2,http,0\n")
    with pytest.warns(UserWarning, match=re.escape("1 row holds a value of 'proto' the model was not trained on "
                                                   "(e.g. 'sctp'): its proto features are 0")):
        write_scores(model, str(new), str(tmp_path / "new.parquet"))
    # a CSV whose name does not say so (LIBSVM's convention: no extension is svmlight): told, or given format=
    unnamed = tmp_path / "unnamed"
    unnamed.write_text(raw.read_text())
    hint = "line 1: comma-separated fields and no index:value pair: not svmlight. A CSV file whose name does not "
    for call in (lambda: write_scores(model, str(unnamed), str(tmp_path / "u.parquet")),
                 lambda: ingest(unnamed, tmp_path / "u", client=dask_client),
                 lambda: evaluate(model, str(unnamed))):
        with pytest.raises(ValueError, match=re.escape(hint + "say so? Name it .csv, or pass format='csv'")):
            call()
    assert evaluate(model, str(unnamed), format="csv") == on_raw
    write_scores(model, str(unnamed), str(tmp_path / "u.parquet"), format="csv")
    np.testing.assert_allclose(pd.read_parquet(tmp_path / "u.parquet")["score"], expected, rtol=1e-12, atol=1e-12)
    w = dict(zip(model.feature_names, model.coef))
    scores = pd.read_parquet(tmp_path / "new.parquet")["score"]
    assert scores[0] == pytest.approx(1.5 * w["a"] + 2 * w["b"] + w["service=http"] + 0.25, rel=1e-12)
    assert scores[1] == pytest.approx(scores[0] + w["proto=tcp"], rel=1e-12)
