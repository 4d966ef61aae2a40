"""OpenAI-compatible `POST /v1/completions`, whole or streamed (`data: {...}` chunks, then
`data: [DONE]`), with `usage`; the `openai` Python client works against it unchanged.

Several prompts in one request are generated side by side (one choice each, by index); a
form the answer is held to (`response_format`, `guided_json`, `guided_regex`,
`guided_choice`: inferd.server.routes.guided) holds for each. `n` > 1, `best_of` > 1, `echo`,
`logprobs`, and `suffix` are refused with 4004 rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from inferd.engine import Generation
from inferd.errors import EmptyInputError, InvalidInputError, TooManyItemsError
from inferd.generation.sequence import Finished
from inferd.server.body import read_json
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.errors import request_id_of
from inferd.server.responses import json_response
from inferd.server.routes.generate import check_prompt_text, error_event, sampling_of, usage
from inferd.server.routes.guided import GuidedFields
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

    def unsupported(self) -> dict[str, bool]:
        """The shared fields set to what inferd does not do (refused, never ignored)."""
        return {"n": self.n not in (None, 1)}

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
    logprobs: int | None = None
    suffix: str | None = None


def _refuse_unsupported(body: CompletionRequest) -> None:
    refuse(
        {
            **body.unsupported(),
            "best_of": body.best_of not in (None, 1),
            "echo": bool(body.echo),
            "logprobs": body.logprobs is not None,
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
    sampling = sampling_of(body, body.max_tokens, body.grammar())

    engine = engine_of(request)
    generations: list[Generation] = []
    try:
        for prompt in prompts:
            generations.append(await engine.start_generation(body.model, prompt, sampling))
    except BaseException:
        for g in generations:
            g.close()
        raise
    head = {
        "id": f"cmpl-{request_id_of(request) or int(time.time() * 1000)}",
        "created": int(time.time()),
        "model": generations[0].model,
    }
    if body.stream:
        return sse_response(_chunks(generations, head, body.with_usage(), request_id_of(request)))
    try:
        async with cancel_on_disconnect(request.receive):
            results = await asyncio.gather(*(g.result() for g in generations))
    finally:
        for g in generations:
            g.close()
    choices = [
        {"text": done.text, "index": i, "logprobs": None, "finish_reason": finish_reason(done)}
        for i, done in enumerate(results)
    ]
    payload = {
        **head,
        "object": "text_completion",
        "choices": choices,
        "usage": _total_usage(results),
    }
    return json_response(payload)


def finish_reason(done: Finished) -> str:
    return "length" if done.reason == "length" else "stop"


def _total_usage(results: list[Finished]) -> dict[str, int]:
    total = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for done in results:
        for key, value in usage(done).items():
            total[key] += value
    return total


async def _chunks(
    generations: list[Generation], head: dict[str, object], with_usage: bool, request_id: str
) -> AsyncIterator[bytes]:
    """Every generation's events, merged as they come, as OpenAI completion chunks."""
    queue: asyncio.Queue[tuple[int, str | Finished | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, generation: Generation) -> None:
        try:
            async for event in generation.stream():
                queue.put_nowait((index, event))
        except Exception as exc:
            queue.put_nowait((index, exc))
        finally:
            queue.put_nowait((index, None))

    tasks = [asyncio.create_task(pump(i, g)) for i, g in enumerate(generations)]
    results: list[Finished] = []
    open_streams = len(generations)
    try:
        while open_streams:
            index, event = await queue.get()
            if event is None:
                open_streams -= 1
                continue
            if isinstance(event, BaseException):
                yield sse(error_event(event, request_id, "/v1/completions"))
                return
            if isinstance(event, Finished):
                results.append(event)
                choice = {
                    "text": "",
                    "index": index,
                    "logprobs": None,
                    "finish_reason": finish_reason(event),
                }
            else:
                choice = {"text": event, "index": index, "logprobs": None, "finish_reason": None}
            yield sse({**head, "object": "text_completion", "choices": [choice]})
        if with_usage:
            yield sse(
                {**head, "object": "text_completion", "choices": [], "usage": _total_usage(results)}
            )
        yield sse(b"[DONE]")
    finally:
        for task in tasks:
            task.cancel()
        for g in generations:
            g.close()
