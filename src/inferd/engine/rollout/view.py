"""What is shown of a model's rollout: its line on the status page (`split`), its full state
for the admin (`status`: the record, the current window of each version, the agreement of
shadowed answers), and the rollouts whose state file could not be taken up (`failures`)."""

from __future__ import annotations

import time
from typing import Any

from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.rollout.router import BASELINE, Router
from inferd.engine.rollout.state_files import Status
from inferd.engine.versions.registry import Registry
from inferd.errors import NotFoundError

NO_ROLLOUT = "none"
"""The status shown for a served model that has had no rollout (never stored)."""


class RolloutView:
    def __init__(self, registry: Registry, policy: ServingPolicy, router: Router) -> None:
        self._registry = registry
        self._policy = policy
        self._router = router

    def split(self, model: str) -> dict[str, Any] | None:
        """What the status page shows of a model's rollout (None when it never had one): a
        running one's versions, the candidate's share, its step, its last decision with the
        reason and the versions withdrawn (rolled back or aborted, out of traffic); an ended
        one's status, last decision and withdrawn versions (no share); a failed one's reason."""
        unreadable = self._policy.unreadable(model)
        if unreadable is not None:
            return {"status": Status.FAILED.value, "reason": self.failure(model)}
        record = self._policy.record(model)
        if record is None:
            return None
        last = record.decisions[-1] if record.decisions else None
        shown: dict[str, Any] = {
            "stable": record.stable,
            "candidate": record.candidate,
            "status": record.status.value,
            "step": record.step + 1,
            "steps": list(record.steps),
            "decision": (
                {"decision": last.decision, "reason": last.reason, "at": last.at}
                if last is not None
                else None
            ),
            "withdrawn": list(record.withdrawn),
        }
        if record.active:
            shown["weight"] = record.weight
            shown["baseline_weight"] = self._router.baseline_share(model, record.weight)
        return shown

    def failures(self) -> dict[str, str]:
        """Model -> why its rollout failed (its state file could not be taken up)."""
        return {m: self.failure(m) for m in self._policy.unreadable_all()}

    def failure(self, model: str) -> str:
        unreadable = self._policy.unreadable(model)
        if unreadable is None:
            return ""
        return f"rollout state {unreadable.path} unreadable: {unreadable.reason}"

    def status(self, model: str) -> dict[str, Any]:
        if self._policy.unreadable(model) is not None:
            return _empty(model, Status.FAILED.value, self.failure(model))
        record = self._policy.record(model)
        if record is None:
            if model not in self._registry.models():
                raise NotFoundError(f"unknown model '{model}'")
            return _empty(model, NO_ROLLOUT, f"model '{model}' has had no rollout")
        router = self._router
        state = record.model_dump(mode="json")
        state["baseline_weight"] = (
            router.baseline_share(model, record.weight) if record.active else 0.0
        )
        state["window"] = {
            "stable": router.window(model, record.stable).facts(),
            "candidate": router.window(model, record.candidate).facts(),
            "baseline": router.window(model, BASELINE).facts(),
            "judged_against": "baseline" if router.baselined(model, record.weight) else "stable",
            "elapsed_s": round(time.time() - record.window_started, 1),
            "agreement": router.agreement(model).facts(),
        }
        return state


def _empty(model: str, status: str, reason: str) -> dict[str, Any]:
    """The status of a model with no rollout record to show."""
    return {
        "model": model,
        "status": status,
        "reason": reason,
        "stable": None,
        "candidate": None,
        "steps": [],
        "step": 0,
        "weight": 0.0,
        "decisions": [],
        "withdrawn": [],
    }
