"""The inference gateway's gauges from an engine's view: what waits, what runs, the KV cache's
use, and the models in memory and loading as the protocol's adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd.engine.resident.residency_record import ResidencyFacts
from inferd.observability.gateway_metrics import GatewayCollector


@dataclass
class View:
    waiting: int = 0
    flight: int = 0
    kv: list[tuple[str, str, int, int]] = field(default_factory=list)
    facts: list[ResidencyFacts] = field(default_factory=list)
    max_loaded_versions: int = 0

    def waiting_requests(self) -> int:
        return self.waiting

    @property
    def in_flight(self) -> int:
        return self.flight

    def kv_usages(self) -> list[tuple[str, str, int, int]]:
        return self.kv

    def residency_facts(self) -> list[ResidencyFacts]:
        return self.facts


def fact(model: str, resident: bool, loading: bool = False, version: str = "1") -> ResidencyFacts:
    return ResidencyFacts(model, version, True, resident, None, None, 0, 0, 0, 0.0, loading)


def read(view: View) -> dict[str, Any]:
    collector = GatewayCollector(lambda: view, clock=lambda: 1234.5)  # type: ignore[arg-type,return-value]
    return {family.name: family.samples for family in collector.collect()}


def test_waiting_is_every_queue_and_running_the_rest_admitted() -> None:
    samples = read(View(waiting=5, flight=9))
    assert samples["inferd:num_requests_waiting"][0].value == 5
    assert samples["inferd:num_requests_running"][0].value == 4
    # a request admitted and counted queued before in_flight counts it: never below zero
    assert read(View(waiting=3, flight=1))["inferd:num_requests_running"][0].value == 0


def test_kv_cache_use_is_the_generators_tokens_over_their_limits() -> None:
    view = View(kv=[("g1", "1", 300, 1000), ("g2", "1", 100, 3000)])
    assert read(view)["inferd:kv_cache_usage_perc"][0].value == 0.1
    assert read(View())["inferd:kv_cache_usage_perc"][0].value == 0.0


def test_adapters_are_the_models_in_memory_and_those_loading() -> None:
    view = View(
        facts=[
            fact("b", True),
            fact("a", True),
            fact("a", False, version="2"),  # another version of a model in memory
            fact("c", False, loading=True),
            fact("d", False),
        ]
    )
    (sample,) = read(view)["inferd:lora_requests_info"]
    assert sample.labels == {
        "running_lora_adapters": "a,b",
        "waiting_lora_adapters": "c",
        "max_lora": "4",  # no bound on the versions in memory: every model may load
    }
    assert sample.value == 1234.5
    view.max_loaded_versions = 2
    (sample,) = read(view)["inferd:lora_requests_info"]
    assert sample.labels["max_lora"] == "2"


def test_nothing_before_an_engine_is_attached() -> None:
    assert list(GatewayCollector(lambda: None).collect()) == []
