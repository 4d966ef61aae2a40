"""The verdict on a new version: timed until the interval is tight, refused when measurably
slower or larger (the tools' end-to-end refusals are in tests/prep). Timing runs on a simulated
clock that each run advances by its cost: nothing here depends on the machine's load."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from inferd.prep.console import Reporter
from inferd.prep.parity import Feeds, Runner
from inferd.prep.worth import (
    SpeedComparison,
    compare_speed,
    median_interval,
    refusals,
    refuse,
)

FEEDS = [{"x": np.zeros(1, np.float32)}]


class Clock:
    """Simulated seconds: a run advances it by what it costs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _costing(clock: Clock, seconds: float, jitter: float = 0.05) -> Runner:
    """A runner that takes `seconds`, give or take `jitter` of it (a repeating spread, as a
    real machine's noise)."""
    spread = itertools.cycle((1.0, 1.0 + jitter, 1.0 - jitter, 1.0 + jitter / 2))

    def run(feeds: Feeds) -> list[np.ndarray]:
        clock.now += seconds * next(spread)
        return []

    return run


def _speed(speedup: float, low: float, high: float) -> SpeedComparison:
    return SpeedComparison(speedup, low, high, 20, 3, 0.010, 0.010 / speedup)


def test_a_candidate_twice_as_slow_is_measured_slower() -> None:
    clock = Clock()
    source, candidate = _costing(clock, 0.0005), _costing(clock, 0.001)
    speed = compare_speed(source, candidate, FEEDS, min_rounds=10, budget_s=5, clock=clock)
    assert speed.slower and not speed.faster
    assert 0.45 < speed.speedup < 0.55 and speed.high < 1.0
    assert speed.rounds >= 10 and speed.batches == 1
    assert speed.source_s == pytest.approx(0.0005, rel=0.1)


def test_a_faster_candidate_passes() -> None:
    clock = Clock()
    source, candidate = _costing(clock, 0.001), _costing(clock, 0.0005)
    speed = compare_speed(source, candidate, FEEDS, min_rounds=10, budget_s=5, clock=clock)
    assert speed.faster and refusals(1.0, speed) == []


def test_rounds_stop_at_max_rounds_when_the_interval_stays_wide() -> None:
    clock = Clock()
    noisy = _costing(clock, 0.0002, jitter=0.9)  # a spread no rounds will tighten
    speed = compare_speed(
        noisy, noisy, FEEDS, min_rounds=5, max_rounds=12, tolerance=1e-6, clock=clock
    )
    assert speed.rounds == 12


def test_rounds_stop_at_the_time_budget() -> None:
    clock = Clock()
    noisy = _costing(clock, 1.0, jitter=0.9)  # a second a pass: the budget ends it
    speed = compare_speed(
        noisy, noisy, FEEDS, min_rounds=5, budget_s=30, tolerance=1e-6, clock=clock
    )
    assert 5 <= speed.rounds < 20


def test_the_interval_holds_the_median() -> None:
    median, low, high = median_interval([0.9, 1.0, 1.1, 0.95, 1.05] * 4)
    assert median == pytest.approx(1.0) and low <= median <= high and high - low < 0.2


def test_refused_only_when_measurably_slower_or_larger() -> None:
    assert refusals(1.0, _speed(0.97, 0.95, 1.01)) == []  # within noise: not slower
    slower = refusals(1.0, _speed(0.73, 0.70, 0.76))
    assert len(slower) == 1 and slower[0].startswith("slower than the source version: 0.73x")
    larger = refusals(2.08, _speed(1.2, 1.1, 1.3), "fp32")
    assert larger == ["larger than fp32: 2.08x its file size"]
    assert refusals(1.005, None) == []  # metadata bytes are not "larger"; no speed judged


def test_refuse_says_why_in_one_line_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    problems = ["larger than fp32: 2.08x its file size", "slower than fp32: 0.73x (...)"]
    assert refuse(Reporter(), problems, force=False, report=report)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "nothing written: larger than fp32" in err and "--force writes it anyway" in err
    assert not refuse(Reporter(), problems, force=True, report=report)
    assert "written despite" in capsys.readouterr().err
    assert not refuse(Reporter(), [], force=False, report=report)
