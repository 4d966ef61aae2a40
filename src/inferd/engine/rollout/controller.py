"""The rollout controller: the admin's actions (start, promote, roll back, abort), the loop
that judges every running rollout, and the rollouts taken up again at start.

A rollout raises its candidate's share step by step (`rollout.steps`); at the last step (100)
the stable version keeps `reference_percent` until the promotion, so the two versions are
measured over the same window at every step. With `baseline` (the default) a second instance
of the stable version is loaded beside the candidate; while the candidate takes under half of
the traffic, the baseline takes as much, and the candidate is judged against it: two arms of
the same share, the same age and the same window (on shared cores a version's time per
request depends on its share of the traffic: judged against the stable version at 90%, a
byte-identical candidate at 10% looks slower). Each window is judged when it has run its
`analysis_window_s` (inferd.engine.rollout.judge): pass (the next step, a new window for both
versions, or the promotion after the last), fail (rolled back at once) or hold (the window
runs on, with more requests, and is judged again one window later; too few requests: again
as soon as both versions have enough). Failures and shadowed disagreement clear before the
window ends roll back at once.

Every decision is a log line, a metric and an entry in the rollout's record
(inferd.engine.rollout.decisions), which the serving policy keeps
(inferd.engine.rollout.policy, on disk in `.inferd/rollouts/`); what is shown of a rollout is
inferd.engine.rollout.view's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, TypeVar

from inferd.config.model import RolloutConfig
from inferd.engine.rollout.decisions import Decisions
from inferd.engine.rollout.judge import Outcome, Sample, judge, judge_early
from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.rollout.router import BASELINE, Router, Window
from inferd.engine.rollout.state_files import RolloutRecord, Status
from inferd.engine.rollout.view import RolloutView
from inferd.engine.rollout.watcher import RepositoryWatcher
from inferd.engine.versions.loader import Loader
from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version
from inferd.errors import InferdError, InvalidInputError, NotFoundError
from inferd.observability.observer import Observer, RolloutDecided, notify

log = logging.getLogger(__name__)

T = TypeVar("T")


def share(record: RolloutRecord, config: RolloutConfig) -> float:
    """The candidate's share (0 to 1) at the record's step: the step's percent, less the
    stable version's `reference_percent` at the last step."""
    percent = min(record.steps[record.step], 100 - config.reference_percent)
    return percent / 100


