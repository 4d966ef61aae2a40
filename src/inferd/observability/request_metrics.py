"""The metrics of requests as answered: their count and latency by endpoint, model, status and
error code, their count by outcome (whose their end was: `outcome_of`),
their time in each stage, and gRPC calls refused before they were read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from inferd.errors import ErrorCode
from inferd.observability.metric_bounds import SECONDS_BUCKETS

STAGES = ("queue", "preprocess", "inference", "postprocess")
CLIENT_CLOSED = 499
SERVER_ERROR = "server_error"


def outcome_of(status: int, code: int | None, deadline_by_client: bool = False) -> str:
    """Whose a request's end was: `ok`; the client's: `client_deadline` (the deadline it set
    passed), `client_closed` (it left first), `refused` (429: shed, retry later),
    `client_error` (any other 4xx); else `server_error` (a deadline of the server's own
    included)."""
    if status < 400 and code is None:
        return "ok"
    if code == ErrorCode.DEADLINE_EXCEEDED and deadline_by_client:
        return "client_deadline"
    if status == CLIENT_CLOSED:
        return "client_closed"
    if status == 429:
        return "refused"
    return "client_error" if status < 500 else SERVER_ERROR


class RequestMetrics:
    def __init__(
        self, registry: CollectorRegistry, model_label: Callable[[str | None], str]
    ) -> None:
        self._model_label = model_label
        self._request_children: dict[tuple[object, ...], tuple[Any, Any, Any]] = {}
        self._stage_children: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests = Counter(
            "inferd_requests",
            "Requests by endpoint, model, HTTP status and error code",
            ["endpoint", "model", "status", "code"],
            registry=registry,
        )
        self.outcomes = Counter(
            "inferd_request_outcomes",
            "Requests by endpoint, model and outcome: ok, refused (429), client_error (other "
            "4xx), client_deadline (the deadline the client set passed: 5040 to the client, "
            "not the server's failure), client_closed, server_error (5xx)",
            ["endpoint", "model", "outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            "inferd_request_duration_seconds",
            "Total time of a request in the server",
            ["endpoint", "model"],
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.stage = Histogram(
            "inferd_stage_duration_seconds",
            "Time per stage of a request",
            ["model", "version", "stage"],
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.grpc_refused = Counter(
            "inferd_grpc_refused",
            "gRPC calls refused before their message was read, by reason (calls: over "
            "grpc_max_calls)",
            ["reason"],
            registry=registry,
        )
        self.paced = Counter(
            "inferd_refusals_paced",
            "429s held back until their client's last Retry-After was over (the client came "
            "back sooner), by endpoint",
            ["endpoint"],
            registry=registry,
        )

    def on_request(
        self,
        endpoint: str,
        model: str | None,
        status: int,
        code: int | None,
        total_s: float,
        outcome: str | None = None,
    ) -> None:
        """`outcome`: whose the end was (`outcome_of`; by default from the status and code)."""
        if outcome is None:
            outcome = outcome_of(status, code)
        label = self._model_label(model)  # bounded, so the cache below is bounded too
        key = (endpoint, label, status, code, outcome)
        children = self._request_children.get(key)
        if children is None:  # label lookups cost more than the observations: done once
            children = (
                self.requests.labels(endpoint, label, str(status), str(code or 0)),
                self.latency.labels(endpoint, label),
                self.outcomes.labels(endpoint, label, outcome),
            )
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(total_s)
        children[2].inc()

    def on_grpc_refused(self, reason: str) -> None:
        self.grpc_refused.labels(reason).inc()

    def on_paced(self, endpoint: str) -> None:
        self.paced.labels(endpoint).inc()

    def on_stages(self, model: str, version: str, stages: dict[str, float]) -> None:
        label = self._model_label(model)
        key = (label, version)
        children = self._stage_children.get(key)
        if children is None:
            children = {stage: self.stage.labels(label, version, stage) for stage in STAGES}
            self._stage_children[key] = children
        for stage, seconds in stages.items():
            children[stage].observe(seconds)
