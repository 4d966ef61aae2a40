"""The response cache around every verb of the engine, on fake runtimes: a
repeat is answered without running, anything that changes the answer never hits, and a
version's answers go with the version."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from inferd.clients import ANONYMOUS, Client, address_client
from inferd.engine import Engine
from inferd.engine.requests.cached import partition_of, request_key
from inferd.observability.trace import RequestTrace, tracing
from tests.unit.engine import asks
from tests.unit.engine.repo import FakeRuntime, add_model, engine_for, fake_loader

CACHE = {"response_cache": {"enabled": True, "max_mb": 1, "ttl_s": 60}}
TEXT = {"tokenizer": {"max_tokens": 16, "truncate": True}}


def cached_repo(root: Path) -> Path:
    add_model(root, "affine", {"max_batch_size": 8, **CACHE})
    add_model(root, "plain", {"max_batch_size": 8})  # no cache: every request runs
    add_model(
        root,
        "encoder",
        {
            "task": "embedding",
            "max_batch_size": 8,
            "embedding": {"dimensions": [2]},
            **TEXT,
            **CACHE,
        },
        tokenizer=True,
    )
    add_model(
        root,
        "sentiment",
        {
            "task": "text-classification",
            "max_batch_size": 8,
            "classification": {"labels": ["positive", "negative"]},
            **TEXT,
            **CACHE,
        },
        tokenizer=True,
    )
    add_model(
        root,
        "ranker",
        {
            "task": "rerank",
            "max_batch_size": 8,
            "tokenizer": {**TEXT["tokenizer"], "token_type_ids": "token_type_ids"},
            **CACHE,
        },
        tokenizer=True,
    )
    return root


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Engine, list[FakeRuntime]]]:
    made: list[FakeRuntime] = []
    engine = engine_for(cached_repo(tmp_path))
    engine.loader._versions._runtime_loader = fake_loader(made=made, aliases={"plain": "affine"})
    await engine.load_all()
    yield engine, made
    await engine.close()


def runs(engine: Engine, made: list[FakeRuntime]) -> int:
    """Runtime calls so far, warm-up excluded (each runtime's first call)."""
    return sum(len(r.rows) - 1 for r in made)


async def infer(engine: Engine, model: str, x: np.ndarray, outputs: list[str] | None = None) -> str:
    trace = RequestTrace("r")
    with tracing(trace):
        await asks.infer(engine, model, None, {"x": x}, outputs)
    assert trace.cache is not None
    return trace.cache


async def test_a_repeated_tensor_request_is_answered_without_running(
    served: tuple[Engine, list[FakeRuntime]],
) -> None:
    engine, made = served
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    before = runs(engine, made)
    assert await infer(engine, "affine", x) == "miss"
    assert await infer(engine, "affine", x.copy()) == "hit"
    assert runs(engine, made) == before + 1
    _, first = await asks.infer(engine, "affine", None, {"x": x})
    np.testing.assert_array_equal(first["y"], x * 2 + 1)
    assert not first["y"].flags.writeable  # shared by every request it answers
    stats = engine.registry.resolve("affine").stats.as_dict()["inference_stats"]
    assert stats["cache_hit"]["count"] == 2 and stats["cache_miss"]["count"] == 1


async def test_a_changed_input_or_parameter_never_hits(
    served: tuple[Engine, list[FakeRuntime]],
) -> None:
    engine, _ = served
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert await infer(engine, "affine", x) == "miss"
    changed = x.copy()
    changed[1, 3] += 1e-6  # one element
    assert await infer(engine, "affine", changed) == "miss"
    assert await infer(engine, "affine", x[:1]) == "miss"  # a prefix of the same bytes
    assert await infer(engine, "affine", x, ["y"]) == "miss"  # the outputs asked for
    trace = RequestTrace("e")
    with tracing(trace):
        await asks.embed(engine, "encoder", ["good film", "bad"])
    assert trace.cache == "miss"
    for texts, dimensions in (
        (["good film", "bad"], None),
        (["good", "film bad"], None),  # the same characters, split elsewhere
        (["good film"], None),
        (["good film", "bad"], 2),  # Matryoshka dimensions
    ):
        trace = RequestTrace("e")
        with tracing(trace):
            await asks.embed(engine, "encoder", texts, dimensions)
        repeat = (texts, dimensions) == (["good film", "bad"], None)
        assert trace.cache == ("hit" if repeat else "miss")
    for k, expected in ((1, "miss"), (1, "hit"), (2, "miss")):
        trace = RequestTrace("c")
        with tracing(trace):
            await asks.classify(engine, "sentiment", ["the film is good"], k)
        assert trace.cache == expected


async def test_an_answer_from_the_cache_equals_a_fresh_one(
    served: tuple[Engine, list[FakeRuntime]],
) -> None:
    engine, _ = served
    texts = ["good film", "awful"]
    _, fresh = await asks.embed(engine, "encoder", texts)
    _, cached = await asks.embed(engine, "encoder", texts)
    np.testing.assert_array_equal(cached.vectors, fresh.vectors)
    assert cached.token_counts == fresh.token_counts
    _, first = await asks.classify(engine, "sentiment", texts, 2)
    _, again = await asks.classify(engine, "sentiment", texts, 2)
    assert again.predictions == first.predictions


async def test_a_model_without_a_cache_runs_every_request(
    served: tuple[Engine, list[FakeRuntime]],
) -> None:
    engine, made = served
    x = np.ones((1, 4), np.float32)
    before = runs(engine, made)
    for _ in range(3):
        trace = RequestTrace("p")
        with tracing(trace):
            await asks.infer(engine, "plain", None, {"x": x})
        assert trace.cache is None
    assert runs(engine, made) == before + 3
    assert [name for name, _, _ in engine.cache_states()] == [
        "affine",
        "encoder",
        "ranker",
        "sentiment",
    ]


async def test_a_version_reloaded_starts_with_an_empty_cache(
    served: tuple[Engine, list[FakeRuntime]],
) -> None:
    engine, _ = served
    x = np.ones((1, 4), np.float32)
    await infer(engine, "affine", x)
    assert await infer(engine, "affine", x) == "hit"
    await engine.unload_model("affine")
    await engine.load_model("affine")
    assert await infer(engine, "affine", x) == "miss"


async def test_the_server_setting_turns_every_cache_off(tmp_path: Path) -> None:
    engine = engine_for(cached_repo(tmp_path), response_cache=False)
    await engine.load_all()
    try:
        trace = RequestTrace("o")
        with tracing(trace):
            await asks.infer(engine, "affine", None, {"x": np.ones((1, 4), np.float32)})
        assert trace.cache is None and engine.cache_states() == []
    finally:
        await engine.close()


async def test_every_verb_is_cached_a_new_one_too(
    served: tuple[Engine, list[FakeRuntime]],
) -> None:
    """Reranking, a verb the cache was never told of, is cached like the others: its key is
    its arguments (the query, the texts, raw_scores)."""
    engine, made = served
    texts = ["good film", "awful film", "the film"]
    before = runs(engine, made)
    for query, raw, expected in (
        ("film", False, "miss"),
        ("film", False, "hit"),
        ("film", True, "miss"),  # raw_scores changes the answer
        ("the film", False, "miss"),  # so does the query
    ):
        trace = RequestTrace("r")
        with tracing(trace):
            await asks.rerank(engine, "ranker", query, texts, raw)
        assert trace.cache == expected
        assert trace.items == len(texts)  # a hit reports its texts as a run does
    assert runs(engine, made) == before + 3
    _, fresh = await asks.rerank(engine, "ranker", "film", texts)
    assert not fresh.scores.flags.writeable  # shared by every request it answers
    assert list(np.argsort(-fresh.scores)) == [0, 2, 1]
    stats = engine.registry.resolve("ranker").stats.as_dict()["inference_stats"]
    assert stats["cache_hit"]["count"] == 2 and stats["cache_miss"]["count"] == 3


async def test_each_keys_client_has_a_partition_of_its_own_unless_shared() -> None:
    alice = Client("alice", keyed=True)
    assert partition_of(alice, shared_across_keys=False) == "alice"
    assert partition_of(alice, shared_across_keys=True) == ""
    # without keys every caller is one tenant
    assert partition_of(address_client("10.0.0.1"), shared_across_keys=False) == ""
    assert partition_of(ANONYMOUS, shared_across_keys=False) == ""
    texts = (["the same text"],)
    assert await request_key("embed", texts, "alice") != await request_key("embed", texts, "bob")
    assert await request_key("embed", texts, "alice") == await request_key("embed", texts, "alice")
    assert await request_key("embed", texts) != await request_key("embed", texts, "alice")
