"""Reading a request body, the one way every route does: `Content-Encoding` gzip or deflate,
bounded after decompression, noted for the log when payload logging is on; then, for the JSON
routes, parsed and validated against the route's schema; a large body parsed in its turn."""

from __future__ import annotations

import asyncio
import weakref
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request

from inferd.errors import EncodingError, InvalidInputError
from inferd.front.jsonbody import validate_body
from inferd.front.route_key import take_route_key
from inferd.observability.trace import current_trace
from inferd.server.error_answers import PayloadTooLargeError
from inferd.server.observe import note_payload
from inferd.server.state import engine_of, settings_of

M = TypeVar("M", bound=BaseModel)

LARGE_BODY_BYTES = 1 << 20
"""A JSON body over this holds the event loop while it is parsed (about 25 ns a byte, so 1.5 s
for 60 MB of numbers; the parser holds the GIL, so a thread would not free the loop): such
bodies are parsed one at a time, and between two of them the loop serves everything else,
probes included."""
TURN_GAP_S = 0.002
"""How long a large body waits after its turn comes, for the requests that arrived meanwhile."""

_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


@asynccontextmanager
async def parsing_turn(size: int) -> AsyncIterator[None]:
    """The turn of a body of `size` bytes to be parsed: at once for a small one; for a large
    one, after every large body before it, and after the loop served what waited."""
    if size <= LARGE_BODY_BYTES:
        yield
        return
    loop = asyncio.get_running_loop()
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = asyncio.Lock()
    async with turn:
        await asyncio.sleep(TURN_GAP_S)
        yield


async def read_body(request: Request) -> bytes:
    """The body as sent, or inflated when compressed; a body that inflates past the route's
    limit (`max_body_bytes`, or `max_text_body_bytes` on a text route: what the body limit's
    middleware put in the request's state) is 413: a small compressed body must not become a
    large one in memory."""
    settings = settings_of(request)
    body = await request.body()
    limit = request.scope.get("state", {}).get("body_limit", settings.max_body_bytes)
    for name, value in request.scope["headers"]:  # no Headers object: this runs per request
        if name == b"content-encoding":
            body = _inflate(body, value.decode("latin-1"), limit)
            break
    if settings.log_payloads:
        note_payload(current_trace(), body, True)
    return body


async def read_json(request: Request, schema: type[M], purpose: str | None = None) -> M:
    """The body, read as above, parsed and validated against `schema` (4002-4004 naming the
    field that is wrong). For an inference route (`purpose`: what its models do), the route
    key field its model's config names is taken out first (inferd.front.route_key)."""

    def route_key(fields: dict[str, Any]) -> None:
        model = fields.get("model")
        named = model if isinstance(model, str) else None
        take_route_key(engine_of(request), fields, named, purpose, schema.model_fields)

    body = await read_body(request)
    async with parsing_turn(len(body)):
        return validate_body(schema, body, route_key if purpose is not None else None)


def _inflate(body: bytes, content_encoding: str, max_bytes: int) -> bytes:
    encoding = content_encoding.strip().lower()
    if encoding in ("identity", ""):
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise InvalidInputError(f"unsupported Content-Encoding {encoding!r}; use gzip or deflate")
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise EncodingError(f"the {encoding} body cannot be decompressed: {exc}") from None
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise PayloadTooLargeError(
            f"request body over the limit of {max_bytes} bytes when inflated"
        )
    return out
