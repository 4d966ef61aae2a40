"""Which instance takes a batch: the one expected to finish it first.

Each instance's speed is learned as seconds per element of input (an exponentially weighted
mean over its runs), and each knows the work given to it and not yet finished. A batch's
expected completion on an instance is the time that instance still needs for its backlog plus
the batch's own elements at its speed. A free instance is not always the answer: a slow CPU
instance beside a fast one, or a CPU beside a GPU, takes a batch only when it would still finish
first; so instances of unequal speed get batches in proportion to their speed under load, and
a lone batch goes to the fastest. An instance not yet measured counts as fast as the fastest
measured one, and wins a tie (so each gets measured). Pure bookkeeping: the pool does the running.

Instances of one device (`cpu-0` and `cpu-1`, `gpu0-0` and `gpu0-1`: one group's, named
`<device>-<n>`) learn one speed together, as the same session on the same device. Learned
apart, one slow run (a first run's warm-up, a wait behind its twin on a shared GPU) marked one
instance slow for good: never chosen again, it was never measured again, and every batch
queued behind its twin while it stood idle (the device idle between them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

SPEED_WEIGHT = 0.2
"""Weight of the newest run in an instance's learned speed."""


@dataclass(slots=True)
class InstanceLoad:
    """One instance's state and totals (its statistics and metrics read these)."""

    name: str
    kind: str
    seconds_per_element: float | None = None
    queued_elements: int = 0
    """Given to it and not finished (the running batch included)."""
    queued_batches: int = 0
    running_since: float | None = None
    running_elements: int = 0
    batches: int = 0
    elements: int = 0
    busy_s: float = 0.0
    failures: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "batches": self.batches,
            "elements": self.elements,
            "busy_ms": round(self.busy_s * 1000, 3),
            "queued_batches": self.queued_batches,
            "us_per_element": (
                None
                if self.seconds_per_element is None
                else round(self.seconds_per_element * 1e6, 4)
            ),
            "failures": self.failures,
        }


class LeastCompletion:
    def __init__(self, instances: Sequence[tuple[str, str]]) -> None:
        """`instances`: each one's (name, kind)."""
        self.loads = [InstanceLoad(name, kind) for name, kind in instances]
        devices: dict[tuple[str, str], list[InstanceLoad]] = {}
        for load in self.loads:
            devices.setdefault((load.kind, device_of(load.name)), []).append(load)
        self._twins = [devices[(load.kind, device_of(load.name))] for load in self.loads]
        """Each instance's device's instances (itself included): they share a speed."""

    def choose(self, elements: int, now: float | None = None, among: int | None = None) -> int:
        """The instance to give a batch of `elements` to (the caller then calls `given`);
        `among`: only the first so many instances compete."""
        loads = self.loads if among is None else self.loads[:among]
        if len(loads) == 1:
            return 0
        now = time.perf_counter() if now is None else now
        measured = [
            load.seconds_per_element for load in loads if load.seconds_per_element is not None
        ]
        # none measured yet: any one unit of time per element (the least queued work wins)
        fastest = min(measured, default=1.0)
        best, best_key = 0, (float("inf"), 0)
        for index, load in enumerate(loads):
            speed = fastest if load.seconds_per_element is None else load.seconds_per_element
            finish = self._backlog_s(load, speed, now) + speed * elements
            key = (finish, load.batches)  # a tie goes to the one that ran less (to measure it)
            if key < best_key:
                best, best_key = index, key
        return best

    @staticmethod
    def _backlog_s(load: InstanceLoad, speed: float, now: float) -> float:
        """What the instance still needs for the work it has: all of it at its speed, less
        what its running batch has had (never below the rest of the queue)."""
        backlog = speed * load.queued_elements
        if load.running_since is not None:
            done = min(now - load.running_since, speed * load.running_elements)
            backlog -= done
        return max(backlog, 0.0)

    def given(self, index: int, elements: int) -> None:
        load = self.loads[index]
        load.queued_elements += elements
        load.queued_batches += 1

    def started(self, index: int, elements: int, now: float | None = None) -> None:
        load = self.loads[index]
        load.running_since = time.perf_counter() if now is None else now
        load.running_elements = elements

    def finished(self, index: int, elements: int, seconds: float, ok: bool | None = True) -> None:
        """The batch left the instance: run (`ok`), failed, or never started (None: cancelled
        while it waited). Only a completed run teaches the instance's speed."""
        load = self.loads[index]
        load.queued_elements -= elements
        load.queued_batches -= 1
        load.running_since = None
        load.running_elements = 0
        load.busy_s += seconds
        if ok is None:
            return
        if not ok:
            load.failures += 1
            return
        load.batches += 1
        load.elements += elements
        if elements > 0:
            rate = seconds / elements
            previous = load.seconds_per_element
            speed = rate if previous is None else previous + SPEED_WEIGHT * (rate - previous)
            for twin in self._twins[index]:
                twin.seconds_per_element = speed


def device_of(name: str) -> str:
    """The device of an instance named `<device>-<n>` (the name itself otherwise)."""
    device, dash, number = name.rpartition("-")
    return device if dash and number.isdigit() else name
