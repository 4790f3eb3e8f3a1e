"""Opening Parquet datasets users already have, and every bad input named."""
from __future__ import annotations

import pickle
import re
import shutil

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsdist.data import DataNotFoundError, Dataset
from nsdist.solvers.scaling import Scaling

RNG = np.random.default_rng(0)


def _frame(n: int, labels) -> pd.DataFrame:
    X = RNG.normal(size=(n, 3))
    return pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2].round().astype(np.int64), "label": labels})


@pytest.mark.parametrize("labels", [[0, 1, 1, 0, 0], [-1, 1, 1, -1, -1], [False, True, True, False, False],
                                    [0.0, 1.0, 1.0, 0.0, 0.0]])
def test_user_parquet_one_column_per_feature(tmp_path, labels):
    df = _frame(5, labels)
    df.to_parquet(tmp_path / "data.parquet")
    ds = Dataset.open(str(tmp_path / "data.parquet"))
    assert ds.feature_names == ["a", "b", "c"] and ds.n_features == 3 and ds.num_rows == 5
    X, y = ds.read_partition(0)
    np.testing.assert_array_equal(X, df[["a", "b", "c"]].to_numpy(float))
    assert X.flags.c_contiguous and X.dtype == np.float64
    np.testing.assert_array_equal(y, [-1, 1, 1, -1, -1])
    assert y.dtype == np.int8
    X32, _ = ds.read_partition(0, dtype=np.float32)
    assert X32.dtype == np.float32
    assert ds.metadata["layout"] == "columns" and ds.metadata["fingerprint"] == ds.fingerprint


def test_pandas_index_and_chosen_columns(tmp_path):
    df = _frame(4, [0, 1, 0, 1]).set_index(pd.Index(["w", "x", "y", "z"], name="id"))
    df["name"] = ["p", "q", "r", "s"]
    df.to_parquet(tmp_path / "d.parquet")
    with pytest.raises(ValueError, match=r"column 'name' has type (large_)?string, not a number; to keep the 3 "
                                         r"numeric ones, pass feature_columns=\['a', 'b', 'c'\]; to use the text "
                                         r"columns as categories, one-hot encode them at ingest: "
                                         r"categorical=\['name'\]; to leave the columns that are not numbers out "
                                         r"\(an id, a timestamp\): drop=\['name'\]$"):
        Dataset.open(tmp_path / "d.parquet")
    assert Dataset.open(tmp_path / "d.parquet", drop=["name"]).feature_names == ["a", "b", "c"]
    df["when"] = pd.to_datetime(["2026-01-01"] * 4)
    df.to_parquet(tmp_path / "two.parquet")
    with pytest.raises(ValueError, match=r"column 'name' has type (large_)?string, not a number \(the columns that "
                                         r"are not: 'name' \((large_)?string\), 'when' \(timestamp"):
        Dataset.open(tmp_path / "two.parquet")
    ds = Dataset.open(tmp_path / "d.parquet", feature_columns=["c", "a"])
    assert ds.feature_names == ["c", "a"]
    np.testing.assert_array_equal(ds.read_partition(0)[0], df[["c", "a"]].to_numpy(float))
    df.drop(columns=["name", "when"]).to_parquet(tmp_path / "e.parquet")
    assert Dataset.open(tmp_path / "e.parquet").feature_names == ["a", "b", "c"]  # index "id" is not a feature


def test_fixed_size_list_and_sparse_layouts(tmp_path):
    X = RNG.normal(size=(6, 4))
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 4)
    pq.write_table(pa.table({"features": vectors, "label": pa.array([1, 0, 0, 1, 0, 0], pa.int8())}),
                   tmp_path / "v.parquet", row_group_size=4)
    ds = Dataset.open(tmp_path / "v.parquet")
    assert ds.schema.layout == "vector" and ds.feature_names == ["x0", "x1", "x2", "x3"]
    np.testing.assert_array_equal(ds.read_partition(0)[0], X)

    sparse = pa.table({"indices": pa.array([[0, 3], [], [1]], pa.list_(pa.int32())),
                       "values": pa.array([[1.5, -2.0], [], [4.0]]), "label": [1, -1, -1]})
    schema_meta = {b"nsdist": b'{"n_features": 5}'}
    pq.write_table(sparse.replace_schema_metadata(schema_meta), tmp_path / "s.parquet")
    ds = Dataset.open(tmp_path / "s.parquet")
    assert ds.schema.layout == "sparse" and ds.n_features == 5
    np.testing.assert_array_equal(ds.read_partition(0)[0].toarray(), [[1.5, 0, 0, -2, 0], [0] * 5, [0, 4, 0, 0, 0]])
    pq.write_table(sparse, tmp_path / "nodim.parquet")
    with pytest.raises(ValueError, match="need the dimension in the schema metadata"):
        Dataset.open(tmp_path / "nodim.parquet")
    bad = sparse.set_column(0, "indices", pa.array([[0, 7], [], [1]], pa.list_(pa.int32())))
    pq.write_table(bad.replace_schema_metadata(schema_meta), tmp_path / "range.parquet")
    with pytest.raises(ValueError, match=r"range.parquet \(partition 0\): row 0: feature index 7 is outside"):
        Dataset.open(tmp_path / "range.parquet").read_partition(0)
    pq.write_table(pa.table({"f": pa.array([[1.0], [2.0, 3.0]]), "label": [1, 0]}), tmp_path / "var.parquet")
    with pytest.raises(ValueError, match="must be a fixed-size list"):
        Dataset.open(tmp_path / "var.parquet")


