"""The registry's answers, admission, and the loader's start-up fallback, reload and unload,
on fake runtimes."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from inferd.engine import VersionState
from inferd.errors import InvalidInputError, NotFoundError, QueueFullError, UnavailableError
from tests.unit.engine import asks
from tests.unit.engine.repo import FakeRuntime, add_model, demo_like, engine_for, fake_loader

X = {"x": np.ones((1, 4), np.float32)}


async def test_resolve_names_versions_and_answers_404(tmp_path: Path) -> None:
    add_model(tmp_path, "affine", {"version_policy": {"all": True}}, versions=(1, 2))
    engine = engine_for(tmp_path)
    registry = engine.registry
    assert not engine.readiness(strict=True).ready  # loading
    assert engine.readiness(strict=True).reason == "loading models"
    await engine.load_all()
    assert registry.resolve("affine").version == 2  # the highest ready
    assert registry.resolve("affine", "1").version == 1
    assert [v.version for v in registry.versions_of("affine")] == [1, 2]
    with pytest.raises(NotFoundError, match=r"no served version '3'; served: \[1, 2\]"):
        registry.resolve("affine", "3")
    with pytest.raises(NotFoundError, match="no served version '²'"):
        registry.resolve("affine", "²")
    for bad in ("nope", "../etc", ""):
        with pytest.raises(NotFoundError):
            registry.resolve(bad)
    assert [r["version"] for r in registry.index()] == ["1", "2"]
    await engine.close()


async def test_a_broken_newest_version_falls_back_to_the_older_one(tmp_path: Path) -> None:
    add_model(tmp_path, "affine", {}, versions=(1, 2))  # latest: 1 selects version 2
    engine = engine_for(tmp_path, broken=["affine/2"])
    await engine.load_all()
    served = engine.registry.resolve("affine")
    assert served.version == 1 and served.ready
    failed = engine.registry.resolve("affine", "2")
    assert failed.state is VersionState.FAILED and failed.superseded
    assert "truncated" in (failed.reason or "")
    assert engine.readiness(strict=True).ready  # a superseded failure does not hold it back
    _, out = await asks.infer(engine, "affine", None, X)
    assert out["y"].tolist() == [[3.0] * 4]
    await engine.close()


async def test_a_failed_model_is_reported_and_the_others_serve(tmp_path: Path) -> None:
    demo_like(tmp_path)
    engine = engine_for(tmp_path, broken=["encoder/1"])
    await engine.load_all()
    readiness = engine.readiness(strict=True)
    assert not readiness.ready and "model 'encoder' version 1 failed" in readiness.reason
    assert "mood" in readiness.reason  # its base failed, so it did too
    assert engine.readiness(strict=False).ready
    with pytest.raises(UnavailableError, match=r"is not ready \(failed\): cannot read"):
        await asks.embed(engine, "encoder", ["good"])
    _, result = await asks.classify(engine, "sentiment", ["good"])
    assert result.predictions[0].labels == ["positive"]
    await engine.close()


async def test_admin_load_adds_a_version_and_a_failing_one_leaves_the_old(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, "affine", {})
    made: list[FakeRuntime] = []
    engine = engine_for(tmp_path)
    engine.loader._versions._runtime_loader = fake_loader(made=made)
    await engine.load_all()
    (tmp_path / "affine" / "2").mkdir()
    (tmp_path / "affine" / "2" / "model.onnx").write_bytes(b"placeholder")
    served, _ = await engine.load_model("affine")
    assert served.version == 2
    assert [v.version for v in engine.registry.versions_of("affine")] == [2]  # 1 retired
    assert made[0].closed  # the retired version's runtime is closed

    (tmp_path / "affine" / "3").mkdir()
    (tmp_path / "affine" / "3" / "model.onnx").write_bytes(b"placeholder")
    engine.loader._versions._runtime_loader = fake_loader(broken=["affine/3"])
    with pytest.raises(UnavailableError, match=r"did not load .*still serving: \[2\]"):
        await engine.load_model("affine")
    assert engine.registry.resolve("affine").version == 2

    await engine.unload_model("affine")
    with pytest.raises(NotFoundError):
        await asks.infer(engine, "affine", None, X)
    assert engine.registry.index() == [
        {"name": "affine", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    with pytest.raises(NotFoundError, match="no model folder 'ghost'"):
        await engine.load_model("ghost")
    await engine.close()


async def test_two_defaults_for_one_task_cannot_be_loaded(tmp_path: Path) -> None:
    demo_like(tmp_path)
    engine = engine_for(tmp_path)
    await engine.load_all()
    for name in ("first", "second"):
        add_model(
            tmp_path,
            name,
            {
                "task": "text-classification",
                "default": True,
                "classification": {"labels": ["positive", "negative"]},
                "tokenizer": {"max_tokens": 16},
            },
            tokenizer=True,
        )
    engine.loader._versions._runtime_loader = fake_loader(aliases={"first": "sentiment"})
    await engine.load_model("first")
    version, _ = await asks.classify(engine, None, ["good"])  # the default now
    assert version.model == "first"
    with pytest.raises(InvalidInputError, match="two models are the default of /predict"):
        await engine.load_model("second")
    with pytest.raises(InvalidInputError, match="zero-shot model follows its base"):
        await engine.load_model("mood")
    await engine.close()


async def test_admission_caps_in_flight_and_drain_waits(tmp_path: Path) -> None:
    add_model(tmp_path, "affine", {})
    engine = engine_for(tmp_path, max_in_flight=1)
    await engine.load_all()
    admission = engine.admission
    admission.enter()
    with pytest.raises(QueueFullError, match="1 requests in flight"):
        await asks.infer(engine, "affine", None, X)
    drained = asyncio.create_task(engine.drain(5))
    await asyncio.sleep(0)
    assert not drained.done() and not engine.readiness(strict=True).ready
    with pytest.raises(UnavailableError, match="shutting down"):
        await asks.infer(engine, "affine", None, X)
    admission.leave()
    assert await drained
    assert engine.readiness(strict=True).reason == "draining"
    await engine.close()


async def test_deadlines_come_from_the_client_the_model_or_the_server(tmp_path: Path) -> None:
    add_model(tmp_path, "affine", {"request_timeout_s": 7})
    engine = engine_for(tmp_path, request_timeout_s=60, max_request_timeout_s=10)
    config = engine.registry.resolve("affine").config
    now = asyncio.get_running_loop().time()
    assert engine.admission.deadline_for(config, None) == pytest.approx(now + 7, abs=0.5)
    assert engine.admission.deadline_for(config, 99) == pytest.approx(now + 10, abs=0.5)
    assert engine.admission.deadline_for(config, 2) == pytest.approx(now + 2, abs=0.5)


async def test_concurrent_loads_of_one_model_take_turns_and_leak_nothing(tmp_path: Path) -> None:
    add_model(tmp_path, "affine", {"instance_count": 2})
    made: list[FakeRuntime] = []
    engine = engine_for(tmp_path)
    engine.loader._versions._runtime_loader = fake_loader(made=made)
    await engine.load_all()
    (tmp_path / "affine" / "2").mkdir()
    (tmp_path / "affine" / "2" / "model.onnx").write_bytes(b"placeholder")
    served = await asyncio.gather(*(engine.load_model("affine") for _ in range(8)))
    assert {v.version for v, _ in served} == {2}
    assert len(made) == 4  # version 1 and version 2 once each, two instances each
    _, out = await asks.infer(engine, "affine", None, X)
    assert out["y"].tolist() == [[3.0] * 4]
    await asyncio.gather(engine.unload_model("affine"), engine.load_model("affine"))
    await engine.unload_model("affine")
    assert all(r.closed for r in made), "every runtime a load opened is closed after unload"
    await engine.close()


async def test_what_is_loaded_is_frozen_out_of_collections_and_an_unloaded_model_is_freed(
    tmp_path: Path,
) -> None:
    """When loading ends, what is alive is collected once and frozen (`gc.freeze`): later
    collections do not scan it. An unload unfreezes and collects first, so a model's objects
    held only in reference cycles are freed then, not kept for good."""
    add_model(tmp_path, "affine", {})
    made: list[FakeRuntime] = []
    engine = engine_for(tmp_path)
    engine.loader._versions._runtime_loader = fake_loader(made=made)
    try:
        await engine.load_all()
        assert gc.get_freeze_count() > 0
        (runtime,) = made
        runtime.cycle = runtime  # type: ignore[attr-defined]  # (freed only by a collection)
        gone = weakref.ref(runtime)
        del runtime, made[:]
        gc.collect()
        assert gone() is not None, "in use: the version serves"
        await engine.unload_model("affine")
        assert gone() is None, "the unloaded model's runtime, in a cycle, was collected"
        assert gc.get_freeze_count() > 0  # frozen again after the unload
    finally:
        await engine.close()
        gc.unfreeze()
