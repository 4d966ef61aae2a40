"""KServe V2 REST: server and model metadata, model readiness, config, and inference."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import Response

from inferd.front import v2_views as views
from inferd.front.route_key import take_route_key
from inferd.front.v2_binary import HEADER_LENGTH, split_body
from inferd.front.v2_codec import (
    InferRequest,
    binary_outputs,
    decode_inputs,
    encode_response,
    parse_infer_request,
)
from inferd.front.v2_parameters import timeout_parameter_s
from inferd.observability.trace import current_trace
from inferd.server.body import parsing_turn, read_body
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.responses import json_response
from inferd.server.state import engine_of, header_timeout_s
from inferd.verbs.infer import INFER, TensorRequest

router = APIRouter(tags=["v2"])


@router.get("/v2", summary="Server metadata")
async def server_metadata(request: Request) -> Response:
    return json_response(views.server_metadata(engine_of(request)))


def _stats(request: Request, model: str | None, version: str | None) -> Response:
    return json_response(views.statistics(engine_of(request), model, version))


@router.get("/v2/models/stats", summary="Statistics of every model (Triton extension)")
async def all_stats(request: Request) -> Response:
    return _stats(request, None, None)


@router.get("/v2/models/{model}/stats", summary="Statistics of a model's versions")
async def model_stats(request: Request, model: str) -> Response:
    return _stats(request, model, None)


@router.get("/v2/models/{model}/versions/{version}/stats", summary="Statistics of a version")
async def version_stats(request: Request, model: str, version: str) -> Response:
    return _stats(request, model, version)


async def _model_metadata(request: Request, model: str, version: str | None) -> Response:
    return json_response(await views.model_metadata(engine_of(request), model, version))


@router.get("/v2/models/{model}", summary="Model metadata")
async def model_metadata(request: Request, model: str) -> Response:
    return await _model_metadata(request, model, None)


@router.get("/v2/models/{model}/versions/{version}", summary="Model version metadata")
async def version_metadata(request: Request, model: str, version: str) -> Response:
    return await _model_metadata(request, model, version)


def _model_ready(request: Request, model: str, version: str | None) -> Response:
    served = engine_of(request).registry.resolve(model, version)
    ready = served.ready or served.standby  # (an on-demand version loads for its request)
    body = {"name": model, "version": str(served.version), "ready": ready}
    if served.reason:
        body["reason"] = served.reason
    return json_response(body, 200 if ready else 503)


@router.get("/v2/models/{model}/ready", summary="Model readiness (200 or 503)")
async def model_ready(request: Request, model: str) -> Response:
    return _model_ready(request, model, None)


@router.get("/v2/models/{model}/versions/{version}/ready", summary="Model version readiness")
async def version_ready(request: Request, model: str, version: str) -> Response:
    return _model_ready(request, model, version)


@router.get("/v2/models/{model}/config", summary="Model configuration (Triton extension)")
async def model_config(request: Request, model: str) -> Response:
    return json_response(
        views.config_of(await views.ready_version(engine_of(request), model, None))
    )


@router.get("/v2/models/{model}/versions/{version}/config", summary="Model version configuration")
async def version_config(request: Request, model: str, version: str) -> Response:
    return json_response(
        views.config_of(await views.ready_version(engine_of(request), model, version))
    )


def _timeout_s(request: Request, parsed: InferRequest) -> float | None:
    """From `X-Request-Timeout-Ms`, else the V2 `timeout` parameter (microseconds)."""
    header = header_timeout_s(request)
    if header is not None:
        return header
    return timeout_parameter_s(parsed.parameters or {})


async def _infer(request: Request, model: str, version: str | None) -> Response:
    body = await read_body(request)
    trace = current_trace()
    started = time.perf_counter()
    json_part, binary = split_body(body, request.headers.get(HEADER_LENGTH))
    async with parsing_turn(len(json_part)):
        parsed = parse_infer_request(json_part)
        if parsed.parameters:  # (free-form: the route key's entry stays)
            take_route_key(engine_of(request), parsed.parameters, model, None, parsed.parameters)
        feeds = decode_inputs(parsed, binary)
    output_names = [o.name for o in parsed.outputs] if parsed.outputs else None
    timeout_s = _timeout_s(request, parsed)
    trace.mark("parse", started)
    async with cancel_on_disconnect(request.receive):
        served, outputs = await engine_of(request).serve(
            INFER, TensorRequest(model, version, feeds, output_names or ()), timeout_s
        )
    started = time.perf_counter()
    as_binary = binary_outputs(parsed, list(outputs))
    content, header_length = encode_response(
        served.model, served.version, parsed.id, outputs, as_binary
    )
    trace.mark("respond", started)
    if header_length is None:
        return json_response(content)
    return Response(
        content,
        media_type="application/octet-stream",
        headers={HEADER_LENGTH: str(header_length)},
    )


async def infer(request: Request, model: str) -> Response:
    return await _infer(request, model, None)


async def version_infer(request: Request, model: str, version: str) -> Response:
    return await _infer(request, model, version)
