"""The fields that hold an answer to a form, as each route names them: OpenAI's
`response_format` (`json_object`, `json_schema`), the extra fields open servers take beside it
(`guided_json`, `guided_regex`, `guided_choice`, as vLLM names them), and `/generate`'s own
(`json_schema`, `regex`, `choice`). At most one a request (4006 for two)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, Field

from inferd.errors import InvalidGrammarError
from inferd.generation.grammar import (
    GrammarRequest,
    choice,
    json_object,
    json_schema,
    one_of,
    regex,
)


class GuidedFields(BaseModel):
    """What open servers add to OpenAI's requests to constrain the answer."""

    response_format: dict[str, Any] | None = Field(
        None,
        description='{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
        '"json_schema": {"name": ..., "schema": {...}, "strict": true}}.',
    )
    guided_json: dict[str, Any] | str | None = Field(None, description="A JSON schema.")
    guided_regex: str | None = Field(None, description="A regex the whole answer matches.")
    guided_choice: list[str] | None = Field(None, description="The answer is one of these.")

    def grammar(self) -> GrammarRequest | None:
        schema = self.guided_json
        if isinstance(schema, str):
            try:
                schema = orjson.loads(schema)
            except orjson.JSONDecodeError as exc:
                raise InvalidGrammarError(
                    f"guided_json is not JSON: {exc}", param="guided_json"
                ) from None
        return one_of(
            {
                "response_format": response_format(self.response_format),
                "guided_json": None if schema is None else json_schema(schema, "guided_json"),
                "guided_regex": _maybe(regex, self.guided_regex, "guided_regex"),
                "guided_choice": _maybe(choice, self.guided_choice, "guided_choice"),
            }
        )


def response_format(value: dict[str, Any] | None) -> GrammarRequest | None:
    """OpenAI's `response_format`: none for text, any JSON object, or JSON valid against a
    schema (`strict` or not, the schema is held to: a constraint, not a hint)."""
    kind = None if value is None else value.get("type")
    if value is None or kind == "text":
        return None
    if kind == "json_object":
        return json_object("response_format")
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise InvalidGrammarError(
                "response_format.json_schema must be an object with a schema",
                param="response_format",
            )
        return json_schema(spec["schema"], "response_format.json_schema.schema")
    raise InvalidGrammarError(
        f"response_format.type must be text, json_object or json_schema; got {kind!r}",
        param="response_format",
    )


def _maybe(build: Any, value: Any, field: str) -> GrammarRequest | None:
    return None if value is None else build(value, field)