def test_hive_directories_glob_and_offsets(tmp_path):
    frames = {"date=2026-11-25/part-0.parquet": _frame(3, [1, 0, 0]),
              "date=2026-11-24/part-1.parquet": _frame(2, [0, 1]),
              "date=2026-11-24/part-0.parquet": _frame(4, [0, 0, 0, 1])}
    for name, df in frames.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        df.to_parquet(tmp_path / name)
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "notes.txt").write_text("not data")
    (tmp_path / ".hidden").mkdir()
    _frame(1, [1]).to_parquet(tmp_path / ".hidden" / "x.parquet")
    ds = Dataset.open(tmp_path)
    order = sorted(frames)
    assert [p.path for p in ds.partitions] == [str(tmp_path / n) for n in order]
    assert [(p.index, p.num_rows, p.row_offset) for p in ds.partitions] == [(0, 4, 0), (1, 2, 4), (2, 3, 6)]
    for p in ds.partitions:
        np.testing.assert_array_equal(ds.read_partition(p.index)[0][:, 0], frames[order[p.index]]["a"])
    globbed = Dataset.open(str(tmp_path / "date=2026-11-24" / "*.parquet"))
    assert globbed.num_rows == 6 and len(globbed.partitions) == 2


def test_memory_url_pickles_small_and_reads_in_dask(memory_url, dask_client):
    fs = fsspec.filesystem("memory")
    for k in range(3):
        with fs.open(f"{memory_url}/part-{k}.parquet", "wb") as f:
            _frame(1000, np.arange(1000) % 2).to_parquet(f)
    ds = Dataset.open(memory_url)
    assert ds.num_rows == 3000 and len(pickle.dumps(ds)) < 5000
    X, y = dask_client.submit(ds.read_partition, 2).result()
    assert X.shape == (1000, 3) and (y > 0).sum() == 500
    assert ds.partition_name(2) == f"{memory_url}/part-2.parquet (partition 2)"


def test_fingerprint(tmp_path):
    (tmp_path / "a").mkdir()
    for k in range(2):
        _frame(5, [0, 1, 0, 1, 0]).to_parquet(tmp_path / "a" / f"p{k}.parquet")
    first = Dataset.open(tmp_path / "a")
    assert Dataset.open(tmp_path / "a").fingerprint == first.fingerprint
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert Dataset.open(tmp_path / "b").fingerprint == first.fingerprint
    _frame(6, [0, 1, 0, 1, 0, 1]).to_parquet(tmp_path / "b" / "p1.parquet")
    changed = Dataset.open(tmp_path / "b")
    assert changed.fingerprint != first.fingerprint
    assert changed.partitions[0].fingerprint == first.partitions[0].fingerprint
    assert changed.partitions[1].fingerprint != first.partitions[1].fingerprint


def _row_group_file(path, groups: list[int], *, nan_at: tuple[int, int] | None = None) -> pa.Table:
    """A Parquet file of row groups of these sizes (3 float64 features, labels alternating); the whole table."""
    n = sum(groups)
    b = np.arange(n, dtype=float)
    if nan_at is not None:
        b[sum(groups[:nan_at[0]]) + nan_at[1]] = np.nan
    table = pa.table({"a": RNG.normal(size=n), "b": b, "c": -b, "label": np.arange(n) % 3 == 0})
    with pq.ParquetWriter(path, table.schema) as writer:
        start = 0
        for size in groups:
            writer.write_table(table.slice(start, size), row_group_size=max(size, 1))
            start += size
    return table


