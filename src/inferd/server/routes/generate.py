"""`POST /generate`: text generation, whole or streamed as server-sent events.

Streamed: `event: token` events, each carrying the text generated since the previous one (the
tokens of one step, or of several when the client reads slower than the model writes), then
one `event: done` with the whole text, the finish reason and usage; an error after the stream
began arrives as `event: error` with inferd's error shape. A client that disconnects stops its
generation; its KV cache rows are freed at the next step.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from inferd.engine import Generation
from inferd.errors import EmptyInputError, EncodingError, InferdError, InternalError
from inferd.front.statuses import http_status
from inferd.generation.grammar import GrammarRequest, choice, json_schema, one_of, regex
from inferd.generation.params import SamplingFields, SamplingRequest
from inferd.generation.sequence import Finished
from inferd.server.body import read_json
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.error_answers import error_body, request_id_of
from inferd.server.responses import json_response
from inferd.server.routes.logprob_shapes import Unsent, plain_logprobs
from inferd.server.sse import sse, sse_response
from inferd.server.state import engine_of


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str = Field(description="The text to continue.")
    model: str | None = Field(None, description="Default: the one generation model served.")
    version: str | None = Field(
        None,
        description="A version of the model; default: the serving one (or a rollout's choice).",
    )
    max_length: int | None = Field(None, description="Most new tokens (model default if unset).")
    temperature: float | None = Field(None, description="0 is greedy; default 1.")
    top_p: float | None = Field(None, description="Nucleus sampling mass, (0, 1].")
    top_k: int | None = Field(None, description="Sample among the k most likely; 0 is off.")
    repetition_penalty: float | None = Field(None, description="Above 1 discourages repeats.")
    presence_penalty: float | None = Field(
        None, description="OpenAI's, -2 to 2: off each token the answer holds."
    )
    frequency_penalty: float | None = Field(
        None, description="OpenAI's, -2 to 2: off each token, per time the answer holds it."
    )
    stop: str | list[str] | None = Field(None, description="Text that ends the generation.")
    seed: int | None = Field(None, description="Same seed, same prompt: same text.")
    stream: bool = Field(False, description="Server-sent events instead of one answer.")
    ignore_eos: bool = Field(False, description="Keep going past EOS (fixed-length output).")
    json_schema: dict[str, Any] | None = Field(
        None, description="The answer is JSON valid against this schema."
    )
    regex: str | None = Field(None, description="The whole answer matches this regex.")
    choice: list[str] | None = Field(None, description="The answer is one of these strings.")
    logprobs: int | None = Field(
        None, description="Each token's log-probability, with this many alternatives (0-20)."
    )

    def grammar(self) -> GrammarRequest | None:
        """The form the answer is held to (inferd.generation.grammar), when one is set."""
        return one_of(
            {
                "json_schema": None
                if self.json_schema is None
                else json_schema(self.json_schema, "json_schema"),
                "regex": None if self.regex is None else regex(self.regex, "regex"),
                "choice": None if self.choice is None else choice(self.choice, "choice"),
            }
        )


def check_prompt_text(prompt: str, where: str = "prompt") -> None:
    if not prompt:
        raise EmptyInputError(f"{where} is empty")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodingError(f"{where} holds an unpaired surrogate") from None


def sampling_of(
    body: SamplingFields,
    max_new_tokens: int | None,
    grammar: GrammarRequest | None = None,
    logprobs: int | None = None,
    length_field: str = "max_length",
) -> SamplingRequest:
    """The request's sampling fields (/generate, /v1/completions, /v1/chat/completions)."""
    return SamplingRequest.of(body, max_new_tokens, grammar, logprobs, length_field)


def usage(done: Finished) -> dict[str, int]:
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }


def error_event(exc: BaseException, request_id: str, path: str = "") -> dict[str, object]:
    """An error after a stream has begun, as its data (in the route's error shape)."""
    error = exc if isinstance(exc, InferdError) else InternalError("generation failed")
    return error_body(
        http_status(error), int(error.code), error.message, request_id, path, error.param
    )


async def generate(request: Request) -> Response:
    started = time.perf_counter()
    body = await read_json(request, GenerateRequest, "generate")
    check_prompt_text(body.prompt)
    sampling = sampling_of(body, body.max_length, body.grammar(), body.logprobs)
    generation = await engine_of(request).start_generation(
        body.model, body.prompt, sampling, body.version
    )
    if body.stream:
        return sse_response(_events(generation, started, request_id_of(request)))
    try:
        async with cancel_on_disconnect(request.receive):
            done = await generation.result()
    finally:
        generation.close()
    return json_response(_final(generation, done, started))


def _final(generation: Generation, done: Finished, started: float) -> dict[str, object]:
    asked = generation.seq.params.logprobs is not None
    return {
        **({"logprobs": plain_logprobs(generation.seq.logprobs)} if asked else {}),
        "text": done.text,
        "tokens": done.completion_tokens,
        "finish_reason": done.reason,
        "latency_ms": round((time.perf_counter() - started) * 1000, 2),
        "time_to_first_token_ms": None
        if done.first_token_s is None
        else round(done.first_token_s * 1000, 2),
        "model": generation.model,
        "version": str(generation.version),
        "usage": usage(done),
    }


async def _events(generation: Generation, started: float, request_id: str) -> AsyncIterator[bytes]:
    unsent = Unsent(generation.seq.logprobs) if generation.seq.params.logprobs is not None else None
    try:
        async for event in generation.stream():
            if isinstance(event, Finished):
                yield sse(_final(generation, event, started), "done")
            else:
                token: dict[str, object] = {"text": event, "tokens": len(generation.seq.generated)}
                if unsent is not None:
                    token["logprobs"] = plain_logprobs(unsent.take())
                yield sse(token, "token")
    except Exception as exc:  # headers are sent: the error travels as an event
        yield sse(error_event(exc, request_id), "error")
    finally:
        generation.close()
