"""The metrics of rollouts: the candidate's share of traffic, each decision, the requests
mirrored to the candidate and their agreement, and the requests of each version and route."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class RolloutMetrics:
    def __init__(
        self, registry: CollectorRegistry, model_label: Callable[[str | None], str]
    ) -> None:
        self._model_label = model_label
        self.weight = Gauge(
            "inferd_rollout_canary_weight",
            "The rollout candidate's share of requests naming no version (0 to 1)",
            ["model"],
            registry=registry,
        )
        self.decisions = Counter(
            "inferd_rollout_decisions",
            "Rollout decisions: start, advance, hold, promote, rollback, abort",
            ["model", "decision"],
            registry=registry,
        )
        self.shadowed = Counter(
            "inferd_rollout_shadow_requests",
            "Requests mirrored to a rollout's candidate: compared, failed (on the candidate), shed",
            ["model", "outcome"],
            registry=registry,
        )
        self.agreement = Gauge(
            "inferd_rollout_agreement",
            "Mean agreement of the candidate's shadowed answers with the stable version's, this "
            "window (0 to 1)",
            ["model"],
            registry=registry,
        )
        self.routed = Counter(
            "inferd_rollout_requests",
            "Requests of a model in a rollout, by version, route (stable, canary) and outcome",
            ["model", "version", "route", "outcome"],
            registry=registry,
        )

    def on_rollout(self, model: str, decision: str, weight: float) -> None:
        label = self._model_label(model)
        self.weight.labels(label).set(weight)
        self.decisions.labels(label, decision).inc()

    def on_shadow(self, model: str, outcome: str, agreement: float | None) -> None:
        label = self._model_label(model)
        self.shadowed.labels(label, outcome).inc()
        if agreement is not None:
            self.agreement.labels(label).set(agreement)

    def on_routed(self, model: str, version: str, route: str, failed: bool) -> None:
        outcome = "error" if failed else "ok"
        self.routed.labels(self._model_label(model), version, route, outcome).inc()
