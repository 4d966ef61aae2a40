"""Which work runs first when the cores are all busy.

Four levels, as Linux thread niceness: the event loop (0: it reads sockets and answers, so
refusals and probes keep flowing under overload), the runtime threads that serve clients
(`SERVING_NICENESS`), those that serve a client flooding a queue beside lighter ones
(`YIELDING_NICENESS`), and background work (`BACKGROUND_NICENESS`: shadow traffic in a
rollout, jobs), which takes only the CPU the others leave.

Background work is marked by a context variable: code that starts it calls `background()`
in its own task, a batcher copies the mark onto what it queues, and a batch made only of
background items runs on the pool's background threads.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading

SERVING_NICENESS = 10
"""How much lower (Linux nice) the runtime threads serving clients run than the event loop."""
BACKGROUND_NICENESS = 19
"""The lowest, with SCHED_IDLE on Linux: background runtime threads get a core only when
serving threads leave it."""

YIELDING_NICENESS = 18
"""A batch of the client that floods a queue while lighter clients wait in it
(inferd.batching.fairness), with SCHED_IDLE on Linux: a light client's batch running beside
it gets the core and so runs in about the time it takes alone, while the flood takes whatever
the others leave, its fair share. Nice 18 alone left the flood's two batches a quarter of the
core (Linux gives a nice-10 thread about six times a nice-18 one's share): in one A/B run
of `benchmarks/overload_bench.py fairness --seconds 60` the steady key's p99 beside a flood
was 2.2x its p99 alone (159 ms against 72) at nice 18, 1.6x (118 against 75) in the idle
class, the flood's goodput the same. The idle class has one weight whatever the niceness:
the flood and background work (shadow traffic, jobs) share what serving leaves."""

_background: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "inferd_background", default=False
)
_yielding: contextvars.ContextVar[bool] = contextvars.ContextVar("inferd_yielding", default=False)


def background() -> None:
    """Marks the calling task's work (and what it queues) as background work."""
    _background.set(True)


def in_background() -> bool:
    return _background.get()


def yielding() -> bool:
    """Whether the current work is a flooding client's batch (`YIELDING_NICENESS`)."""
    return _yielding.get()


def context(background_work: bool, yielding_work: bool = False) -> contextvars.Context:
    """A copy of the current context, marked as background work or not, and as a flooding
    client's batch (`YIELDING_NICENESS`) or not."""
    copied = contextvars.copy_context()
    copied.run(_background.set, background_work)
    copied.run(_yielding.set, yielding_work)
    return copied


def lower_thread(niceness: int) -> None:
    """Lowers the calling thread's priority to `niceness` (Linux; per thread). Elsewhere
    setpriority would lower the whole process, so nothing is done. The yielding and
    background levels also put the thread in Linux's SCHED_IDLE class: it then runs only on a
    core nothing else wants (a nice-19 thread alone still takes about 1/7 of a core from a
    serving one)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
        if niceness >= YIELDING_NICENESS:
            with contextlib.suppress(OSError, AttributeError):
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