def test_a_large_file_is_read_as_runs_of_its_row_groups(tmp_path, monkeypatch):
    import nsdist.data.dataset as dataset_module

    groups = [40, 40, 40, 90, 10, 40]
    table = _row_group_file(tmp_path / "big.parquet", groups)
    footer = pq.ParquetFile(tmp_path / "big.parquet").metadata
    sizes = [footer.row_group(r).total_byte_size for r in range(footer.num_row_groups)]
    whole = Dataset.open(tmp_path / "big.parquet")
    assert len(whole.partitions) == 1 and whole.partitions[0].row_groups is None     # small: one partition
    monkeypatch.setattr(dataset_module, "SPLIT_BYTES", sizes[0] + sizes[1])          # two 40-row groups a run
    ds = Dataset.open(tmp_path / "big.parquet")
    runs = [p.row_groups for p in ds.partitions]
    assert runs[0] == (0, 2) and runs[1][0] == 2 and runs[-1][1] == len(groups)
    for (a, b), (c, _) in zip(runs, runs[1:]):
        assert b == c                                                               # consecutive, covering
    for a, b in runs:                                                               # within the cap, or one group
        assert sum(sizes[a:b]) <= dataset_module.SPLIT_BYTES or b == a + 1
        assert b == len(groups) or sum(sizes[a:b + 1]) > dataset_module.SPLIT_BYTES  # greedy: no room for the next
    assert [p.num_rows for p in ds.partitions] == [sum(groups[a:b]) for a, b in runs]
    assert [p.row_offset for p in ds.partitions] == [p.file_row for p in ds.partitions] == \
        list(np.cumsum([0] + [p.num_rows for p in ds.partitions])[:-1])
    assert ds.num_rows == whole.num_rows == table.num_rows
    X = np.vstack([ds.read_partition(i)[0] for i in range(len(ds.partitions))])
    np.testing.assert_array_equal(X, whole.read_partition(0)[0])
    for i, p in enumerate(ds.partitions):
        y = ds.read_labels(i)
        assert p.label_range == (y.min() > 0, y.max() > 0)                     # that run's own statistics
    assert len({p.fingerprint for p in ds.partitions} | {whole.partitions[0].fingerprint}) == len(runs) + 1
    assert ds.partition_name(0) == f"{tmp_path / 'big.parquet'} (partition 0: row groups 0-1, whose row 0 is " \
                                   "the file's row 0)"


def test_a_row_of_a_part_of_a_file_is_named_by_its_row_groups(tmp_path, monkeypatch, caplog):
    import logging

    import nsdist.data.dataset as dataset_module
    from nsdist.run import _log_datasets

    _row_group_file(tmp_path / "big.parquet", [30, 30, 30], nan_at=(2, 7))
    footer = pq.ParquetFile(tmp_path / "big.parquet").metadata
    monkeypatch.setattr(dataset_module, "SPLIT_BYTES", footer.row_group(0).total_byte_size)
    ds = Dataset.open(tmp_path / "big.parquet")
    assert [p.row_groups for p in ds.partitions] == [(0, 1), (1, 2), (2, 3)]
    with caplog.at_level(logging.INFO, logger="nsdist"):
        _log_datasets(ds, ds, "holdout")
    assert "90 rows, 3 features, 3 partitions (1 file(s) over 0 MiB read as runs of row groups)" in caplog.text
    ds.read_partition(1)
    with pytest.raises(ValueError, match=re.escape("big.parquet (partition 2: row group 2, whose row 0 is the "
                                                   "file's row 60): row 7: feature 'b' = nan is not finite")):
        ds.read_partition(2)


