"""The choices of an OpenAI generation request: `n` answers to each prompt (which share its
prefill, each drawing from its own seed: seed + i), started all or none, gathered whole or
merged into one stream, and their usage (each prompt's tokens counted once)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from starlette.requests import Request

from inferd.engine import Engine, Generation
from inferd.errors import InvalidInputError, TooManyItemsError
from inferd.generation.chat import Prompt
from inferd.generation.params import SamplingRequest
from inferd.generation.sequence import Finished
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.routes.generate import usage

MAX_CHOICES = 16
"""`n` at most."""


def choice_count(n: int | None) -> int:
    """A request's `n` (1 when unset; 4004 below 1, 4005 over `MAX_CHOICES`)."""
    count = 1 if n is None else n
    if count < 1:
        raise InvalidInputError(f"n must be at least 1; got {count}", param="n")
    if count > MAX_CHOICES:
        raise TooManyItemsError(f"n is {count}; the limit is {MAX_CHOICES}", param="n")
    return count


async def start(
    engine: Engine, model: str | None, prompts: Sequence[Prompt], sampling: SamplingRequest, n: int
) -> list[Generation]:
    """`n` generations of each prompt, in order (choice index: prompt x n + i); all or none."""
    generations: list[Generation] = []
    try:
        for prompt in prompts:
            generations += await engine.start_generations(model, prompt, sampling, n)
    except BaseException:
        for g in generations:
            g.close()
        raise
    return generations


async def whole(request: Request, generations: list[Generation]) -> list[Finished]:
    """Every generation's end (all stopped when the client goes away)."""
    try:
        async with cancel_on_disconnect(request.receive):
            return list(await asyncio.gather(*(g.result() for g in generations)))
    finally:
        for g in generations:
            g.close()


async def merged(generations: list[Generation]) -> AsyncIterator[tuple[int, str | Finished]]:
    """Every generation's events as they come, with its index; raises the first error."""
    queue: asyncio.Queue[tuple[int, str | Finished | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, generation: Generation) -> None:
        try:
            async for event in generation.stream():
                queue.put_nowait((index, event))
        except Exception as exc:
            queue.put_nowait((index, exc))
        finally:
            queue.put_nowait((index, None))

    tasks = [asyncio.create_task(pump(i, g)) for i, g in enumerate(generations)]
    open_streams = len(generations)
    try:
        while open_streams:
            index, event = await queue.get()
            if event is None:
                open_streams -= 1
            elif isinstance(event, BaseException):
                raise event
            else:
                yield index, event
    finally:
        for task in tasks:
            task.cancel()
        for g in generations:
            g.close()


def total_usage(results: Sequence[Finished], n: int) -> dict[str, int]:
    """The request's usage: every answer's tokens, each prompt's once (not once a choice)."""
    total = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for i, done in enumerate(results):
        counted = usage(done)
        if i % n:
            counted["total_tokens"] -= counted["prompt_tokens"]
            counted["prompt_tokens"] = 0
        for key, value in counted.items():
            total[key] += value
    return total
