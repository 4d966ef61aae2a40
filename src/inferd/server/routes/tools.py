"""OpenAI's tool calls on `/v1/chat/completions`: the `tools` a request offers, what its
`tool_choice` lets the answer be, the grammar that holds the answer to it, and the answer as
`tool_calls`, whole or streamed as OpenAI streams them.

What the model writes for a call is a JSON object, held to the tools' parameter schemas by
constrained decoding (inferd.generation.constraint), so a call always parses and its
arguments always validate:

- `required`: `{"name": ..., "arguments": {...}}`, the name one of the tools', the arguments
  valid against that tool's `parameters`;
- a named function (`{"type": "function", "function": {"name": ...}}`): its arguments alone;
- `auto` (the default with tools): either such a call, or text that does not begin with `{`;
- `none`: text, unconstrained.

The tools are passed to the model's chat template as `tools`, as Hugging Face passes them, and
earlier calls and their results (`tool_calls` on an assistant message, `tool` messages) go
through the template too. One call an answer (`parallel_tool_calls` is taken, and one call
made).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from inferd.errors import InvalidInputError, TooManyItemsError
from inferd.generation.grammar import GrammarRequest, json_schema

MAX_TOOLS = 128
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}
WRAPPED = re.compile(r'^\{"name":"([A-Za-z0-9_-]{1,64})","arguments":')
"""How a wrapped call begins (compact JSON: the grammar allows no whitespace)."""


class Function(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema.")
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: Function


@dataclass(frozen=True)
class ToolPlan:
    """What the answer may be, and the grammar that holds it there."""

    mode: Literal["none", "auto", "required", "named"]
    grammar: GrammarRequest | None = None
    name: str | None = None
    """The function a `named` choice calls."""
    tools: tuple[dict[str, Any], ...] = ()
    """The tools as the chat template gets them."""

    @property
    def calls(self) -> bool:
        return self.mode != "none"


def plan(tools: list[Tool] | None, choice: Any) -> ToolPlan:
    """The plan for a request's `tools` and `tool_choice` (4004 for a choice that names no
    offered tool, 4006 for parameters that are not a usable schema)."""
    tools = tools or []
    if len(tools) > MAX_TOOLS:
        raise TooManyItemsError(f"{len(tools)} tools; the limit is {MAX_TOOLS}")
    names = [t.function.name for t in tools]
    for name in names:
        if not NAME.match(name):
            raise InvalidInputError(
                f"tool name {name!r} must be 1 to 64 letters, digits, '_' or '-'", param="tools"
            )
    if len(set(names)) < len(names):
        raise InvalidInputError("two tools have the same name", param="tools")
    shown = tuple(t.model_dump(exclude_none=True) for t in tools)
    mode, named = _choice(choice, names)
    if mode == "none" or not tools:
        return ToolPlan("none", tools=shown)
    schemas = {t.function.name: t.function.parameters or NO_PARAMETERS for t in tools}
    if mode == "named":
        assert named is not None
        return ToolPlan("named", json_schema(schemas[named], "tools"), named, shown)
    call = {"anyOf": [_wrapped(name, schema) for name, schema in schemas.items()]}
    if mode == "required":
        return ToolPlan("required", json_schema(call, "tools"), None, shown)
    options = {"whitespace_flexible": False}
    text = json_schema({**call, "x-guidance": options}, "tools").source  # (bounds checked)
    lark = f"start: call | text\ncall: %json {text}\ntext: /[^{{\\s][\\s\\S]*/\n"
    return ToolPlan("auto", GrammarRequest("lark", "tools", lark), None, shown)


def _choice(choice: Any, names: list[str]) -> tuple[str, str | None]:
    if choice is None:
        return ("auto" if names else "none"), None
    if choice in ("none", "auto", "required"):
        if choice != "none" and not names:
            raise InvalidInputError(f"tool_choice {choice!r} needs tools", param="tool_choice")
        return str(choice), None
    name = None
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise InvalidInputError(
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    if name not in names:
        raise InvalidInputError(
            f"tool_choice names {name!r}, not one of the tools", param="tool_choice"
        )
    return "named", name


def _wrapped(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def template_message(role: str, content: str, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A message as the chat template gets it: earlier calls with their arguments as objects
    (what Hugging Face's templates expect; OpenAI clients send them as JSON text)."""
    message: dict[str, Any] = {"role": role, "content": content}
    if calls:
        message["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": _arguments(call["function"])}}
            for call in calls
        ]
    return message


