"""What a request asks its answer to match, before any model is known: a JSON schema (or any
JSON object), a regular expression, or a choice among strings; as the grammar the grammar
engine (llguidance) compiles.

Checked here, in Python, within bounds a hostile request cannot stretch: the schema's size
and nesting, the regex's length, the choices' count and length (4006, naming the field).
What only the engine can judge (an unknown keyword, a `$ref` to nowhere, a regex that does
not parse, a schema nothing satisfies) is refused when the grammar compiles
(inferd.generation.constraint), with the engine's own words."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance
import orjson

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # (its stub's only)

from inferd.errors import InvalidGrammarError

MAX_SCHEMA_BYTES = 64 * 1024
"""A JSON schema's size, serialized, at most."""
MAX_SCHEMA_DEPTH = 32
"""Objects and arrays inside one another in a schema, at most (llguidance's own recursion
limit is deeper: this refuses sooner, and says where)."""
MAX_REGEX_CHARS = 2048
MAX_CHOICES = 1024
MAX_CHOICE_CHARS = 512

JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False}
"""Answers without whitespace between tokens (`{"a":1}`), as OpenAI's are: a model with few
tokens to spare does not spend them on spaces, and a sampled one cannot wander in them."""


@dataclass(frozen=True)
class GrammarRequest:
    """One request's constraint: its kind, where it came from (the field named in refusals)
    and its source: a JSON schema's text, a regex, or a Lark grammar. The grammar llguidance
    compiles is made from it on the compile thread (`grammar`): for a large schema that takes
    a millisecond, which the event loop does not spend."""

    kind: str
    """"json_schema", "regex" or "lark"."""
    field: str
    source: str

    @property
    def key(self) -> str:
        """What a compiled grammar is cached under."""
        return hashlib.sha256(f"{self.kind}\0{self.source}".encode()).hexdigest()

    def grammar(self) -> str:
        """llguidance's grammar (InvalidGrammarError for a schema past the bounds)."""
        if self.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(self.source)
        if self.kind == "lark":
            return llguidance.LLMatcher.grammar_from_lark(self.source)
        where = _too_deep(orjson.loads(self.source), MAX_SCHEMA_DEPTH)
        if where is not None:
            raise InvalidGrammarError(
                f"{self.field} nests deeper than {MAX_SCHEMA_DEPTH} levels at {where}",
                param=self.field,
            )
        try:
            return llguidance.LLMatcher.grammar_from_json_schema(
                self.source, overrides=JSON_OPTIONS
            )
        except ValueError as exc:
            raise InvalidGrammarError(f"{self.field}: {exc}", param=self.field) from exc


def json_schema(schema: Any, field: str) -> GrammarRequest:
    """An answer that is JSON valid against `schema` (a JSON object)."""
    if not isinstance(schema, dict):
        raise InvalidGrammarError(f"{field} must be a JSON object (a JSON schema)", param=field)
    try:
        text = orjson.dumps(schema)
    except orjson.JSONEncodeError:  # (nested past orjson's own limit, 255 levels)
        raise InvalidGrammarError(
            f"{field} nests deeper than {MAX_SCHEMA_DEPTH} levels", param=field
        ) from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise InvalidGrammarError(
            f"{field} has {len(text)} bytes; the limit is {MAX_SCHEMA_BYTES}", param=field
        )
    return GrammarRequest("json_schema", field, text.decode())


def json_object(field: str) -> GrammarRequest:
    """An answer that is any JSON object (OpenAI's `json_object` response format)."""
    return GrammarRequest("json_schema", field, '{"type":"object"}')


def regex(pattern: Any, field: str) -> GrammarRequest:
    """An answer that the regular expression matches, whole."""
    _sized(pattern, str, "string", "characters", MAX_REGEX_CHARS, field)
    return GrammarRequest("regex", field, pattern)


def choice(options: Any, field: str) -> GrammarRequest:
    """An answer that is exactly one of `options`."""
    _sized(options, list, "list of strings", "choices", MAX_CHOICES, field)
    for i, option in enumerate(options):
        if not isinstance(option, str) or not 0 < len(option) <= MAX_CHOICE_CHARS:
            raise InvalidGrammarError(
                f"{field}[{i}] must be a string of 1 to {MAX_CHOICE_CHARS} characters",
                param=field,
            )
    lark = "start: " + " | ".join(orjson.dumps(o).decode() for o in dict.fromkeys(options))
    return GrammarRequest("lark", field, lark)


def _sized(
    value: Any, kind: type[str] | type[list[Any]], name: str, unit: str, limit: int, field: str
) -> None:
    """4006 unless `value` is a non-empty `kind` of at most `limit` items."""
    if not isinstance(value, kind) or not value:
        raise InvalidGrammarError(f"{field} must be a non-empty {name}", param=field)
    if len(value) > limit:
        raise InvalidGrammarError(
            f"{field} has {len(value)} {unit}; the limit is {limit}", param=field
        )


def one_of(asked: dict[str, GrammarRequest | None]) -> GrammarRequest | None:
    """The one constraint a request sets, of those its fields may set (4006 for two)."""
    given = [(name, g) for name, g in asked.items() if g is not None]
    if len(given) > 1:
        names = " and ".join(name for name, _ in given)
        raise InvalidGrammarError(f"set one constraint at a time, not {names}")
    return given[0][1] if given else None


def _too_deep(value: Any, limit: int, path: str = "#") -> str | None:
    """The JSON pointer where `value` nests past `limit` levels, or None."""
    if limit < 0:
        return path
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        where = _too_deep(item, limit - 1, f"{path}/{key}")
        if where is not None:
            return where
    return None
