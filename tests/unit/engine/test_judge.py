"""The rollout judge on samples recorded from real runs of the server
(benchmarks/results/rollout-samples.json: versions 1 and 2 of three models served side by
side, each request's server latency and outcome): pure calls, no clock, no I/O beyond
reading the recording once."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import orjson
import pytest

from inferd.config.model import RolloutConfig
from inferd.engine.rollout.judge import Outcome, Sample, Shadowed, judge, judge_early
from inferd.engine.rollout.statistics import fisher_greater, mann_whitney_greater

RECORDING = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "rollout-samples.json"


@cache
def recorded(model: str) -> list[list[float]]:
    return list(orjson.loads(RECORDING.read_bytes())["models"][model]["samples"])


def window(model: str, start: int, count: int) -> tuple[Sample, Sample]:
    """Both versions' requests among `count` consecutive recorded ones from `start`: the
    same stretch of time for both, as the server's windows are."""
    rows = recorded(model)[start : start + count]

    def sample(version: int) -> Sample:
        mine = [r for r in rows if r[1] == version]
        return Sample(
            len(mine), sum(int(r[3]) for r in mine), [r[2] / 1000 for r in mine], [0.0] * len(mine)
        )

    return sample(1), sample(2)


def test_an_identical_copy_passes_in_every_recorded_stretch() -> None:
    config = RolloutConfig()
    total = len(recorded("same"))
    for start in range(0, total - 400, 200):
        stable, candidate = window("same", start, 400)
        verdict = judge(stable, candidate, config)
        assert verdict.outcome is not Outcome.FAIL, (start, verdict.reason)
    stable, candidate = window("same", 0, total)
    assert judge(stable, candidate, config).outcome is Outcome.PASS


def test_a_slower_candidate_fails_on_p99_with_the_evidence_in_words() -> None:
    stable, candidate = window("slower", 0, 1000)
    verdict = judge(stable, candidate, RolloutConfig())
    assert verdict.outcome is Outcome.FAIL
    assert verdict.reason.startswith("p99 latency") and "p=" in verdict.reason


def test_two_percent_failures_fail_once_beyond_noise_and_hold_before() -> None:
    stable, candidate = window("flaky", 0, len(recorded("flaky")))
    assert candidate.failure_rate == pytest.approx(0.02, abs=0.002)
    verdict = judge(stable, candidate, RolloutConfig())
    assert verdict.outcome is Outcome.FAIL and verdict.reason.startswith("error rate")
    # the first requests of the recording: one failure of the candidate's first 50 or so
    stable, candidate = window("flaky", 0, 110)
    assert candidate.failures >= 1
    thin = judge(stable, candidate, RolloutConfig())
    assert thin.outcome is Outcome.HOLD and "not yet beyond noise" in thin.reason


def test_too_few_requests_in_either_arm_hold() -> None:
    stable, candidate = window("slower", 0, 60)
    verdict = judge(stable, candidate, RolloutConfig(min_requests=50))
    assert verdict.outcome is Outcome.HOLD
    assert verdict.reason.startswith("not enough traffic to judge")


def test_a_small_rise_is_not_worth_acting_on() -> None:
    stable, candidate = window("flaky", 0, len(recorded("flaky")))
    lenient = RolloutConfig(max_error_rate_increase=0.05)
    assert judge(stable, candidate, lenient).outcome is Outcome.PASS


def test_early_failures_need_a_stricter_level_and_agreement_is_judged_too() -> None:
    stable, candidate = window("flaky", 0, len(recorded("flaky")))
    config = RolloutConfig()
    early = judge_early(stable, candidate, config)
    assert early is not None and early.outcome is Outcome.FAIL
    same_stable, same_candidate = window("same", 0, 400)
    assert judge_early(same_stable, same_candidate, config) is None
    drifted = judge_early(same_stable, same_candidate, config, Shadowed(60, 0.5))
    assert drifted is not None and drifted.reason.startswith("agreement 50.0%")


def test_a_step_asked_to_judge_agreement_holds_without_comparisons() -> None:
    stable, candidate = window("same", 0, 400)
    config = RolloutConfig(shadow_percent=10, min_requests=20)
    verdict = judge(stable, candidate, config, Shadowed(3, 1.0), stable_share=0.9)
    assert verdict.outcome is Outcome.HOLD and "shadowed" in verdict.reason


def test_the_tests_match_their_reference_values() -> None:
    # reference values: scipy.stats (mannwhitneyu asymptotic, fisher_exact), one-sided
    assert fisher_greater(4, 25, 0, 200) == pytest.approx(1.2167837e-4, rel=1e-6)
    assert fisher_greater(1, 60, 0, 5940) == pytest.approx(0.01, rel=1e-6)
    assert fisher_greater(30, 1000, 20, 1000) == pytest.approx(0.098469762, rel=1e-6)
    assert fisher_greater(0, 10, 0, 10) == 1.0
    assert mann_whitney_greater([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) > 0.99
    assert mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(
        0.0060928902, rel=1e-6
    )
    assert mann_whitney_greater([1.0] * 5, [1.0] * 5) == 1.0
    assert mann_whitney_greater([], [1.0]) == 1.0


def test_queue_time_is_judged_only_when_asked() -> None:
    """The controller does not ask when the candidate takes the larger share (its queue
    grows with its share): the same samples fail on queue time, or pass without it."""
    stable, candidate = window("same", 0, 400)
    longer = Sample(
        candidate.requests,
        candidate.failures,
        candidate.latencies_s,
        [0.2 + 0.001 * (i % 7) for i in range(len(candidate.queue_s))],
    )
    shorter = Sample(
        stable.requests, stable.failures, stable.latencies_s, [0.001] * stable.requests
    )
    config = RolloutConfig(min_requests=20)
    failed = judge(shorter, longer, config)
    assert failed.outcome is Outcome.FAIL and "queue time" in failed.reason
    assert judge(shorter, longer, config, queue_judged=False).outcome is Outcome.PASS


def test_a_slower_median_under_a_tail_of_waiting_fails_too() -> None:
    """At a small share on shared cores the tail is mostly waiting for a core, the same in
    both arms; a model 1.5x slower still shows at the median."""
    waits = [0.05 + 0.0001 * i for i in range(20)]
    stable = Sample(200, 0, [0.010 + 0.00001 * i for i in range(180)] + waits, [0.0] * 200)
    slower = Sample(200, 0, [0.015 + 0.00001 * i for i in range(180)] + waits, [0.0] * 200)
    config = RolloutConfig(min_requests=20)
    verdict = judge(stable, slower, config)
    assert verdict.outcome is Outcome.FAIL and verdict.reason.startswith("median latency"), verdict
    assert judge(stable, stable, config).outcome is Outcome.PASS
