"""A step's rates count its steady part: not the load building up, not the drain after the
sending stopped; its latencies and errors count every request."""

from __future__ import annotations

import pytest

from inferd.bench.load import LoadRun, Sample
from inferd.bench.steps import MIN_STEADY, summarize


def answers(times: list[float], latency_s: float = 0.5, status: int = 200) -> list[Sample]:
    return [
        Sample(
            latency_s,
            status,
            0 if status == 200 else 5030,
            tokens=8 if status == 200 else 0,  # as the load client records them
            done_s=t,
        )
        for t in times
    ]


def test_rates_leave_out_the_build_up_and_the_drain() -> None:
    # sending for 8 s; a batching server answers nothing in the first 1.5 s, then 10 a second;
    # the drain: 40 answers in the 4 s after the sending stopped
    steady = [1.5 + i / 10 for i in range(65)]  # 1.5 .. 7.9
    drain = [8.1 + i / 10 for i in range(40)]
    run = LoadRun(answers(steady + drain), elapsed_s=12.1, sending_s=8.0)
    step = summarize("closed", 16, run, items_per_request=2, server=None)
    # from 2 s (a quarter of 8) to 8 s: 60 answers in 6 s
    assert step.requests_per_s == pytest.approx(10.0)
    assert step.items_per_s == pytest.approx(20.0)
    assert step.tokens_per_s == pytest.approx(80.0)
    assert step.requests == step.ok == 105  # every request counted in the step's totals
    assert step.elapsed_s == 12.1


def test_failures_in_the_steady_part_are_not_throughput() -> None:
    good = answers([2 + i / 10 for i in range(50)])  # 2.0 .. 6.9
    failed = answers([2.05 + i / 10 for i in range(50)], status=503)
    run = LoadRun(good + failed, elapsed_s=9.0, sending_s=8.0)
    step = summarize("closed", 4, run, items_per_request=1, server=None)
    assert step.requests_per_s == pytest.approx(50 / 6)
    assert step.errors == {"5030": 50}
    assert step.tokens_per_s == pytest.approx(8 * 50 / 6)
    assert step.requests == 100 and step.ok == 50


def test_too_few_steady_answers_fall_back_to_the_whole_step() -> None:
    times = [0.5 + i for i in range(MIN_STEADY - 1)]
    run = LoadRun(answers(times), elapsed_s=float(MIN_STEADY), sending_s=float(MIN_STEADY - 1))
    step = summarize("closed", 1, run, items_per_request=1, server=None)
    assert step.requests_per_s == pytest.approx((MIN_STEADY - 1) / MIN_STEADY)
