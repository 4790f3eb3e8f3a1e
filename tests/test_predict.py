"""Scoring a dataset on the cluster: ``nsdist.predict`` / ``nsdist predict`` with a directory output.

Each Parquet file of the input is scored by one task on a worker into ``part-NNNNN.parquet``; the directory is
published whole (docs/engine.md §Scoring on the cluster).  The parts, read in order, must be the very table that
the one-process path writes for a single output file, and the scores must be ``X @ w + b`` computed here from the
rows as read by pyarrow.  The clusters are real: ``dask scheduler`` / ``dask worker`` processes on 127.0.0.1 and
the session's ``LocalCluster``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nsdist
from nsdist.data import Dataset, scoring
from nsdist.data.scoring import output_format, write_scores
from nsdist.engine.predict import PREDICTIONS_FORMAT
from nsdist.model import LinearModel

REPO = Path(__file__).resolve().parents[1]
LETTER = REPO / "data" / "letter" / "letter-recognition.data"
RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def cluster(dask_processes):
    """A ``dask scheduler`` and two ``dask worker`` processes."""
    return dask_processes(2)


@pytest.fixture(scope="module")
def letter(tmp_path_factory, dask_client):
    """Letter ingested into 7 partitions, and a model of its 16 features."""
    root = tmp_path_factory.mktemp("letter")
    ds = nsdist.ingest(str(LETTER), str(root / "data"), format="csv", label_column=0, positive="N",
                       rows_per_partition=3000, client=dask_client)
    model = LinearModel(RNG.normal(size=ds.n_features), 0.3, "pauc", feature_names=list(ds.feature_names))
    return root, ds, model


def read_dir(path: Path) -> pa.Table:
    """The part files of a scored directory, in name order, as one table."""
    parts = sorted(p for p in os.listdir(path) if p.startswith("part-"))
    return pa.concat_tables([pq.read_table(path / p) for p in parts])


def test_output_names_tell_a_file_from_a_directory():
    assert [output_format(u) for u in ("s.parquet", "s.PQ", "x/s.parq", "s.csv", "s.csv.gz", "s3://b/k.csv.bz2")] \
        == ["parquet", "parquet", "parquet", "csv", "csv", "csv"]
    assert [output_format(u) for u in ("scores", "scores/", "s3://b/scores", "s.parquet/", "s.json")] == [None] * 5


def test_a_dataset_scored_on_the_cluster_is_the_file_scored_here_split_by_input_file(letter, cluster, tmp_path):
    """Real worker processes score the 7 files into 7 parts: together the table the one-process path writes,
    byte for byte in its values, and each part the scores X @ w + b of its input file's rows, in order."""
    root, ds, model = letter
    out = tmp_path / "scores"
    files = []
    result = nsdist.predict(model, ds.url, str(out), client=cluster.address,
                            on_file=lambda done, total, rows: files.append((done, total, rows)))
    assert result["rows"] == 20000 and result["files"] == 7 and result["output"] == str(out)
    assert sorted(os.listdir(out)) == ["_nsdist.json", *(f"part-{i:05d}.parquet" for i in range(7))]
    assert [f[:2] for f in files] == [(i, 7) for i in range(1, 8)] and files[-1][2] == 20000

    here = write_scores(model, ds.url, str(tmp_path / "one.parquet"))
    assert here == 20000 and read_dir(out).equals(pq.read_table(tmp_path / "one.parquet"))

    inputs = sorted(p.name for p in (root / "data").glob("*.parquet"))
    manifest = json.loads((out / "_nsdist.json").read_text())
    assert manifest["format"] == PREDICTIONS_FORMAT and manifest["num_rows"] == 20000
    assert [(p["path"], p["input"]) for p in manifest["partitions"]] == \
        [(f"part-{i:05d}.parquet", name) for i, name in enumerate(inputs)]
    for i, name in enumerate(inputs):            # each part: its input file's rows, scored here by numpy
        table = pq.read_table(root / "data" / name)
        X = np.column_stack([table.column(f).to_numpy().astype(np.float64) for f in model.feature_names])
        part = pq.read_table(out / f"part-{i:05d}.parquet")
        assert manifest["partitions"][i]["num_rows"] == part.num_rows == table.num_rows
        expected = X @ model.coef + 0.3      # summed in another order: equal to rounding
        np.testing.assert_allclose(part.column("score").to_numpy(), expected, rtol=1e-12,
                                   atol=1e-12 * np.abs(expected).max())
        np.testing.assert_array_equal(part.column("label").to_numpy(), table.column("label").to_numpy())
        np.testing.assert_array_equal(part.column("prediction").to_numpy(),
                                      np.where(X @ model.coef + 0.3 > 0, 1, -1))
    assert len(pd.read_parquet(out)) == 20000      # pandas / pyarrow read the directory (the manifest is hidden)


