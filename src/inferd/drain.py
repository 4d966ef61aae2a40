"""A drain's wait: what stops taking work (a batcher, a generation scheduler, the server's
admission) waits for its last admitted work to end, within a bound."""

from __future__ import annotations

import asyncio


async def ended_within(idle: asyncio.Event, timeout_s: float) -> bool:
    """Whether `idle` is set within `timeout_s` (at once when it is set now)."""
    try:
        await asyncio.wait_for(idle.wait(), timeout_s)
    except TimeoutError:
        return False
    return True
