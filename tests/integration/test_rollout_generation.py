"""Rollouts of a text generator on a real server (random-weight GPT-2 decoders the tests
export): greedy generations routed to the stable version are mirrored to the candidate and
their tokens compared. A candidate with other weights answers every request and is rolled back
on token agreement; a candidate with the same weights agrees and is promoted."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from inferd.tools.generator import build_generator
from tests.generator_model import MODEL, SHAPE, build_generator_repo
from tests.integration.rollouts import ADMIN, act, load_until, serve, status
from tests.integration.server import RunningServer

WINDOW_S = 2.0


def prompt(index: int) -> dict[str, Any]:
    return {"prompt": f"def function_{index}(value):", "max_length": 8, "temperature": 0}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_generator_repo(tmp_path_factory.mktemp("gen-rollout"))
    config_path = root / MODEL / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["rollout"] = {
        "steps": [50, 100],
        "analysis_window_s": WINDOW_S,
        "min_requests": 10,
        "shadow_percent": 100,
        "min_agreement": 0.9,
        "max_latency_ratio": 100,  # judged on agreement here
        "max_queue_increase_ms": 60_000,
    }
    config_path.write_text(yaml.safe_dump(config))
    return root


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A version folder of the same shape with other random weights (and a tokenizer
    trained alike)."""
    root = tmp_path_factory.mktemp("gen-other")
    build_generator(root, MODEL, steps=0, shape=SHAPE, seed=1, corpus_chars=200_000)
    return root / MODEL / "1"


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = serve(repo, tmp_path_factory.mktemp("gen-rollout-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def test_greedy_generations_that_disagree_roll_the_candidate_back(
    repo: Path, server: RunningServer, other_weights: Path
) -> None:
    shutil.copytree(other_weights, repo / MODEL / "2")
    assert act(server, MODEL, "start").status_code == 200
    answers, took = load_until(
        server,
        MODEL,
        prompt,
        lambda s: s["status"] != "running",
        limit_s=WINDOW_S * 10,
        path="/generate",
    )
    state = status(server, MODEL)
    assert state["status"] == "rolled_back", state["decisions"]
    assert "agreement" in state["reason"] and "shadowed requests" in state["reason"]
    assert took < WINDOW_S * 2, took  # judged as the comparisons come, not at the window's end
    assert {a[0] for a in answers} == {200}  # no client saw an error
    assert {a[1] for a in answers} <= {"1", "2"}
    metrics = httpx.get(f"{server.url}/metrics").text
    assert f'inferd_rollout_shadow_requests_total{{model="{MODEL}",outcome="compared"}}' in metrics


def test_a_candidate_that_generates_the_same_tokens_is_promoted(
    repo: Path, server: RunningServer
) -> None:
    shutil.copytree(repo / MODEL / "1", repo / MODEL / "3")
    assert act(server, MODEL, "start", to=3).status_code == 200
    answers, _ = load_until(
        server,
        MODEL,
        prompt,
        lambda s: s["status"] not in ("running", "holding"),
        limit_s=WINDOW_S * 12,
        path="/generate",
    )
    state = status(server, MODEL)
    assert state["status"] == "promoted", state["decisions"]
    agreements = [d["agreement"] for d in state["decisions"] if d["agreement"]["compared"]]
    assert agreements and all(a["mean"] == 1.0 for a in agreements), state["decisions"]
    assert {a[0] for a in answers} == {200}
    assert "3" in {a[1] for a in answers}
    after = httpx.post(f"{server.url}/generate", json=prompt(0), timeout=30)
    assert after.json()["version"] == "3"
    assert (
        httpx.get(f"{server.url}/v2/repository/models/{MODEL}/rollout", headers=ADMIN).json()[
            "status"
        ]
        == "promoted"
    )
