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
    """`raw` (a parsed body, or a gRPC request's parameters) validated against `schema`; the
    first problem said in plain words, naming its field (pydantic's wording never reaches a
    client)."""
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        where = _where(errors[0]["loc"])
        here = [e for e in errors if _where(e["loc"]) == where]  # (a union's members)
        wants = list(dict.fromkeys(_wanted(e) for e in here))
        # other fields at fault (not a union member's own fields under this one)
        wheres = {_where(e["loc"]) for e in errors}
        more = len({w for w in wheres if w != where and not w.startswith(f"{where}.")})
        also = f" (and {more} more)" if more else ""
        field = where.split(".")[0] if where else None
        said = (
            wants[0]
            if len(wants) == 1
            else "must be " + " or ".join(w.removeprefix("must be ") for w in wants)
        )
        message = f"'{where}' {said}" if where else said  # (the body's own check: its words)
        raise InvalidInputError(f"{message}{also}", param=field) from None


TYPES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "none_required": "null",
}
BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
    "too_short": ("min_length", "at least this long:"),
    "too_long": ("max_length", "at most this long:"),
}
UNION_TAGS = {"str", "int", "float", "bool", "none", "bytes"}


def _where(loc: tuple[Any, ...]) -> str:
    """A location as the client wrote it: fields and indexes, not a union's member tags."""
    parts = [
        str(p)
        for p in loc
        if isinstance(p, int) or not (p in UNION_TAGS or "[" in p or p[:1].isupper() or "-" in p)
    ]
    return ".".join(parts)


def _wanted(error: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field this request takes"
    if kind == "value_error":  # (a check of inferd's own: its words)
        return f"is not valid: {ctx.get('error')}" if error["loc"] else str(ctx.get("error"))
    if kind in TYPES:
        return f"must be {TYPES[kind]}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}"
    if kind in BOUNDS:
        key, words = BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}"
    return "has a value this request does not take"
