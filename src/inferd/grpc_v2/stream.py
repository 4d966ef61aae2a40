"""`ModelStreamInfer`'s flow: the stream's requests run as they arrive, at most `window` at a
time; responses go out as they are ready (a generation's in order).

Bounded, so that a client that writes and does not read is held back by HTTP/2's flow control
rather than by the server's memory: with `window` requests running the next one is not read,
and at most `window` responses wait to be sent (a request whose response finds them full
waits, holding its place in the window)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from inferd.errors import InferdError
from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.wire import InferCall

Put = Callable[[pb.ModelStreamInferResponse], Awaitable[None]]
"""Sends a response of the stream (waiting while `window` responses wait to be sent)."""
Answer = Callable[[InferCall | InferdError, Put], Awaitable[None]]
"""Answers one request of the stream (or the error that refused it) through `Put`."""


async def windowed(
    requests: AsyncIterator[InferCall | InferdError], window: int, answer: Answer
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    """The stream's responses, `answer` run for each request within the window."""
    slots = asyncio.Semaphore(window)
    out: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue(window)
    running: set[asyncio.Task[None]] = set()

    async def answer_one(item: InferCall | InferdError) -> None:
        try:
            await answer(item, out.put)
        finally:
            slots.release()

    async def read() -> None:
        incoming = aiter(requests)
        while True:
            await slots.acquire()
            try:
                item = await anext(incoming)
            except StopAsyncIteration:
                slots.release()
                break
            task = asyncio.get_running_loop().create_task(answer_one(item))
            running.add(task)
            task.add_done_callback(running.discard)
        while running:
            await asyncio.gather(*list(running), return_exceptions=True)
        await out.put(None)

    reader = asyncio.get_running_loop().create_task(read())
    try:
        while (response := await out.get()) is not None:
            yield response
    finally:
        reader.cancel()
        for task in list(running):
            task.cancel()
        await asyncio.gather(reader, *running, return_exceptions=True)


def stream_error(
    exc: InferdError, request: pb.ModelInferRequest | None
) -> pb.ModelStreamInferResponse:
    """A request's error as the stream carries it: `error_message` (and the stream goes on),
    with the request's model and `id`."""
    response = pb.ModelInferResponse()
    if request is not None:
        response.model_name, response.id = request.model_name, request.id
    return pb.ModelStreamInferResponse(
        error_message=f"[{int(exc.code)}] {exc.message}", infer_response=response
    )
