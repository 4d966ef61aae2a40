"""Each servable kind through the engine, on fake runtimes: what it answers, what it refuses
(with the code and a message naming what the model does), and what it reports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from inferd.engine import Engine
from inferd.errors import InvalidInputError, NotFoundError
from inferd.generation.params import SamplingRequest
from inferd.observability.observer import BatchRan, Event, Observer, TextsServed
from inferd.observability.trace import RequestTrace, tracing
from tests.unit.engine import asks
from tests.unit.engine.repo import demo_like, engine_for


class Recorder(Observer):
    def __init__(self) -> None:
        self.texts: list[tuple[str, list[int], list[str] | None]] = []
        self.batches: list[tuple[str, int]] = []

    def observe(self, event: Event) -> None:
        if isinstance(event, TextsServed):
            labels = None if event.top_labels is None else list(event.top_labels)
            self.texts.append((event.model, list(event.token_counts), labels))
        elif isinstance(event, BatchRan):
            self.batches.append((event.model, event.record.rows))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Engine, Recorder]]:
    recorder = Recorder()
    engine = engine_for(demo_like(tmp_path), recorder)
    await engine.load_all()
    yield engine, recorder
    await engine.close()


async def test_everything_loads_and_is_ready(served: tuple[Engine, Recorder]) -> None:
    engine, _ = served
    readiness = engine.readiness(strict=True)
    assert readiness.ready, readiness.reason
    kinds = {v.model: v.servable.kind for v in engine.registry.all_versions()}
    assert kinds == {
        "affine": "a tensor model",
        "encoder": "an embedding model",
        "sentiment": "a text classifier",
        "mood": "a zero-shot classifier",
    }


async def test_a_tensor_model_infers_and_names_its_outputs(
    served: tuple[Engine, Recorder],
) -> None:
    engine, recorder = served
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    trace = RequestTrace("r1")
    with tracing(trace):
        version, out = await asks.infer(engine, "affine", None, {"x": x}, ["y"])
    np.testing.assert_array_equal(out["y"], x * 2 + 1)
    assert (version.model, version.version) == ("affine", 1)
    assert (trace.model, trace.version, trace.items, trace.batch_size) == ("affine", "1", 2, 2)
    assert ("affine", 2) in recorder.batches
    assert version.stats.as_dict()["inference_stats"]["success"]["count"] == 1
    with pytest.raises(InvalidInputError, match=r"unknown output\(s\) \['z'\]"):
        await asks.infer(engine, "affine", None, {"x": x}, ["z"])
    with pytest.raises(InvalidInputError):
        await asks.infer(engine, "affine", None, {"x": x.reshape(4, 2)})
    assert version.stats.as_dict()["inference_stats"]["fail"]["count"] == 2


async def test_a_tensor_model_refuses_text_requests(served: tuple[Engine, Recorder]) -> None:
    engine, _ = served
    with pytest.raises(InvalidInputError, match="'affine' is a tensor model; it does not embed"):
        await asks.embed(engine, "affine", ["good"])
    with pytest.raises(InvalidInputError, match="does not classify texts"):
        await asks.classify(engine, "affine", ["good"])


async def test_an_embedding_model_embeds_pooled_and_normalized(
    served: tuple[Engine, Recorder],
) -> None:
    engine, recorder = served
    version, result = await asks.embed(engine, "encoder", ["good film", "bad"])
    assert version.model == "encoder" and result.token_counts == [2, 1]
    assert result.vectors.shape == (2, 4)
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, rtol=1e-6)
    assert result.vectors[0, 0] > result.vectors[0, 1] and result.vectors[1, 1] > 0.9
    assert ("encoder", [2, 1], None) in recorder.texts
    _, over_v2 = await asks.infer(
        engine, "encoder", None, {"text": np.array(["good film", "bad"], dtype=object)}
    )
    np.testing.assert_allclose(over_v2["embedding"], result.vectors, rtol=1e-6)
    with pytest.raises(InvalidInputError, match="one BYTES input named 'text'"):
        await asks.infer(engine, "encoder", None, {"x": np.zeros((1, 4), np.float32)})
    with pytest.raises(InvalidInputError, match="an embedding model; it does not classify"):
        await asks.classify(engine, "encoder", ["good"])


async def test_a_text_classifier_labels_texts(served: tuple[Engine, Recorder]) -> None:
    engine, recorder = served
    _, result = await asks.classify(engine, "sentiment", ["good great film", "awful"], k=2)
    assert [p.labels for p in result.predictions] == [
        ["positive", "negative"],
        ["negative", "positive"],
    ]
    assert result.probabilities.shape == (2, 2)
    assert ("sentiment", [3, 1], ["positive", "negative"]) in recorder.texts
    _, out = await asks.infer(
        engine, "sentiment", None, {"text": np.array([["bad"]], dtype=object)}
    )
    assert list(out["label"]) == ["negative"] and out["probabilities"].shape == (1, 2)


async def test_zero_shot_scores_over_its_base_model(served: tuple[Engine, Recorder]) -> None:
    engine, recorder = served
    version, result = await asks.classify(engine, "mood", ["great film", "awful film"])
    assert [p.labels[0] for p in result.predictions] == ["happy", "sad"]
    assert version.servable.providers == ("FakeExecutionProvider",)
    models = [m for m, _, _ in recorder.texts]
    assert models[-2:] == ["encoder", "mood"]  # the base's texts, then the classifier's
    with pytest.raises(InvalidInputError, match="zero-shot classifier; it does not embed"):
        await asks.embed(engine, "mood", ["good"])


async def test_a_request_naming_no_model_needs_a_default(served: tuple[Engine, Recorder]) -> None:
    engine, _ = served
    version, _ = await asks.embed(engine, None, ["good"])  # the one embedding model
    assert version.model == "encoder"
    with pytest.raises(InvalidInputError, match="none is the default"):
        await asks.classify(engine, None, ["good"])  # sentiment and mood
    with pytest.raises(NotFoundError, match="no model here can generate"):
        await engine.start_generation(None, "hello", SamplingRequest())


async def test_a_failing_observer_breaks_no_request(tmp_path: Path) -> None:
    class Broken(Observer):
        def observe(self, event: Event) -> None:  # texts served, batches run
            raise RuntimeError("observer bug")

    engine = engine_for(demo_like(tmp_path), Broken())
    await engine.load_all()
    try:
        _, result = await asks.classify(engine, "sentiment", ["good"])
        assert result.predictions[0].labels == ["positive"]
        _, out = await asks.infer(engine, "affine", None, {"x": np.ones((1, 4), np.float32)})
        assert out["y"].tolist() == [[3.0] * 4]
    finally:
        await engine.close()
