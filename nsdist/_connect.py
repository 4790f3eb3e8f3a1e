"""The one way every nsdist entry point reaches Dask: :func:`connect`.

``train``, ``evaluate``, ``ingest``, ``retrain`` and the command line all get
their client here, so ``DASK_SCHEDULER_ADDRESS``, the TLS check and the
embedded cluster behave the same everywhere.  It lives at the package's base
(like :mod:`nsdist._validation`) because both the data layer (``ingest``) and
the engine use it and ``nsdist.data`` must not import ``nsdist.engine``;
:mod:`nsdist.engine.cluster` re-exports it as the public name.
"""
from __future__ import annotations

import ast
import contextlib
import logging
import os
import sys
import weakref
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

__all__ = ["connect", "check_tls", "check_spawn_safe", "dashboard_link", "UnguardedScriptError", "LOOPBACK"]

log = logging.getLogger("nsdist.engine")

#: the one address the embedded cluster listens on (scheduler, workers, dashboards): a job on a laptop or a
#: shared host opens no port on its network interfaces (docs/engine.md §Cluster)
LOOPBACK = "127.0.0.1"


class UnguardedScriptError(SystemExit):
    """A script would start worker processes from code that runs again when they import it.

    A :class:`SystemExit`: uncaught, Python prints its one-line message (what
    to write instead) and exits with status 1, without a traceback.
    """

    def __str__(self) -> str:
        return str(self.code)


@contextlib.contextmanager
def connect(client: Client | str | None = None, *, n_workers: int | None = None,
            memory_limit: str | int | None = "auto", security: Security | None = None, processes: bool = True,
            threads_per_worker: int = 2, quiet: bool = False) -> Iterator[Client]:
    """Yield a :class:`distributed.Client` for the job (docs/engine.md §Cluster).

    Parameters
    ----------
    client : Client, str or None
        ``None``: the scheduler at ``DASK_SCHEDULER_ADDRESS`` when it is set,
        else an embedded :class:`~distributed.LocalCluster`, closed afterwards.
        A string: connect to that scheduler address (``tcp://host:8786``,
        ``tls://...``).  A ``Client``: used as is and left open.
    n_workers, memory_limit, processes, threads_per_worker :
        The embedded cluster: ``n_workers`` (default: one per core, at most 4)
        worker processes of ``threads_per_worker`` threads (default 2: a
        worker loads the next partition while it steps on this one; measured
        20-30% faster for a whole ``train`` call on 2 quiet cores,
        ``bench/results/scale_rerun.md``), or with ``processes=False`` workers
        in this process (what ``ingest`` uses).
    security : distributed.security.Security, optional
        TLS settings when connecting to an address (default: Dask's
        ``distributed.comm.tls.*`` configuration).
    quiet : bool
        Embedded cluster: silence its logs.

    Raises
    ------
    ValueError
        For a ``tls://`` address when no client certificate is configured.
    UnguardedScriptError
        Before starting worker processes from a script's top-level code that
        is not under ``if __name__ == "__main__":`` (the workers would run the
        script again: see :func:`check_spawn_safe`).
    """
    from distributed import Client

    if isinstance(client, Client):
        yield client
        return
    if client is not None and not isinstance(client, str):
        raise ValueError(f"client must be a distributed.Client, a scheduler address or None, got {client!r}")
    address = client or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if address:
        check_tls(address, security)
        log.info("connecting to the Dask scheduler at %s", address)
        with Client(address, security=security, set_as_default=False) as c:
            try:
                yield c
            finally:
                _release(c)
        return
    from distributed import LocalCluster

    if processes:
        check_spawn_safe()
    n = n_workers or max(1, min(os.cpu_count() or 1, 4))
    extra = {"silence_logs": logging.CRITICAL} if quiet else {}
    # Dask's own defaults listen on every interface for the dashboard (":0"), and for the HTTP server of a worker
    # in this process; worker processes and the scheduler's TCP port go where ``host`` says (in-process ones
    # talk through memory, "inproc://", which takes no host)
    where = {"host": LOOPBACK} if processes else {"worker_dashboard_address": f"{LOOPBACK}:0"}
    with LocalCluster(n_workers=n, threads_per_worker=threads_per_worker, processes=processes,
                      memory_limit=memory_limit, dashboard_address=f"{LOOPBACK}:0", **where, **extra) as cluster, \
            Client(cluster, set_as_default=False) as c:
        _EMBEDDED.add(cluster)
        log.info("started an embedded LocalCluster with %d workers; dashboard: %s", n, dashboard_link(c))
        try:
            yield c
        except Exception:
            _stop_heartbeats(c)
            raise
        _stop_heartbeats(c)


_EMBEDDED: weakref.WeakSet = weakref.WeakSet()
"""The clusters :func:`connect` started (their dashboards listen on :data:`LOOPBACK`)."""


