"""The bounded HTTP protocol fed bytes directly (no socket, so how the bytes arrive in reads is
the test's choice): a head over its limits is refused, a whole request in one read is not."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from inferd.server.http_limits import bounded_protocol


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


def protocol(max_bytes: int = 65536, max_headers: int = 100) -> tuple[Any, Transport]:
    cls = bounded_protocol(max_bytes, max_headers, 10.0)
    config = uvicorn.Config(app, http=cls, log_config=None, lifespan="off")
    config.load()
    made = cls(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    made.connection_made(transport)
    return made, transport


def post(body: bytes) -> bytes:
    return (b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


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
