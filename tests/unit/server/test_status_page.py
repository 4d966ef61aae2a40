"""The status page's first paint, written on the server: the current status in the page's
elements, every value escaped, and no script of its own."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources
from typing import Any

from inferd.server.status_page import render

TEMPLATE = (resources.files("inferd.server") / "static" / "status.html").read_text()
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def version(number: str, state: str = "READY", reason: str | None = None) -> dict[str, Any]:
    return {
        "version": number,
        "state": state,
        "reason": reason,
        "queue_depth": 2,
        "requests": 5,
        "failures": 0,
        "batches": 1,
        "rows": 5,
        "real_elements": 5,
        "padded_elements": 5,
        "cache_hits": 3,
        "cache_misses": 1,
    }


def status(models: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "server": {"name": "inferd", "version": "1.2.3"},
        "time": 0.0,
        "ready": True,
        "in_flight": 7,
        "window_s": 10,
        "models": models,
        "jobs": {"store": "memory", "running": True},
    }


def model(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "task": "tensor",
        "state": None,
        "reason": None,
        "versions": [version("1")],
        "rollout": None,
        "live": None,
        **fields,
    }


class Texts(HTMLParser):
    """Each element's text by its class, and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.by_class: dict[str, list[str]] = {}
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.stack.append(dict(attrs).get("class") or "")

    def handle_endtag(self, tag: str) -> None:
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1]:
            self.by_class.setdefault(self.stack[-1], []).append(data)


def parsed(page: str) -> Texts:
    texts = Texts()
    texts.feed(page)
    return texts


def test_the_header_and_every_model_are_in_the_page() -> None:
    live = {"requests_per_s": 12.345, "errors_per_s": 0, "p50_ms": 3.5, "p99_ms": 120.0}
    page = render(TEMPLATE, status([model("a", live=live), model("b")]))
    assert '<b id="server">inferd 1.2.3</b>' in page
    assert '<b id="ready">yes</b>' in page and '<b id="in-flight">7</b>' in page
    assert '<b id="updated" data-time="0.0">00:00:00 UTC</b>' in page
    assert re.findall(r'data-model="([^"]+)"', page) == ["a", "b"]
    texts = parsed(page)
    assert texts.by_class["value"][:3] == ["12.3", "3.50 / 120 ms", "2.00"]
    assert texts.by_class["note"] == [
        "response cache: 75.0% of 4 lookups hit",
        "response cache: 75.0% of 4 lookups hit",
    ]
    assert texts.by_class["badge READY"] == ["v1 READY", "v1 READY"]


def test_a_running_rollout_shows_its_split_step_decision_and_withdrawn_versions() -> None:
    rollout = {
        "stable": 1,
        "candidate": 3,
        "status": "holding",
        "step": 2,
        "steps": [10, 50, 100],
        "decision": {"decision": "hold", "reason": "3 candidate requests in 8 s", "at": 1.0},
        "withdrawn": [2],
        "weight": 0.5,
        "baseline_weight": 0.0,
    }
    page = render(TEMPLATE, status([model("m", rollout=rollout)]))
    texts = parsed(page)
    assert texts.by_class["stable"] == ["v1 50%"] and texts.by_class["canary"] == ["v3 50%"]
    assert "baseline" not in texts.by_class
    assert texts.by_class["step"] == ["step 2 of 3 (holding)"]
    assert texts.by_class["decision"] == ["last decision: hold: 3 candidate requests in 8 s"]
    assert texts.by_class["withdrawn"] == ["withdrawn: v2"]


def test_an_ended_rollout_shows_how_it_ended_and_no_split() -> None:
    rollout = {
        "stable": 1,
        "candidate": 2,
        "status": "aborted",
        "step": 1,
        "steps": [10, 100],
        "decision": {"decision": "abort", "reason": "aborted by the admin", "at": 1.0},
        "withdrawn": [2],
    }
    page = render(TEMPLATE, status([model("m", rollout=rollout)]))
    assert '<div class="split" hidden></div>' in page
    texts = parsed(page)
    assert texts.by_class["step"] == ["rollout of v2 aborted"]
    assert texts.by_class["decision"] == ["last decision: abort: aborted by the admin"]


def test_every_value_is_escaped() -> None:
    rollout = {
        "stable": 1,
        "candidate": 2,
        "status": "running",
        "step": 1,
        "steps": [10, 100],
        "decision": {"decision": "start", "reason": HOSTILE, "at": 1.0},
        "withdrawn": [],
        "weight": 0.1,
        "baseline_weight": 0.1,
    }
    failed = {"status": "failed", "reason": HOSTILE}
    models = [
        model("m", reason=HOSTILE, versions=[version("1", "FAILED", HOSTILE)], rollout=rollout),
        model("v", versions=[version("1", "FAILED", HOSTILE)]),
        model("n", rollout=failed, task=HOSTILE),
    ]
    page = render(TEMPLATE, status(models))
    texts = parsed(page)
    assert texts.tags.count("script") == 1 and texts.tags.count("img") == 0
    assert texts.by_class["reason"][0] == HOSTILE
    assert texts.by_class["badge FAILED"] == ["v1 FAILED", "v1 FAILED"]
    assert texts.by_class["decision"] == [f"last decision: start: {HOSTILE}"]
    assert texts.by_class["failed"] == [f"rollout failed: {HOSTILE}"]
    assert texts.by_class["reason"][1] == f"v1: {HOSTILE}"
    assert texts.by_class["task"][2] == HOSTILE


def test_a_version_in_memory_shows_what_it_holds_on_the_host_and_each_gpu() -> None:
    """(The device footprint is given here: this machine has no GPU to measure one.)"""
    on_gpus = {**version("1"), "resident_mb": 212.5, "resident_device_mb": {"0": 96.0, "1": 8.5}}
    host_only = {**version("2"), "resident_mb": 4.0, "resident_device_mb": None}
    unloaded = {**version("3", "UNLOADED"), "resident_mb": None, "resident_device_mb": None}
    page = render(TEMPLATE, status([model("a", versions=[on_gpus, host_only, unloaded])]))
    texts = parsed(page)
    assert texts.by_class["badge READY"] == [
        "v1 READY 212.5 MB, GPU 0 96 MB, GPU 1 8.5 MB",
        "v2 READY 4 MB",
    ]
    assert texts.by_class["badge UNLOADED"] == ["v3 UNLOADED"]


def test_memory_is_shown_only_where_a_load_measured_some() -> None:
    """A version whose load added nothing measurable shows no figure (not "0 MB"); a small
    one shows at least 0.1 MB."""
    from inferd.config.model import ModelConfig
    from inferd.engine.versions.version import Version, VersionState
    from inferd.server.status_view import _version

    served = Version("m", 1, ModelConfig())
    served.state = VersionState.READY
    for footprint, shown in ((None, None), (0, None), (20_000, 0.1), (3 * 2**20, 3.0)):
        served.footprint_bytes = footprint
        assert _version(served, 0)["resident_mb"] == shown, footprint
