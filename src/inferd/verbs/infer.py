"""The `infer` verb: KServe V2 tensors in and out, which every kind answers (a text model maps
its BYTES `text` input to its own verb). Its forms are KServe V2's own, over HTTP
(inferd.server.routes.v2) and gRPC (inferd.grpc_v2.service), which decode and encode tensors
(JSON, the binary extension, protobuf) before and after this verb."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inferd.config.model import ModelConfig
from inferd.engine.kinds.servable import Servable
from inferd.engine.requests.agreement import tensors
from inferd.runtime.protocol import Array, Feeds
from inferd.verbs.verb import Verb


@dataclass(frozen=True)
class TensorRequest:
    model: str
    version: str | None
    feeds: Feeds
    output_names: Sequence[str] = field(default=())
    """The outputs asked for (all when none)."""


Tensors = dict[str, Array]


def agreement(config: ModelConfig, stable: Tensors, candidate: Tensors) -> float:
    """1 when every output is within the model's `rollout.tensor_tolerance`, else 0."""
    return tensors(stable, candidate, config.rollout.tensor_tolerance)


async def _run(servable: Servable, request: TensorRequest, deadline: float | None) -> Tensors:
    return await servable.infer(request.feeds, request.output_names, deadline)


INFER: Verb[TensorRequest, Tensors] = Verb(
    name="infer",
    purpose=None,
    does="take V2 tensors",
    run=_run,
    arguments=lambda request: (request.feeds, list(request.output_names)),
    agree=agreement,
)
