"""OpenAI-compatible `POST /v1/chat/completions`, whole or streamed (`chat.completion.chunk`
objects, then `data: [DONE]`), with `usage`; the `openai` Python client works unchanged.

The messages become a prompt through the model's chat template (inferd.generation.chat); the
assistant's answer is generated from it like any prompt, held to a form when the request
asks (`response_format` with `json_object` or `json_schema`, or vLLM's `guided_*` fields:
inferd.server.routes.guided), or a tool call (`tools`, `tool_choice`:
inferd.server.routes.tools). One choice per request: `n` > 1, `logprobs` and the deprecated
`functions` are refused with 4004 rather than silently ignored.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from inferd.engine import Generation
from inferd.errors import EmptyInputError, TooManyItemsError
from inferd.generation.chat import Conversation
from inferd.generation.grammar import one_of
from inferd.generation.sequence import Finished
from inferd.server.body import read_json
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.errors import request_id_of
from inferd.server.responses import json_response
from inferd.server.routes.completions import OpenAIGeneration, finish_reason, refuse
from inferd.server.routes.generate import check_prompt_text, error_event, sampling_of, usage
from inferd.server.routes.tools import CallStream, Tool, ToolPlan, answer, plan, template_message
from inferd.server.sse import sse, sse_response
from inferd.server.state import engine_of

MAX_MESSAGES = 256


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: str = Field(description="JSON text, as OpenAI sends it.")


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = Field(
        None, description="Text, or text parts (images are not read); none for a call."
    )
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, description="An assistant's calls.")
    tool_call_id: str | None = Field(None, description="The call a tool message answers.")

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.text for part in self.content)

    def for_template(self) -> dict[str, Any]:
        calls = [c.model_dump() for c in self.tool_calls or ()]
        message = template_message(self.role, self.text(), calls)
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class ChatRequest(OpenAIGeneration):
    messages: list[ChatMessage] = Field(description="The conversation, oldest first.")
    max_completion_tokens: int | None = Field(None, description="Wins over max_tokens.")
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Any = Field(
        None, description='"none", "auto" (with tools, the default), "required", or a function.'
    )
    parallel_tool_calls: bool | None = Field(None, description="Taken; one call an answer.")
    functions: list[dict[str, Any]] | None = None


def _refuse_unsupported(body: ChatRequest) -> None:
    refuse(
        {
            **body.unsupported(),
            "logprobs": bool(body.logprobs) or body.top_logprobs is not None,
            "functions": bool(body.functions),
        }
    )


def _messages(body: ChatRequest) -> list[dict[str, Any]]:
    if not body.messages:
        raise EmptyInputError("messages is an empty list")
    if len(body.messages) > MAX_MESSAGES:
        raise TooManyItemsError(f"{len(body.messages)} messages; the limit is {MAX_MESSAGES}")
    messages = []
    for i, message in enumerate(body.messages):
        text = message.text()
        if text:
            check_prompt_text(text, f"message {i}")
        messages.append(message.for_template())
    return messages


async def chat_completions(request: Request) -> Response:
    body = await read_json(request, ChatRequest, "generate")
    _refuse_unsupported(body)
    conversation, tool_plan = _conversation(body)
    max_tokens = body.max_completion_tokens or body.max_tokens
    grammar = one_of({"response_format": body.grammar(), "tools": tool_plan.grammar})
    generation = await engine_of(request).start_generation(
        body.model, conversation, sampling_of(body, max_tokens, grammar)
    )
    head = {
        "id": f"chatcmpl-{request_id_of(request) or int(time.time() * 1000)}",
        "created": int(time.time()),
        "model": generation.model,
        "system_fingerprint": f"{generation.model}-v{generation.version}",
    }
    if body.stream:
        stream = CallStream(tool_plan)
        return sse_response(
            _chunks(generation, head, body.with_usage(), request_id_of(request), stream)
        )
    try:
        async with cancel_on_disconnect(request.receive):
            done = await generation.result()
    finally:
        generation.close()
    message, reason = answer(tool_plan, done.text, finish_reason(done))
    payload = {
        **head,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reason}],
        "usage": usage(done),
    }
    return json_response(payload)


def _conversation(body: ChatRequest) -> tuple[Conversation, ToolPlan]:
    """The messages and tools for the chat template, and what the answer may be."""
    tool_plan = plan(body.tools, body.tool_choice)
    return Conversation(_messages(body), tool_plan.tools), tool_plan


def _chunk(head: dict[str, object], delta: dict[str, Any], reason: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    return sse({**head, "object": "chat.completion.chunk", "choices": [choice]})


async def _chunks(
    generation: Generation,
    head: dict[str, object],
    with_usage: bool,
    request_id: str,
    stream: CallStream,
) -> AsyncIterator[bytes]:
    """The assistant's role first, then its text (or its call) as it comes, then the finish
    reason (and the usage, when asked)."""
    try:
        yield _chunk(head, {"role": "assistant", "content": ""}, None)
        done: Finished | None = None
        async for event in generation.stream():
            if isinstance(event, Finished):
                done = event
                for delta in stream.finish(finish_reason(event)):
                    yield _chunk(head, delta, None)
                yield _chunk(head, {}, stream.finish_reason(finish_reason(event)))
            else:
                for delta in stream.push(event):
                    yield _chunk(head, delta, None)
        if with_usage and done is not None:
            yield sse(
                {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage(done)}
            )
        yield sse(b"[DONE]")
    except Exception as exc:  # headers are sent: the error travels as a data object
        yield sse(error_event(exc, request_id, "/v1/chat/completions"))
    finally:
        generation.close()
