"""The rollout's hot path: which version a request naming none goes to, what each version's
requests did in the current window, and shadow traffic.

Routing. A request naming no version goes to the candidate when its unit hash is below the
candidate's share: the hash of its route key (`X-Inferd-Route-Key`) when it has one, so a key
sees one version for the whole rollout and raising the share from 5% to 20% moves only the
keys hashed in [0.05, 0.20); a request without a key is drawn at random. A request naming a
version gets that version. While the candidate's share is under half and the rollout holds a
baseline (a second instance of the stable version, loaded for the rollout), the baseline
takes the next slice of the same size: keys in [share, 2 x share). The stable version it
copies answers the rest.

Windows. Each version's requests in the current analysis window are counted (failures: every
error answer but shedding's 4290, latency, queue time; the baseline's apart from the stable
version's); the windows start and end together, so the judge always compares two samples of
the same minutes, and, with a baseline, two of the same share of traffic.

Shadow traffic. `shadow_percent` of the requests routed to the stable version also run on the
candidate, in the background, after the client's answer is computed (never delaying or
failing it), and the two answers are compared (inferd.engine.requests.agreement). Shadow work is the
first shed: none while anything waits in either version's queue; and it runs as background
work (inferd.runtime.priority).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from inferd.engine.rollout.judge import Sample, Shadowed
from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.rollout.statistics import quantile
from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version
from inferd.observability.observer import Observer, Routed, ShadowOutcome, notify
from inferd.runtime import priority

MAX_SAMPLES = 100_000
"""Latency samples kept per version and window (past it, a uniform subset: reservoir)."""
MAX_SHADOWS = 4
"""Mirrored requests running at once; over it, more are shed."""
BASELINE = 0
"""The baseline's window key in place of a version number (versions start at 1)."""

T = TypeVar("T")


@dataclass
class Window:
    """One version's requests in the current analysis window."""

    requests: int = 0
    failures: int = 0
    latencies: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)

    def add(self, failed: bool, latency_s: float, queue_s: float, draw: random.Random) -> None:
        self.requests += 1
        self.failures += failed
        if len(self.latencies) < MAX_SAMPLES:
            self.latencies.append(latency_s)
            self.queue.append(queue_s)
            return
        slot = draw.randrange(self.requests)  # each request kept with the same chance
        if slot < MAX_SAMPLES:
            self.latencies[slot], self.queue[slot] = latency_s, queue_s

    def sample(self) -> Sample:
        return Sample(self.requests, self.failures, tuple(self.latencies), tuple(self.queue))

    def facts(self) -> dict[str, float]:
        rate = self.failures / self.requests if self.requests else 0.0
        return {
            "requests": self.requests,
            "error_rate": round(rate, 4),
            "p99_ms": round(quantile(self.latencies, 0.99) * 1000, 2),
            "queue_p99_ms": round(quantile(self.queue, 0.99) * 1000, 2),
        }


@dataclass
class Agreement:
    """The shadowed requests of a window: how many were compared, their mean agreement."""

    compared: int = 0
    total: float = 0.0

    def add(self, value: float) -> None:
        self.compared += 1
        self.total += value

    @property
    def mean(self) -> float:
        return self.total / self.compared if self.compared else 1.0

    def shadowed(self) -> Shadowed:
        return Shadowed(self.compared, self.mean)

    def facts(self) -> dict[str, float]:
        return {"compared": self.compared, "mean": round(self.mean, 4)}


