"""SIGTERM as an interrupt: how a command stopped by a scheduler or a container ends cleanly.

A batch scheduler's time limit, ``timeout``, ``kill`` and a stopping container send SIGTERM
(then, after a grace period, SIGKILL).  Python's default ends the process on the spot: no
``finally`` block runs, so a half-written output's staging directory stays beside it and an
embedded cluster's workers linger.  :func:`terminate_as_interrupt` makes SIGTERM unwind the
command as Ctrl-C does, and neither is lost where Python only prints an exception.
"""
from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator

__all__ = ["Terminated", "terminate_as_interrupt", "TERMINATED_STATUS"]

#: how long after a swallowed interrupt it is delivered again: time for the main thread to leave the hook
REDELIVERY_SECONDS = 0.01

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
    another thread) signals cannot be caught, and nothing changes.

    Python runs a signal's handler in whatever Python code the main thread is in.  When that is a garbage
    collector's callback (``distributed`` installs one), a ``__del__`` method or a weakref's callback, the
    raised exception is only printed ("Exception ignored in ...") and the command would go on to the end.  So
    the block also takes :data:`sys.unraisablehook`: a swallowed :class:`Terminated`, or a swallowed Ctrl-C's
    :class:`KeyboardInterrupt`, is not printed but delivered again (:func:`_thread.interrupt_main`, from a
    thread, :data:`REDELIVERY_SECONDS` later) and raised in the next ordinary code the main thread runs, or as
    the block ends if that comes first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    swallowed: set[int] = set()          # the signals whose exception was only printed: to be delivered again
    delivering = threading.Lock()        # (once the block has ended, nothing is delivered)
    ours = {signal.SIGTERM} | ({signal.SIGINT} if signal.getsignal(signal.SIGINT) is signal.default_int_handler
                               else set())

    def interrupt(signum, frame):
        swallowed.discard(signum)
        if signum != signal.SIGTERM:
            raise KeyboardInterrupt()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated()

    def deliver_soon(signum: int) -> None:
        # neither from the main thread nor at once: either would run the handler right away, in the hook
        time.sleep(REDELIVERY_SECONDS)
        with delivering:
            if signum in swallowed:
                _thread.interrupt_main(signum)

    def deliver_again(unraisable) -> None:
        exc = unraisable.exc_value
        signum = signal.SIGTERM if isinstance(exc, Terminated) else \
            signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None
        if signum not in ours:
            previous_hook(unraisable)
            return
        swallowed.add(signum)
        signal.signal(signum, interrupt)
        threading.Thread(target=deliver_soon, args=(signum,), name="nsdist-interrupt", daemon=True).start()

    previous = {signum: signal.signal(signum, interrupt) for signum in ours}
    previous_hook, sys.unraisablehook = sys.unraisablehook, deliver_again
    try:
        yield
    finally:
        with delivering:
            left = set(swallowed)
            swallowed.clear()
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if left:                            # the block ended before the delivery came
        raise Terminated() if signal.SIGTERM in left else KeyboardInterrupt()