def test_raw_parquet_with_categories_and_ids_is_scored_file_by_file(cluster, tmp_path):
    """Parquet as users have it -- an id, a text column of categories, numbers of mixed widths -- against a model
    of one-hot features: the parts equal the one-process output, the scores are the model's on pandas'
    get_dummies of the rows, and the rows whose category the model never saw are counted in one warning per
    file on the driver."""
    raw = tmp_path / "raw"
    raw.mkdir()
    frames = []
    for i, n in enumerate((400, 250, 333)):
        df = pd.DataFrame({"id": np.arange(n) + 1000 * i, "a": RNG.normal(size=n).astype(np.float32),
                           "country": RNG.choice(["de", "fr", "it"] if i < 2 else ["de", "fr", "xx"], n),
                           "b": RNG.integers(0, 9, n), "label": RNG.choice([-1, 1], n)})
        df.to_parquet(raw / f"day-{i}.parquet", index=False)
        frames.append(df)
    features = ["a", "country=de", "country=fr", "country=it", "b"]
    model = LinearModel(RNG.normal(size=5), -0.1, "f1", feature_names=features)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = nsdist.predict(model, str(raw), str(tmp_path / "scores"), client=cluster.address, keep=["id"])
    unseen = [str(w.message) for w in caught if "was not trained on" in str(w.message)]
    n_xx = int((frames[2]["country"] == "xx").sum())
    assert len(unseen) == 1 and "day-2.parquet" in unseen[0] and f"{n_xx} rows hold" in unseen[0], unseen
    assert result["rows"] == 983
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_scores(model, str(raw), str(tmp_path / "one.parquet"), keep=["id"])
    scored = read_dir(tmp_path / "scores")
    assert scored.column_names == ["id", "label", "score", "prediction"]
    assert scored.equals(pq.read_table(tmp_path / "one.parquet"))
    rows = pd.concat(frames, ignore_index=True)
    dummies = pd.get_dummies(rows["country"], prefix="country", prefix_sep="=").astype(float)
    X = np.column_stack([rows["a"].astype(np.float64)] + [dummies.get(c, pd.Series(0.0, index=rows.index))
                                                          for c in features[1:4]] + [rows["b"].astype(float)])
    np.testing.assert_allclose(scored.column("score").to_numpy(), X @ model.coef - 0.1, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(scored.column("id").to_numpy(), rows["id"].to_numpy())


def test_a_dataset_opened_with_feature_columns_scores_only_those(cluster, tmp_path):
    """A ``Dataset`` opened with ``feature_columns`` and its own label column (the way such a model was trained:
    its other columns are an id and a timestamp): scored into a file here and into a directory on the cluster,
    only its features are read -- the scores are the model's on those columns --, its label column is copied
    as the label, and the other columns are copied only when kept.  The files' URL, which says nothing of the
    features, is refused naming the extra column."""
    raw = tmp_path / "raw"
    raw.mkdir()
    frames = []
    for i, n in enumerate((300, 200)):
        df = pd.DataFrame({"txn": np.arange(n) + 1000 * i, "a": RNG.normal(size=n), "when": RNG.normal(size=n),
                           "b": RNG.normal(size=n).astype(np.float32), "fraud": RNG.choice([0, 1], n)})
        df.to_parquet(raw / f"day-{i}.parquet", index=False)
        frames.append(df)
    rows = pd.concat(frames, ignore_index=True)
    model = LinearModel(np.array([0.7, -1.3]), 0.2, "f1", feature_names=["a", "b"])
    ds = Dataset.open(str(raw), label_column="fraud", feature_columns=["a", "b"])
    nsdist.predict(model, ds, str(tmp_path / "one.parquet"))
    nsdist.predict(model, ds, str(tmp_path / "scores"), client=cluster.address)
    nsdist.predict(model, ds, str(tmp_path / "kept"), client=cluster.address, keep=["txn"])
    one, parts = pq.read_table(tmp_path / "one.parquet"), read_dir(tmp_path / "scores")
    kept = read_dir(tmp_path / "kept")
    assert one.column_names == ["fraud", "score", "prediction"] and parts.equals(one)
    np.testing.assert_array_equal(one.column("fraud").to_numpy(), rows["fraud"].to_numpy())
    expected = rows["a"].to_numpy() * 0.7 - 1.3 * rows["b"].to_numpy().astype(np.float64) + 0.2
    np.testing.assert_allclose(one.column("score").to_numpy(), expected, rtol=1e-12, atol=1e-12)
    assert kept.column_names == ["txn", "fraud", "score", "prediction"]
    np.testing.assert_array_equal(kept.column("txn").to_numpy(), rows["txn"].to_numpy())
    for dst, client in ((tmp_path / "url.parquet", None), (tmp_path / "url-dir", cluster.address)):
        with pytest.raises(ValueError, match="unexpected 'txn'"):
            nsdist.predict(model, str(raw), str(dst), client=client, label_column="fraud")


def test_drop_leaves_a_column_out_here_on_the_cluster_and_on_the_command_line(cluster, tmp_path):
    """Parquet files (and a CSV file) as users have them: a transaction id, the model's two features, a
    timestamp that is no feature, and the label.  Without ``drop`` the timestamp is refused, naming it and
    both ways out; with ``keep=["txn"], drop=["when"]`` the scores are the model's on the two features (an
    independent ``0.7 a - 1.3 b + 0.2``), the id and label are copied and the timestamp is not -- in one
    file here, in a directory on ``dask worker`` processes, from a CSV file and from ``nsdist predict
    --drop``.  A misspelt ``drop`` name, a column both kept and dropped, and ``drop`` on svmlight input
    are refused, naming them."""
    raw = tmp_path / "raw"
    raw.mkdir()
    frames = []
    for i, n in enumerate((400, 250)):
        df = pd.DataFrame({"txn": np.arange(n) + 1000 * i, "a": RNG.normal(size=n), "when": RNG.normal(size=n),
                           "b": RNG.normal(size=n).astype(np.float32), "label": RNG.choice([-1, 1], n)})
        df.to_parquet(raw / f"day-{i}.parquet", index=False)
        frames.append(df)
    rows = pd.concat(frames, ignore_index=True)
    rows.to_csv(tmp_path / "rows.csv", index=False)
    model = LinearModel(np.array([0.7, -1.3]), 0.2, "f1", feature_names=["a", "b"])
    for dst, client in ((tmp_path / "refused.parquet", None), (tmp_path / "refused", cluster.address)):
        with pytest.raises(ValueError, match="unexpected 'when'.*--keep, or left out with --drop"):
            nsdist.predict(model, str(raw), str(dst), client=client, keep=["txn"])
        assert not dst.exists()
    how = dict(keep=["txn"], drop=["when"])
    nsdist.predict(model, str(raw), str(tmp_path / "one.parquet"), **how)
    nsdist.predict(model, str(raw), str(tmp_path / "scores"), client=cluster.address, **how)
    nsdist.predict(model, str(tmp_path / "rows.csv"), str(tmp_path / "csv.parquet"), **how)
    one = pq.read_table(tmp_path / "one.parquet")
    assert one.column_names == ["txn", "label", "score", "prediction"]
    assert read_dir(tmp_path / "scores").equals(one)
    assert json.loads((tmp_path / "scores" / "_nsdist.json").read_text())["drop"] == ["when"]
    expected = rows["a"].to_numpy() * 0.7 - 1.3 * rows["b"].to_numpy().astype(np.float64) + 0.2
    np.testing.assert_allclose(one.column("score").to_numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(one.column("txn").to_numpy(), rows["txn"].to_numpy())
    from_csv = pq.read_table(tmp_path / "csv.parquet")
    assert from_csv.column_names == one.column_names
    np.testing.assert_allclose(from_csv.column("score").to_numpy(), expected, rtol=1e-6, atol=1e-6)  # b in text
    model.save(str(tmp_path / "model"))
    proc = subprocess.run([sys.executable, "-m", "nsdist", "predict", str(tmp_path / "model"), str(raw),
                           str(tmp_path / "cli.parquet"), "--keep", "txn", "--drop", "when"], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(tmp_path / "cli.parquet").equals(one)
    with pytest.raises(ValueError, match="--drop column.*'whne' not in"):
        nsdist.predict(model, str(raw), str(tmp_path / "typo.parquet"), keep=["txn"], drop=["when", "whne"])
    with pytest.raises(ValueError, match="'txn' .* both copied \\(--keep\\) and left out"):
        nsdist.predict(model, str(raw), str(tmp_path / "both.parquet"), keep=["txn"], drop=["txn", "when"])
    with pytest.raises(ValueError, match="'label' .* both copied \\(the label\\)"):
        nsdist.predict(model, str(raw), str(tmp_path / "label.parquet"), keep=["txn"], drop=["label", "when"])
    (tmp_path / "rows.svm").write_text("1 1:0.5 2:1.0\n-1 2:2.0\n")
    with pytest.raises(ValueError, match="--drop does not apply to svmlight input"):
        nsdist.predict(model, str(tmp_path / "rows.svm"), str(tmp_path / "svm.parquet"), drop=["when"])
    assert not any((tmp_path / f).exists() for f in ("typo.parquet", "both.parquet", "label.parquet", "svm.parquet"))


def test_a_sparse_dataset_is_scored_as_csr_rows_on_the_cluster(shared_data, cluster, dask_client, tmp_path):
    """a9a's test file ingested in the sparse layout: its parts equal the one-process output and the scores
    svmlight's rows give by hand."""
    from sklearn.datasets import load_svmlight_file

    src = shared_data / "a9a" / "a9a.t.xz"
    ds = nsdist.ingest(str(src), str(tmp_path / "a9a"), layout="sparse", shuffle=False, n_features=123,
                       rows_per_partition=4000, client=dask_client)
    assert ds.is_sparse and len(ds.partitions) >= 4
    model = LinearModel(RNG.normal(size=123), 0.05, "prec@k", feature_names=list(ds.feature_names))
    result = nsdist.predict(model, ds.url, str(tmp_path / "scores"), client=cluster.address)
    assert result["rows"] == 16281 and result["files"] == len(ds.partitions)
    write_scores(model, ds.url, str(tmp_path / "one.parquet"))
    scored = read_dir(tmp_path / "scores")
    assert scored.equals(pq.read_table(tmp_path / "one.parquet"))
    import lzma

    with lzma.open(src) as f:
        X, y = load_svmlight_file(f, n_features=123)
    expected = X @ model.coef + 0.05
    np.testing.assert_allclose(scored.column("score").to_numpy(), expected, rtol=1e-12,
                               atol=1e-12 * np.abs(expected).max())
    np.testing.assert_array_equal(scored.column("label").to_numpy(), np.where(y > 0, 1, -1))


def test_a_bad_file_is_named_and_leaves_the_previous_scores_as_they_were(letter, cluster, tmp_path, monkeypatch):
    """A later file with a null feature fails on its worker: the error names the file, the row and the feature,
    the previous output stays byte for byte, and nothing is left beside it.  In one process, read in batches of
    1,024 rows, the row is still counted from the file's first."""
    root, ds, model = letter
    data = tmp_path / "data"
    data.mkdir()
    for p in sorted((root / "data").glob("*.parquet")):
        data.joinpath(p.name).write_bytes(p.read_bytes())
    out = tmp_path / "scores"
    nsdist.predict(model, str(data), str(out), client=cluster.address)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    victim = sorted(data.glob("*.parquet"))[4]
    table = pq.read_table(victim)
    col = table.column("col7").to_pylist()
    col[1234] = None
    pq.write_table(table.set_column(table.schema.get_field_index("col7"), "col7", pa.array(col, pa.float64())),
                   victim)
    with pytest.raises(ValueError) as err:
        nsdist.predict(model, str(data), str(out), client=cluster.address)
    assert f"{victim}: row 1234: feature 'col7' is missing (null)" in str(err.value)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "scores"]
    monkeypatch.setattr(scoring, "SCAN_BYTES", 1)           # batches of 1,024 rows: row 1234 is the 2nd's 210th
    with pytest.raises(ValueError, match=f"{victim}: row 1234: feature 'col7' is missing"):
        write_scores(model, str(data), str(tmp_path / "one.parquet"))
    assert not (tmp_path / "one.parquet").exists()


def test_the_output_may_not_overlap_the_input_nor_replace_other_data(letter, dask_client, tmp_path):
    root, ds, model = letter
    elsewhere = tmp_path / "notes"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    cases = [(root / "data" / "scores", "overlaps the input"), (root, "overlaps the input"),
             (elsewhere, "exists and is not a directory of scores"), (elsewhere / "keep.txt", "is a file")]
    for dst, message in cases:
        with pytest.raises(ValueError, match=message):
            nsdist.predict(model, ds.url, str(dst), client=dask_client)
    assert (elsewhere / "keep.txt").read_text() == "mine" and len(Dataset.open(ds.url).partitions) == 7
    with pytest.raises(ValueError, match="scored in this process into one file: name a .parquet or .csv output"):
        nsdist.predict(model, str(LETTER), str(tmp_path / "out"), client=dask_client, format="csv")
    empty = tmp_path / "empty"
    empty.mkdir()
    pq.write_table(pq.read_table(sorted((root / "data").glob("*.parquet"))[0]).slice(0, 0), empty / "e.parquet")
    for out in (tmp_path / "e.parquet", tmp_path / "e-scores"):
        with pytest.raises(ValueError, match="every Parquet file is empty"):
            nsdist.predict(model, str(empty), str(out), client=dask_client)
    wrong = LinearModel(np.ones(3), 0.0, "pauc", feature_names=["col1", "col2", "zz"])
    with pytest.raises(ValueError, match="zz"):         # checked on the driver: no output, no task
        nsdist.predict(wrong, ds.url, str(tmp_path / "w"), client=dask_client)
    assert not (tmp_path / "w").exists()


def test_nsdist_predict_to_a_directory_on_dask_processes(letter, cluster, tmp_path):
    """The command line: a directory OUTPUT is scored on the scheduler given, replaced on a second run, and
    a file OUTPUT with --scheduler is refused in one line."""
    root, ds, model = letter
    model.save(str(tmp_path / "model"))
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}

    def cli(*args, code=0):
        proc = subprocess.run([sys.executable, "-m", "nsdist", "predict", *map(str, args)], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=300)
        assert proc.returncode == code, proc.stderr
        return proc

    for _ in range(2):
        out = cli(tmp_path / "model", ds.url, tmp_path / "scores", "--scheduler", cluster.address).stdout
        assert "20000 rows scored on the cluster into 7 part files" in out and cluster.address in out, out
    assert read_dir(tmp_path / "scores").equals(read_dir_of(model, ds, tmp_path))
    line = cli(tmp_path / "model", ds.url, tmp_path / "s.parquet", "--scheduler", cluster.address, code=1).stderr
    assert "is one file, written by this process" in line and not (tmp_path / "s.parquet").exists()


def read_dir_of(model, ds, tmp_path: Path) -> pa.Table:
    write_scores(model, ds.url, str(tmp_path / "reference.parquet"))
    return pq.read_table(tmp_path / "reference.parquet")


def test_wide_rows_score_to_the_same_bits_here_and_on_a_nanny_worker(tmp_path):
    """300 float64 features: enough for OpenBLAS to divide a product among its threads, which rounds the
    partial sums otherwise.  A nanny's worker has one BLAS thread (OPENBLAS_NUM_THREADS=1), this process as
    many as cores; the scores are computed on one BLAS thread on both, so they have the same bits."""
    from distributed import Client, LocalCluster

    d, names = 300, [f"f{j}" for j in range(300)]
    for i in range(2):
        X = RNG.normal(size=(30_000, d))
        pq.write_table(pa.table({**{n: X[:, j] for j, n in enumerate(names)}, "label": RNG.choice([-1, 1], 30_000)}),
                       tmp_path / f"p{i}.parquet")
    model = LinearModel(RNG.normal(size=d), 0.5, "auc", feature_names=names)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as lc, \
            Client(lc, set_as_default=False) as client:
        assert client.run(lambda: os.environ.get("OPENBLAS_NUM_THREADS")) == {w: "1" for w in lc.workers.values()
                                                                             for w in [w.worker_address]}
        nsdist.predict(model, str(tmp_path / "p*.parquet"), str(tmp_path / "scores"), client=client)
    write_scores(model, str(tmp_path / "p*.parquet"), str(tmp_path / "one.parquet"))
    assert read_dir(tmp_path / "scores").equals(pq.read_table(tmp_path / "one.parquet"))


def test_a_large_file_is_scored_as_runs_of_its_row_groups(letter, dask_client, tmp_path, monkeypatch):
    """A file over SPLIT_BYTES is one task per run of its row groups, as training reads it (here every row group
    a run): the parts list their row groups in the manifest and hold the file's rows in order; a bad row of a
    later run is named by its row in the file; a Dataset selection scores only its partitions."""
    import nsdist.data.dataset as dataset_module

    root, ds, model = letter
    table = pa.concat_tables([pq.read_table(p) for p in sorted((root / "data").glob("*.parquet"))])
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=4000)              # 5 row groups
    monkeypatch.setattr(dataset_module, "SPLIT_BYTES", 1)
    result = nsdist.predict(model, str(tmp_path / "big.parquet"), str(tmp_path / "scores"), client=dask_client)
    manifest = json.loads((tmp_path / "scores" / "_nsdist.json").read_text())
    assert result["files"] == 5 and [p["row_groups"] for p in manifest["partitions"]] == \
        [[i, i + 1] for i in range(5)] and {p["input"] for p in manifest["partitions"]} == {"big.parquet"}
    write_scores(model, str(tmp_path / "big.parquet"), str(tmp_path / "one.parquet"))
    assert read_dir(tmp_path / "scores").equals(pq.read_table(tmp_path / "one.parquet"))

    selection = Dataset.open(str(tmp_path / "big.parquet")).select([1, 3], "some")
    nsdist.predict(model, selection, str(tmp_path / "some"), client=dask_client)
    some = read_dir(tmp_path / "some")
    whole = pq.read_table(tmp_path / "one.parquet")
    assert some.equals(pa.concat_tables([whole.slice(4000, 4000), whole.slice(12000, 4000)]))
    nsdist.predict(model, selection, str(tmp_path / "some.parquet"))        # the same rows into one file, here
    assert pq.read_table(tmp_path / "some.parquet").equals(some)

    col = table.column("col3").to_pylist()
    col[13_001] = float("inf")
    bad = table.set_column(table.schema.get_field_index("col3"), "col3", pa.array(col, pa.float64()))
    pq.write_table(bad, tmp_path / "big.parquet", row_group_size=4000)
    with pytest.raises(ValueError, match=r"big.parquet: row 13001: feature 'col3' = inf is not finite"):
        nsdist.predict(model, str(tmp_path / "big.parquet"), str(tmp_path / "scores"), client=dask_client)
    assert read_dir(tmp_path / "scores").equals(whole)       # the parts in flight ended before the clean-up:
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]        # no staging directory is left


