"""Rollout routing and judging on fake runtimes: route keys keep their version, raising the
candidate's share moves only the keys it must, a window without enough traffic holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inferd.engine import Engine
from inferd.errors import NotFoundError
from tests.unit.engine.repo import add_model, engine_for


async def rollout_engine(tmp_path: Path, rollout: dict[str, object]) -> Engine:
    add_model(tmp_path, "affine", {"rollout": rollout})
    engine = engine_for(tmp_path)
    await engine.load_all()
    (tmp_path / "affine" / "2").mkdir()
    (tmp_path / "affine" / "2" / "model.onnx").write_bytes(b"placeholder: a fake runtime")
    state = await engine.rollouts.start("affine", None)
    assert (state["stable"], state["candidate"], state["status"]) == (1, 2, "running")
    return engine


async def test_keys_keep_their_version_and_a_raise_moves_only_its_share(tmp_path: Path) -> None:
    engine = await rollout_engine(tmp_path, {"steps": [5, 20, 100], "analysis_window_s": 3600})
    rollouts = engine.rollouts
    keys = [f"user-{i}" for i in range(1000)]
    before = {}
    for key in keys:
        chosen = {rollouts.router.choose("affine", key) for _ in range(200)}
        assert len(chosen) == 1, (key, chosen)
        before[key] = chosen.pop()
    canary = sum(route == "canary" for _, route in before.values()) / len(keys)
    assert canary == pytest.approx(0.05, abs=0.02)
    # the baseline (a second instance of version 1) takes as large a share as the candidate
    baseline = sum(route == "baseline" for _, route in before.values()) / len(keys)
    assert baseline == pytest.approx(0.05, abs=0.02)
    assert all(version == 1 for version, route in before.values() if route == "baseline")
    record = rollouts.policy.record("affine")
    assert record is not None
    record.step, record.weight = 1, 0.2  # 5% -> 20%
    after = {key: rollouts.router.choose("affine", key) for key in keys}
    moved = [k for k in keys if after[k][0] != before[k][0]]  # keys whose version changed
    assert all(before[k][0] == 1 and after[k] == (2, "canary") for k in moved)
    assert len(moved) / len(keys) == pytest.approx(0.15, abs=0.02)
    baseline = sum(route == "baseline" for _, route in after.values()) / len(keys)
    assert baseline == pytest.approx(0.2, abs=0.03)
    assert rollouts.router.choose("other", "user-1") is None  # no rollout: the usual version
    await engine.close()


async def test_a_window_without_enough_traffic_holds_and_says_so(tmp_path: Path) -> None:
    engine = await rollout_engine(
        tmp_path, {"steps": [10, 100], "analysis_window_s": 0.2, "min_requests": 50}
    )
    for _ in range(40):
        await asyncio.sleep(0.05)
        if engine.rollouts.view.status("affine")["status"] == "holding":
            break
    state = engine.rollouts.view.status("affine")
    assert state["status"] == "holding" and state["weight"] == pytest.approx(0.1)
    assert "not enough traffic to judge: 0 candidate and 0 baseline requests" in state["reason"]
    assert [d["decision"] for d in state["decisions"]] == ["start", "hold"]
    promoted = await engine.rollouts.promote("affine")
    assert promoted["status"] == "promoted"
    assert sorted(engine.registry.versions_map("affine")) == [2]
    assert (tmp_path / ".inferd" / "rollouts" / "affine.json").is_file()
    await engine.close()


async def test_a_promotion_outlives_a_restart_with_a_pinned_policy(tmp_path: Path) -> None:
    add_model(
        tmp_path,
        "affine",
        {"version_policy": {"specific": [1]}, "rollout": {"analysis_window_s": 3600}},
    )
    engine = engine_for(tmp_path)
    await engine.load_all()
    (tmp_path / "affine" / "2").mkdir()
    (tmp_path / "affine" / "2" / "model.onnx").write_bytes(b"placeholder: a fake runtime")
    await engine.rollouts.start("affine", 2)
    await engine.rollouts.promote("affine")
    await engine.close()
    again = engine_for(tmp_path)  # the policy still names version 1
    await again.load_all()
    assert sorted(again.registry.versions_map("affine")) == [2]
    assert again.registry.resolve("affine").version == 2
    await again.close()


async def test_a_step_asked_to_judge_agreement_holds_without_comparisons(tmp_path: Path) -> None:
    engine = await rollout_engine(
        tmp_path,
        {
            "steps": [50, 100],
            "analysis_window_s": 0.2,
            "min_requests": 5,
            "shadow_percent": 100,
            "max_latency_ratio": 1000,
        },
    )
    rollouts = engine.rollouts
    for _ in range(20):  # candidate traffic enough to judge, but no shadow compared
        rollouts.router.record("affine", 2, False, 0.001, 0.0, "canary")
        rollouts.router.record("affine", 1, False, 0.001, 0.0, "stable")
    for _ in range(40):
        await asyncio.sleep(0.05)
        if rollouts.view.status("affine")["status"] != "running":
            break
    state = rollouts.view.status("affine")
    assert state["status"] == "holding", state["decisions"]
    assert "not enough shadowed requests to judge agreement: 0 compared" in state["reason"]
    await engine.close()


async def test_a_served_model_without_a_rollout_says_none_and_an_unknown_one_is_not_found(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, "affine", {})
    engine = engine_for(tmp_path)
    await engine.load_all()
    try:
        state = engine.rollouts.view.status("affine")
        assert (state["model"], state["status"], state["decisions"]) == ("affine", "none", [])
        with pytest.raises(NotFoundError, match="unknown model 'absent'"):
            engine.rollouts.view.status("absent")
    finally:
        await engine.close()