def _arguments(function: dict[str, Any]) -> Any:
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def answer(tool_plan: ToolPlan, text: str, reason: str) -> tuple[dict[str, Any], str]:
    """The assistant's message and finish reason for a whole answer: a call when the text
    is one (and whole), else the text."""
    call = _call(tool_plan, text) if reason == "stop" else None
    if call is None:
        return {"role": "assistant", "content": text}, reason
    name, arguments = call
    function = {"name": name, "arguments": arguments}
    calls = [{"id": call_id(), "type": "function", "function": function}]
    return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"


def _call(tool_plan: ToolPlan, text: str) -> tuple[str, str] | None:
    if tool_plan.mode == "named":
        assert tool_plan.name is not None
        return tool_plan.name, text
    if tool_plan.mode in ("required", "auto") and text.startswith("{"):
        try:
            parsed = json.loads(text)
            return str(parsed["name"]), orjson.dumps(parsed["arguments"]).decode()
        except (ValueError, KeyError, TypeError):  # (not a call: its grammar allows none such)
            return None
    return None


@dataclass
class CallStream:
    """A streamed answer's deltas as OpenAI streams them: `content` for text; for a call,
    one delta with its id and name, then its arguments piece by piece."""

    tool_plan: ToolPlan
    text: str = ""
    kind: str | None = None
    """"text" or "call", once the answer's beginning says."""
    sent: int = 0
    """Characters of the arguments sent."""
    start: int | None = None
    """Where the arguments begin in the text."""
    name: str | None = None

    def push(self, delta: str, final: bool = False) -> list[dict[str, Any]]:
        """The deltas for this piece of text (`final`: the answer's last, whole)."""
        self.text += delta
        if self.kind is None:
            self.kind = self._kind()
            if self.kind is None:
                return []
        if self.kind == "text":
            if self.start is None:  # (text held back while the kind was unknown)
                self.start = 0
                delta = self.text
            return [{"content": delta}] if delta else []
        deltas: list[dict[str, Any]] = []
        if self.start is None:
            if self.tool_plan.mode == "named":
                self.name, self.start = self.tool_plan.name, 0
            else:
                begun = WRAPPED.match(self.text)
                if begun is None:
                    return []
                self.name, self.start = begun.group(1), begun.end()
            function = {"name": self.name, "arguments": ""}
            deltas.append({"index": 0, "id": call_id(), "type": "function", "function": function})
        end = len(self.text)
        if self.tool_plan.mode != "named":  # the wrapper's closing brace is not arguments
            end -= 1
        pieces = self.text[self.start + self.sent : end]
        if pieces:
            self.sent += len(pieces)
            deltas.append({"index": 0, "function": {"arguments": pieces}})
        return [{"tool_calls": [d]} for d in deltas] if deltas else []

    def finish(self, reason: str) -> list[dict[str, Any]]:
        """What is left to send at the end: text held while its kind was unknown; a call cut
        by the length limit, as far as it came (a whole one's last brace is its wrapper's)."""
        if reason == "stop" and self.kind == "call":
            return []
        if self.kind is None or (self.kind == "call" and self.start is None):
            self.kind = "text"  # (a call cut before its name is text)
            return [{"content": self.text}] if self.text else []
        rest = self.text[(self.start or 0) + self.sent :] if self.kind == "call" else ""
        self.sent += len(rest)
        return [{"tool_calls": [{"index": 0, "function": {"arguments": rest}}]}] if rest else []

    def finish_reason(self, reason: str) -> str:
        return "tool_calls" if self.kind == "call" and reason == "stop" else reason

    def _kind(self) -> str | None:
        if self.tool_plan.mode == "none":
            return "text"
        if self.tool_plan.mode in ("named", "required"):
            return "call"
        stripped = self.text.lstrip()
        if not stripped:
            return None
        return "call" if stripped.startswith("{") else "text"