def test_files_whose_columns_differ_are_named_in_one_process_and_on_the_cluster(dask_client, tmp_path):
    """A day whose file gained a column: one process refuses the scan, naming that file and the column (one
    scan would read it with the first file's columns and drop it); on the cluster its task refuses the
    unexpected column, naming the file."""
    features = ["a", "b"]
    for i, extra in enumerate([{}, {}, {"c": [1.0, 2.0]}]):
        pq.write_table(pa.table({"a": [0.5, 1.5], "b": [1.0, -1.0], **extra, "label": [1, -1]}),
                       tmp_path / f"day-{i}.parquet")
    model = LinearModel(np.array([1.0, 2.0]), 0.0, "pauc", feature_names=features)
    with pytest.raises(ValueError, match=r"day-2.parquet: its columns are not those of .*day-0.parquet; it adds "
                                         r"\['c'\]"):
        write_scores(model, str(tmp_path / "day-*.parquet"), str(tmp_path / "one.parquet"))
    with pytest.raises(ValueError, match=r"day-2.parquet.*'c'"):
        nsdist.predict(model, str(tmp_path / "day-*.parquet"), str(tmp_path / "scores"), client=dask_client)
    assert not (tmp_path / "one.parquet").exists() and not (tmp_path / "scores").exists()
