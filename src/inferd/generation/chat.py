"""Chat messages as a prompt: the model's chat template, Jinja as Hugging Face defines it.

The template is the `chat_template` of the model's `tokenizer_config.json` (beside its
tokenizer; a list of named templates gives its `default`), or `generation.chat_template` in the
model's config, which wins. It is rendered in Jinja's sandbox with what Hugging Face passes:
`messages` (each a `role` and a `content`), `add_generation_prompt` (true: the prompt ends
where the assistant's answer begins), `bos_token`, `eos_token`, and `raise_exception(message)`,
which refuses the conversation (4004) as a template asks. A model without a template gets
`DEFAULT_TEMPLATE`: the tools as JSON on a first line when there are any, one `role: content`
line per message (an earlier call's `tool_calls` as JSON after its content), then
`assistant:`. The tools a request offers are passed as `tools`, and earlier calls and their
results as the messages' `tool_calls` and `tool_call_id`, as Hugging Face passes them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from inferd.errors import InvalidInputError

DEFAULT_TEMPLATE = (
    "{% if tools %}tools: {{ tools | tojson }}\n{% endif %}"
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}"
    "{% if message['tool_calls'] %}{{ message['tool_calls'] | tojson }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
CONFIG_FILE = "tokenizer_config.json"
MARK_OPEN, MARK_CLOSE = "\ue000", "\ue001"
"""Around the marker that stands for a message's content while the template renders."""

Messages = Sequence[Mapping[str, Any]]
"""Chat messages: each a `role` and a `content` (and, for a call or its result, what the
template reads of it: `tool_calls`, `tool_call_id`)."""


@dataclass(frozen=True)
class Conversation:
    """Chat messages and the tools the assistant may call, both for the chat template."""

    messages: Messages
    tools: tuple[Mapping[str, Any], ...] = ()


Prompt = str | Messages | Conversation
"""A prompt, or chat messages to render into one."""


class ChatTemplateError(ValueError):
    """A template that does not compile, or a tokenizer config that cannot be read: the model
    does not load (said at load time, not at the first chat)."""


def _refuse(message: str) -> NoReturn:
    raise InvalidInputError(f"the model's chat template refuses this conversation: {message}")


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    bos_token: str = ""
    eos_token: str = ""
    origin: str = "default"
    """Where the template came from: "default", the config, or the file's name."""

    @cached_property
    def _compiled(self) -> Any:
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _refuse
        try:
            return environment.from_string(self.source)
        except TemplateError as exc:
            raise ChatTemplateError(
                f"the chat template ({self.origin}) is not valid Jinja: {exc}"
            ) from exc

    def check(self) -> None:
        """Compiles the template now (a model with a broken one does not load)."""
        self._compiled  # noqa: B018  (compiling is the point)

    def render(self, messages: Messages, tools: Sequence[Mapping[str, Any]] = ()) -> str:
        """The prompt; `tools` reach the template as Hugging Face passes them (none: None)."""
        try:
            return str(
                self._compiled.render(
                    messages=[dict(m) for m in messages],
                    tools=[dict(t) for t in tools] or None,
                    add_generation_prompt=True,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                )
            )
        except InvalidInputError:
            raise
        except TemplateError as exc:
            raise InvalidInputError(f"the chat template failed on these messages: {exc}") from None

    def render_parts(
        self, messages: Messages, tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[tuple[str, bool]]:
        """The prompt `render` gives, in pieces: each the template's text (False) or a
        message's content (True), so that content can be tokenized apart from the control
        tokens the template writes (inferd.generation.chat_tokens). Each content is rendered
        as a marker no message can forge (a random number between two private-use
        characters), then put back; a template that alters the marker (it changes the
        content's characters) is refused 4004."""
        nonce = str(secrets.randbits(63))
        marked = [
            {**m, "content": f"{MARK_OPEN}{nonce}.{i}{MARK_CLOSE}"} if "content" in m else m
            for i, m in enumerate(messages)
        ]
        rendered = self.render(marked, tools)
        parts: list[tuple[str, bool]] = []
        at = 0
        for found in re.finditer(f"{MARK_OPEN}{nonce}\\.(\\d+){MARK_CLOSE}", rendered):
            parts.append((rendered[at : found.start()], False))
            parts.append((messages[int(found.group(1))]["content"], True))
            at = found.end()
        parts.append((rendered[at:], False))
        if any(MARK_OPEN in text or MARK_CLOSE in text for text, content in parts if not content):
            raise InvalidInputError(
                "the model's chat template changes the messages' content, which then cannot be "
                "kept apart from the template's control tokens"
            )
        return [(text, content) for text, content in parts if text]


def _token_text(value: object) -> str:
    """A special token as tokenizer configs write it: a string or `{"content": ...}`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return ""


def load_chat_template(
    folders: Sequence[Path], override: str | None, eos_token: str
) -> ChatTemplate:
    """The model's template: `override` (its config's), else the first `tokenizer_config.json`
    in `folders` that has one, else the default. Raises ChatTemplateError for a file that
    cannot be read or a template that does not compile."""
    found: dict[str, Any] = {}
    origin = "default"
    for folder in folders:
        path = folder / CONFIG_FILE
        if path.is_file():
            try:
                found = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ChatTemplateError(f"{path.name}: cannot read it: {exc}") from exc
            if not isinstance(found, dict):
                raise ChatTemplateError(f"{path.name}: not a JSON object")
            origin = path.name
            break
    source = found.get("chat_template")
    if isinstance(source, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if override is not None:
        source, origin = override, "generation.chat_template"
    if not isinstance(source, str) or not source.strip():
        source, origin = DEFAULT_TEMPLATE, "default"
    template = ChatTemplate(
        source,
        bos_token=_token_text(found.get("bos_token")),
        eos_token=_token_text(found.get("eos_token")) or eos_token,
        origin=origin,
    )
    template.check()
    return template
