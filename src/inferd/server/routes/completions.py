"""OpenAI-compatible `POST /v1/completions`, whole or streamed (`data: {...}` chunks, then
`data: [DONE]`), with `usage`; the `openai` Python client works against it unchanged.

Several prompts in one request are generated side by side (one choice each, by index); a
form the answer is held to (`response_format`, `guided_json`, `guided_regex`,
`guided_choice`: inferd.server.routes.guided) holds for each. `n` > 1, `best_of` > 1, `echo`,
`logprobs`, and `suffix` are refused with 4004 rather than silently ignored.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from inferd.engine import Generation
from inferd.errors import EmptyInputError, InvalidInputError, TooManyItemsError
from inferd.generation.sequence import Finished
from inferd.server.body import read_json
from inferd.server.error_answers import request_id_of
from inferd.server.responses import json_response
from inferd.server.routes import choices
from inferd.server.routes.generate import check_prompt_text, error_event, sampling_of
from inferd.server.routes.guided import GuidedFields
from inferd.server.routes.logprob_shapes import Unsent, completion_logprobs
from inferd.server.sse import sse, sse_response
from inferd.server.state import engine_of

MAX_PROMPTS = 16


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class OpenAIGeneration(GuidedFields):
    """The fields OpenAI's completions and chat completions share (and those open servers
    add to them)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="A model id from /v1/models.")
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    user: str | None = None
    # not OpenAI's, but what open servers take too
    top_k: int | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False

    def with_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


def refuse(unsupported: dict[str, bool]) -> None:
    named = [k for k, v in unsupported.items() if v]
    if named:
        raise InvalidInputError(f"not supported here: {', '.join(named)}", param=named[0])


class CompletionRequest(OpenAIGeneration):
    prompt: str | list[str] = Field(description="A prompt or a list of prompts.")
    best_of: int | None = None
    echo: bool | None = None
    logprobs: int | None = Field(
        None, description="Each token's log-probability and as many alternatives (0 to 20)."
    )
    suffix: str | None = None


def _refuse_unsupported(body: CompletionRequest) -> None:
    refuse(
        {
            "best_of": body.best_of not in (None, 1),
            "echo": bool(body.echo),
            "suffix": body.suffix is not None,
        }
    )


def _prompts(value: str | list[str]) -> list[str]:
    prompts = [value] if isinstance(value, str) else list(value)
    if not prompts:
        raise EmptyInputError("prompt is an empty list")
    if len(prompts) > MAX_PROMPTS:
        raise TooManyItemsError(f"{len(prompts)} prompts; the limit is {MAX_PROMPTS}")
    for i, prompt in enumerate(prompts):
        check_prompt_text(prompt, f"prompt {i}" if len(prompts) > 1 else "prompt")
    return prompts


async def completions(request: Request) -> Response:
    body = await read_json(request, CompletionRequest, "generate")
    _refuse_unsupported(body)
    prompts = _prompts(body.prompt)
    n = choices.choice_count(body.n)
    sampling = sampling_of(body, body.max_tokens, body.grammar(), body.logprobs, "max_tokens")
    generations = await choices.start(engine_of(request), body.model, prompts, sampling, n)
    head = {
        "id": f"cmpl-{request_id_of(request) or int(time.time() * 1000)}",
        "created": int(time.time()),
        "model": generations[0].model,
    }
    if body.stream:
        stream = _chunks(generations, head, body, n, request_id_of(request))
        return sse_response(stream)
    results = await choices.whole(request, generations)
    asked = body.logprobs is not None
    payload = {
        **head,
        "object": "text_completion",
        "choices": [
            {
                "text": done.text,
                "index": i,
                "logprobs": completion_logprobs(g.seq.logprobs) if asked else None,
                "finish_reason": finish_reason(done),
            }
            for i, (g, done) in enumerate(zip(generations, results, strict=True))
        ],
        "usage": choices.total_usage(results, n),
    }
    return json_response(payload)


def finish_reason(done: Finished) -> str:
    return "length" if done.reason == "length" else "stop"


async def _chunks(
    generations: list[Generation],
    head: dict[str, object],
    body: CompletionRequest,
    n: int,
    request_id: str,
) -> AsyncIterator[bytes]:
    """Every choice's text as it comes (with its tokens' log-probabilities when asked), as
    OpenAI completion chunks; then the usage when asked."""
    unsent = [Unsent(g.seq.logprobs) for g in generations]
    asked = body.logprobs is not None
    ended: dict[int, Finished] = {}
    try:
        async for index, event in choices.merged(generations):
            text, reason = event, None
            if isinstance(event, Finished):
                ended[index], text, reason = event, "", finish_reason(event)
            choice = {
                "text": text,
                "index": index,
                "logprobs": unsent[index].completion() if asked else None,
                "finish_reason": reason,
            }
            yield sse({**head, "object": "text_completion", "choices": [choice]})
        if body.with_usage():
            results = [ended[i] for i in sorted(ended)]
            usage_total = choices.total_usage(results, n)
            yield sse({**head, "object": "text_completion", "choices": [], "usage": usage_total})
        yield sse(b"[DONE]")
    except Exception as exc:  # headers are sent: the error travels as a data object
        yield sse(error_event(exc, request_id, "/v1/completions"))
