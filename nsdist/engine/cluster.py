"""Connecting to a Dask cluster (embedded ``LocalCluster``, an address, or a ``Client``), and the workers'
allocator during a training job.

:func:`connect` is defined in :mod:`nsdist._connect`, where the data layer
(``ingest``) can reach it too; this is its public name.

:func:`heap_for_blocks` raises glibc's allocation thresholds in every worker for
the length of a training job and puts them back afterwards
(``docs/engine.md`` §Cluster).  Dask's nanny starts its workers with
``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes glibc's mmap threshold at
128 KiB: every larger temporary of a step (a sparse step's ``d``-sized state
copies and scratch arrays, a block's gathers) is then a fresh ``mmap`` whose
pages fault in one by one and are unmapped when it is freed.  With the
thresholds raised, such arrays are reused from the heap.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import platform
import threading
import time
from typing import TYPE_CHECKING, Iterator

import dask
import numpy as np

from nsdist._connect import UnguardedScriptError, check_spawn_safe, check_tls, connect, dashboard_link

if TYPE_CHECKING:
    from distributed import Client

    from nsdist.data import Dataset

_check_tls = check_tls  # the former private name

__all__ = ["connect", "dashboard_link", "check_tls", "check_spawn_safe", "UnguardedScriptError", "heap_for_blocks",
           "MMAP_THRESHOLD", "TRIM_THRESHOLD", "direct_to_workers", "fetch", "check_partitions_fit", "READ_COPIES"]

log = logging.getLogger("nsdist.engine")

#: during a job, allocations below this size come from the heap, not from a fresh mmap (glibc's largest
#: allowed value).  Measured on the sparse text job (2^20 features, bench/results/sparse.md): one pass
#: 5.3 -> 3.4 s, medians of 3 pairs; no change on the dense 100-column jobs (bench/results/scale.md)
MMAP_THRESHOLD = 32 << 20
#: and the free memory at the heap's top is given back to the system only beyond this size
TRIM_THRESHOLD = 64 << 20
#: glibc's own default of both thresholds, restored when the environment did not set them
_GLIBC_DEFAULT = 128 << 10
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: the Dask configuration key that turns :func:`heap_for_blocks` off (``dask.config.set({KEY: False})``)
CONFIG_KEY = "nsdist.worker-heap"
#: a partition being read is held about this many times over on its worker: Arrow's decoded columns, and the
#: block made from them (:func:`check_partitions_fit`)
READ_COPIES = 2


def check_partitions_fit(client: Client, dataset: Dataset, dtype) -> None:
    """Refuse a dataset whose largest partition cannot be read on ``client``'s workers, before any is read.

    A partition is read whole by one task (a Parquet file, or a run of a large file's row groups:
    ``docs/engine.md`` §Dataset format).  If :data:`READ_COPIES` times its rows as read in ``dtype``
    exceed the smallest worker's memory limit, Dask would kill every worker that tried (an opaque
    ``KilledWorker`` after three deaths): raise a ``ValueError`` naming the partition and what to do.
    Workers without a memory limit are not checked.
    """
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
    if not limits or not all(limits):
        return
    i = max(range(len(dataset.partitions)), key=lambda j: dataset.partition_bytes(j, dtype))
    nbytes, limit = dataset.partition_bytes(i, dtype), min(limits)
    if READ_COPIES * nbytes > limit:
        gib = 2 ** 30
        raise ValueError(
            f"{dataset.partition_name(i)}: its {dataset.partitions[i].num_rows:,} rows take {nbytes / gib:.2f} GiB "
            f"as {np.dtype(dtype).name}, about {READ_COPIES}x that while one task reads them, and a worker may use "
            f"{limit / gib:.2f} GiB: a partition is read whole, so write the data in smaller files or row groups "
            "(pyarrow.parquet.write_table(..., row_group_size=N): a large file is read a run of row groups at a "
            "time), or ingest it (nsdist ingest SRC DST writes partitions of about 64 MiB), or give the workers "
            "more memory")


def _mallopt(trim: int, mmap: int, *, release: bool = False) -> bool:
    """Set this process's glibc trim and mmap thresholds (and give free heap memory back); False without glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    done = bool(libc.mallopt(_M_TRIM_THRESHOLD, trim)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap))
    if release:
        libc.malloc_trim(0)
    return done


def _raise_thresholds() -> bool:
    return _mallopt(TRIM_THRESHOLD, MMAP_THRESHOLD)