class Rollouts:
    def __init__(
        self, registry: Registry, loader: Loader, observer: Observer, policy: ServingPolicy
    ) -> None:
        self._registry = registry
        self._loader = loader
        self._observer = observer
        self.policy = policy
        self.router = Router(registry, policy, observer)
        """The data path's side: which version a request goes to, what each served."""
        self.watcher = RepositoryWatcher(registry, policy, self.start)
        self.view = RolloutView(registry, policy, self.router)
        """What is shown of the rollouts (status, the status page's split, failures)."""
        self._decisions = Decisions(self.router, policy, observer)
        self._next_look: dict[str, float] = {}
        """Per model: when a held window is judged again (wall-clock seconds)."""
        self._changes = asyncio.Lock()

    # -- the data path (the router's) ----------------------------------------------------------

    def baseline(self, model: str) -> Version | None:
        """The rollout's baseline (a second instance of its stable version), if it serves."""
        baseline = self.router.baseline(model)
        return baseline if baseline is not None and baseline.ready else None

    def shadow_target(self, model: str) -> Version | None:
        return self.router.shadow_target(model, self._config(model).shadow_percent)

    # -- the admin's actions ---------------------------------------------------------------------

    async def start(self, model: str, to: int | None) -> dict[str, Any]:
        """Loads the candidate (`to`, else the newest version folder above the serving one
        that is not withdrawn) beside the stable version and gives it the first step's
        share. A candidate that does not load never takes traffic: the answer says why."""
        async with self._changes:
            current = self.policy.record(model)
            if current is not None and current.active:
                raise InvalidInputError(
                    f"model '{model}' already has a rollout of version {current.candidate} "
                    "running; promote, roll back or abort it first"
                )
            stable = self._registry.resolve(model)
            stable.ensure_ready()
            if to is None:
                to = await asyncio.to_thread(self.watcher.newest, model)
                if to <= stable.version:
                    raise InvalidInputError(
                        f"model '{model}' has no version folder above {stable.version} "
                        "(a rolled-back version is started again only by naming it)"
                    )
            if to == stable.version:
                raise InvalidInputError(f"version {to} of '{model}' is the one serving")
            await self._loader.add_version(model, to)
            config = stable.config.rollout
            await self._load_baseline(model, stable.version, config)
            record = self.policy.begin(model, stable.version, to, config.steps, time.time())
            record.weight = share(record, config)
            self._new_window(record)
            self._decisions.decide(
                record, "start", f"version {to} loaded, given the first step's share"
            )
        return self.view.status(model)

    async def promote(self, model: str) -> dict[str, Any]:
        async with self._changes:
            await self._promote(self._active(model), "promoted by the admin")
        return self.view.status(model)

    async def rollback(self, model: str, abort: bool = False) -> dict[str, Any]:
        async with self._changes:
            record = self._active(model)
            if abort:
                await self._end(record, Status.ABORTED, "abort", "aborted by the admin")
            else:
                await self._end(record, Status.ROLLED_BACK, "rollback", "rolled back by the admin")
        return self.view.status(model)

    def _active(self, model: str) -> RolloutRecord:
        record = self.policy.record(model)
        if record is None or not record.active:
            raise NotFoundError(f"model '{model}' has no rollout running")
        return record

    async def watch(self, every_s: float) -> None:
        await self.watcher.watch(every_s)

    # -- the controller ----------------------------------------------------------------------------

    async def run(self, tick_s: float = 0.25) -> None:
        """Judges every running rollout every `tick_s` (until cancelled)."""
        while True:
            await asyncio.sleep(tick_s)
            for record in self.policy.records():
                if not record.active:
                    continue
                try:
                    async with self._changes:
                        await self.judge_now(record, time.time())
                except Exception:  # a fault judging one rollout must not stop the others
                    log.exception("judging a rollout failed", extra={"model": record.model})

    async def judge_now(self, record: RolloutRecord, now: float) -> None:
        """One look at a running rollout's window at wall-clock time `now`."""
        if not record.active:
            return
        model = record.model
        config = self._config(model)
        stable_window = self._reference(record)
        candidate_window = self.router.window(model, record.candidate)
        shadowed = self.router.agreement(model).shadowed()
        counts = (
            Sample(stable_window.requests, stable_window.failures, (), ()),
            Sample(candidate_window.requests, candidate_window.failures, (), ()),
        )
        early = judge_early(*counts, config, shadowed)
        if early is not None:
            await self._end(record, Status.ROLLED_BACK, "rollback", early.reason)
            return
        if now - record.window_started < config.analysis_window_s:
            return
        if now < self._next_look.get(model, 0.0):
            return
        enough = min(stable_window.requests, candidate_window.requests) >= config.min_requests
        if not enough and record.status is Status.HOLDING and "not enough traffic" in record.reason:
            return  # (nothing to look at yet: the hold stands as said)
        verdict = judge(
            stable_window.sample(),
            candidate_window.sample(),
            config,
            shadowed,
            stable_share=1 - record.weight - self.router.baseline_share(model, record.weight),
            queue_judged=record.weight <= self._reference_share(record),
            reference="baseline"
            if self.router.baselined(record.model, record.weight)
            else "stable",
        )
        if verdict.outcome is Outcome.FAIL:
            await self._end(record, Status.ROLLED_BACK, "rollback", verdict.reason)
        elif verdict.outcome is Outcome.HOLD:
            if enough:  # evidence too thin: more requests, then one more look
                self._next_look[model] = now + config.analysis_window_s
            self._decisions.hold(record, verdict.reason)
        elif record.step + 1 >= len(record.steps):
            await self._promote(record, f"every step passed ({verdict.reason})")
        else:
            record.step += 1
            record.status = Status.RUNNING
            record.weight = share(record, config)
            # recorded with the evidence the step passed on, then the next step starts afresh
            self._decisions.decide(
                record,
                "advance",
                f"step passed ({verdict.reason}); candidate at {record.weight:.0%}",
            )
            self._new_window(record)

    def _reference(self, record: RolloutRecord) -> Window:
        """The window the candidate's is judged against: the baseline's when it takes the
        candidate's share, else the stable version's."""
        key = BASELINE if self.router.baselined(record.model, record.weight) else record.stable
        return self.router.window(record.model, key)

    def _reference_share(self, record: RolloutRecord) -> float:
        """The share of traffic of the arm the candidate is judged against."""
        if self.router.baselined(record.model, record.weight):
            return record.weight
        return 1 - record.weight

    async def _load_baseline(self, model: str, stable: int, config: RolloutConfig) -> None:
        """The rollout's baseline (with `baseline` on); one that does not load is logged, and
        the candidate is judged against the stable version."""
        if not config.baseline or model in self.router.baselines:
            return
        try:
            self.router.baselines[model] = await self._loader.load_baseline(model, stable)
        except InferdError as exc:
            log.warning(
                "rollout baseline not loaded: judged against the stable version",
                extra={"model": model, "reason": exc.message},
            )

    async def _drop_baseline(self, model: str) -> None:
        baseline = self.router.baselines.pop(model, None)
        if baseline is not None:
            await self._loader.close_baseline(baseline)

    async def _promote(self, record: RolloutRecord, reason: str) -> None:
        record.status = Status.PROMOTED
        record.weight = 0.0
        self._decisions.decide(record, "promote", reason)
        await self._drop_baseline(record.model)
        await self._loader.retire_version(record.model, record.stable)

    async def _end(self, record: RolloutRecord, status: Status, decision: str, reason: str) -> None:
        self.policy.end(record, status)
        self._decisions.decide(record, decision, reason)
        await self._drop_baseline(record.model)
        await self._loader.retire_version(record.model, record.candidate)

    def _config(self, model: str) -> RolloutConfig:
        config = self._registry.config_of(model)
        return config.rollout if config is not None else RolloutConfig()

    def _new_window(self, record: RolloutRecord) -> None:
        record.window_started = time.time()
        self._next_look.pop(record.model, None)
        self.router.reset(record.model, (record.stable, record.candidate))

    # -- life --------------------------------------------------------------------------------------

    async def resume(self) -> None:
        """Takes up the records of served models once start-up loading is done (the serving
        policy chose what loaded): a running rollout gets a new window at its step's share;
        one whose versions did not both load is aborted, and says why. A model whose record
        could not be read is reported failed (`status`, /ready) and serves by its version
        policy; the others resume."""
        for model, reason in self.view.failures().items():
            notify(self._observer, RolloutDecided(model, "failed", 0.0))
            log.error("rollout failed", extra={"model": model, "reason": reason})
        for record in self.policy.records():
            if record.model not in self._registry.models() or not record.active:
                continue
            try:
                await self._take_up(record)
            except InferdError as exc:
                await self._end(record, Status.ABORTED, "abort", f"could not resume: {exc.message}")

    async def _take_up(self, record: RolloutRecord) -> None:
        model = record.model
        versions = self._registry.versions_map(model)
        for number in (record.stable, record.candidate):
            if number not in versions or not versions[number].ready:
                await self._loader.add_version(model, number)
        await self._load_baseline(model, record.stable, self._config(model))
        record.weight = share(record, self._config(model))
        self._new_window(record)
        log.info(
            "rollout resumed",
            extra={"model": model, "candidate": record.candidate, "weight": record.weight},
        )

    async def close(self) -> None:
        await self.router.close()
        for model in list(self.router.baselines):
            baseline = self.router.baselines.pop(model)
            await baseline.stop()  # (what it holds is answered 5030, as the versions' is)
            await baseline.close()
        for record in self.policy.records():
            if record.active:
                self.policy.save(record)  # (logs, never raises, when it cannot be written)
