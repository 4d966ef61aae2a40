"""The status page's live window: figures over the last seconds, and how long since a request."""

from __future__ import annotations

from inferd.observability.live import LiveWindow
from tests.fakes import Clock


def test_figures_cover_the_window_and_idle_counts_from_the_last_request() -> None:
    clock = Clock(50.0)
    live = LiveWindow(window_s=10.0, clock=clock)
    clock.now += 3.0
    assert live.idle_s() == 3.0  # none yet: since the start
    for ms in (10, 20, 30, 40):
        live.record("m", ms / 1000, failed=ms == 40)
    clock.now += 0.25
    assert live.idle_s() == 0.25
    figures = live.figures()["m"]
    assert figures.p50_ms == 25.0
    assert abs(figures.requests_per_s - 4 / 3.25) < 1e-9  # the server has run 3.25 s
    assert abs(figures.errors_per_s - 1 / 3.25) < 1e-9
    clock.now += 20.0  # the samples leave the window
    assert live.figures()["m"].requests_per_s == 0.0
    assert live.idle_s() == 20.25
