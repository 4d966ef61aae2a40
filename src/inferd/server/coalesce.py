"""A connection's writes within one turn of the event loop, sent as one.

uvicorn writes a response's head (status line and headers) when the app sends
`http.response.start` and its body when the app sends `http.response.body`: two `send()` calls
for every whole response, two segments on the wire, and a client that wakes on the head and then
again on the body. Both writes happen in the same turn of the event loop (nothing between them
waits), so `CoalescedWrites` keeps what is written during a turn and hands it to the socket's
transport at the end of the turn (`loop.call_soon`): one call, one segment, one wake-up of the
client. A stream's events are each sent at the end of the turn that wrote them, as before.

On two cores shared with the client, a localhost `send()` also runs the receiving side's work
and wakes the client, which then often takes the core from the server: under generation load
at 16 requests in flight, the server's main thread spent about 5% of its time inside the two
sends of its responses (py-spy, native frames)."""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescedWrites(asyncio.Transport):
    """`transport` with its writes kept until the end of the loop's turn; everything else is
    the transport's own. Closing sends what is kept first; aborting drops it."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Hands what was written this turn to the transport, as one write."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._pending)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
