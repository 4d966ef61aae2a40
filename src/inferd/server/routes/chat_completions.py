"""OpenAI-compatible `POST /v1/chat/completions`, whole or streamed (`chat.completion.chunk`
objects, then `data: [DONE]`), with `usage`; the `openai` Python client works unchanged.

The messages become a prompt through the model's chat template (inferd.generation.chat); the
assistant's answer is generated from it like any prompt, held to a form when the request
asks (`response_format` with `json_object` or `json_schema`, or vLLM's `guided_*` fields:
inferd.server.routes.guided), or a tool call (`tools`, `tool_choice`:
inferd.server.routes.tools). `n` answers share the prompt's prefill
(inferd.server.routes.choices); `logprobs` and `top_logprobs` give each token's
log-probability. The deprecated `functions` are refused with 4004 rather than silently
ignored.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from inferd.engine import Generation
from inferd.errors import EmptyInputError, InvalidInputError, TooManyItemsError
from inferd.generation.chat import Conversation
from inferd.generation.grammar import one_of
from inferd.generation.sequence import Finished
from inferd.server.body import read_json
from inferd.server.error_answers import request_id_of
from inferd.server.responses import json_response
from inferd.server.routes import choices
from inferd.server.routes.completions import OpenAIGeneration, finish_reason, refuse
from inferd.server.routes.generate import check_prompt_text, error_event, sampling_of
from inferd.server.routes.logprob_shapes import Unsent, chat_logprobs
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
    logprobs: bool | None = Field(None, description="Each token's log-probability.")
    top_logprobs: int | None = Field(None, description="Alternatives a token, 0 to 20.")
    tools: list[Tool] | None = None
    tool_choice: Any = Field(
        None, description='"none", "auto" (with tools, the default), "required", or a function.'
    )
    parallel_tool_calls: bool | None = Field(None, description="Taken; one call an answer.")
    functions: list[dict[str, Any]] | None = None

    def logprobs_asked(self) -> int | None:
        """Alternatives a token (None: no log-probabilities); 4004 for `top_logprobs`
        without `logprobs`."""
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidInputError("top_logprobs needs logprobs: true", param="top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None


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
    refuse({"functions": bool(body.functions)})
    conversation, tool_plan = _conversation(body)
    if tool_plan.calls and body.stop:  # (a stop string would cut a call short)
        raise InvalidInputError("stop cannot be used with tool calls", param="stop")
    given = body.max_completion_tokens is not None  # (it wins over max_tokens)
    named = "max_completion_tokens" if given else "max_tokens"
    max_tokens = body.max_completion_tokens if given else body.max_tokens
    grammar = one_of({"response_format": body.grammar(), "tools": tool_plan.grammar})
    sampling = sampling_of(body, max_tokens, grammar, body.logprobs_asked(), named)
    n = choices.choice_count(body.n)
    engine = engine_of(request)
    generations = await choices.start(engine, body.model, [conversation], sampling, n)
    first = generations[0]
    head = {
        "id": f"chatcmpl-{request_id_of(request) or int(time.time() * 1000)}",
        "created": int(time.time()),
        "model": first.model,
        "system_fingerprint": f"{first.model}-v{first.version}",
    }
    if body.stream:
        stream = _chunks(generations, head, body, tool_plan, request_id_of(request))
        return sse_response(stream)
    results = await choices.whole(request, generations)
    asked = body.logprobs_asked() is not None
    answers = []
    for i, (generation, done) in enumerate(zip(generations, results, strict=True)):
        message, reason = answer(tool_plan, done.text, finish_reason(done))
        shaped = chat_logprobs(generation.seq.logprobs) if asked else None
        answers.append(
            {"index": i, "message": message, "logprobs": shaped, "finish_reason": reason}
        )
    payload = {
        **head,
        "object": "chat.completion",
        "choices": answers,
        "usage": choices.total_usage(results, n),
    }
    return json_response(payload)


def _conversation(body: ChatRequest) -> tuple[Conversation, ToolPlan]:
    """The messages and tools for the chat template, and what the answer may be."""
    tool_plan = plan(body.tools, body.tool_choice)
    return Conversation(_messages(body), tool_plan.tools), tool_plan


def _chunk(
    head: dict[str, object],
    index: int,
    delta: dict[str, Any],
    reason: str | None,
    logprobs: dict[str, Any] | None = None,
) -> bytes:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
    return sse({**head, "object": "chat.completion.chunk", "choices": [choice]})


async def _chunks(
    generations: list[Generation],
    head: dict[str, object],
    body: ChatRequest,
    tool_plan: ToolPlan,
    request_id: str,
) -> AsyncIterator[bytes]:
    """Each choice's role first, then its text (or its call) as it comes, with its tokens'
    log-probabilities when asked, then its finish reason; the usage at the end, when asked."""
    streams = [CallStream(tool_plan) for _ in generations]
    unsent = [Unsent(g.seq.logprobs) for g in generations]
    asked = body.logprobs_asked() is not None
    ended: dict[int, Finished] = {}
    try:
        for index in range(len(generations)):
            yield _chunk(head, index, {"role": "assistant", "content": ""}, None)
        async for index, event in choices.merged(generations):
            stream = streams[index]
            if isinstance(event, Finished):
                ended[index] = event
                deltas = stream.finish(finish_reason(event))
            else:
                deltas = stream.push(event)
            shaped = chat_logprobs(unsent[index].take()) if asked else None
            for delta in deltas:
                yield _chunk(head, index, delta, None, shaped)
                shaped = None  # (once: with the chunk's first delta)
            if shaped is not None and shaped["content"]:
                yield _chunk(head, index, {}, None, shaped)
            if isinstance(event, Finished):
                yield _chunk(head, index, {}, stream.finish_reason(finish_reason(event)))
        if body.with_usage():
            results = [ended[i] for i in sorted(ended)]
            usage_total = choices.total_usage(results, len(generations))
            yield sse(
                {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage_total}
            )
        yield sse(b"[DONE]")
    except Exception as exc:  # headers are sent: the error travels as a data object
        yield sse(error_event(exc, request_id, "/v1/chat/completions"))
