"""Reading a request body: `Content-Encoding` gzip or deflate, bounded after decompression."""

from __future__ import annotations

import zlib

from fastapi import Request

from inferd.errors import EncodingError, InvalidInputError
from inferd.server.errors import PayloadTooLargeError


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body as sent, or inflated when compressed; a body that inflates past `max_bytes` is
    413 (a small compressed body must not become a large one in memory)."""
    body = await request.body()
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
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
