"""The one way a JSON answer is made: orjson (numpy arrays and scalars as numbers), in a plain
Starlette `Response`, nothing more per request."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response


def json_response(
    body: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """`body` as JSON; `bytes` are JSON already (a V2 answer's encoded body) and go as they are."""
    content = (
        body if isinstance(body, bytes) else orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    )
    return Response(content, status, headers, media_type="application/json")
