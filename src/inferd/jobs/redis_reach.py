"""Redis's errors as the job store's answers: a Redis that cannot be reached is 5030 for the
caller and one warning for the log while it lasts (inferd.jobs.reach); a Redis at its
`maxmemory` is 5030 too, saying so."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inferd.errors import UnavailableError
from inferd.jobs.reach import UNREACHABLE, Reach

RETRY_AFTER_S = 2.0
"""Retry-After of a 503 while Redis cannot be reached."""


@contextlib.asynccontextmanager
async def reaching(reach: Reach) -> AsyncIterator[None]:
    """Redis's connection errors as 5030, logged once while they last (`reach`)."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        reach.failed(f"{type(exc).__name__}: {exc}")
        raise UnavailableError(UNREACHABLE, retry_after_s=RETRY_AFTER_S) from exc
    except ResponseError as exc:
        if not str(exc).startswith("OOM"):
            raise
        raise UnavailableError(
            "the job store is full (Redis is at its maxmemory)", retry_after_s=RETRY_AFTER_S
        ) from exc
    reach.answered()
