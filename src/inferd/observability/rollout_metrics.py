"""The metrics of rollouts: the candidate's share of traffic, each decision, the requests
mirrored to the candidate and their agreement, and the requests of each version and route."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from inferd.observability.observer import RolloutDecided, Routed, ShadowOutcome


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

    def on_rollout(self, event: RolloutDecided) -> None:
        label = self._model_label(event.model)
        self.weight.labels(label).set(event.weight)
        self.decisions.labels(label, event.decision).inc()

    def on_shadow(self, event: ShadowOutcome) -> None:
        label = self._model_label(event.model)
        self.shadowed.labels(label, event.outcome).inc()
        if event.agreement is not None:
            self.agreement.labels(label).set(event.agreement)

    def on_routed(self, event: Routed) -> None:
        outcome = "error" if event.failed else "ok"
        label = self._model_label(event.model)
        self.routed.labels(label, event.version, event.route, outcome).inc()
