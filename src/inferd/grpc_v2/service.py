"""`inference.GRPCInferenceService` on inferd's engine: the same models, batchers, limits,
deadlines, keys, metrics and log lines as HTTP.

Each call is observed as an HTTP request is (inferd.grpc_v2.calls). Metadata plays the part of
headers: `authorization: Bearer <key>` (an admin key for the repository RPCs), `x-request-id`,
`x-inferd-route-key`. The call's deadline is the request's deadline (the V2 `timeout`
parameter, in microseconds, may shorten it); a call its client cancels stops its work (queued
batches are dropped, a generation ends at its next step).

A text generator answers `ModelInfer` with the whole text and `ModelStreamInfer` with one
response per generated token, in order, then a last one flagged `triton_final_response`.
Its input is `text_input` (BYTES, one element); the request's parameters carry the sampling
settings (`max_tokens`, `temperature`, `top_k`, `top_p`, `repetition_penalty`, `seed`,
`stop`, `ignore_eos`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import Message

from inferd.engine import Engine
from inferd.errors import InferdError, TooManyItemsError
from inferd.front import v2_views as views
from inferd.front.recording import RequestRecorder
from inferd.front.route_key import take_route_key
from inferd.front.v2_parameters import timeout_parameter_s
from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2 import kserve_v2_service_pb2_grpc as pb_grpc
from inferd.grpc_v2.calls import Calls
from inferd.grpc_v2.codec import decode_inputs, encode_outputs, parameter_values
from inferd.grpc_v2.generate_rpc import generated
from inferd.grpc_v2.reader import Reader
from inferd.grpc_v2.stream import Put, stream_error, windowed
from inferd.grpc_v2.wire import InferAnswer, InferCall
from inferd.observability.trace import current_trace
from inferd.verbs.infer import INFER, TensorRequest

MAX_PARAMETERS = 1024
"""Parameters of one request that are read (more: refused)."""

M = TypeVar("M", bound=Message)


def _message(body: dict[str, Any], message: M) -> M:
    """A V2 view (inferd.front.v2_views) as a message; fields the message lacks are left out."""
    json_format.ParseDict(body, message, ignore_unknown_fields=True)
    return message


class InferenceService(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(
        self,
        engine: Engine,
        recorder: RequestRecorder,
        strict_readiness: bool,
        reader: Reader,
        stream_window: int,
    ) -> None:
        self._engine = engine
        self.calls = Calls(recorder)
        self._strict = strict_readiness
        self._reader = reader
        self._window = stream_window

    # -- health and metadata ---------------------------------------------------------------

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Any
    ) -> pb.ServerLiveResponse:
        return await self.calls.run(context, "ServerLive", None, self._live)

    async def _live(self) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Any
    ) -> pb.ServerReadyResponse:
        async def ready() -> pb.ServerReadyResponse:
            return pb.ServerReadyResponse(ready=self._engine.readiness(self._strict).ready)

        return await self.calls.run(context, "ServerReady", None, ready)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        async def ready() -> pb.ModelReadyResponse:
            served = self._engine.registry.resolve(request.name, request.version or None)
            return pb.ModelReadyResponse(ready=served.ready or served.standby)

        return await self.calls.run(context, "ModelReady", request.name, ready)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Any
    ) -> pb.ServerMetadataResponse:
        async def metadata() -> pb.ServerMetadataResponse:
            body = views.server_metadata(self._engine)
            return _message(body, pb.ServerMetadataResponse())

        return await self.calls.run(context, "ServerMetadata", None, metadata)

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Any
    ) -> pb.ModelMetadataResponse:
        async def metadata() -> pb.ModelMetadataResponse:
            body = await views.model_metadata(self._engine, request.name, request.version or None)
            return _message(body, pb.ModelMetadataResponse())

        return await self.calls.run(context, "ModelMetadata", request.name, metadata)

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Any
    ) -> pb.ModelConfigResponse:
        async def config() -> pb.ModelConfigResponse:
            served = await views.ready_version(self._engine, request.name, request.version or None)
            body = {"config": views.config_of(served)}
            return _message(body, pb.ModelConfigResponse())

        return await self.calls.run(context, "ModelConfig", request.name, config)

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        async def statistics() -> pb.ModelStatisticsResponse:
            body = views.statistics(self._engine, request.name or None, request.version or None)
            return _message(body, pb.ModelStatisticsResponse())

        return await self.calls.run(context, "ModelStatistics", request.name or None, statistics)

    # -- the repository ----------------------------------------------------------------------

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        async def index() -> pb.RepositoryIndexResponse:
            rows = self._engine.repository_index()
            if request.ready:
                rows = [row for row in rows if row.get("state") == "READY"]
            return _message({"models": rows}, pb.RepositoryIndexResponse())

        return await self.calls.run(context, "RepositoryIndex", None, index)

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        async def load() -> pb.RepositoryModelLoadResponse:
            await self._engine.load_model(request.model_name)
            return pb.RepositoryModelLoadResponse()

        return await self.calls.run(context, "RepositoryModelLoad", request.model_name, load)

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        async def unload() -> pb.RepositoryModelUnloadResponse:
            await self._engine.unload_model(request.model_name)
            return pb.RepositoryModelUnloadResponse()

        return await self.calls.run(context, "RepositoryModelUnload", request.model_name, unload)

    # -- inference ---------------------------------------------------------------------------

    async def ModelInfer(
        self, call: InferCall, context: Any
    ) -> InferAnswer | pb.ModelInferResponse:
        """Called with the request as `wire` parses it, answered for `wire` to write."""
        request = call.message

        async def infer() -> InferAnswer | pb.ModelInferResponse:
            if self._generates(request.model_name):
                generating = self._generate(call, context, streamed=False)
                responses = [r async for r in generating]
                return responses[-1]
            return await self._infer(call, context)

        return await self.calls.run(context, "ModelInfer", request.model_name, infer)

    async def _infer(self, call: InferCall, context: Any) -> InferAnswer:
        request = call.message
        trace = current_trace()
        started = time.perf_counter()
        parameters = self._parameters(request)
        feeds, output_names = await self._reader.off_loop(
            call.size, lambda: _read_tensors(request, call.raw, call.packed)
        )
        timeout_s = _timeout_s(context, parameters)
        trace.mark("parse", started)
        asked = TensorRequest(
            request.model_name, request.model_version or None, feeds, output_names or ()
        )
        served, outputs = await self._engine.serve(INFER, asked, timeout_s)
        started = time.perf_counter()
        answer = encode_outputs(
            InferAnswer(
                pb.ModelInferResponse(
                    model_name=served.model, model_version=str(served.version), id=request.id
                )
            ),
            outputs,
        )
        trace.mark("respond", started)
        return answer

    def _parameters(self, request: pb.ModelInferRequest) -> dict[str, Any]:
        if len(request.parameters) > MAX_PARAMETERS:
            raise TooManyItemsError(
                f"the request has {len(request.parameters)} parameters; at most "
                f"{MAX_PARAMETERS} are read"
            )
        parameters = parameter_values(request.parameters)
        if parameters:  # (the route key's entry stays: parameters are free-form)
            take_route_key(self._engine, parameters, request.model_name, None, parameters)
        return parameters

    def _generates(self, model: str) -> bool:
        config = self._engine.registry.config_of(model)
        return config is not None and "generate" in config.kind.verbs

    def _generate(
        self, call: InferCall, context: Any, streamed: bool
    ) -> AsyncIterator[pb.ModelInferResponse]:
        parameters = self._parameters(call.message)
        timeout_s = _timeout_s(context, parameters)
        return generated(self._engine, self._reader, call, parameters, timeout_s, streamed)

    async def ModelStreamInfer(
        self, requests: AsyncIterator[InferCall | InferdError], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """The stream's requests run as they arrive, at most `stream_window` at a time
        (inferd.grpc_v2.stream); each response carries its request's `id`. A request that
        fails gets `error_message` (and the stream goes on)."""

        async def answer(item: InferCall | InferdError, put: Put) -> None:
            if isinstance(item, InferdError):
                await put(stream_error(item, None))
                return
            request = item.message

            async def responses() -> None:
                if self._generates(request.model_name):
                    async for response in self._generate(item, context, streamed=True):
                        await put(pb.ModelStreamInferResponse(infer_response=response))
                else:
                    answered = await self._infer(item, context)
                    await put(pb.ModelStreamInferResponse(infer_response=answered.complete()))

            try:
                await self.calls.stream_request(context, request.id, request.model_name, responses)
            except InferdError as exc:
                await put(stream_error(exc, request))

        async for response in windowed(requests, self._window, answer):
            yield response


def _read_tensors(
    request: pb.ModelInferRequest,
    raw: Sequence[memoryview],
    packed: Mapping[tuple[int, int], Sequence[memoryview]],
) -> tuple[dict[str, np.ndarray], list[str] | None]:
    """The request's inputs and the outputs it names (off the loop for a large message)."""
    return decode_inputs(request, raw, packed), [o.name for o in request.outputs] or None


def _timeout_s(context: Any, parameters: dict[str, Any]) -> float | None:
    """The call's deadline, shortened by the V2 `timeout` parameter (microseconds)."""
    remaining = context.time_remaining()
    seconds = timeout_parameter_s(parameters)
    if seconds is None:
        return remaining if remaining is not None else None
    return seconds if remaining is None else min(seconds, remaining)
