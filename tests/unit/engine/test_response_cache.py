"""The response cache's store: hits, the byte budget (least recently used first), the time to
live, and single flight (identical requests run once; a failure is never shared)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from inferd.engine.requests.response_cache import COALESCED, HIT, MISS, ResponseCache
from inferd.errors import DeadlineExceededError
from tests.fakes import Clock


def counting(value: str) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    runs: list[int] = []

    async def run() -> str:
        runs.append(1)
        return value

    return runs, run


async def test_a_second_lookup_hits_and_returns_the_same_answer() -> None:
    cache: ResponseCache[str] = ResponseCache(1000, 60)
    runs, run = counting("answer")
    first = await cache.get_or_run(b"k", run, len, None)
    second = await cache.get_or_run(b"k", run, len, None)
    assert first == ("answer", MISS) and second == ("answer", HIT)
    assert len(runs) == 1
    assert (cache.hits, cache.misses, cache.entries, cache.bytes) == (1, 1, 1, len("answer"))


async def test_the_least_recently_used_answer_goes_first_when_the_budget_is_passed() -> None:
    cache: ResponseCache[str] = ResponseCache(10, 60)

    async def value(text: str) -> str:
        return text

    await cache.get_or_run(b"a", lambda: value("aaaa"), len, None)
    await cache.get_or_run(b"b", lambda: value("bbbb"), len, None)
    await cache.get_or_run(b"a", lambda: value("never"), len, None)  # a is now the most recent
    await cache.get_or_run(b"c", lambda: value("cccc"), len, None)  # 12 bytes > 10: b goes
    assert cache.evictions == 1 and cache.bytes == 8 and cache.entries == 2
    assert (await cache.get_or_run(b"a", lambda: value("x"), len, None))[1] == HIT
    assert (await cache.get_or_run(b"b", lambda: value("bbbb"), len, None))[1] == MISS


async def test_an_answer_larger_than_the_budget_is_not_kept() -> None:
    cache: ResponseCache[str] = ResponseCache(4, 60)

    async def big() -> str:
        return "0123456789"

    await cache.get_or_run(b"k", big, len, None)
    assert cache.entries == 0 and cache.bytes == 0
    assert (await cache.get_or_run(b"k", big, len, None))[1] == MISS


async def test_an_answer_expires_after_its_time_to_live() -> None:
    clock = Clock()
    cache: ResponseCache[str] = ResponseCache(1000, 30, clock)
    runs, run = counting("v")
    await cache.get_or_run(b"k", run, len, None)
    clock.now = 29.9
    assert (await cache.get_or_run(b"k", run, len, None))[1] == HIT
    clock.now = 30.0  # a hit does not extend its life
    assert (await cache.get_or_run(b"k", run, len, None))[1] == MISS
    assert len(runs) == 2 and cache.expirations == 1 and cache.entries == 1


async def test_identical_requests_arriving_while_the_first_runs_wait_for_it() -> None:
    cache: ResponseCache[str] = ResponseCache(1000, 60)
    release = asyncio.Event()
    runs: list[int] = []

    async def slow() -> str:
        runs.append(1)
        await release.wait()
        return "shared"

    tasks = [asyncio.create_task(cache.get_or_run(b"k", slow, len, None)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert len(runs) == 1
    release.set()
    results = await asyncio.gather(*tasks)
    assert sorted(how for _, how in results) == [COALESCED] * 4 + [MISS]
    assert {value for value, _ in results} == {"shared"}
    assert (cache.misses, cache.coalesced, cache.hits) == (1, 4, 0)


async def test_a_failure_is_not_shared_the_waiters_run_themselves() -> None:
    cache: ResponseCache[str] = ResponseCache(1000, 60)
    release = asyncio.Event()
    calls: list[str] = []

    async def first() -> str:
        calls.append("first")
        await release.wait()
        raise RuntimeError("the first request's batch failed")

    async def second() -> str:
        calls.append("second")
        return "fine"

    leader = asyncio.create_task(cache.get_or_run(b"k", first, len, None))
    await asyncio.sleep(0)
    follower = asyncio.create_task(cache.get_or_run(b"k", second, len, None))
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(RuntimeError):
        await leader
    assert await follower == ("fine", MISS)
    assert calls == ["first", "second"]


async def test_a_cancelled_first_request_leaves_its_waiters_to_run() -> None:
    cache: ResponseCache[str] = ResponseCache(1000, 60)

    async def forever() -> str:
        await asyncio.Event().wait()
        return "never"

    async def quick() -> str:
        return "quick"

    leader = asyncio.create_task(cache.get_or_run(b"k", forever, len, None))
    await asyncio.sleep(0)
    follower = asyncio.create_task(cache.get_or_run(b"k", quick, len, None))
    await asyncio.sleep(0.01)
    leader.cancel()  # its client went away
    assert await follower == ("quick", MISS)


async def test_a_waiter_past_its_deadline_gets_5040_and_the_first_one_goes_on() -> None:
    cache: ResponseCache[str] = ResponseCache(1000, 60)
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "late"

    leader = asyncio.create_task(cache.get_or_run(b"k", slow, len, None))
    await asyncio.sleep(0)
    deadline = asyncio.get_running_loop().time() + 0.02
    with pytest.raises(DeadlineExceededError):
        await cache.get_or_run(b"k", slow, len, deadline)
    release.set()
    assert await leader == ("late", MISS)
    assert (await cache.get_or_run(b"k", slow, len, None))[1] == HIT
