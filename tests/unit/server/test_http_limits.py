"""The bounded HTTP protocol fed bytes directly (no socket, so how the bytes arrive in reads is
the test's choice): a head over its limits is refused, a whole request in one read is not; an
early hook's answer is written from the head alone, its body skipped, the connection kept; a
client that comes back before its `Retry-After` has its next refusal held back until then."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from inferd.server.early_answer import EarlyAnswer
from inferd.server.http_limits import bounded_protocol
from inferd.server.pacing import HOLD_MAX_S, Pacer


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def app(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def protocol(
    max_bytes: int = 65536, max_headers: int = 100, early: EarlyAnswer | None = None
) -> tuple[Any, Transport]:
    cls = bounded_protocol(max_bytes, max_headers, 10.0, early)
    config = uvicorn.Config(app, http=cls, log_config=None, lifespan="off")
    config.load()
    state = ServerState()
    state.default_headers = [(b"server", b"uvicorn")]  # as uvicorn's server sets them
    made = cls(config=config, server_state=state, app_state={})
    transport = Transport()
    made.connection_made(transport)
    return made, transport


def post(body: bytes, path: bytes = b"/x", extra: bytes = b"") -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
    return head % (path, extra, len(body)) + body


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_whole_large_request_in_one_read_is_served() -> None:
    made, transport = protocol()
    made.data_received(post(b" " * 150_000))
    for _ in range(20):
        await asyncio.sleep(0)
    assert transport.written.startswith(b"HTTP/1.1 200 "), transport.written[:200]


async def test_a_large_body_after_its_head_is_not_counted() -> None:
    made, transport = protocol()
    body = b" " * 300_000
    request = post(body)
    made.data_received(request[:100])
    for start in range(100, len(request), 100_000):
        made.data_received(request[start : start + 100_000])
    for _ in range(20):
        await asyncio.sleep(0)
    assert transport.written.startswith(b"HTTP/1.1 200 "), transport.written[:200]


async def test_an_oversized_or_crowded_head_is_refused() -> None:
    made, transport = protocol(max_bytes=4096)
    made.data_received(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 5000)
    assert transport.written.startswith(b"HTTP/1.1 431 ") and transport.closed
    made, transport = protocol(max_headers=10)
    head = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(20)) + b"\r\n"
    made.data_received(head)
    assert transport.written.startswith(b"HTTP/1.1 431 ") and transport.closed


class Gate:
    """Refuses POST /shed from its head; lets the rest through, counting what it let in."""

    def __init__(self) -> None:
        self.asked: list[bytes] = []
        self.open = 0

    def __call__(
        self,
        method: bytes,
        url: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        keep_alive: bool,
        received_at: float,
        address: str | None,
    ) -> Gate.Refusal | Gate.Ticket | None:
        self.asked.append(url)
        if url == b"/shed":
            return Gate.Refusal(self.pace_s)
        self.open += 1
        return Gate.Ticket(self)

    pace_s = 0.0

    class Refusal:
        def __init__(self, pace_s: float) -> None:
            self.pace_s = pace_s
            self.held_s: float | None = None

        def render(self, held_s: float) -> bytes:
            self.held_s = held_s
            return b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\n\r\nno"

    class Ticket:
        def __init__(self, gate: Gate) -> None:
            self.gate = gate

        def release(self) -> None:
            self.gate.open -= 1


async def test_an_early_answer_skips_the_body_and_keeps_the_connection() -> None:
    gate = Gate()
    made, transport = protocol(early=gate)
    request = post(b"b" * 50_000, b"/shed")
    made.data_received(request[:200])  # the head and a little of the body
    await asyncio.sleep(0)  # (written at the end of the loop's turn: inferd.server.coalesce)
    assert transport.written.startswith(b"HTTP/1.1 429 "), transport.written[:200]
    assert b"\r\nserver: " in transport.written  # uvicorn's default headers are added
    made.data_received(request[200:] + post(b"hello"))  # the rest of the body, then the next
    await settle()
    answers = transport.written.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"429", b"200"] and not transport.closed
    assert gate.asked == [b"/shed", b"/x"] and gate.open == 0  # released once answered


async def test_an_early_answer_closes_when_the_body_may_never_come() -> None:
    made, transport = protocol(early=Gate())
    made.data_received(post(b"{}", b"/shed", b"Expect: 100-continue\r\n")[:-2])
    assert b"connection: close" in transport.written and transport.closed


async def test_a_pipelined_request_waits_its_turn_and_is_not_asked_early() -> None:
    gate = Gate()
    made, transport = protocol(early=gate)
    made.data_received(post(b"one") + post(b"two", b"/shed"))  # the second while the first runs
    await settle()
    assert gate.asked == [b"/x"]  # /shed went to the app, after the first answer
    assert [a[:3] for a in transport.written.split(b"HTTP/1.1 ")[1:]] == [b"200", b"200"]
    assert gate.open == 0


async def test_a_lost_connection_releases_what_it_held() -> None:
    gate = Gate()
    made, _ = protocol(early=gate)
    made.data_received(post(b"x" * 100)[:-50])  # the body never completes
    assert gate.open == 1
    made.connection_lost(None)
    assert gate.open == 0


def statuses(transport: Transport) -> list[bytes]:
    return [a[:3] for a in transport.written.split(b"HTTP/1.1 ")[1:]]


async def test_a_client_back_before_its_retry_after_has_its_refusal_held_until_then() -> None:
    gate = Gate()
    gate.pace_s = 0.2
    made, transport = protocol(early=gate)
    made.data_received(post(b"{}", b"/shed"))
    await asyncio.sleep(0)
    assert statuses(transport) == [b"429"]  # the first refusal: at once
    made.data_received(post(b"{}", b"/shed"))  # back at once, ignoring Retry-After
    await asyncio.sleep(0.05)
    assert statuses(transport) == [b"429"]  # held
    await asyncio.sleep(0.25)
    assert statuses(transport) == [b"429", b"429"] and not transport.closed
    made.data_received(post(b"hello"))  # the connection serves on
    await settle()
    assert statuses(transport) == [b"429", b"429", b"200"]


async def test_a_client_that_waits_as_told_is_refused_at_once() -> None:
    gate = Gate()
    gate.pace_s = 0.05
    made, transport = protocol(early=gate)
    made.data_received(post(b"{}", b"/shed"))
    await asyncio.sleep(0.1)  # longer than its Retry-After
    made.data_received(post(b"{}", b"/shed"))
    await asyncio.sleep(0)
    assert statuses(transport) == [b"429", b"429"]


async def test_a_pipelined_request_sends_the_held_refusal_first() -> None:
    gate = Gate()
    gate.pace_s = 10.0
    made, transport = protocol(early=gate)
    made.data_received(post(b"{}", b"/shed"))
    await asyncio.sleep(0)
    made.data_received(post(b"{}", b"/shed") + post(b"next"))
    await settle()
    assert statuses(transport) == [b"429", b"429", b"200"]


async def test_a_held_refusal_is_dropped_with_its_connection_and_sent_at_shutdown() -> None:
    gate = Gate()
    gate.pace_s = 10.0
    made, transport = protocol(early=gate)
    made.data_received(post(b"{}", b"/shed") + post(b"{}", b"/shed"))
    await asyncio.sleep(0)
    assert statuses(transport) == [b"429"]
    made.shutdown()
    assert statuses(transport) == [b"429", b"429"] and transport.closed
    made, transport = protocol(early=gate)
    made.data_received(post(b"{}", b"/shed") + post(b"{}", b"/shed"))
    made.connection_lost(None)
    await asyncio.sleep(0)
    assert statuses(transport) == [b"429"]


def test_a_client_that_keeps_coming_back_early_is_held_longer_each_time() -> None:
    """Held until its last wait is over, then past it by one pace more, three, seven (at most
    HOLD_MAX_S in all); a client that then waits as told is answered at once and forgiven."""
    pacer = Pacer()
    assert pacer.hold_s(1.0, now=0.0) == 0.0  # the first refusal: at once; wait 1 s
    holds = []
    now = 0.0
    for _ in range(5):  # back as soon as each answer came
        hold = pacer.hold_s(1.0, now=now)
        holds.append(hold)
        now += hold
    assert holds == pytest.approx([1.0, 2.0, 4.0, 4.0, 4.0])
    assert HOLD_MAX_S == 4.0
    assert pacer.hold_s(1.0, now=now + 1.0) == 0.0  # waited as told
    assert pacer.hold_s(1.0, now=now + 1.5) == pytest.approx(0.5)  # early again: from scratch
    assert pacer.hold_s(0.0, now=now + 1.6) == 0.0  # a drain's refusal is never held
