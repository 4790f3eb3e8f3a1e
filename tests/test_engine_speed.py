"""The cheaper reads of the engine give the same numbers as the plain ones (docs/engine.md §Holdout and sample).

Real Parquet files and a real ``LocalCluster`` of worker processes; nothing here
depends on wall-clock time (the speed lives in ``bench/scale.py``).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster

from nsdist.api import open_dataset
from nsdist.engine.cluster import CONFIG_KEY, heap_for_blocks
from nsdist.engine.holdout import class_counts, column_moments, gather_validation, plan_holdout
from nsdist.solvers.plan import Holdout
from nsdist.solvers.scaling import merge_moments, moments_of, row_moments


def _write(root: Path, X: np.ndarray, y: np.ndarray, rows_per_file: int) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(range(0, len(y), rows_per_file)):
        cols = {f"f{j}": X[a:a + rows_per_file, j] for j in range(X.shape[1])}
        cols["label"] = y[a:a + rows_per_file]
        pq.write_table(pa.table(cols), root / f"part-{i:05d}.parquet")
    return str(root)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        yield client


def test_column_moments_equal_row_moments_of_the_matrix_to_the_bit():
    """Moments from the columns are row_moments of the float64 matrix, bit for bit (any shape, dtype, chunk)."""
    rng = np.random.default_rng(11)
    for trial in range(14):
        n, d = int(rng.integers(1, 9000)), int(rng.integers(1, 40))
        dtype = (np.float32, np.float64)[trial % 2]
        X = (rng.normal(size=(n, d)) * rng.uniform(0.01, 1e3, d) + rng.uniform(-1e4, 1e4, d)).astype(dtype)
        columns = [np.ascontiguousarray(X[:, j]) for j in range(d)]
        ref = row_moments(X.astype(np.float64))
        cut = int(rng.integers(0, n))
        blocks = [[c[:cut] for c in columns], [c[cut:] for c in columns]]      # two blocks, one after the other
        for got in (column_moments([columns]), column_moments(blocks, chunk=int(rng.integers(1, 5000))),
                    moments_of(np.ascontiguousarray(X))):
            assert got[0] == ref[0]
            np.testing.assert_array_equal(got[1], ref[1])
            np.testing.assert_array_equal(got[2], ref[2])
        if d >= 4:                      # groups of at least 2 columns: each group's numbers are the whole's
            groups = [column_moments([columns[a:b]]) for a, b in ((0, d // 2), (d // 2, d))]
            np.testing.assert_array_equal(np.concatenate([g[1] for g in groups]), ref[1])
            np.testing.assert_array_equal(np.concatenate([g[2] for g in groups]), ref[2])


def test_read_columns_are_read_partitions_columns_with_its_errors(tmp_path):
    """Dataset.read_columns: the columns of read_partition's matrix, its labels, and its error for a bad cell."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    y = (rng.random(300) < 0.3).astype(np.int8)
    ds = open_dataset(_write(tmp_path / "ok", X, y, 300))
    for dtype in (np.float32, np.float64):
        values, labels = ds.read_columns(0, dtype=dtype)
        M, ref_y = ds.read_partition(0, dtype=dtype)
        np.testing.assert_array_equal(np.column_stack(values), M)
        assert all(v.dtype == dtype for v in values)
        np.testing.assert_array_equal(labels, ref_y)
    some, labels = ds.read_columns(0, features=[4, 1])
    np.testing.assert_array_equal(np.column_stack(some), ds.read_partition(0)[0][:, [4, 1]])
    X[17, 3] = np.nan
    bad = open_dataset(_write(tmp_path / "bad", X, y, 300))
    with pytest.raises(ValueError) as plain:
        bad.read_partition(0)
    with pytest.raises(ValueError, match="row 17: feature 'f3'") as columns:
        bad.read_columns(0)
    assert str(columns.value) == str(plain.value)
    bad.read_columns(0, features=[0, 1, 2, 4])               # only the columns asked for are read and checked
    with pytest.raises(ValueError, match="row 17: feature 'f3'"):
        bad.read_columns(0, features=[3])


