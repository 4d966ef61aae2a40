"""Cancelling a request's work when its client goes away.

After the body is read, the ASGI `receive` of uvicorn returns only when the client disconnects
(or the response completes). A watcher waits on it and cancels the handler, which cancels the
request's queued items before they cost compute.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.types import Receive


class ClientDisconnected(Exception):
    """The client went away; nothing can be sent back."""


@asynccontextmanager
async def cancel_on_disconnect(receive: Receive) -> AsyncIterator[None]:
    handler = asyncio.current_task()
    if handler is None:
        yield
        return
    gone = False

    async def watch() -> None:
        nonlocal gone
        message = await receive()
        if message["type"] == "http.disconnect":
            gone = True
            handler.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        yield
    except asyncio.CancelledError:
        if not gone:
            raise
        handler.uncancel()
        raise ClientDisconnected() from None
    finally:
        watcher.cancel()
