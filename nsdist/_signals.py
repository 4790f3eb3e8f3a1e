"""SIGTERM as an interrupt: how a command stopped by a scheduler or a container ends cleanly.

A batch scheduler's time limit, ``timeout``, ``kill`` and a stopping container send SIGTERM
(then, after a grace period, SIGKILL).  Python's default ends the process on the spot: no
``finally`` block runs, so a half-written output's staging directory stays beside it and an
embedded cluster's workers linger.  :func:`terminate_as_interrupt` makes SIGTERM unwind the
command as Ctrl-C does.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["Terminated", "terminate_as_interrupt", "TERMINATED_STATUS"]

#: the exit status of a command ended by SIGTERM (128 + 15, as a shell reports it)
TERMINATED_STATUS = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where Ctrl-C raises :class:`KeyboardInterrupt`."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread, as Ctrl-C raises
    :class:`KeyboardInterrupt`, instead of ending the process on the spot: the command unwinds, so its staging
    directory is removed (:func:`~nsdist.data.fs.staging_directory`), its embedded cluster's worker processes
    are closed and a checkpoint already written stays for ``--resume``.  A second SIGTERM ends the process at
    once (the default action is back once the first is raised).  Outside the main thread (a command run from
    another thread) signals cannot be caught, and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