def test_an_ingested_dataset_keeps_its_sidecar_counts_when_its_files_are_split(tmp_path, monkeypatch):
    import nsdist
    import nsdist.data.dataset as dataset_module
    import nsdist.data.layout as layout

    rows = [f"{1 if i % 7 == 0 else -1} " + " ".join(f"{j + 1}:{(i + j) % 5 + 1}" for j in range(i % 4, 12, 3))
            for i in range(600)]
    (tmp_path / "in.svm").write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(layout, "ROW_GROUP_NNZ", 200)                # several row groups a file
    nsdist.ingest(str(tmp_path / "in.svm"), str(tmp_path / "ds"), format="svmlight", rows_per_partition=300,
                  layout="sparse")
    before = Dataset.open(tmp_path / "ds")
    monkeypatch.setattr(dataset_module, "SPLIT_BYTES", 1)            # every row group a partition
    after = Dataset.open(tmp_path / "ds")
    assert len(before.partitions) == 2 and len(after.partitions) > 4
    assert after.metadata["positives"] == before.metadata["positives"] == sum(i % 7 == 0 for i in range(600))
    assert sum(p.nnz for p in after.partitions) == sum(p.nnz for p in before.partitions)
    assert sum(p.nnz for p in after.partitions[:2]) == after.read_partition(0)[0].nnz + \
        after.read_partition(1)[0].nnz


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("value, shown", [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_nonfinite_feature_names_file_row_feature(tmp_path, value, shown):
    b = np.arange(5.0)
    b[3] = value
    pq.write_table(pa.table({"a": np.ones(5), "b": b, "label": [0, 1, 0, 1, 0]}), tmp_path / "p.parquet")
    ds = Dataset.open(tmp_path / "p.parquet")
    with pytest.raises(ValueError, match=re.escape(f"p.parquet (partition 0): row 3: feature 'b' = {shown} "
                                                   "is not finite")):
        ds.read_partition(0)


def test_null_feature_and_bad_labels(tmp_path):
    pq.write_table(pa.table({"a": pa.array([1.0, None, 3.0]), "label": [0, 1, 0]}), tmp_path / "n.parquet")
    for read in (lambda ds: ds.read_partition(0), lambda ds: ds.read_columns(0), lambda ds: ds.read_block(0)):
        with pytest.raises(ValueError, match=re.escape(
                "n.parquet (partition 0): row 1: feature 'a' is missing (null); nsdist does not impute missing "
                "values: fill them where the data is made (pandas: df['a'].fillna(...)), or leave the column out "
                "(feature_columns)")):
            read(Dataset.open(tmp_path / "n.parquet"))
    _frame(4, [0, 1, 2, 1]).to_parquet(tmp_path / "l.parquet")
    with pytest.raises(ValueError, match=re.escape("l.parquet (partition 0): label[2] = 2 is not a valid label")):
        Dataset.open(tmp_path / "l.parquet").read_partition(0)
    pq.write_table(pa.table({"a": [1.0, 2.0], "label": pa.array([1, None])}), tmp_path / "m.parquet")
    with pytest.raises(ValueError, match=re.escape("m.parquet (partition 0): row 1: label column 'label' is "
                                                   "missing")):
        Dataset.open(tmp_path / "m.parquet").read_labels(0)
    with pytest.raises(ValueError, match="no label column 'y'"):
        Dataset.open(tmp_path / "l.parquet", label_column="y")


def test_drop_leaves_an_id_and_a_timestamp_out_of_every_other_column(tmp_path):
    """Files as users have them: an integer id (which would otherwise be taken for a feature), a text timestamp
    (which would otherwise be refused), two features and the label.  ``drop`` leaves both out: the same schema as
    ``feature_columns=["a", "b"]``, every file may hold them, and the rows read are the features'.  A sparse file
    with an id beside ``indices``/``values`` is the sparse layout once the id is dropped.  A name that is no
    column, ``drop`` beside ``feature_columns``, and dropping the label are refused, naming them."""
    root = tmp_path / "users"
    root.mkdir()
    for i in range(2):
        df = _frame(50, RNG.choice([0, 1], 50))
        pq.write_table(pa.table({"id": np.arange(50) + 50 * i, "ts": [f"2026-12-0{i + 1}T10:{m:02d}" for m in
                                                                       range(50)],
                                 "a": df["a"], "b": df["b"], "label": df["label"]}), root / f"part-{i}.parquet")
    with pytest.raises(ValueError, match="'ts'"):
        Dataset.open(root)
    assert Dataset.open(root, drop=["ts"]).feature_names == ["id", "a", "b"]      # an id is a number
    ds = Dataset.open(root, drop=["id", "ts"])
    named = Dataset.open(root, feature_columns=["a", "b"])
    assert ds.feature_names == ["a", "b"] and ds.schema.read_columns == named.schema.read_columns
    X, y = ds.read_partition(1)
    np.testing.assert_array_equal(X, named.read_partition(1)[0])
    np.testing.assert_array_equal(X[:, 0], pq.read_table(root / "part-1.parquet").column("a").to_numpy())
    sparse = tmp_path / "sparse.parquet"
    schema = pa.schema([("id", pa.int64()), ("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float64())),
                        ("label", pa.int8())], metadata={b"nsdist": b'{"n_features": 10}'})
    pq.write_table(pa.table({"id": [7, 8], "indices": [[0, 3], [1]], "values": [[1.0, 2.0], [0.5]],
                             "label": [1, -1]}, schema=schema), sparse)
    assert Dataset.open(sparse, drop=["id"]).is_sparse
    for kwargs, message in (({"drop": ["idd"]}, "column 'idd' to drop: no such column"),
                            ({"drop": ["id"], "feature_columns": ["a"]}, "give feature_columns or drop, not both"),
                            ({"drop": ["label", "ts"]}, "'label' to drop: it is the label; it cannot be dropped")):
        with pytest.raises(ValueError, match=re.escape(message)):
            Dataset.open(root, **kwargs)


def test_a_null_is_found_when_the_dataset_is_opened_not_when_its_file_is_read(tmp_path):
    """Four files, a null in the last one's feature ``b`` (row 123): the footers' statistics count it, so opening
    the dataset raises the error reading that file raises -- its partition, row and column -- before any row of
    the other files is read; leaving ``b`` out (``feature_columns``) opens it.  A file written without
    statistics opens and is still checked where it is read, and so does the sparse layout's list columns, whose
    null count includes the empty rows (here a row without non-zeros beside a missing list).  A missing label
    is found at open."""
    root = tmp_path / "dense"
    root.mkdir()
    for i in range(4):
        df = _frame(200, RNG.choice([0, 1], 200))
        b = pa.array(df["b"], mask=(np.arange(200) == 123) if i == 3 else None)
        pq.write_table(pa.table({"a": df["a"], "b": b, "c": df["c"], "label": df["label"]}),
                       root / f"part-{i}.parquet")
    message = "part-3.parquet (partition 3): row 123: feature 'b' is missing (null)"
    with pytest.raises(ValueError, match=re.escape(message)):
        Dataset.open(root)
    assert Dataset.open(root, feature_columns=["a", "c"]).n_features == 2
    table = pq.read_table(root / "part-3.parquet")
    pq.write_table(table, root / "part-3.parquet", write_statistics=False)
    ds = Dataset.open(root)                           # no null count in its footer: found where it is read
    with pytest.raises(ValueError, match=re.escape(message)):
        ds.read_partition(3)
    sparse = tmp_path / "sparse.parquet"
    schema = pa.schema([("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float64())),
                        ("label", pa.int8())], metadata={b"nsdist": b'{"n_features": 10}'})
    pq.write_table(pa.table({"indices": [[0, 3], [], [1], None], "values": [[1.0, 2.0], [], [0.5], None],
                             "label": [1, -1, 1, 1]}, schema=schema), sparse)
    ds = Dataset.open(sparse)
    with pytest.raises(ValueError, match=re.escape("sparse.parquet (partition 0): row 3: 'indices' is missing")):
        ds.read_partition(0)
    pq.write_table(pa.table({"a": [1.0, 2.0, 3.0], "label": pa.array([1, 0, None])}), tmp_path / "m.parquet")
    with pytest.raises(ValueError, match=re.escape("m.parquet (partition 0): row 2: label column 'label' is "
                                                   "missing")):
        Dataset.open(tmp_path / "m.parquet")


@pytest.mark.parametrize("change, message", [
    (lambda df: df.drop(columns="b"), "column 'b' is missing"),
    (lambda df: df.assign(b=df["b"].astype(str)), "column 'b' has type (large_)?string, expected number"),
    (lambda df: df.assign(z=1.0), "column 'z' is not in the first partition"),
])
def test_schema_differing_partition_named(tmp_path, change, message):
    _frame(3, [0, 1, 0]).to_parquet(tmp_path / "part-0.parquet")
    change(_frame(3, [0, 1, 0])).to_parquet(tmp_path / "part-1.parquet")
    with pytest.raises(ValueError, match=r"part-1\.parquet: schema differs from the first partition: " + message):
        Dataset.open(tmp_path)


def test_numeric_types_may_differ_between_partitions(tmp_path):
    _frame(3, [0, 1, 0]).to_parquet(tmp_path / "part-0.parquet")
    _frame(3, [0, 1, 0]).assign(a=[1, 2, 3]).to_parquet(tmp_path / "part-1.parquet")
    assert Dataset.open(tmp_path).read_partition(1)[0][:, 0].tolist() == [1.0, 2.0, 3.0]


def test_partition_changed_after_open(tmp_path):
    _frame(3, [0, 1, 0]).to_parquet(tmp_path / "part-0.parquet")
    ds = Dataset.open(tmp_path)
    _frame(3, [0, 1, 0]).drop(columns="c").to_parquet(tmp_path / "part-0.parquet")
    with pytest.raises(ValueError, match="part-0.parquet \\(partition 0\\): schema differs .* column 'c' is missing"):
        ds.read_partition(0)
    _frame(4, [0, 1, 0, 0]).to_parquet(tmp_path / "part-0.parquet")
    with pytest.raises(ValueError, match="has 4 rows but had 3 when the dataset was opened"):
        ds.read_partition(0)


def test_empty_partition_is_skipped_with_warning(tmp_path):
    _frame(3, [0, 1, 0]).to_parquet(tmp_path / "part-0.parquet")
    _frame(0, []).astype({"label": np.int64}).to_parquet(tmp_path / "part-1.parquet")
    _frame(2, [1, 1]).to_parquet(tmp_path / "part-2.parquet")
    with pytest.warns(UserWarning, match="part-1.parquet: Parquet file has no rows; skipped"):
        ds = Dataset.open(tmp_path)
    assert [(p.index, p.num_rows, p.row_offset) for p in ds.partitions] == [(0, 3, 0), (1, 2, 3)]
    assert ds.partitions[1].path.endswith("part-2.parquet")


def test_corrupt_and_truncated_files_named(tmp_path):
    _frame(50, np.arange(50) % 2).to_parquet(tmp_path / "good.parquet")
    data = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.parquet").write_bytes(b"this is not parquet" * 10)
    for name in ("truncated.parquet", "garbage.parquet"):
        with pytest.raises(ValueError, match=re.escape(f"{tmp_path / name}: not a readable Parquet file")):
            Dataset.open(tmp_path / name)
    with pytest.raises(ValueError, match="garbage.parquet: not a readable Parquet file"):
        Dataset.open(tmp_path)


def test_text_files_and_data_frames_are_told_how_to_become_a_dataset(tmp_path):
    """A CSV (plain or gzipped) given where a Parquet dataset is expected is named and pointed to ingest; a
    truncated Parquet file is not called text; a data frame is pointed to to_parquet or the estimator."""
    import gzip

    text = b"N,2,8,3\nA,5,12,3\n" * 50
    (tmp_path / "rows.csv").write_bytes(text)
    (tmp_path / "rows.csv.gz").write_bytes(gzip.compress(text))
    for name in ("rows.csv", "rows.csv.gz"):
        with pytest.raises(ValueError, match=re.escape(f"{name}: not a readable Parquet file (") + ".*"
                           + re.escape("); it looks like a text file (CSV, svmlight): make a Parquet dataset of "
                                       "it first with nsdist.ingest(src, dst, ...) or `nsdist ingest`")):
            Dataset.open(tmp_path / name)
    _frame(50, np.arange(50) % 2).to_parquet(tmp_path / "good.parquet")
    (tmp_path / "cut.parquet").write_bytes((tmp_path / "good.parquet").read_bytes()[:700])
    with pytest.raises(ValueError, match="cut.parquet: not a readable Parquet file") as info:
        Dataset.open(tmp_path / "cut.parquet")
    assert "text file" not in str(info.value)
    with pytest.raises(ValueError, match=re.escape("got a pandas.DataFrame: write it as Parquet first "
                                                   "(df.to_parquet(path)")):
        Dataset.open(_frame(5, [0, 1, 0, 1, 0]))


def test_nothing_to_open(tmp_path):
    with pytest.raises(DataNotFoundError, match=re.escape(f"no such file or directory: '{tmp_path / 'nope'}'")):
        Dataset.open(tmp_path / "nope")
    with pytest.raises(ValueError, match="no such file or directory: 'memory://nsdist-nothing-here'"):
        Dataset.open("memory://nsdist-nothing-here")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=re.escape("no Parquet files (*.parquet, *.parq, *.pq) found at")):
        Dataset.open(tmp_path / "empty")
    with pytest.raises(ValueError, match="cannot open 'nosuchprotocol://x'"):
        Dataset.open("nosuchprotocol://x")


def _block_reference(ds: Dataset, i: int, dtype, rows, shift, scale):
    """What ``read_block`` must equal: read, ``X[rows]``, then ``(X - shift) / scale`` on the whole block."""
    X, y = ds.read_partition(i, dtype=dtype)
    X, y = X[rows], y[rows]
    if shift is not None:
        X -= shift.astype(X.dtype)
    if scale is not None:
        X /= scale.astype(X.dtype)
    return X, y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_read_block_is_read_gather_scale_to_the_bit(tmp_path, dtype):
    """docs/engine.md §Partition chain: the chain's one-copy load equals read + X[rows] + scaling, bit for bit, in
    Fortran order (the transposing copy is gone), over several row groups, mixed column types (float32/float64/int/bool) and any row selection."""
    n = 3001
    rng = np.random.default_rng(5)
    table = pa.table({"f": rng.normal(size=n).astype(np.float32), "g": rng.normal(size=n) * 1e3,
                      "h": rng.integers(-5, 5, size=n), "b": rng.random(n) < 0.5,
                      "label": (rng.random(n) < 0.1).astype(np.int8)})
    pq.write_table(table, tmp_path / "part-0.parquet", row_group_size=700)
    ds = Dataset.open(str(tmp_path))
    shift, scale = rng.normal(size=4), rng.uniform(0.1, 3, size=4)
    for rows in (np.arange(n), rng.permutation(n), rng.permutation(n)[:17], np.flatnonzero(rng.random(n) < 0.3),
                 np.zeros(0, dtype=np.int64)):
        for sh, sc in ((None, None), (None, scale), (shift, scale)):
            scaling = None if sc is None else Scaling(np.zeros(4) if sh is None else sh, sc, centered=sh is not None)
            X, y = ds.read_block(0, dtype=dtype, order=lambda _y, rows=rows: rows, scaling=scaling)
            RX, Ry = _block_reference(ds, 0, dtype, rows, sh, sc)
            assert X.dtype == np.dtype(dtype) and X.flags.f_contiguous and X.shape == RX.shape   # the kernel's layout
            np.testing.assert_array_equal(X, RX)
            np.testing.assert_array_equal(y, Ry)


def test_read_partition_stays_c_ordered_and_vector_blocks_are_fortran_ordered(tmp_path):
    """read_partition keeps its C order (the sample and the validation rows are scored as the estimator scores
    its rows); read_block of every dense layout is Fortran-ordered, read + ``X[rows]`` + scaling to the bit."""
    X = RNG.normal(size=(300, 4)).astype(np.float32)
    pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(4)} | {"label": np.arange(300) % 3 == 0}),
                   tmp_path / "c.parquet")
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 4)
    pq.write_table(pa.table({"features": vectors, "label": np.arange(300) % 3 == 0}), tmp_path / "v.parquet")
    rows, scaling = RNG.permutation(300)[:200], Scaling(RNG.normal(size=4), RNG.uniform(0.5, 2, size=4))
    for name in ("c.parquet", "v.parquet"):
        ds = Dataset.open(tmp_path / name)
        R, Ry = ds.read_partition(0, dtype=np.float32)
        assert R.flags.c_contiguous
        np.testing.assert_array_equal(R, X)
        for order, sc in ((None, None), (lambda _y: rows, scaling)):
            B, y = ds.read_block(0, dtype=np.float32, order=order, scaling=sc)
            ref = (R.copy() if order is None else R[rows], Ry if order is None else Ry[rows])
            if sc is not None:
                sc.apply(ref[0])
            assert B.flags.f_contiguous and B.dtype == np.float32
            np.testing.assert_array_equal(B, ref[0])
            np.testing.assert_array_equal(y, ref[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_take_rows_is_x_rows_in_fortran_order(dtype, layout):
    """The in-memory solvers' gather (nsdist.solvers.blocks.take_rows): ``X[rows]``'s values, Fortran-ordered, from
    any layout, over several of its chunks (TAKE_BYTES), in any order, with repeats and none."""
    from nsdist.solvers.blocks import TAKE_BYTES, take_rows

    n, d = 3 * TAKE_BYTES // (7 * np.dtype(dtype).itemsize) + 11, 7
    X = RNG.normal(size=(n, 2 * d)).astype(dtype)
    X = {"C": X[:, :d].copy(), "F": np.asfortranarray(X[:, :d]), "strided": X[:, ::2]}[layout]
    for rows in (RNG.permutation(n), RNG.integers(0, n, size=1000), np.arange(n)[::-3], np.zeros(0, np.int64), None):
        B = take_rows(X, rows)
        assert B.flags.f_contiguous and B.dtype == dtype
        np.testing.assert_array_equal(B, X if rows is None else X[rows])
    with pytest.raises(IndexError):
        take_rows(X, np.array([0, n]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("wide", [False, True])
def test_take_rows_shifts_and_scales_as_scaling_apply(dtype, layout, wide):
    """take_rows(X, rows, shift=, scale=) is ``Scaling.apply(X[rows])`` to the bit, whether the rows are long
    enough (LONG_ROW) to be scaled in its gathering buffer or are scaled once gathered; centred or scale-only."""
    from nsdist.solvers.blocks import LONG_ROW, TAKE_BYTES, take_rows
    from nsdist.solvers.scaling import Scaling

    item = np.dtype(dtype).itemsize
    d = LONG_ROW // item + 3 if wide else 7
    n = 2 * max(256, TAKE_BYTES // (d * item)) + 5          # several gathering chunks
    X = RNG.normal(2.0, 3.0, size=(n, 2 * d)).astype(dtype)
    X = {"C": X[:, :d].copy(), "F": np.asfortranarray(X[:, :d]), "strided": X[:, ::2]}[layout]
    for centered in (True, False):
        sc = Scaling(mean=X.mean(axis=0, dtype=np.float64) * centered, scale=X.std(axis=0, dtype=np.float64),
                     centered=centered)
        for rows in (RNG.permutation(n), None):
            B = take_rows(X, rows, **sc.shift_scale())
            ref = sc.apply(np.array(X if rows is None else X[rows]))
            assert B.flags.f_contiguous and B.dtype == dtype
            np.testing.assert_array_equal(B, ref)


@pytest.mark.parametrize("layout", ["C", "F"])
def test_pass_buffer_gathers_take_rows_values_into_one_reused_block(layout):
    """PassBuffer.take is take_rows (scaled or not) into one flat array, reused by later gathers of as many rows
    or fewer and grown for more; out= is checked; a pickled copy starts empty."""
    import pickle

    from nsdist.solvers.blocks import PassBuffer, take_rows

    X = RNG.normal(size=(900, 9))
    X = X.copy() if layout == "C" else np.asfortranarray(X)
    shift, scale = X.mean(axis=0), X.std(axis=0)
    buf = PassBuffer()
    first = buf.take(X, RNG.permutation(900), shift=shift, scale=scale)
    for m in (900, 300, 1):
        rows = RNG.permutation(900)[:m]
        B = buf.take(X, rows, shift=shift, scale=scale)
        assert B.flags.f_contiguous and B.shape == (m, 9) and np.shares_memory(B, first)
        np.testing.assert_array_equal(B, take_rows(X, rows, shift=shift, scale=scale))
    more = buf.take(np.vstack([X, X]), np.arange(1800))
    assert not np.shares_memory(more, first)
    np.testing.assert_array_equal(more, np.vstack([X, X]))
    with pytest.raises(ValueError, match="Fortran-ordered"):
        take_rows(X, np.arange(5), out=np.empty((5, 9)))            # C-ordered
    with pytest.raises(ValueError, match="Fortran-ordered"):
        take_rows(X, np.arange(5), out=np.empty((4, 9), order="F"))
    assert pickle.loads(pickle.dumps(buf))._flat is None


def test_gather_block_is_fortran_ordered_x_rows_without_a_transposing_copy():
    """gather_block returns the transpose of its (d, m) gathering buffer: Fortran order, no second copy."""
    from nsdist.solvers.blocks import gather_block

    X = RNG.normal(size=(500, 6)).astype(np.float32)
    rows = RNG.permutation(500)[:321]
    B = gather_block([X[:, j].copy() for j in range(6)], np.float32, rows=rows)
    assert B.flags.f_contiguous and B.base is not None and B.base.shape == (6, 321)
    np.testing.assert_array_equal(B, X[rows])


def test_read_block_checks_every_row_kept_or_not(tmp_path):
    """A NaN in a row the block leaves out (held out, another class) is still named, as read_partition names it."""
    X = RNG.normal(size=(50, 3))
    X[7, 2] = np.nan
    X[9, 0] = np.inf
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "label": [0, 1] * 25}),   # NaN, not null
                   tmp_path / "d.parquet")
    ds = Dataset.open(str(tmp_path / "d.parquet"))
    for read in (lambda: ds.read_partition(0), lambda: ds.read_block(0, order=lambda y: np.array([0, 1]))):
        with pytest.raises(ValueError, match=re.escape("d.parquet (partition 0): row 7: feature 'c' = nan is not finite")):
            read()


def test_footer_label_statistics_show_both_classes(tmp_path):
    """The class check needs no read when the footers' statistics show both classes (docs/engine.md §Holdout)."""
    _frame(5, [0, 0, 0, 0, 0]).to_parquet(tmp_path / "part-0.parquet")
    _frame(5, [1, 1, 0, 1, 1]).to_parquet(tmp_path / "part-1.parquet")
    ds = Dataset.open(str(tmp_path))
    assert [p.label_range for p in ds.partitions] == [(0, 0), (0, 1)]
    assert ds.has_both_classes() is True
    assert Dataset.open(str(tmp_path / "part-0.parquet")).has_both_classes() is None     # cannot tell: read
    pq.write_table(pa.Table.from_pandas(_frame(5, [1, 0, 1, 0, 1])), tmp_path / "s.parquet", write_statistics=False)
    assert Dataset.open(str(tmp_path / "s.parquet")).has_both_classes() is None


def test_class_name_labels_need_positive_and_read_with_it(tmp_path):
    """Labels stored as class names (plain or dictionary-encoded strings, in several row groups) are refused at
    open without ``positive=``, naming the file and the names; with it, the positive class's rows are +1 and
    every other row -1, on every read path, and the dataset's fingerprint records the choice."""
    names = np.array(["ok", "fraud", "ok", " 'fraud' ", "ok", "chargeback", "ok", "fraud"])
    expected = np.array([-1, 1, -1, 1, -1, -1, -1, 1], dtype=np.int8)
    X = RNG.normal(size=(8, 2))
    for dictionary in (False, True):
        root = tmp_path / f"dict{dictionary}"
        root.mkdir()
        labels = pa.array(names).dictionary_encode() if dictionary else pa.array(names)
        pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "status": labels}), root / "part-0.parquet",
                       row_group_size=3)
        with pytest.raises(ValueError, match=re.escape("part-0.parquet: label column 'status' holds class names (")
                           + r".*" + re.escape("pass positive=")):
            Dataset.open(str(root), label_column="status")
        ds = Dataset.open(str(root), label_column="status", positive="fraud")
        assert ds.schema.positive == ("fraud",) and ds.metadata["label_positive"] == ["fraud"]
        assert ds.partitions[0].label_range is None and ds.has_both_classes() is None
        np.testing.assert_array_equal(ds.read_labels(0), expected)
        np.testing.assert_array_equal(ds.read_partition(0)[1], expected)
        rows = np.array([7, 0, 3])
        np.testing.assert_array_equal(ds.read_block(0, order=lambda y: rows)[1], expected[rows])
        two = Dataset.open(str(root), label_column="status", positive=["fraud", "chargeback"])
        np.testing.assert_array_equal(two.read_labels(0), np.where(np.isin(np.arange(8), [1, 3, 5, 7]), 1, -1))
        assert len({ds.fingerprint, two.fingerprint}) == 2
    pq.write_table(pa.table({"a": X[:3, 0], "status": pa.array(["ok", None, "fraud"])}), tmp_path / "n.parquet")
    with pytest.raises(ValueError, match=re.escape("n.parquet (partition 0): row 1: label column 'status' is "
                                                   "missing")):
        Dataset.open(tmp_path / "n.parquet", label_column="status", positive="fraud").read_labels(0)


