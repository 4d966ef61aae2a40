"""Received messages parsed after the call was admitted, and off the event loop when large.

gRPC hands inferd each message as bytes (every method is registered without a deserializer):
nothing is parsed before the call's key is checked (inferd.grpc_v2.gate). A message of up to
`INLINE_BYTES` is parsed where it arrives (its walk is bounded by its size: about a
millisecond at most); a larger one in one of `THREADS` worker threads, so the event loop keeps
serving (it gets the interpreter back at every switch interval while the walk runs; protobuf's
own parse, in C, is bounded by the walk's budget). A message that does not parse, or holds
more fields than `grpc_max_message_fields`, is refused INVALID_ARGUMENT with a plain reason;
such refusals are logged at most once a second, with their count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from inferd.errors import InvalidInputError, TooManyItemsError
from inferd.grpc_v2.message_scan import Malformed, OverBudget, walk
from inferd.grpc_v2.wire import InferCall, parse_infer_request

log = logging.getLogger(__name__)

INLINE_BYTES = 4096
THREADS = 2
LOG_EVERY_S = 1.0

M = TypeVar("M", bound=Message)
R = TypeVar("R")


class RefusedMessage(InvalidInputError):
    """A message that does not parse as its type (code 4004)."""


class MessageOverBudget(TooManyItemsError):
    """A message with more fields than the server parses (code 4005)."""


class Reader:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="inferd-grpc-read")
        self._refused = 0
        self._logged_at = -LOG_EVERY_S

    async def message(self, kind: type[M], data: bytes) -> M:
        """`data` as a `kind` message."""

        def parse() -> M:
            walk(data, kind.DESCRIPTOR, self.budget)
            return kind.FromString(data)

        return await self._run(kind.DESCRIPTOR.name, data, parse)

    async def infer_request(self, data: bytes) -> InferCall:
        """`data` as a `ModelInferRequest`, its raw contents as views (inferd.grpc_v2.wire)."""
        return await self._run(
            "ModelInferRequest", data, lambda: parse_infer_request(data, self.budget)
        )

    async def off_loop(self, size: int, work: Callable[[], R]) -> R:
        """`work` (pure work on a received message of `size` bytes, such as decoding its
        tensors) where a parse of that size would run."""
        if size <= INLINE_BYTES:
            return work()
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    async def _run(self, name: str, data: bytes, parse: Callable[[], R]) -> R:
        try:
            return await self.off_loop(len(data), parse)
        except (Malformed, DecodeError):
            self._note()
            raise RefusedMessage(f"the request is not a valid {name} message") from None
        except OverBudget:
            self._note()
            raise MessageOverBudget(
                f"the {name} holds more than {self.budget} fields and packed integers "
                "(grpc_max_message_fields); send tensors in raw_input_contents"
            ) from None

    def _note(self) -> None:
        """Counts a refused message; logs the count at most once every `LOG_EVERY_S`."""
        self._refused += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning(
                "gRPC messages refused as malformed or too large", extra={"count": self._refused}
            )
            self._refused = 0
            self._logged_at = now

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
