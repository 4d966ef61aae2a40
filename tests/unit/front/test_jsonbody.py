"""A request's fields checked against its schema: the first problem in plain words, naming the
field as the client wrote it (never a union member's type tag), without pydantic's wording."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferd.errors import InvalidInputError
from inferd.front.jsonbody import validate_fields


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    text: str


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    count: int
    stop: str | list[str] | None = None
    documents: list[str | Document] | None = None
    role: Literal["user", "assistant"] = "user"
    n: int = Field(1, ge=1)
    body: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _not_seven(self) -> Request:
        if self.count == 7:
            raise ValueError("give a count other than 7")
        return self


@pytest.mark.parametrize(
    ("raw", "message", "param"),
    [
        ({"count": "1"}, "'count' must be an integer", "count"),
        ({}, "'count' is required", "count"),
        ({"count": 1, "extra": 1}, "'extra' is not a field this request takes", "extra"),
        ({"count": 1, "stop": 5}, "'stop' must be a string or a list", "stop"),
        ({"count": 1, "documents": [{"text": 1}]}, "'documents.0' must be a string", "documents"),
        ({"count": 1, "role": "root"}, "'role' must be 'user' or 'assistant'", "role"),
        ({"count": 1, "n": 0}, "'n' must be at least 1", "n"),
        ({"count": 7}, "give a count other than 7", None),
        ({"count": 1, "body": ["a"]}, "'body' must be an object", "body"),
        ({"count": "x", "n": 0}, "'count' must be an integer (and 1 more)", "count"),
    ],
)
def test_a_bad_field_is_named_in_plain_words(
    raw: dict[str, Any], message: str, param: str | None
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        validate_fields(Request, raw)
    assert refused.value.message == message
    assert refused.value.param == param
    for pydantic_words in ("Input should", "Value error", "Extra inputs", "Field required"):
        assert pydantic_words not in refused.value.message