def test_positive_picks_codes_and_leaves_plain_labels_as_they_were(tmp_path):
    """``positive=`` also names numeric codes (1..26 as the letter, matched as numbers); a dataset opened
    without it keeps its fingerprint, and one whose later partition holds strings is refused naming it."""
    codes = np.array([14, 3, 14, 26, 1, 14])
    _frame(6, codes).to_parquet(tmp_path / "codes.parquet")
    ds = Dataset.open(tmp_path / "codes.parquet", positive=[14.0])
    np.testing.assert_array_equal(ds.read_labels(0), np.where(codes == 14, 1, -1))
    with pytest.raises(ValueError, match=re.escape("label[0] = 14 is not a valid label; use {-1,+1}, {0,1} or bool; or pass "
                                                   "positive= naming the positive class's code")):
        Dataset.open(tmp_path / "codes.parquet").read_labels(0)
    root = tmp_path / "mixed"
    root.mkdir()
    _frame(4, [0, 1, 0, 1]).to_parquet(root / "part-0.parquet")
    plain = Dataset.open(str(root))
    assert "positive" not in plain.schema.describe() and "label_positive" not in plain.metadata
    _frame(4, ["no", "yes", "no", "no"]).to_parquet(root / "part-1.parquet")
    with pytest.raises(ValueError, match=re.escape("part-1.parquet (partition 1): label column 'label' holds "
                                                   "class names ('no', 'yes')") + ".*positive='no'"):
        Dataset.open(str(root)).read_labels(1)
    with pytest.raises(ValueError, match="positive must name at least one label value"):
        Dataset.open(str(root), positive=[])
