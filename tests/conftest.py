"""Shared fixtures: the real data sets, the bundled demo data, a small Dask cluster.

The real data sets live in ``shared/data`` beside the repository (CI clones the
repository next to a copy of ``shared/``); tests that need them are skipped if
it is missing.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REPO_DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``shared/data``: one folder per data set (letter, mammography, a9a, w8a, ijcnn1, kddcup99, ...)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def repo_data() -> Path:
    """The data bundled in the repository (``data/``)."""
    return REPO_DATA


@pytest.fixture(scope="session")
def dask_client():
    """A small in-process Dask cluster (1 worker, 2 threads) shared by the session.

    Not set as the default client: pass it explicitly (``client=dask_client``).
    """
    from distributed import Client, LocalCluster

    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture
def memory_url():
    """A fresh ``memory://`` folder URL, deleted after the test."""
    root = f"/nsdist-test-{uuid.uuid4().hex}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)
