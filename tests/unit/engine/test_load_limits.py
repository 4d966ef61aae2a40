"""A token bucket per client for on-demand loads, on an injected clock."""

from __future__ import annotations

import pytest

from inferd.clients import Client, address_client
from inferd.engine.resident import load_limits
from inferd.engine.resident.load_limits import LoadLimits
from inferd.errors import ErrorCode, TooManyLoadsError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_one_load_per_period_and_the_wait_in_retry_after() -> None:
    clock = Clock()
    limits = LoadLimits(6, 3, clock)  # one every 10 s, three at once
    client = address_client("10.0.0.1")
    for _ in range(3):
        limits.take(client, "model 'm' version 1")
    with pytest.raises(TooManyLoadsError) as caught:
        limits.take(client, "model 'm' version 1")
    refused = caught.value
    assert refused.code is ErrorCode.TOO_MANY_LOADS and int(refused.code) == 4291
    assert refused.retry_after_s == pytest.approx(10.0)
    assert (
        "client 'addr:10.0.0.1'" in refused.message and "6 a minute, 3 at once" in refused.message
    )
    clock.now += 4.0
    with pytest.raises(TooManyLoadsError) as caught:
        limits.take(client, "m")
    assert caught.value.retry_after_s == pytest.approx(6.0)
    clock.now += 6.0
    limits.take(client, "m")  # one token back
    clock.now += 1000.0
    for _ in range(3):  # full again, never more than the burst
        limits.take(client, "m")
    with pytest.raises(TooManyLoadsError):
        limits.take(client, "m")
    assert limits.refused == 3


def test_each_client_has_its_own_bucket_and_its_keys_settings_win() -> None:
    clock = Clock()
    limits = LoadLimits(6, 1, clock)
    limits.take(address_client("10.0.0.1"), "m")
    with pytest.raises(TooManyLoadsError):
        limits.take(address_client("10.0.0.1"), "m")
    limits.take(address_client("10.0.0.2"), "m")  # another client: its own bucket
    generous = Client("batch", loads_per_minute=60, load_burst=5, keyed=True)
    for _ in range(5):
        limits.take(generous, "m")
    with pytest.raises(TooManyLoadsError) as caught:
        limits.take(generous, "m")
    assert caught.value.retry_after_s == pytest.approx(1.0)
    unlimited = Client("ops", loads_per_minute=0, keyed=True)
    for _ in range(100):
        limits.take(unlimited, "m")
    # keys of one client (one name) share its bucket
    other_key_same_name = Client("batch", loads_per_minute=60, load_burst=5, keyed=True)
    with pytest.raises(TooManyLoadsError):
        limits.take(other_key_same_name, "m")


def test_a_server_rate_of_zero_is_no_limit() -> None:
    limits = LoadLimits(0, 3, Clock())
    for _ in range(100):
        limits.take(address_client("10.0.0.1"), "m")
    assert limits.refused == 0


def test_past_the_bound_on_clients_those_refilled_are_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(load_limits, "MAX_BUCKETS", 3)
    clock = Clock()
    limits = LoadLimits(6, 2, clock)
    for host in ("a", "b", "c"):
        limits.take(address_client(host), "m")
    clock.now += 5.0  # half a token back each: none full
    limits.take(address_client("d"), "m")
    assert len(limits._buckets) == 4
    clock.now += 6.0  # a, b, c full again (d not yet): forgotten when the next client comes
    limits.take(address_client("e"), "m")
    assert set(limits._buckets) == {"addr:d", "addr:e"}
