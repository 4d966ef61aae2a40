"""Rollouts: a candidate version beside the stable one, its share of traffic raised step by
step, each step judged against the stable version; promoted when the last step passes, rolled
back at once when one fails.

Routing. A request naming no version goes to the candidate when its unit hash is below the
candidate's share: the hash of its route key (`X-Inferd-Route-Key`) when it has one, so a key
sees one version for the whole rollout and raising the share from 5% to 20% moves only the
keys hashed in [0.05, 0.20); a request without a key is drawn at random. A request naming a
version gets that version.

Judging. Each version's requests in the current window are counted: failures (every error
answer but shedding's 4290: both versions share their clients, so a client's mistakes fall on
both alike), latency, queue time. Once the candidate has `min_requests` in a window, a failure
rate over the stable one's by more than `max_error_rate_increase` rolls back at once, and so
does a mean agreement of shadowed answers under `min_agreement`; at the window's end, p99
latency over `max_latency_ratio` times the stable one's (and over it by more than
`latency_slack_ms`), or p99 queue time over it by more than `max_queue_increase_ms`, rolls
back; otherwise the step passes. A window with too few candidate requests holds its step, and
says so. When the stable version has too little traffic in a window (late steps), the last
window where it had enough is the reference.

Shadow traffic. `shadow_percent` of the requests routed to the stable version also run on the
candidate, in the background, after the client's answer is computed (never delaying or
failing it), and the two answers are compared (inferd.engine.agreement). Shadow work is the
first shed: none while anything waits in either version's queue; and it runs as background
work (inferd.runtime.priority): its batches take the cores only when serving work leaves them.

Every decision is a log line, a metric and an entry in the rollout's state, which is kept in
`<repository>/.inferd/rollouts/<model>.json` and taken up again at start: a running rollout
resumes its step, a promoted candidate keeps serving (a pinned version policy
notwithstanding), a rolled-back one stays out of traffic until a new rollout names it.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import hashlib
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson

from inferd.config.model import RolloutConfig
from inferd.engine.loader import Loader
from inferd.engine.registry import Registry
from inferd.engine.version import Version
from inferd.errors import InferdError, InvalidInputError, NotFoundError
from inferd.observability.observer import Observer, notify
from inferd.repository.scan import scan_model
from inferd.runtime import priority

log = logging.getLogger(__name__)

STATE_FOLDER = Path(".inferd") / "rollouts"
MAX_SAMPLES = 100_000
"""Latency samples kept per version and window (the newest)."""
DECISIONS_KEPT = 50
MAX_SHADOWS = 4
"""Mirrored requests running at once; over it, more are shed."""

T = TypeVar("T")


class Status(enum.StrEnum):
    RUNNING = "running"
    HOLDING = "holding"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"


ACTIVE = (Status.RUNNING, Status.HOLDING)


@dataclass
class Window:
    """One version's requests in the current analysis window."""

    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)

    def add(self, failed: bool, latency_s: float, queue_s: float) -> None:
        self.requests += 1
        self.errors += failed
        if len(self.latencies) < MAX_SAMPLES:
            self.latencies.append(latency_s)
            self.queue.append(queue_s)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def p99(self, values: list[float]) -> float:
        return float(np.percentile(values, 99)) if values else 0.0

    def facts(self) -> dict[str, float]:
        return {
            "requests": self.requests,
            "error_rate": round(self.error_rate, 4),
            "p99_ms": round(self.p99(self.latencies) * 1000, 2),
            "queue_p99_ms": round(self.p99(self.queue) * 1000, 2),
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


@dataclass
class Rollout:
    model: str
    stable: int
    candidate: int
    steps: tuple[float, ...]
    step: int = 0
    status: Status = Status.RUNNING
    reason: str = ""
    window_started: float = field(default_factory=time.time)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def weight(self) -> float:
        """The candidate's share of requests naming no version (0 to 1)."""
        return self.steps[self.step] / 100 if self.status in ACTIVE else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value, "weight": self.weight}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rollout:
        data = {k: v for k, v in data.items() if k != "weight"}
        return cls(**{**data, "status": Status(data["status"]), "steps": tuple(data["steps"])})


