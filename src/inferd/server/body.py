"""Reading a request body, the one way every route does: `Content-Encoding` gzip or deflate,
bounded after decompression, noted for the log when payload logging is on; then, for the JSON
routes, parsed and validated against the route's schema."""

from __future__ import annotations

import zlib
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request

from inferd.errors import EncodingError, InvalidInputError
from inferd.front.jsonbody import validate_body
from inferd.front.route_key import take_route_key
from inferd.observability.trace import current_trace
from inferd.server.errors import PayloadTooLargeError
from inferd.server.observe import note_payload
from inferd.server.state import engine_of, settings_of

M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request) -> bytes:
    """The body as sent, or inflated when compressed; a body that inflates past the server's
    `max_body_bytes` is 413 (a small compressed body must not become a large one in memory)."""
    settings = settings_of(request)
    body = await request.body()
    for name, value in request.scope["headers"]:  # no Headers object: this runs per request
        if name == b"content-encoding":
            body = _inflate(body, value.decode("latin-1"), settings.max_body_bytes)
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

    return validate_body(
        schema, await read_body(request), route_key if purpose is not None else None
    )


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