def dashboard_link(client: Client) -> str:
    """The address of ``client``'s dashboard as a browser on this machine reaches it.

    Dask's own link names the scheduler's host, which for an in-process cluster
    is this machine's network address; the embedded cluster's dashboard listens
    on :data:`LOOPBACK` only, so its link names that.  Any other cluster's link
    is Dask's.
    """
    from urllib.parse import urlsplit

    link = client.dashboard_link
    if client.cluster is None or client.cluster not in _EMBEDDED:
        return link
    parts = urlsplit(link)
    return parts._replace(netloc=f"{LOOPBACK}:{parts.port}").geturl() if parts.port else link


def _release(client: Client, timeout: float = 0.5) -> None:
    """Let the scheduler forget this client's futures before it closes.

    Closing a client that still holds futures makes the scheduler cancel them
    and write to the closing connection: a ``CommClosedError`` traceback in
    the scheduler's log per connection.  Futures that are garbage are released
    here, and the release reaches the scheduler (a round trip) first.
    """
    import gc
    import time

    gc.collect()
    deadline = time.monotonic() + timeout
    while client.futures and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        client.sync(client.scheduler.identity)    # the batched release is sent before this reply
    except Exception:  # noqa: BLE001 - a lost scheduler: closing is all that is left
        pass


HEARTBEAT_WAIT = 10.0
"""Seconds a closing embedded cluster waits for a heartbeat on its way to come back."""


def _stop_heartbeats(client: Client) -> None:
    """Stop the embedded cluster's heartbeats, and let those on their way come back, before it closes.

    A closing worker drops its connections, among them one that may carry a
    heartbeat waiting for the scheduler's reply; the worker then logs "Failed
    to communicate with scheduler during heartbeat" with a traceback at the
    end of a job that went well (dask/distributed#7105).  A worker sends one
    every 0.5 s, so it happens when the scheduler answers slowly: on a loaded
    machine, a README example's second run printed it.  Not done when the job
    is interrupted: the cluster closes at once.
    """
    try:
        client.run(_quiesce_heartbeat)
    except Exception:  # noqa: BLE001 - a worker already gone: closing is all that is left
        pass


async def _quiesce_heartbeat(dask_worker, timeout: float = HEARTBEAT_WAIT) -> None:
    """On a worker: no new heartbeat, and none in flight (at most ``timeout`` seconds)."""
    import asyncio
    import time

    beat = dask_worker.periodic_callbacks.get("heartbeat")
    if beat is not None:
        beat.stop()
    deadline = time.monotonic() + timeout
    while dask_worker.rpc.active and time.monotonic() < deadline:     # connections in use: the heartbeat's
        await asyncio.sleep(0.01)


def check_tls(address: str, security: Security | None) -> None:
    """Refuse a ``tls://`` address without a client certificate, saying how to give one.

    (Dask itself fails later with a ``TypeError`` about a missing ``ssl_context``.)
    """
    if not address.startswith("tls://"):
        return
    from distributed.security import Security

    tls = (security or Security()).get_tls_config_for_role("client")
    if not (tls.get("ca_file") and tls.get("cert")):
        raise ValueError(f"{address} is a TLS scheduler but no client certificate is configured: pass "
                         "security=Security(tls_ca_file=..., tls_client_cert=..., tls_client_key=...), or set "
                         "Dask's distributed.comm.tls.ca-file, .client.cert and .client.key (environment: "
                         "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, "
                         "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY)")


def check_spawn_safe() -> None:
    """Refuse to start worker processes from a script's unguarded top-level code.

    Dask's worker processes are *spawned*: each imports the main script again
    (as ``__mp_main__``), running every top-level statement that is not under
    ``if __name__ == "__main__":``.  Code there that starts a cluster (an
    ingest, a training run) would run once per worker and fail with ~80 lines
    about a nanny that failed to start.  This is checked before any process
    starts: in a worker process, or when the main script's top-level line that
    led here is not under the guard, :class:`UnguardedScriptError` says what to
    write.  Interactive sessions, ``python -c`` and notebooks are not affected.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    line = _main_line(path) if path else None
    if line is None:             # not called from the main script's top level (a function, a notebook, -c)
        return
    if getattr(main, "__name__", None) == "__mp_main__" or not _guarded(path, line):
        raise UnguardedScriptError(_unguarded(path))


def _unguarded(path: str) -> str:
    return (f"{path} starts Dask worker processes from top-level code, which they re-run when they import the "
            "script: put that code under `if __name__ == \"__main__\":` (or pass client=, a running "
            "scheduler's address)")


def _main_line(path: str) -> int | None:
    """The line of the main script's top-level code being executed, if the call comes from there."""
    target = os.path.realpath(path)
    frame = sys._getframe(1)
    line = None
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and os.path.realpath(code.co_filename) == target:
            line = frame.f_lineno
        frame = frame.f_back
    return line


def _guarded(path: str, line: int) -> bool:
    """Whether ``line`` of the script at ``path`` is in the body of an ``if __name__ == "__main__":``."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return True            # cannot tell: do not stand in the way
    body, top = tree.body, True
    while True:
        stmt = next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if stmt is None:          # the line is in the header of the enclosing statement (or nowhere)
            return top
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
            return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in stmt.body)
        inner = [getattr(stmt, name, None) or [] for name in ("body", "orelse", "finalbody", "handlers")]
        body, top = [s for block in inner for s in block if hasattr(s, "lineno")], False


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1
