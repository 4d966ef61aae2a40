"""The server's own view of a load step, from two scrapes of its `/metrics`: requests it
counted, the mean batch size it formed and the mean time requests queued."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

SELF = ("/metrics",)
"""Endpoints the tool itself calls around a step (the scrapes), not part of the load."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples | None:
    """Every sample of `/metrics` by (name, labels); None when the target has no metrics."""
    try:
        response = httpx.get(url + "/metrics", timeout=10)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    found: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@dataclass(frozen=True)
class ServerView:
    requests: dict[str, float]
    """Requests the server counted in the step, by "endpoint status"."""
    mean_batch_size: float | None
    mean_queue_ms: float | None


def _total(delta: Samples, name: str, **match: str) -> float:
    return sum(
        v
        for (n, labels), v in delta.items()
        if n == name and all(dict(labels).get(k) == want for k, want in match.items())
    )


def server_view(
    before: Samples | None, after: Samples | None, model: str | None
) -> ServerView | None:
    if before is None or after is None:
        return None
    delta = {key: value - before.get(key, 0.0) for key, value in after.items()}
    requests: dict[str, float] = defaultdict(float)
    for (name, labels), value in delta.items():
        tags = dict(labels)
        if name == "inferd_requests_total" and value and tags.get("endpoint") not in SELF:
            requests[f"{tags.get('endpoint')} {tags.get('status')}"] += value
    scope = {"model": model} if model else {}
    rows = _total(delta, "inferd_batch_size_sum", **scope)
    runs = _total(delta, "inferd_batch_size_count", **scope)
    queued = _total(delta, "inferd_stage_duration_seconds_sum", stage="queue", **scope)
    queue_n = _total(delta, "inferd_stage_duration_seconds_count", stage="queue", **scope)
    return ServerView(
        dict(requests),
        rows / runs if runs else None,
        queued / queue_n * 1000 if queue_n else None,
    )
