"""CoalescedWrites on a real TCP connection over 127.0.0.1: writes within one turn of the event
loop are held (the transport's buffer counts them) and sent together at the turn's end, in
order; close sends what is held first; abort drops it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from inferd.server.coalesce import CoalescedWrites


class Received(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.chunks = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.arrived = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.chunks += 1
        self.arrived.set()

    async def until(self, size: int) -> None:
        """Until `size` bytes have arrived."""
        async with asyncio.timeout(5):
            while len(self.data) < size:
                self.arrived.clear()
                await self.arrived.wait()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[CoalescedWrites, Received]]:
    loop = asyncio.get_running_loop()
    peer = Received()
    server = await loop.create_server(lambda: peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    yield CoalescedWrites(transport, loop), peer
    transport.close()
    server.close()
    await server.wait_closed()


async def test_writes_of_one_turn_go_out_together_in_order(
    pair: tuple[CoalescedWrites, Received],
) -> None:
    writes, peer = pair
    writes.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")
    writes.write(bytearray(b"he"))
    writes.write(memoryview(b"llo"))
    writes.write(b"")
    held = writes.get_write_buffer_size()
    assert held == 43  # held in this turn, not yet the socket's
    await asyncio.sleep(0)  # the turn ends: one write to the socket
    await peer.until(held)
    assert bytes(peer.data) == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    assert peer.chunks == 1
    assert writes.get_write_buffer_size() == 0
    writes.writelines([b"next", b" turn"])
    await peer.until(held + 9)
    assert peer.data.endswith(b"next turn")


async def test_close_sends_what_is_held_first(
    pair: tuple[CoalescedWrites, Received],
) -> None:
    writes, peer = pair
    writes.write(b"last words")
    writes.close()  # in the same turn as the write
    assert writes.is_closing()
    await asyncio.wait_for(peer.closed, 5)
    assert bytes(peer.data) == b"last words"


async def test_abort_drops_what_is_held(pair: tuple[CoalescedWrites, Received]) -> None:
    writes, peer = pair
    writes.write(b"never sent")
    writes.abort()
    await asyncio.wait_for(peer.closed, 5)
    assert bytes(peer.data) == b""