def _restore_thresholds() -> bool:
    """The thresholds the worker started with (its environment's, else glibc's defaults); free memory returned."""
    def started(name: str) -> int:
        try:
            return int(os.environ.get(name, _GLIBC_DEFAULT))
        except ValueError:
            return _GLIBC_DEFAULT
    return _mallopt(started("MALLOC_TRIM_THRESHOLD_"), started("MALLOC_MMAP_THRESHOLD_"), release=True)


@contextlib.contextmanager
def heap_for_blocks(client: Client) -> Iterator[None]:
    """Raise glibc's trim and mmap thresholds in every worker of ``client`` while the block runs.

    Afterwards each worker gets the thresholds it started with (from its
    ``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_MMAP_THRESHOLD_``, else glibc's 128 KiB)
    and returns its free heap memory to the system (``malloc_trim``).  A no-op
    on workers without glibc, and when the Dask configuration sets
    :data:`CONFIG_KEY` to False.  Best effort: a worker that joins or restarts
    meanwhile keeps its own settings (only the speed depends on them).
    """
    if not dask.config.get(CONFIG_KEY, True):
        yield
        return
    with contextlib.suppress(Exception):        # the speed-up is optional; a failure here must not fail the job
        client.run(_raise_thresholds)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            client.run(_restore_thresholds)


def direct_to_workers(client: Client) -> bool:
    """Whether the driver fetches results straight from the workers (``client.gather(..., direct=True)``).

    What the client was made with, if it says (``Client(direct_to_workers=...)``);
    else yes when every worker runs on this machine -- a loopback address or one
    of this machine's own, which the driver can always reach -- and no otherwise,
    as Dask's default (a client may not reach workers on other hosts, behind a
    gateway or a NAT).  Dask's default path goes through the scheduler: two hops,
    and on an embedded cluster both on the driver's own process (``docs/engine.md``
    §Cluster gives the times).
    """
    chosen = getattr(client, "direct_to_workers", None)
    if chosen is not None:
        return bool(chosen)
    try:
        workers = list(client.scheduler_info()["workers"])
    except Exception:       # (no answer: Dask's default)
        return False
    return bool(workers) and all(_on_this_machine(address) for address in workers)


def fetch(client: Client, futures, direct: bool | None = None, timeout: float | None = None):
    """``client.gather(futures)``, straight from the workers if ``direct`` (default: :func:`direct_to_workers`,
    one round trip to the scheduler: a caller that fetches often asks it once).

    ``timeout``: seconds, then ``TimeoutError``; the gather is not cancelled but left to end by itself.  The
    client's concurrent gathers share one request to the workers, and cancelling a gather waiting on it
    cancels that request for all: another's then ends in an ``asyncio.CancelledError``, which Dask's ``sync``
    lets out as an ``UnboundLocalError`` (dask/distributed#8514).  The ring's watch, whose 0.5 s timeouts cut
    its gathers off, failed a redo in CI so.
    """
    direct = (direct_to_workers(client) if direct is None else direct) or None
    return client.sync(_gather, client, futures, direct, timeout)


async def _gather(client: Client, futures, direct: bool | None, timeout: float | None):
    task = asyncio.ensure_future(client._gather(futures, direct=direct))
    if timeout is None:
        return await task
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout)
    except TimeoutError:        # (its outcome, if it ever comes, is nobody's: taken, so as not to be logged)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise


def settle(futures, timeout: float) -> bool:
    """Wait until each of ``futures`` has finished, erred or been cancelled, ``timeout`` seconds at most in all,
    fetching no result (a wide state's would cross to the driver for nothing: 1.7 s at the end of a default
    2^20-feature job); whether they all did."""
    futures = list(futures)
    ended = threading.Semaphore(0)
    for future in futures:
        future.add_done_callback(lambda _: ended.release())
    deadline = time.monotonic() + timeout
    return all(ended.acquire(timeout=max(0.0, deadline - time.monotonic())) for _ in futures)


def _on_this_machine(address: str) -> bool:
    from distributed.comm import get_address_host, parse_address

    if parse_address(address)[0] == "inproc":
        return True
    host = get_address_host(address)
    return host in ("localhost", "::1") or host.startswith("127.") or host in _own_addresses()


@functools.lru_cache(maxsize=1)
def _own_addresses() -> frozenset[str]:
    """This machine's interface addresses (psutil comes with distributed)."""
    import psutil

    return frozenset(a.address.split("%")[0] for nic in psutil.net_if_addrs().values() for a in nic)