def test_validation_rows_and_moments_are_those_of_the_whole_matrix(cluster, tmp_path):
    """gather_validation on the workers: the holdout's rows (C-ordered, in file order) and the moments of
    every row, the same numbers as on the whole dataset in memory, for both buffer widths."""
    rng = np.random.default_rng(5)
    X = (rng.normal(size=(5000, 12)) * 3 + 1).astype(np.float32)
    y = np.where(rng.random(5000) < 0.1, 1, -1).astype(np.int8)
    ds = open_dataset(_write(tmp_path / "data", X, y, 1300))
    holdout = plan_holdout(cluster, ds, class_counts(cluster, ds), random_state=4, fraction=0.2, max_rows=800)
    assert holdout == Holdout.draw(y, np.arange(len(y)), 4, 0.2, 800)
    keep = holdout.mask(y, np.arange(len(y)))
    for dtype in ("float32", "float64"):
        (Xv, yv), moments, _ = gather_validation(cluster, ds, holdout, dtype=dtype)
        assert Xv.flags.c_contiguous and Xv.dtype == dtype
        np.testing.assert_array_equal(Xv, X[keep].astype(dtype))
        np.testing.assert_array_equal(yv, y[keep])
        parts = [row_moments(X[a:a + 1300].astype(dtype).astype(np.float64)) for a in range(0, 5000, 1300)]
        for got, ref in zip(moments, merge_moments(parts)):
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("layout", ["columns", "sparse"])
def test_the_validation_pass_draws_the_2pmb_reservoir_that_offering_every_scaled_training_row_draws(
        cluster, tmp_path, layout):
    """docs/engine.md §Reservoir: with a holdout, 2PMB's reservoir comes from the validation pass (each
    partition's candidates as raw rows, the merged sample scaled afterwards): the rows, keys, rare class and
    count that offering every scaled training row at once in memory gives, to the bit -- and what the
    reservoir's pass of its own (a run without a holdout) draws.  Several partitions, each with more rows of
    either class than the sample holds."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file

    from nsdist import ingest
    from nsdist.engine.reservoir import Reservoir, sample_reservoir, scaled_reservoir
    from nsdist.solvers.scaling import scaling_from_moments

    rng = np.random.default_rng(8)
    X = rng.normal(size=(5000, 12)) * 3 + 1
    y = np.where(rng.random(5000) < 0.1, 1, -1).astype(np.int8)
    if layout == "columns":
        url = _write(tmp_path / "data", X.astype(np.float32), y, 1300)
    else:
        X[rng.random(X.shape) < 0.7] = 0.0
        dump_svmlight_file(X, y, str(tmp_path / "data.svm"), zero_based=False)
        url = str(ingest(str(tmp_path / "data.svm"), str(tmp_path / "sparse"), format="svmlight", layout="sparse",
                         shuffle=False, n_features=12, rows_per_partition=1300, client=cluster).url)
    ds = open_dataset(url)
    assert ds.schema.layout == layout and len(ds.partitions) == 4
    dtype, size, seed = "float32", 40, 9
    blocks = [ds.read_partition(i, dtype=dtype) for i in range(4)]
    rows = (sp.vstack if layout == "sparse" else np.concatenate)([b[0] for b in blocks])
    labels, ids = np.concatenate([b[1] for b in blocks]), np.arange(5000)
    holdout = plan_holdout(cluster, ds, class_counts(cluster, ds), random_state=4, fraction=0.2, max_rows=800)
    train = np.flatnonzero(~holdout.mask(labels, ids))
    _, moments, drawn = gather_validation(cluster, ds, holdout, dtype=dtype, reservoir=(size, seed))
    scaling = scaling_from_moments(*moments, center=layout == "columns")
    drawn = scaled_reservoir(drawn, scaling)
    scaled = scaling.apply(rows[train].copy())
    ref = {label: Reservoir.empty(label, size, 12, dtype, layout == "sparse").offer(scaled, labels[train],
                                                                                   ids[train], seed)
           for label in (1, -1)}
    own = sample_reservoir(cluster, ds, size, seed, dtype, scaling, holdout)
    for got in (drawn, own):
        assert got.label == ref[1].label == 1 and got.n_rare == ref[1].n_rare > 3 * size
        assert got.X.dtype == np.float32 and sp.issparse(got.X) == (layout == "sparse")
        np.testing.assert_array_equal(got.keys, ref[1].keys)
        dense = [a.toarray() if sp.issparse(a) else a for a in (got.X, ref[1].X)]
        np.testing.assert_array_equal(*dense)


@pytest.mark.parametrize("sparse", [False, True])
def test_a_read_only_reservoir_is_scaled_in_a_copy(sparse):
    """One partition's sample comes back from a worker as it was sent, possibly in a read-only buffer: its rows
    are scaled in a copy, to the values of scaling a writeable one, and the buffer is left as it was."""
    import scipy.sparse as sp

    from nsdist.engine.reservoir import Reservoir, scaled_reservoir
    from nsdist.solvers.scaling import Scaling

    rows = np.arange(1.0, 13.0, dtype=np.float32).reshape(4, 3)
    scaling = Scaling(np.zeros(3) if sparse else np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 8.0]),
                      centered=not sparse)
    X = sp.csr_matrix(rows) if sparse else rows.copy()
    (X.data if sparse else X).flags.writeable = False
    got = scaled_reservoir(Reservoir(1, X, np.arange(4.0), 4, 4), scaling).X
    want = scaling.apply(rows.copy())
    np.testing.assert_array_equal(got.toarray() if sparse else got, want)
    np.testing.assert_array_equal(X.toarray() if sparse else X, rows)


def _mmapped(size: int = 1 << 20) -> bool:
    """Whether glibc serves a ``size``-byte malloc in this process by its own mmap (the chunk's IS_MMAPPED bit)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    p = libc.malloc(size)
    head = ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value
    libc.free(p)
    return bool(head & 2)


def test_heap_for_blocks_raises_the_workers_thresholds_and_puts_them_back(cluster):
    """docs/engine.md §Cluster: inside the block a 1 MiB allocation comes from the heap in every worker; before
    and after it, from a fresh mmap (Dask's nanny's MALLOC_TRIM_THRESHOLD_ fixes the threshold at 128 KiB);
    the configuration key turns it off."""
    assert all(cluster.run(_mmapped).values())
    with heap_for_blocks(cluster):
        assert not any(cluster.run(_mmapped).values())
    assert all(cluster.run(_mmapped).values())
    with dask.config.set({CONFIG_KEY: False}), heap_for_blocks(cluster):
        assert all(cluster.run(_mmapped).values())


def test_fixed_run_sample_moments_by_column_groups_equal_the_whole_samples(cluster, tmp_path):
    """A fixed run's moments, computed by groups of columns on the workers, are row_moments of the sample's rows
    (several partitions, odd column count, both buffer widths); its rows are read only for the cut."""
    from nsdist.engine.holdout import WorkerSample

    rng = np.random.default_rng(8)
    X = (rng.normal(size=(3000, 9)) * rng.uniform(0.1, 50, 9) + rng.uniform(-100, 100, 9)).astype(np.float32)
    y = np.where(rng.random(3000) < 0.2, 1, -1).astype(np.int8)
    ds = open_dataset(_write(tmp_path / "data", X, y, 700))
    for dtype in ("float32", "float64"):
        sample = WorkerSample(cluster, ds, [0, 2, 4], dtype=dtype)
        rows = np.concatenate([X[700 * p:700 * (p + 1)] for p in (0, 2, 4)]).astype(dtype)
        for got, ref in zip(sample.moments(), row_moments(rows.astype(np.float64))):
            np.testing.assert_array_equal(got, ref)
        assert sample.futures == []
        sample.release()


def test_the_engine_and_its_workers_do_not_import_scikit_learn():
    """``nsdist.train`` and the engine's tasks (and so every fresh worker) import without scikit-learn (about
    a second); only the estimator and the in-memory baselines need it.  A fresh interpreter, so that nothing
    imported by the tests counts."""
    import subprocess
    import sys

    code = ("import sys; import nsdist, nsdist.api, nsdist.engine.chain, nsdist.engine.holdout, nsdist.engine.evaluate; "
            "nsdist.train; print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
    code = "import sys; import nsdist; nsdist.NonDecomposableClassifier; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "True"


def test_the_driver_imports_train_without_scipy_sparse_or_the_ingest():
    """``import nsdist.api`` (what the first ``nsdist.train`` of a process loads) imports neither
    ``scipy.sparse`` (about 0.1 s; a job on dense rows never needs it, sparse rows load it as they are
    made) nor the ingest, which ``nsdist.api.ingest`` and ``nsdist.ingest`` still resolve to on first use.
    A fresh interpreter, so that nothing imported by the tests counts."""
    import subprocess
    import sys

    code = ("import sys; import nsdist.api; print([m for m in ('scipy.sparse', 'nsdist.data.ingestion') "
            "if m in sys.modules]); import nsdist; from nsdist.data.ingestion import ingest; "
            "print(nsdist.api.ingest is ingest is nsdist.ingest)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["[]", "True"]


def test_a_sparse_partition_loads_without_arrow_compute(tmp_path):
    """A chain load of a sparse partition (a fresh worker's first task of a sparse job) reads and checks its
    CSR rows without importing ``pyarrow.compute`` (35 ms; only the ingest's write options and the cast
    of decimal or boolean lists use it), and reads them right.  A fresh interpreter."""
    import json
    import subprocess
    import sys

    table = pa.table({"indices": pa.array([[0, 3], [], [1, 2, 4]], pa.list_(pa.int32())),
                      "values": pa.array([[1.0, 2.0], [], [3.0, 4.0, 5.0]], pa.list_(pa.float32())),
                      "label": pa.array([1, 0, 1], pa.int8())})
    (tmp_path / "d").mkdir()
    pq.write_table(table.replace_schema_metadata({b"nsdist": json.dumps({"n_features": 5}).encode()}),
                   tmp_path / "d" / "part-00000.parquet")
    code = ("import sys, numpy as np; import nsdist.engine.chain, nsdist.engine.holdout; "
            "from nsdist.data import Dataset; "
            f"X, y = Dataset.open({str(tmp_path / 'd')!r}).read_block(0, dtype=np.float32, order=lambda y: [2, 0, 1]); "
            "print('pyarrow.compute' in sys.modules, X.toarray().tolist(), y.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == ("False [[0.0, 3.0, 4.0, 0.0, 5.0], [1.0, 0.0, 0.0, 2.0, 0.0], "
                                  "[0.0, 0.0, 0.0, 0.0, 0.0]] [1, 1, -1]")


def test_the_chain_tasks_import_the_data_layer_without_ingest_or_text_readers():
    """A fresh worker unpickling a chain task imports ``nsdist.data`` without the ingest and the text readers
    (loaded on first use: ``nsdist.data``'s PEP 562 exports), which every fresh-cluster job paid for before its
    first load; the exports still resolve to the functions."""
    import subprocess
    import sys

    lazy = ["nsdist.data.ingestion", "nsdist.data.readers", "nsdist.data.sources"]
    code = (f"import sys; import nsdist.engine.chain, nsdist.engine.holdout; print([m for m in {lazy!r} "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
    from nsdist.data import ingest, read_csv, read_svmlight
    from nsdist.data.ingestion import ingest as ingest_fn
    from nsdist.data.readers import read_csv as read_csv_fn, read_svmlight as read_svmlight_fn

    assert (ingest, read_csv, read_svmlight) == (ingest_fn, read_csv_fn, read_svmlight_fn)
    import nsdist.data

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nsdist.data.nope


def test_no_lazy_export_is_named_like_a_submodule_of_its_package():
    """A package's lazy export named like one of its submodules becomes that module once the submodule is
    imported (the import system sets the package's attribute): ``from nsdist import ingest`` gave the module
    ``nsdist.data.ingest`` after ``import nsdist.data.ingest``.  So no export of a package that exports
    lazily (``nsdist._lazy``) shares a submodule's name, and in a fresh interpreter that imports the
    ingest's and the readers' modules first the exports are still the functions."""
    import pkgutil
    import subprocess
    import sys

    import nsdist
    import nsdist.data

    for package in (nsdist, nsdist.data):
        submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        assert not set(package.__all__) & submodules, package.__name__
    code = ("import inspect, nsdist.data.ingestion, nsdist.data.readers\n"
            "from nsdist import ingest\n"
            "from nsdist.data import ingest as ingest2, read_csv, read_svmlight\n"
            "print([inspect.isfunction(f) for f in (ingest, ingest2, read_csv, read_svmlight)])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[True, True, True, True]"


def test_a_fresh_worker_of_a_dense_job_imports_neither_scipy_nor_the_ingest(tmp_path):
    """Every module a chain task names is imported by a fresh worker before its first load (the chain's
    start waits for it).  A dense job's workers import no scipy (``scipy.sparse`` alone takes about 90 ms:
    ``nsdist._sparse``), no ``pyarrow.compute`` and no ingest: measured in one worker,
    ``import nsdist.engine.chain, nsdist.engine.holdout`` 211 -> 105 ms.  A sparse job's worker then does
    import ``scipy.sparse`` (the check sees what a worker loads)."""
    import nsdist
    from nsdist._sparse import issparse

    rng = np.random.default_rng(0)
    dense, sparse = tmp_path / "dense", tmp_path / "sparse"
    dense.mkdir()
    sparse.mkdir()
    for k in range(2):
        X = rng.normal(size=(400, 5)).astype(np.float32)
        y = (X[:, 0] + 0.5 * rng.normal(size=400) > 1.0).astype(np.int8)
        pq.write_table(pa.table({**{f"x{j}": X[:, j] for j in range(5)}, "label": y}), dense / f"part-{k}.parquet")
        rows = [np.flatnonzero(r) for r in X > 0.5]
        table = pa.table({"indices": pa.array([r.tolist() for r in rows], pa.list_(pa.int32())),
                          "values": pa.array([X[i, r].tolist() for i, r in enumerate(rows)], pa.list_(pa.float32())),
                          "label": y})
        meta = {b"nsdist": b'{"n_features": 5}'}
        pq.write_table(table.replace_schema_metadata(meta), sparse / f"part-{k}.parquet")
    heavy = ["scipy", "pyarrow.compute", "nsdist.data.ingestion", "sklearn"]
    fixed = dict(measure="pauc", solver="1pmb", eta=0.1, n_passes=1)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as lc, \
            Client(lc) as c:
        nsdist.train(str(dense), client=c, **fixed)
        # a lambda: cloudpickle sends it by value (a function of this module would make the worker import the
        # module, and with it nsdist.api, scipy and the rest)
        loaded = lambda prefixes: sorted(m for m in __import__("sys").modules
                                         if any(m == p or m.startswith(p + ".") for p in prefixes))
        assert list(c.run(loaded, heavy).values()) == [[]]
        model = nsdist.train(str(sparse), client=c, **fixed)
        assert "scipy.sparse" in next(iter(c.run(loaded, ["scipy"]).values()))
    assert np.isfinite(model.coef_).all()
    import scipy.sparse as sp

    assert issparse(sp.csr_matrix(np.eye(2))) and not issparse(np.eye(2)) and not issparse([[1.0]])
