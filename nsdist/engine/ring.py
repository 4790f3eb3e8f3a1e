"""The ring: the sequential chain's state handed from worker to worker, not through the scheduler.

A step task whose state was made on another worker waits for Dask's round trip: the scheduler hears
that step ``j`` is done, tells the next step's worker, and that worker fetches the state -- about 6 ms
here against a 20 ms step (``docs/engine.md`` §The ring).  In the ring, the steps of a segment are
dealt in turn to a fixed list of worker slots (:func:`ring_slots`).  Each step is a task of its own,
pinned to its slot and submitted without a dependency on the step before it
(:func:`nsdist.engine.chain.ring_step`): it loads its block, takes its state from its worker's
:class:`Mailbox`, steps, and sends the new state straight to the mailbox of the next step's worker -- one
message over Dask's own comms (about 1 ms).  The calls are those of a load task and a step task (``load_block``,
``step_block``), so the states are the same to the bit.

A slot's worker loads its next block while the others step, so on two one-thread workers each one
loads, waits for the state (usually there already), steps, sends it on, loads ...
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from distributed import WorkerPlugin, get_worker, rejoin, secede
from distributed.protocol import to_serialize
from distributed.utils import sync
from distributed.worker import thread_state

from .._faults import WorkLost
from ..solvers.kernel import SGDState

__all__ = ["Mailbox", "RingMailbox", "ring_slots", "send_state", "take_state", "RING_KEY", "HANDLER",
           "STALL_SECONDS", "TIMINGS"]

#: the Dask configuration key that turns the ring off (``dask.config.set({RING_KEY: False})``): the chain's
#: steps then hand their states on through the scheduler, as dependent tasks
RING_KEY = "nsdist.ring"
#: the name of the workers' comm handler that takes a state into their mailbox
HANDLER = "nsdist_ring_put"
#: a ring step that has waited this long for its state leaves its worker's thread pool (and rejoins it
#: when the state comes), so that two jobs' rings sharing a cluster cannot hold each other's threads
STALL_SECONDS = 1.0
#: how often a waiting ring step looks whether its task is still wanted (cancelled: the job failed or stopped)
_POLL_SECONDS = 0.05
#: what a ring step (:func:`nsdist.engine.chain.ring_step`) records of its step, wall-clock seconds
#: (``time.time``, comparable across the processes of one machine): ``ChainProgress.timings``
TIMINGS = ("load_start", "load_end", "state_arrived", "step_start", "step_end")


class Mailbox:
    """The states sent to one worker's ring steps, by ``(ring, step)``; a ring step waits here for its own."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._states: dict[tuple[str, int], tuple[SGDState, float]] = {}

    def put(self, ring: str, step: int, state: SGDState) -> None:
        with self._ready:
            self._states[(ring, step)] = (state, time.time())
            self._ready.notify_all()

    def handle(self, ring: str = "", step: int = -1, state: SGDState | None = None) -> str:
        """The comm handler :data:`HANDLER` (runs on the worker's event loop)."""
        self.put(ring, step, state)
        return "OK"

    def take(self, ring: str, step: int, wanted: Callable[[], bool]) -> tuple[SGDState, float]:
        """Wait for step ``step``'s state; return it and the time it arrived.  Raises :class:`WorkLost` once
        ``wanted()`` is False (the task was cancelled: the job failed or stopped); after
        :data:`STALL_SECONDS` the wait leaves the worker's thread pool."""
        since, seceded = time.monotonic(), False
        try:
            while True:
                with self._ready:
                    item = self._states.pop((ring, step), None)
                    if item is None:
                        self._ready.wait(_POLL_SECONDS)
                        item = self._states.pop((ring, step), None)
                if item is not None:
                    return item
                if not wanted():
                    self.drop(ring)
                    raise WorkLost(f"ring step {step + 1} cancelled while it waited for its state")
                if not seceded and time.monotonic() - since > STALL_SECONDS:
                    secede()
                    seceded = True
        finally:
            if seceded:
                rejoin()

    def drop(self, ring: str) -> None:
        """Forget the states sent to ``ring``'s steps that none took (a ring given up)."""
        with self._ready:
            for key in [k for k in self._states if k[0] == ring]:
                del self._states[key]


class RingMailbox(WorkerPlugin):
    """Gives every worker, those that join later too, a :class:`Mailbox` and the handler :data:`HANDLER` that
    fills it.  Registering it again keeps the mailboxes a worker has (another job's ring may be using them)."""

    name = "nsdist-ring"
    idempotent = True

    def setup(self, worker) -> None:
        if not isinstance(worker.extensions.get(self.name), Mailbox):
            worker.extensions[self.name] = Mailbox()
        worker.handlers[HANDLER] = worker.extensions[self.name].handle


def ring_slots(workers: dict[str, dict], n: int) -> list[str]:
    """The ring's slots: worker addresses in turn, one slot per thread, at most ``n`` (each slot holds one block
    at a time); fewer than two slots make no ring (``[]``).  ``workers``: ``client.scheduler_info()["workers"]``."""
    threads = {address: max(1, int(info.get("nthreads", 1))) for address, info in sorted(workers.items())}
    slots = [address for t in range(max(threads.values(), default=0)) for address, k in threads.items() if k > t]
    slots = slots[:n]
    return slots if len(slots) >= 2 else []


def send_state(address: str, ring: str, step: int, state: SGDState) -> None:
    """Put ``state`` in the mailbox of the worker at ``address`` for ``ring``'s step ``step`` (runs in a task, on
    a worker); :class:`WorkLost` if that worker is gone."""
    worker = get_worker()
    if address == worker.address:
        worker.extensions[RingMailbox.name].put(ring, step, state)
        return

    async def put() -> object:
        return await getattr(worker.rpc(address), HANDLER)(ring=ring, step=step, state=to_serialize(state))

    try:
        answer = sync(worker.loop, put)
    except Exception as exc:  # the next worker is gone or unreachable: the driver redoes the steps
        raise WorkLost(f"ring step {step + 1}'s state could not be sent to {address}: {exc}") from exc
    if answer != "OK":        # (a worker without the mailbox answers None: the state would be lost)
        raise WorkLost(f"ring step {step + 1}'s state was not taken by {address} (it has no mailbox)")


def take_state(ring: str, step: int) -> tuple[SGDState, float]:
    """The state sent for ``ring``'s step ``step`` to this worker (runs in that step's task), and when it came:
    :meth:`Mailbox.take`, given up if the task is cancelled."""
    worker, key = get_worker(), thread_state.key

    def wanted() -> bool:
        ts = worker.state.tasks.get(key)
        return ts is not None and ts.state in ("executing", "long-running")

    return worker.extensions[RingMailbox.name].take(ring, step, wanted)
