"""What a drain's line counts as answered 5030 by an abort: the requests in flight that the
abort answered 5030, not those in flight whose answer was already made and still going out."""

from __future__ import annotations

import asyncio

import pytest

from inferd.config.server_settings import ServerSettings
from inferd.engine.requests.admission import Admission
from inferd.errors import UnavailableError


async def test_an_abort_counts_the_requests_it_answered_5030_and_no_others() -> None:
    admission = Admission(ServerSettings())
    answered = asyncio.Event()
    aborted = asyncio.Event()

    async def finishes() -> None:  # its answer made before the abort, still going out
        async with admission.admit():
            answered.set()
            await aborted.wait()

    async def cut() -> None:  # answered 5030 by the abort
        async with admission.admit():
            await aborted.wait()
            raise UnavailableError("the server is stopping")

    tasks = [asyncio.create_task(finishes()), asyncio.create_task(cut())]
    await answered.wait()
    with pytest.raises(UnavailableError):  # a 5030 before any abort: not the abort's
        async with admission.admit():
            raise UnavailableError("the model is unhealthy")
    admission.enter()  # a generation's slot, released as its stream ends (`leave`)
    assert admission.in_flight == 3
    admission.aborting = True
    aborted.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    admission.leave(unavailable=True)  # its sequence failed with 5030
    assert isinstance(results[1], UnavailableError) and results[0] is None
    assert admission.in_flight == 0
    assert admission.cut == 2
