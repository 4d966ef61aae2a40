"""The knee finder on synthetic sweeps, and the pieces of a workload that need no server."""

from __future__ import annotations

import random

import pytest

from inferd.bench.knee import find_knee, past_knee, within_budget
from inferd.bench.variants import parse_setting, set_dotted
from inferd.bench.workload import Lengths, WorkloadError, generate_texts, text_body


def test_the_knee_is_the_step_before_latency_stops_paying() -> None:
    throughput = [100, 190, 350, 600, 640, 650]
    p99 = [10, 11, 13, 18, 40, 90]
    knee = find_knee(throughput, p99, levels=[1, 2, 4, 8, 16, 32])
    assert knee.found and knee.index == 3  # concurrency 16: p99 +122% for +7% throughput
    assert "from level 8 to 16, p99 rose 122% while throughput changed +7%" in knee.reason


def test_no_knee_when_throughput_keeps_growing() -> None:
    knee = find_knee([100, 200, 400, 800], [10, 12, 25, 60])
    assert not knee.found and knee.index == 3  # the best step, said plainly


def test_thresholds_are_parameters() -> None:
    throughput, p99 = [100, 150, 160], [10, 14, 30]
    assert find_knee(throughput, p99).index == 1
    assert not find_knee(throughput, p99, p99_rise=2.0).found
    assert find_knee(throughput, p99, p99_rise=0.3, gain=0.6).index == 0
    assert not past_knee([100], [10]) and past_knee(throughput, p99)


def test_a_flat_then_noisy_sweep_does_not_fool_it() -> None:
    # latency jitter alone (throughput still growing) is not a knee
    knee = find_knee([100, 210, 300, 420], [10, 20, 19, 25])
    assert not knee.found


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("fixed:12", 12, 12), ("uniform:5-9", 5, 9), ("loguniform:8-128", 8, 128)],
)
def test_lengths(text: str, low: int, high: int) -> None:
    lengths = Lengths.parse(text)
    rng = random.Random(0)
    drawn = [lengths.draw(rng) for _ in range(500)]
    assert min(drawn) >= low and max(drawn) <= high


@pytest.mark.parametrize("bad", ["fixed", "uniform:9-5", "normal:3", "uniform:a-b", ""])
def test_bad_lengths_are_refused(bad: str) -> None:
    with pytest.raises(WorkloadError, match="fixed:N"):
        Lengths.parse(bad)


def test_generated_texts_are_deterministic_and_sized() -> None:
    texts = generate_texts(50, Lengths.parse("uniform:5-20"), seed=3)
    assert texts == generate_texts(50, Lengths.parse("uniform:5-20"), seed=3)
    assert texts != generate_texts(50, Lengths.parse("uniform:5-20"), seed=4)
    assert all(5 <= len(t.split()) <= 20 for t in texts)


def test_bodies_per_endpoint() -> None:
    assert text_body("embed", ["a"], "m", 8) == {"texts": ["a"], "model": "m"}
    assert text_body("v1-embeddings", ["a"], None, 8) == {"input": "a"}
    assert text_body("generate", ["a"], None, 8)["max_length"] == 8
    with pytest.raises(WorkloadError):
        text_body("nope", ["a"], None, 8)


def test_settings_are_yaml_values_under_dotted_keys() -> None:
    config: dict[str, object] = {"dynamic_batching": {"max_queue_size": 10}}
    for text in (
        "max_batch_size=8",
        "dynamic_batching.max_queue_delay_ms=2.5",
        "version_policy={specific: [1, 3]}",
    ):
        set_dotted(config, *parse_setting(text))
    assert config == {
        "dynamic_batching": {"max_queue_size": 10, "max_queue_delay_ms": 2.5},
        "max_batch_size": 8,
        "version_policy": {"specific": [1, 3]},
    }
    with pytest.raises(ValueError):
        parse_setting("novalue")


def _trial(settings: dict[str, object], rates: list[float], p50s: list[float]) -> object:
    from inferd.bench.steps import Step
    from inferd.bench.tune import Trial

    steps = [
        Step(
            mode="closed", level=level, requests=100, ok=100, elapsed_s=1.0,
            requests_per_s=rate, items_per_s=rate, p50_ms=p50, p90_ms=p50, p95_ms=p50,
            p99_ms=p50 * 2, max_ms=p50 * 3, errors={}, dropped=0, server=None,
        )
        for level, rate, p50 in zip([1, 4, 16], rates, p50s, strict=True)
    ]  # fmt: skip
    return Trial(settings, steps, max(steps, key=lambda s: s.requests_per_s))


def test_tune_prefers_the_faster_lone_request_when_throughput_ties() -> None:
    from inferd.bench.tune import recommend

    narrow = _trial({"solo_threads": 0}, [60, 130, 160], [16, 30, 90])
    solo = _trial({"solo_threads": "auto"}, [85, 128, 157], [11, 31, 92])  # -2%: a tie
    small = _trial({"max_batch_size": 1}, [86, 100, 110], [10, 40, 140])  # much less at load
    assert recommend([narrow, solo, small]) is solo  # type: ignore[list-item]
    faster = _trial({"instance_count": 4}, [55, 140, 180], [18, 28, 80])  # +15%: not a tie
    assert recommend([narrow, solo, faster]) is faster  # type: ignore[list-item]


def test_without_a_budget_the_knee_says_what_it_assumed() -> None:
    throughput, p99 = [100, 200, 400, 800], [10, 12, 25, 4700]
    knee = within_budget(find_knee(throughput, p99), throughput, p99, None)
    assert knee.index == 3 and "no p99 budget given" in knee.reason
    assert "--p99-budget-ms" in knee.reason


def test_a_budget_picks_the_most_throughput_within_it() -> None:
    throughput, p99 = [100, 200, 400, 800], [10, 12, 25, 4700]
    levels = [1, 2, 4, 8]
    knee = within_budget(find_knee(throughput, p99), throughput, p99, 30, levels)
    assert knee.index == 2 and "within the budget of 30 ms" in knee.reason


def test_a_budget_no_step_meets_says_so_and_points_at_the_lowest_p99() -> None:
    throughput, p99 = [100, 200, 400], [50, 40, 90]
    knee = within_budget(find_knee(throughput, p99), throughput, p99, 10, [1, 2, 4])
    assert knee.index == 1
    assert knee.reason == (
        "no step met the p99 budget of 10 ms; the lowest p99 was 40.0 ms at level 2"
    )
