"""Jobs keep to their share of the time while clients come, and run back to back when none
have come for a while."""

from __future__ import annotations

import pytest

from inferd.jobs.machine_share import JobShare
from tests.fakes import Clock


def test_a_job_is_followed_by_its_pause_while_clients_come() -> None:
    clock = Clock(100.0)
    idle = 0.0  # a client request just now
    share = JobShare(0.25, lambda: idle, quiet_s=1.0, clock=clock)
    assert share.ready()
    share.spent(0.010)  # a 10 ms job at a quarter of the time: 30 ms without one
    assert not share.ready()
    clock.now += 0.029
    assert not share.ready()
    clock.now += 0.002
    assert share.ready()
    # two jobs ending together (concurrency 2) owe both pauses, one after the other
    share.spent(0.010)
    share.spent(0.010)
    clock.now += 0.031
    assert not share.ready()
    clock.now += 0.030
    assert share.ready()


def test_without_clients_jobs_run_back_to_back() -> None:
    clock = Clock(100.0)
    idle = 0.5
    share = JobShare(0.1, lambda: idle, quiet_s=1.0, clock=clock)
    share.spent(0.050)  # owes 450 ms while clients come
    assert not share.ready()
    idle = 1.0  # no client request for a second
    assert share.ready()


def test_a_whole_share_never_pauses() -> None:
    clock = Clock(100.0)
    share = JobShare(1.0, lambda: 0.0, quiet_s=1.0, clock=clock)
    share.spent(5.0)
    assert share.ready()


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5])
def test_a_share_is_a_fraction(bad: float) -> None:
    with pytest.raises(ValueError, match="share"):
        JobShare(bad, lambda: 0.0, quiet_s=1.0)
