"""Request fields: a JSON body parsed with orjson (strict UTF-8, no lone surrogates), and fields
(a body's, or a gRPC request's parameters) validated against a pydantic schema, with errors
that name the offending field or index."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from inferd.errors import EncodingError, InvalidInputError

M = TypeVar("M", bound=BaseModel)


def parse_json(body: bytes) -> Any:
    if not body:
        raise InvalidInputError("empty request body; expected JSON")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        text = str(exc)
        if "utf-8" in text.lower() or "surrogate" in text.lower():
            raise EncodingError(f"the body is not valid UTF-8 JSON: {text}") from None
        raise InvalidInputError(f"the body is not valid JSON: {text}") from None


def validate_body(
    schema: type[M], body: bytes, before: Callable[[dict[str, Any]], None] | None = None
) -> M:
    """`before` sees (and may change) the parsed object before it is validated."""
    raw = parse_json(body)
    if not isinstance(raw, dict):
        raise InvalidInputError("the body must be a JSON object")
    if before is not None:
        before(raw)
    return validate_fields(schema, raw)


def validate_fields(schema: type[M], raw: dict[str, Any]) -> M:
    """`raw` (a parsed body, or a gRPC request's parameters) validated against `schema`."""
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        field = str(first["loc"][0]) if first["loc"] else None
        raise InvalidInputError(
            f"invalid request at '{where}': {first['msg']}{more}", param=field
        ) from None
