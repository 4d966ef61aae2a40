"""Generation over KServe V2 gRPC: a generator's prompt (its `text_input` tensor) answered with
its text (`text_output`), one response for `ModelInfer`, one a token on `ModelStreamInfer`
(the last flagged final, Triton's way), within the call's deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from inferd.engine import FINAL, TEXT_OUTPUT, Engine, Generation
from inferd.errors import DeadlineExceededError
from inferd.front.v2_parameters import prompt_of, sampling_of
from inferd.generation.sequence import Finished
from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.codec import decode_inputs, encode_outputs
from inferd.grpc_v2.reader import Reader
from inferd.grpc_v2.wire import InferAnswer, InferCall
from inferd.observability.trace import current_trace


async def generated(
    engine: Engine,
    reader: Reader,
    call: InferCall,
    parameters: dict[str, Any],
    timeout_s: float | None,
    streamed: bool,
) -> AsyncIterator[pb.ModelInferResponse]:
    """A generation's responses: with `streamed`, one per token, the last flagged final;
    else one with the whole text. `parameters`: the request's, read; `timeout_s`: the call's
    deadline (None: none)."""
    request = call.message
    feeds = await reader.off_loop(call.size, lambda: decode_inputs(request, call.raw, call.packed))
    generation = await engine.start_generation(
        request.model_name, prompt_of(feeds), sampling_of(parameters), request.model_version or None
    )
    current_trace().deadline_by_client = timeout_s is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        generation.close()  # the stream ends; its sequence stops at the next step

    timer = None
    if timeout_s is not None:
        timer = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        if not streamed:
            done = await generation.result()
            if expired:
                raise DeadlineExceededError("the call's deadline passed during its generation")
            yield text_response(request, generation, done.text, done)
            return
        # each token's response goes out when the next one is known, so that the last
        # carries the final flag; a client that asked for an empty final response
        # (`triton_enable_empty_final_response`) gets every token, then that
        empty_final = bool(parameters.get("triton_enable_empty_final_response"))
        held: str | None = None
        async for event in generation.stream(joined=False):
            if expired:
                break
            if isinstance(event, Finished):
                if held is not None and not empty_final:
                    yield text_response(request, generation, held, event)
                else:
                    if held is not None:
                        yield text_response(request, generation, held, None)
                    yield text_response(request, generation, None, event)
                return
            if held is not None:
                yield text_response(request, generation, held, None)
            held = event
        if expired:
            raise DeadlineExceededError("the call's deadline passed during its generation")
    finally:
        if timer is not None:
            timer.cancel()
        generation.close()


def text_response(
    request: pb.ModelInferRequest,
    generation: Generation,
    text: str | None,
    done: Finished | None,
) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(
        model_name=generation.model, model_version=str(generation.version), id=request.id
    )
    if text is not None:
        text_output = {TEXT_OUTPUT: np.array([text], dtype=object)}
        encode_outputs(InferAnswer(response), text_output).complete()
    response.parameters[FINAL].bool_param = done is not None
    if done is not None:
        response.parameters["finish_reason"].string_param = done.reason
        response.parameters["prompt_tokens"].int64_param = done.prompt_tokens
        response.parameters["completion_tokens"].int64_param = done.completion_tokens
    return response
