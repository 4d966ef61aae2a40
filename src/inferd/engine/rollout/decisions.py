"""A rollout's decisions (start, advance, hold, promote, roll back, abort): each one is an entry
in the rollout's record, with the evidence it was taken on (every version's window, the
agreement of shadowed answers), a log line and a metric; the record is then saved."""

from __future__ import annotations

import logging
import time

from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.rollout.router import BASELINE, Router
from inferd.engine.rollout.state_files import DECISIONS_KEPT, Decision, RolloutRecord, Status
from inferd.observability.observer import Observer, RolloutDecided, notify

log = logging.getLogger("inferd.engine.rollout.controller")  # (every rollout line is its)


class Decisions:
    def __init__(self, router: Router, policy: ServingPolicy, observer: Observer) -> None:
        self._router = router
        self._policy = policy
        self._observer = observer

    def hold(self, record: RolloutRecord, reason: str) -> None:
        """The step waits for evidence; a decision is recorded when the hold starts, or its
        reason changes kind."""
        kind = reason.split(":")[0]
        if record.status is not Status.HOLDING or kind != record.reason.split(":")[0]:
            record.status = Status.HOLDING
            self.decide(record, "hold", reason)
        else:
            record.reason = reason

    def decide(self, record: RolloutRecord, decision: str, reason: str) -> None:
        record.reason = reason[:4096]
        model = record.model
        router = self._router
        entry = Decision(
            at=round(time.time(), 3),
            decision=decision,
            weight=record.weight,
            reason=record.reason,
            candidate=router.window(model, record.candidate).facts(),
            stable=router.window(model, record.stable).facts(),
            baseline=(router.window(model, BASELINE).facts() if model in router.baselines else {}),
            agreement=router.agreement(model).facts(),
        )
        record.decisions = [*record.decisions, entry][-DECISIONS_KEPT:]
        level = logging.WARNING if decision in ("rollback", "hold") else logging.INFO
        log.log(
            level,
            f"rollout {decision}",
            extra={
                "model": model,
                "stable": record.stable,
                "candidate": record.candidate,
                "weight": record.weight,
                "reason": reason,
            },
        )
        notify(self._observer, RolloutDecided(model, decision, record.weight))
        self._policy.save(record)
