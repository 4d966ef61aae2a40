from __future__ import annotations

import logging

import numpy as np
import pytest

from inferd.observability.drift import DriftMonitor


def normal_lengths(rng: np.random.Generator, n: int) -> list[int]:
    return [int(x) for x in np.clip(rng.lognormal(3.0, 0.6, n), 4, 200)]


def test_psi_stays_low_for_the_same_population() -> None:
    rng = np.random.default_rng(0)
    monitor = DriftMonitor("m", reference_size=500, window=300, threshold=0.2)
    assert monitor.observe(normal_lengths(rng, 500)) == {}  # still filling the reference
    result = monitor.observe(normal_lengths(rng, 300))
    assert result["input_length"] < 0.1


def test_psi_crosses_the_threshold_when_inputs_collapse(caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(1)
    monitor = DriftMonitor("m", reference_size=500, window=300, threshold=0.2)
    monitor.observe(normal_lengths(rng, 800))
    with caplog.at_level(logging.WARNING, logger="inferd.observability.drift"):
        result = monitor.observe([3] * 300)  # empty-ish texts: a couple of tokens each
    assert result["input_length"] > 0.2
    assert any("drift" in r.getMessage() for r in caplog.records)
    # one warning per crossing, not one per request
    with caplog.at_level(logging.WARNING, logger="inferd.observability.drift"):
        caplog.clear()
        monitor.observe([3] * 10)
    assert not caplog.records


def test_reference_from_samples_and_confidence_feature() -> None:
    reference = {"input_length": [20] * 100, "top_confidence": [0.95] * 100}
    monitor = DriftMonitor("m", reference_size=1000, window=50, reference=reference)
    result = monitor.observe([20] * 50, [0.4] * 50)
    assert result["input_length"] < 0.01
    assert result["top_confidence"] > 1.0
