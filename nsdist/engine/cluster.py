"""Connecting to a Dask cluster: embedded ``LocalCluster``, an address, or a ``Client``."""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

from distributed import Client, LocalCluster
from distributed.security import Security

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
        TLS settings when connecting to an address (default: Dask's
        ``distributed.comm.tls.*`` configuration).

    Raises
    ------
    ValueError
        For a ``tls://`` address when no client certificate is configured.
    """
    if isinstance(client, Client):
        yield client
        return
    address = client or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if address:
        _check_tls(address, security)
        log.info("connecting to the Dask scheduler at %s", address)
        with Client(address, security=security, set_as_default=False) as c:
            yield c
        return
    n = n_workers or max(1, min(os.cpu_count() or 1, 4))
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                      dashboard_address=":0") as cluster, Client(cluster, set_as_default=False) as c:
        log.info("started an embedded LocalCluster with %d workers; dashboard: %s", n, c.dashboard_link)
        yield c


def _check_tls(address: str, security: Security | None) -> None:
    """Refuse a ``tls://`` address without a client certificate, saying how to give one.

    (Dask itself fails later with a ``TypeError`` about a missing ``ssl_context``.)
    """
    if not address.startswith("tls://"):
        return
    tls = (security or Security()).get_tls_config_for_role("client")
    if not (tls.get("ca_file") and tls.get("cert")):
        raise ValueError(f"{address} is a TLS scheduler but no client certificate is configured: pass "
                         "security=Security(tls_ca_file=..., tls_client_cert=..., tls_client_key=...), or set "
                         "Dask's distributed.comm.tls.ca-file, .client.cert and .client.key (environment: "
                         "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, "
                         "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY)")
