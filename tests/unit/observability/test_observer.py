"""The data path's events: one guarded fan-out, and every kind recorded by the metrics."""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field

import pytest

from inferd.observability import observer as events
from inferd.observability.metrics import Metrics
from inferd.observability.observer import (
    BatchRan,
    Event,
    GenerationStep,
    JobsLost,
    Observer,
    Observers,
    TextsServed,
    Unhealthy,
    notify,
)


@dataclass(frozen=True)
class Batch:
    items: int = 3
    rows: int = 3
    real_elements: int = 30
    padded_elements: int = 36
    queue_s: tuple[float, ...] = (0.001, 0.002, 0.003)
    run_s: float = 0.01
    error: object = None
    token_cap: int | None = None


@dataclass
class Seen(Observer):
    events: list[Event] = field(default_factory=list)

    def observe(self, event: Event) -> None:
        self.events.append(event)


class Broken(Observer):
    def observe(self, event: Event) -> None:
        raise RuntimeError("observer bug")


def test_every_observer_sees_every_event_even_after_one_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, last = Seen(), Seen()
    fan = Observers([first, Broken(), last])
    sent = [TextsServed("m", [3, 4]), Unhealthy("m", "1", "fails alone")]
    with caplog.at_level(logging.ERROR, "inferd.observability.observer"):
        for event in sent:
            notify(fan, event)
    assert first.events == sent and last.events == sent
    failures = [r for r in caplog.records if r.message.startswith("observer failed")]
    assert [(r.observer, r.event) for r in failures] == [  # type: ignore[attr-defined]
        ("Broken", "TextsServed"),
        ("Broken", "Unhealthy"),
    ]


def test_an_observer_that_watches_nothing_ignores_every_event() -> None:
    notify(Observer(), JobsLost(3))  # no error, nothing to do


KINDS = [
    cls
    for _, cls in inspect.getmembers(events, inspect.isclass)
    if issubclass(cls, Event) and cls is not Event
]
NOT_METRICS = {Unhealthy}
"""A version's health is its state (the readiness and the index), not a metric."""


def test_the_metrics_record_every_kind_of_event_but_health() -> None:
    metrics = Metrics(["m"], gpu=False)
    handled = set(metrics._handlers)
    assert handled == set(KINDS) - NOT_METRICS


def test_events_reach_the_rendered_metrics() -> None:
    metrics = Metrics(["m"], gpu=False)
    notify(metrics, BatchRan("m", "1", Batch()))
    notify(metrics, GenerationStep("m", "1", "decode", 4, (0.01, 0.02), 4, 1, 100, 1000))
    notify(metrics, JobsLost(2))
    notify(metrics, TextsServed("other", [5]))  # a model not ours: `_unknown`
    text = metrics.render().decode()
    assert 'inferd_batch_size_count{model="m",version="1"} 1.0' in text
    assert 'inferd_generation_kv_cache_tokens{model="m",version="1"} 100.0' in text
    assert "inferd_jobs_lost_total 2.0" in text
    assert 'inferd_input_length_tokens_count{model="_unknown"} 1.0' in text