def unit_hash(model: str, key: str) -> float:
    """A key's place in [0, 1), the same on every server and every restart."""
    digest = hashlib.blake2b(f"{model}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Router:
    def __init__(self, registry: Registry, policy: ServingPolicy, observer: Observer) -> None:
        self._registry = registry
        self._policy = policy
        self._observer = observer
        self._windows: dict[tuple[str, int], Window] = {}
        self._agreements: dict[str, Agreement] = {}
        self._shadows: set[asyncio.Task[None]] = set()
        self._random = random.Random()
        self.baselines: dict[str, Version] = {}
        """Model -> its rollout's baseline (the controller loads and closes them)."""

    def baseline_share(self, model: str, weight: float) -> float:
        """The baseline's share of requests naming no version: the candidate's while that is
        under half and the baseline serves, else 0."""
        baseline = self.baselines.get(model)
        return weight if weight < 0.5 and baseline is not None and baseline.ready else 0.0

    def baselined(self, model: str, weight: float) -> bool:
        """Whether the candidate (at `weight`) is judged against the baseline, which then
        takes as much of the traffic, not against the stable version."""
        return self.baseline_share(model, weight) > 0

    def baseline(self, model: str) -> Version | None:
        return self.baselines.get(model)

    def choose(self, model: str, key: str | None) -> tuple[int, str] | None:
        """(version, "stable" | "canary" | "baseline") for a request naming no version (the
        baseline: the stable version's number, served by `baseline(model)`); None when the model
        has no rollout running, or one of its two versions does not serve."""
        record = self._policy.record(model)
        if record is None or not record.active:
            return None
        versions = self._registry.versions_map(model)
        stable, candidate = versions.get(record.stable), versions.get(record.candidate)
        if stable is None or candidate is None or not (stable.ready and candidate.ready):
            return None
        place = unit_hash(model, key) if key else self._random.random()
        if place < record.weight:
            return record.candidate, "canary"
        if place < record.weight + self.baseline_share(model, record.weight):
            return record.stable, "baseline"
        return record.stable, "stable"

    def record(
        self,
        model: str,
        version: int,
        failed: bool,
        latency_s: float,
        queue_s: float,
        route: str | None,
    ) -> None:
        """A request's outcome (`failed`: an error answer other than shedding), counted in
        its version's window while the model's rollout runs."""
        record = self._policy.record(model)
        if record is None or not record.active:
            return
        if version not in (record.stable, record.candidate):
            return
        key = BASELINE if route == "baseline" else version
        self.window(model, key).add(failed, latency_s, queue_s, self._random)
        if route is not None:
            notify(self._observer, Routed(model, str(version), route, failed))

    def shadow_target(self, model: str, shadow_percent: float) -> Version | None:
        """The candidate, when this (stable-routed) request is drawn to be mirrored to it:
        `shadow_percent` of them, none while anything waits in either version's queue
        (shadow work is the first shed) or `MAX_SHADOWS` mirrors run."""
        record = self._policy.record(model)
        if record is None or not record.active:
            return None
        if shadow_percent <= 0 or self._random.random() * 100 >= shadow_percent:
            return None
        versions = self._registry.versions_map(model)
        stable, candidate = versions.get(record.stable), versions.get(record.candidate)
        if stable is None or candidate is None or not (stable.ready and candidate.ready):
            return None
        queued = stable.servable.holder.queued_items + candidate.servable.holder.queued_items
        if queued > 0 or len(self._shadows) >= MAX_SHADOWS:
            notify(self._observer, ShadowOutcome(model, "shed", None))
            return None
        return candidate

    def mirror(self, model: str, work: Awaitable[T], agree: Callable[[T], float]) -> None:
        """Runs `work` (the request, on the candidate) in the background, outside the client's
        request (its own context: the request's trace is not touched), and records how far
        its answer agrees (a failure agrees not at all)."""

        async def shadow() -> None:
            priority.background()  # its batches run on the candidate's lowest-priority threads
            try:
                value = agree(await work)
                outcome = "compared"
            except Exception:
                value, outcome = 0.0, "failed"
            agreement = self.agreement(model)
            agreement.add(value)
            notify(self._observer, ShadowOutcome(model, outcome, agreement.mean))

        task = asyncio.get_running_loop().create_task(shadow(), context=contextvars.Context())
        self._shadows.add(task)
        task.add_done_callback(self._shadows.discard)

    # -- the controller's view -----------------------------------------------------------------

    def window(self, model: str, version: int) -> Window:
        return self._windows.setdefault((model, version), Window())

    def agreement(self, model: str) -> Agreement:
        return self._agreements.setdefault(model, Agreement())

    def reset(self, model: str, versions: tuple[int, ...]) -> None:
        """A new window for both versions and the baseline (and the shadow comparisons) at
        once."""
        self._agreements[model] = Agreement()
        for version in (*versions, BASELINE):
            self._windows[(model, version)] = Window()

    async def close(self) -> None:
        for task in list(self._shadows):
            task.cancel()
        await asyncio.gather(*self._shadows, return_exceptions=True)
