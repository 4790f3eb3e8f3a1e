"""Connecting to a Dask cluster: embedded ``LocalCluster``, an address, or a ``Client``."""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

from distributed import Client, LocalCluster

__all__ = ["connect"]

log = logging.getLogger("nsdist.engine")


@contextlib.contextmanager
def connect(client: Client | str | None = None, *, n_workers: int | None = None,
            memory_limit: str | int | None = "auto", security=None) -> Iterator[Client]:
    """Yield a :class:`distributed.Client` for the job (SPEC §5).

    Parameters
    ----------
    client : Client, str or None
        ``None``: start an embedded :class:`~distributed.LocalCluster` (one worker
        process per core, one thread each) and close it afterwards; the scheduler
        address in ``DASK_SCHEDULER_ADDRESS`` is used instead when set.  A string:
        connect to that scheduler address (``tcp://host:8786``, ``tls://...``).
        A ``Client``: used as is and left open.
    n_workers, memory_limit :
        Size of the embedded cluster.
    security : distributed.security.Security, optional
        TLS settings when connecting to an address.
    """
    if isinstance(client, Client):
        yield client
        return
    address = client or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if address:
        log.info("connecting to the Dask scheduler at %s", address)
        with Client(address, security=security, set_as_default=False) as c:
            yield c
        return
    n = n_workers or max(1, min(os.cpu_count() or 1, 4))
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                      dashboard_address=":0") as cluster, Client(cluster, set_as_default=False) as c:
        log.info("started an embedded LocalCluster with %d workers; dashboard: %s", n, c.dashboard_link)
        yield c
