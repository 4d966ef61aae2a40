"""gRPC's own event loop, on a thread of its own, and the crossing of each call to the app's.

grpcio turns every received message into one Python bytes object in its own code, holding the
interpreter throughout (about 100 ms for 60 MB, most of it the fresh memory's page faults),
and does so for every message ready at once before its loop moves on. On the app's loop,
four large messages arriving together held HTTP (probes included) for all four in a row.
So `grpc.aio` runs here on a loop of its own (`LoopThread`), where it does what is gRPC's:
the connections, receiving messages as bytes, serializing and sending answers, statuses.
Everything else stays on the app's loop, as one task per call, as before: the gate, the
reader, the service, the engine, metrics and logs. Between two messages the interpreter goes
back to the app's loop, which then waits for one message's copy at most.

`on_app_loop` wraps a method handler so that its behaviour runs on the app's loop with a
`CallView` in place of gRPC's context and the call's requests crossing one at a time. The
task on the app's loop starts in a copy of the gRPC task's context and keeps the context
variables it sets (the request trace, the client) for the whole call, streams included. A
call that gRPC cancels (its client left, its deadline passed, the server stopped) cancels its
task on the app's loop, and gRPC's side waits until that task has ended.

Imports nothing of inferd.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import grpc

T = TypeVar("T")

STOP_JOIN_S = 5.0
"""How long stopping waits for the loop's thread to end."""


class LoopThread:
    """An event loop running on a thread of its own, from `start` to `stop`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop, from `start` to `stop`."""
        return self._loop

    def start(self) -> asyncio.AbstractEventLoop:
        """Starts the thread; its loop, running."""
        started = threading.Event()

        def run() -> None:
            loop = asyncio.SelectorEventLoop()  # (asyncio's own, whatever the app's runs on)
            asyncio.set_event_loop(loop)
            self._loop = loop
            loop.call_soon(started.set)
            try:
                loop.run_forever()
            finally:
                _close(loop)

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()
        started.wait()
        if self._loop is None:
            raise RuntimeError(f"the {self._name} thread did not start its event loop")
        return self._loop

    async def stop(self) -> None:
        """Stops the loop (what still runs there is cancelled) and waits for the thread."""
        thread, loop = self._thread, self._loop
        self._thread = self._loop = None
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # (closed already)
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, STOP_JOIN_S)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    left = asyncio.all_tasks(loop)
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


async def run_on(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """Runs `work` as a task on `loop` (another thread's), in a copy of the current context,
    and waits here for its outcome. Cancelled here, it cancels the task there and waits until
    that task has ended (its `finally` blocks ran) before raising CancelledError."""
    here = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = here.create_future()
    started: list[asyncio.Task[T]] = []

    def settle(task: asyncio.Task[T]) -> None:  # (on `loop`)
        with contextlib.suppress(RuntimeError):  # (this loop closed: nobody waits)
            here.call_soon_threadsafe(_copy_outcome, task, outcome)

    def start() -> None:  # (on `loop`)
        task = loop.create_task(work)
        started.append(task)
        task.add_done_callback(settle)

    def cancel() -> None:  # (on `loop`, after `start`: the calls keep their order)
        for task in started:
            task.cancel()

    try:
        loop.call_soon_threadsafe(start, context=contextvars.copy_context())
    except RuntimeError:
        work.close()
        raise
    try:
        return await asyncio.shield(outcome)
    except asyncio.CancelledError:
        if outcome.done():
            raise
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(cancel)
        with contextlib.suppress(BaseException):
            await outcome
        raise


def _copy_outcome(task: asyncio.Task[T], outcome: asyncio.Future[T]) -> None:
    if outcome.done():
        return
    if task.cancelled():
        outcome.cancel()
    elif (error := task.exception()) is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(task.result())


class CallView:
    """gRPC's context of a call, as the call's task on the app's loop sees it: what the call
    carried (read when it started), its deadline, and what it answers (done on gRPC's loop).
    The methods inferd's handlers use, with the same meaning as `grpc.aio.ServicerContext`'s."""

    def __init__(self, context: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Built on gRPC's loop, when the call starts."""
        self._context = context
        self._loop = loop
        self._metadata: tuple[Any, ...] = tuple(context.invocation_metadata() or ())
        self._peer: str = context.peer()
        self._remaining_s: float | None = context.time_remaining()
        self._at = time.monotonic()
        self.trailing: Sequence[tuple[str, str | bytes]] | None = None
        """Trailing metadata to set when the call ends (None: none set)."""

    def invocation_metadata(self) -> tuple[Any, ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        if self._remaining_s is None:
            return None
        return max(self._remaining_s - (time.monotonic() - self._at), 0.0)

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self.trailing = tuple(metadata)

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> None:
        """Sends the status now and raises gRPC's own AbortError, as gRPC's abort does (the
        same error, raised again on gRPC's loop, ends the call there)."""
        await run_on(self._loop, self._context.abort(code, details, tuple(trailing_metadata)))

    async def write(self, message: Any) -> None:
        await run_on(self._loop, self._context.write(message))

    def end(self) -> None:
        """(On gRPC's loop, as the call ends.) Sets the trailing metadata set meanwhile."""
        if self.trailing is not None:
            self._context.set_trailing_metadata(self.trailing)


class _Requests:
    """The call's requests, read on gRPC's loop one at a time for the app's loop (each a
    message turned into bytes, or parsed, there)."""

    def __init__(self, requests: AsyncIterator[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._requests = aiter(requests)
        self._loop = loop

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        return await run_on(self._loop, _next(self._requests))


async def _next(requests: AsyncIterator[Any]) -> Any:
    return await anext(requests)


Behavior = Callable[[Any, Any], Any]


def on_app_loop(
    handler: grpc.RpcMethodHandler[Any, Any], app: asyncio.AbstractEventLoop
) -> grpc.RpcMethodHandler[Any, Any]:
    """`handler` (an asyncio one: coroutine or async generator functions) registered on gRPC's
    loop, its behaviour run on `app`'s loop; the same kind, (de)serializers and behaviour."""
    decode, encode = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _unary_response(handler.unary_unary, app, streamed=False), decode, encode
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _unary_response(handler.stream_unary, app, streamed=True), decode, encode
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _stream_response(handler.unary_stream, app, streamed=False), decode, encode
        )
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            _stream_response(handler.stream_stream, app, streamed=True), decode, encode
        )
    raise ValueError("a method handler without a behaviour")


def _unary_response(
    behavior: Behavior, app: asyncio.AbstractEventLoop, streamed: bool
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def handle(request: Any, context: Any) -> Any:
        here = asyncio.get_running_loop()
        view = CallView(context, here)
        try:
            argument = _Requests(request, here) if streamed else request
            return await run_on(app, behavior(argument, view))
        finally:
            view.end()

    return handle


def _stream_response(
    behavior: Behavior, app: asyncio.AbstractEventLoop, streamed: bool
) -> Callable[[Any, Any], Awaitable[None]]:
    """A handler of gRPC's reader/writer kind: each response written from the app's loop."""

    async def handle(request: Any, context: Any) -> None:
        here = asyncio.get_running_loop()
        view = CallView(context, here)

        async def respond() -> None:  # (on the app's loop)
            argument = _Requests(request, here) if streamed else request
            async with contextlib.aclosing(behavior(argument, view)) as responses:
                async for response in responses:
                    await view.write(response)

        try:
            await run_on(app, respond())
        finally:
            view.end()

    return handle