def unit_hash(model: str, key: str) -> float:
    """A key's place in [0, 1), the same on every server and every restart."""
    digest = hashlib.blake2b(f"{model}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Rollouts:
    def __init__(
        self, registry: Registry, loader: Loader, observer: Observer, root: Path | None
    ) -> None:
        self._registry = registry
        self._loader = loader
        self._observer = observer
        self._folder = root / STATE_FOLDER if root is not None else None
        self._rollouts: dict[str, Rollout] = {}
        self._windows: dict[tuple[str, int], Window] = {}
        self._reference: dict[str, Window] = {}
        """Per model: the stable version's last window with enough requests."""
        self._agreements: dict[str, Agreement] = {}
        self._tried: dict[str, set[int]] = {}
        """Per model: the versions an automatic rollout was started for (or tried)."""
        self._shadows: set[asyncio.Task[None]] = set()
        self._random = random.Random()
        self._changes = asyncio.Lock()

    # -- the data path -------------------------------------------------------------------------

    def choose(self, model: str, key: str | None) -> tuple[int, str] | None:
        """(version, "stable" | "canary") for a request naming no version; None when the model
        has no rollout running, or one of its two versions does not serve."""
        rollout = self._rollouts.get(model)
        if rollout is None or rollout.status not in ACTIVE:
            return None
        versions = self._registry.versions_map(model)
        stable, candidate = versions.get(rollout.stable), versions.get(rollout.candidate)
        if stable is None or candidate is None or not (stable.ready and candidate.ready):
            return None
        place = unit_hash(model, key) if key else self._random.random()
        if place < rollout.weight:
            return rollout.candidate, "canary"
        return rollout.stable, "stable"

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
        rollout = self._rollouts.get(model)
        if rollout is None or rollout.status not in ACTIVE:
            return
        if version not in (rollout.stable, rollout.candidate):
            return
        self._window(model, version).add(failed, latency_s, queue_s)
        if route is not None:
            notify(self._observer.on_routed, model, str(version), route, failed)

    def shadow_target(self, model: str) -> Version | None:
        """The candidate, when this (stable-routed) request is drawn to be mirrored to it: the
        rollout's `shadow_percent` of them, none while anything waits in either version's
        queue (shadow work is the first shed) or `MAX_SHADOWS` mirrors run."""
        rollout = self._rollouts.get(model)
        if rollout is None or rollout.status not in ACTIVE:
            return None
        config = self._config(model)
        if config.shadow_percent <= 0 or self._random.random() * 100 >= config.shadow_percent:
            return None
        versions = self._registry.versions_map(model)
        stable, candidate = versions.get(rollout.stable), versions.get(rollout.candidate)
        if stable is None or candidate is None or not (stable.ready and candidate.ready):
            return None
        queued = stable.servable.holder.queued_items + candidate.servable.holder.queued_items
        if queued > 0 or len(self._shadows) >= MAX_SHADOWS:
            notify(self._observer.on_shadow, model, "shed", None)
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
            agreement = self._agreements.setdefault(model, Agreement())
            agreement.add(value)
            notify(self._observer.on_shadow, model, outcome, agreement.mean)

        task = asyncio.get_running_loop().create_task(shadow(), context=contextvars.Context())
        self._shadows.add(task)
        task.add_done_callback(self._shadows.discard)

    def _window(self, model: str, version: int) -> Window:
        return self._windows.setdefault((model, version), Window())

    # -- the admin's actions ---------------------------------------------------------------------

    def split(self, model: str) -> dict[str, Any] | None:
        """A running rollout's versions and the candidate's share (None when none runs)."""
        rollout = self._rollouts.get(model)
        if rollout is None or rollout.status not in ACTIVE:
            return None
        return {
            "stable": rollout.stable,
            "candidate": rollout.candidate,
            "weight": rollout.weight,
            "status": rollout.status.value,
        }

    def status(self, model: str) -> dict[str, Any]:
        rollout = self._rollouts.get(model)
        if rollout is None:
            raise NotFoundError(f"model '{model}' has no rollout")
        state = rollout.as_dict()
        state["window"] = {
            "stable": self._window(model, rollout.stable).facts(),
            "candidate": self._window(model, rollout.candidate).facts(),
            "elapsed_s": round(time.time() - rollout.window_started, 1),
            "agreement": self._agreement_facts(model),
        }
        return state

    async def start(self, model: str, to: int | None) -> dict[str, Any]:
        """Loads the candidate (`to`, else the newest version folder above the serving one)
        beside the stable version and gives it the first step's share. A candidate that does
        not load never takes traffic: the answer says why."""
        async with self._changes:
            current = self._rollouts.get(model)
            if current is not None and current.status in ACTIVE:
                raise InvalidInputError(
                    f"model '{model}' already has a rollout of version {current.candidate} "
                    "running; promote, roll back or abort it first"
                )
            stable = self._registry.resolve(model)
            stable.ensure_ready()
            config = stable.config.rollout
            if to is None:
                to = await asyncio.to_thread(self._newest_folder, model)
                if to <= stable.version:
                    raise InvalidInputError(
                        f"model '{model}' has no version folder above {stable.version}"
                    )
            candidate = to
            if candidate == stable.version:
                raise InvalidInputError(f"version {candidate} of '{model}' is the one serving")
            await self._loader.add_version(model, candidate)
            rollout = Rollout(model, stable.version, candidate, config.steps)
            self._rollouts[model] = rollout
            self._reset_windows(rollout)
            self._decide(rollout, "start", f"version {candidate} beside {stable.version}")
        return self.status(model)

    async def promote(self, model: str) -> dict[str, Any]:
        async with self._changes:
            rollout = self._active(model)
            await self._promote(rollout, "promoted by the admin")
        return self.status(model)

    async def rollback(self, model: str, abort: bool = False) -> dict[str, Any]:
        async with self._changes:
            rollout = self._active(model)
            if abort:
                await self._end(rollout, Status.ABORTED, "abort", "aborted by the admin")
            else:
                await self._end(rollout, Status.ROLLED_BACK, "rollback", "rolled back by the admin")
        return self.status(model)

    def _active(self, model: str) -> Rollout:
        rollout = self._rollouts.get(model)
        if rollout is None or rollout.status not in ACTIVE:
            raise NotFoundError(f"model '{model}' has no rollout running")
        return rollout

    def _newest_folder(self, model: str) -> int:
        """The highest version folder with a model file (0: none); reads the folder."""
        entry = self._registry.entries.get(model)
        if entry is None:
            raise NotFoundError(f"unknown model '{model}'")
        return max((v.version for v in scan_model(entry.folder).available), default=0)

    async def watch(self, every_s: float) -> None:
        """Every `every_s`, starts a rollout for each model whose config asks for it
        (`rollout.auto`) and whose folder has a version newer than the one serving, tried
        once (a rolled-back one, or one that did not load, is not tried again)."""
        while True:
            await asyncio.sleep(every_s)
            for model in self._registry.models():
                try:
                    await self._start_newest(model)
                except Exception as exc:  # one model's fault must not stop the watch
                    log.error(
                        "automatic rollout not started",
                        extra={"model": model, "reason": getattr(exc, "message", str(exc))},
                    )

    async def _start_newest(self, model: str) -> None:
        config = self._registry.config_of(model)
        if config is None or not config.rollout.auto:
            return
        current = self._rollouts.get(model)
        if current is not None and current.status in ACTIVE:
            return
        serving = self._registry.resolve(model)
        if not serving.ready:
            return
        newest = await asyncio.to_thread(self._newest_folder, model)
        tried = self._tried.setdefault(model, set())
        if newest <= serving.version or newest in tried:
            return
        if current is not None and current.candidate == newest:
            return  # its rollout ended (rolled back, aborted): a new one is the admin's call
        tried.add(newest)
        log.info(
            "new version folder: starting a rollout", extra={"model": model, "version": newest}
        )
        await self.start(model, newest)

    # -- the controller ----------------------------------------------------------------------------

    async def run(self, tick_s: float = 0.25) -> None:
        """Judges every running rollout every `tick_s` (until cancelled)."""
        while True:
            await asyncio.sleep(tick_s)
            for rollout in list(self._rollouts.values()):
                if rollout.status not in ACTIVE:
                    continue
                try:
                    async with self._changes:
                        await self._judge(rollout)
                except Exception:  # a fault judging one rollout must not stop the others
                    log.exception("judging a rollout failed", extra={"model": rollout.model})

    async def _judge(self, rollout: Rollout) -> None:
        if rollout.status not in ACTIVE:
            return
        config = self._config(rollout.model)
        candidate = self._window(rollout.model, rollout.candidate)
        stable = self._window(rollout.model, rollout.stable)
        if stable.requests >= config.min_requests:
            self._reference[rollout.model] = stable
        reference = self._reference.get(rollout.model, stable)
        if candidate.requests >= config.min_requests:
            over = candidate.error_rate - reference.error_rate
            if over > config.max_error_rate_increase:
                await self._end(
                    rollout,
                    Status.ROLLED_BACK,
                    "rollback",
                    f"error rate {candidate.error_rate:.1%} against {reference.error_rate:.1%} "
                    f"(allowed +{config.max_error_rate_increase:.1%})",
                )
                return
        agreement = self._agreements.get(rollout.model, Agreement())
        if agreement.compared >= config.min_requests and agreement.mean < config.min_agreement:
            await self._end(
                rollout,
                Status.ROLLED_BACK,
                "rollback",
                f"agreement {agreement.mean:.1%} with the stable version over "
                f"{agreement.compared} shadowed requests (at least {config.min_agreement:.0%} "
                "needed)",
            )
            return
        elapsed = time.time() - rollout.window_started
        if elapsed < config.analysis_window_s:
            return
        if candidate.requests < config.min_requests:
            self._hold(
                rollout,
                f"not enough traffic to judge: {candidate.requests} candidate requests in "
                f"{elapsed:.0f} s, {config.min_requests} needed",
            )
            return
        failure = self._slower(candidate, reference, config)
        if failure is not None:
            await self._end(rollout, Status.ROLLED_BACK, "rollback", failure)
            return
        if (
            config.shadow_percent > 0
            and rollout.weight < 1
            and agreement.compared < config.min_requests
        ):
            # asked to judge agreement, and the stable version still takes traffic to mirror:
            # a step does not pass on no evidence (shadows are shed while queues are busy)
            self._hold(
                rollout,
                f"not enough shadowed requests to judge agreement: {agreement.compared} "
                f"compared in {elapsed:.0f} s, {config.min_requests} needed",
            )
            return
        if rollout.step + 1 >= len(rollout.steps):
            await self._promote(rollout, "every step passed")
            return
        rollout.step += 1
        rollout.status = Status.RUNNING
        # recorded with the evidence the step passed on, then the next step starts afresh
        self._decide(
            rollout,
            "advance",
            f"step passed ({candidate.facts()}); candidate at {rollout.weight:.0%}",
        )
        self._reset_windows(rollout)

    @staticmethod
    def _slower(candidate: Window, reference: Window, config: RolloutConfig) -> str | None:
        if not reference.latencies:
            return None  # nothing to compare against yet
        p99, stable_p99 = candidate.p99(candidate.latencies), reference.p99(reference.latencies)
        slower = (p99 - stable_p99) * 1000 > config.latency_slack_ms
        if stable_p99 > 0 and p99 > config.max_latency_ratio * stable_p99 and slower:
            return (
                f"p99 latency {p99 * 1000:.1f} ms against {stable_p99 * 1000:.1f} ms "
                f"(allowed x{config.max_latency_ratio:g})"
            )
        queue, stable_queue = candidate.p99(candidate.queue), reference.p99(reference.queue)
        if (queue - stable_queue) * 1000 > config.max_queue_increase_ms:
            return (
                f"p99 queue time {queue * 1000:.1f} ms against {stable_queue * 1000:.1f} ms "
                f"(allowed +{config.max_queue_increase_ms:g} ms)"
            )
        return None

    def _hold(self, rollout: Rollout, reason: str) -> None:
        """The step waits for evidence; the decision is recorded once, when it starts to."""
        if rollout.status is not Status.HOLDING:
            rollout.status = Status.HOLDING
            self._decide(rollout, "hold", reason)

    async def _promote(self, rollout: Rollout, reason: str) -> None:
        rollout.status = Status.PROMOTED
        self._decide(rollout, "promote", reason)
        await self._loader.retire_version(rollout.model, rollout.stable)

    async def _end(self, rollout: Rollout, status: Status, decision: str, reason: str) -> None:
        rollout.status = status
        self._decide(rollout, decision, reason)
        await self._loader.retire_version(rollout.model, rollout.candidate)

    def _config(self, model: str) -> RolloutConfig:
        config = self._registry.config_of(model)
        return config.rollout if config is not None else RolloutConfig()

    def _reset_windows(self, rollout: Rollout) -> None:
        rollout.window_started = time.time()
        self._agreements[rollout.model] = Agreement()
        for version in (rollout.stable, rollout.candidate):
            self._windows[(rollout.model, version)] = Window()

    def _agreement_facts(self, model: str) -> dict[str, float]:
        agreement = self._agreements.get(model, Agreement())
        return {"compared": agreement.compared, "mean": round(agreement.mean, 4)}

    def _decide(self, rollout: Rollout, decision: str, reason: str) -> None:
        rollout.reason = reason
        entry = {
            "at": round(time.time(), 3),
            "decision": decision,
            "weight": rollout.weight,
            "reason": reason,
            "candidate": self._window(rollout.model, rollout.candidate).facts(),
            "stable": self._window(rollout.model, rollout.stable).facts(),
            "agreement": self._agreement_facts(rollout.model),
        }
        rollout.decisions = [*rollout.decisions, entry][-DECISIONS_KEPT:]
        level = logging.WARNING if decision in ("rollback", "hold") else logging.INFO
        log.log(
            level,
            f"rollout {decision}",
            extra={
                "model": rollout.model,
                "stable": rollout.stable,
                "candidate": rollout.candidate,
                "weight": rollout.weight,
                "reason": reason,
            },
        )
        notify(self._observer.on_rollout, rollout.model, decision, rollout.weight)
        self._save(rollout)

    # -- state on disk -----------------------------------------------------------------------------

    def _save(self, rollout: Rollout) -> None:
        if self._folder is None:
            return
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            path = self._folder / f"{rollout.model}.json"
            temporary = path.with_suffix(".json.tmp")
            temporary.write_bytes(orjson.dumps(rollout.as_dict(), option=orjson.OPT_INDENT_2))
            os.replace(temporary, path)
        except OSError as exc:
            log.error("rollout state not saved", extra={"model": rollout.model, "reason": str(exc)})

    async def resume(self) -> None:
        """Takes up the saved rollouts of served models: a running one gets both its versions
        loaded and its step's share; a promoted one serves its candidate though the version
        policy chose the old version; a rolled-back or aborted one keeps its candidate out."""
        if self._folder is None or not self._folder.is_dir():
            return
        for path in sorted(self._folder.glob("*.json")):
            try:
                rollout = Rollout.from_dict(orjson.loads(path.read_bytes()))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.error("rollout state unreadable", extra={"path": path.name, "reason": str(exc)})
                continue
            if rollout.model not in self._registry.models():
                continue
            self._rollouts[rollout.model] = rollout
            try:
                await self._take_up(rollout)
            except InferdError as exc:
                rollout.status = Status.ABORTED
                self._decide(rollout, "abort", f"could not resume: {exc.message}")

    async def _take_up(self, rollout: Rollout) -> None:
        model = rollout.model
        if rollout.status in ACTIVE:
            await self._loader.add_version(model, rollout.stable)
            await self._loader.add_version(model, rollout.candidate)
            self._reset_windows(rollout)
            log.info(
                "rollout resumed",
                extra={"model": model, "candidate": rollout.candidate, "weight": rollout.weight},
            )
        elif rollout.status is Status.PROMOTED:
            serving = self._registry.versions_map(model)
            if rollout.stable in serving and rollout.stable == max(serving):
                # the version policy chose the old version again (a pinned `specific`, say)
                await self._loader.add_version(model, rollout.candidate)
                await self._loader.retire_version(model, rollout.stable)
                log.info(
                    "a promoted version serves again",
                    extra={"model": model, "version": rollout.candidate},
                )
        elif rollout.status in (Status.ROLLED_BACK, Status.ABORTED):
            serving = self._registry.versions_map(model)
            if rollout.candidate in serving:
                await self._loader.add_version(model, rollout.stable)
                await self._loader.retire_version(model, rollout.candidate)
                log.warning(
                    "a rolled-back version stays out of traffic",
                    extra={"model": model, "version": rollout.candidate},
                )

    async def close(self) -> None:
        for task in list(self._shadows):
            task.cancel()
        await asyncio.gather(*self._shadows, return_exceptions=True)
        for rollout in self._rollouts.values():
            self._save(rollout)  # (logs, never raises, when the folder cannot be written)
