"""What the KServe V2 protocol shows of the engine, as plain values: the server's and a
model's metadata, a version's configuration and statistics. The HTTP routes send them as JSON,
the gRPC service (inferd.grpc_v2) as its messages, so the two protocols cannot drift apart."""

from __future__ import annotations

from typing import Any

from inferd import __version__
from inferd.config.model import ModelConfig
from inferd.engine import Engine, Version, served_shape
from inferd.runtime.placement import GPU_PROVIDERS
from inferd.runtime.protocol import TensorSpec

EXTENSIONS = ["model_configuration", "binary_tensor_data", "statistics", "model_repository"]
PLATFORM = "onnxruntime_onnx"


def server_metadata(engine: Engine) -> dict[str, Any]:
    # "defaults" (inferd's own field): the model each task route uses when a request names none
    return {
        "name": "inferd",
        "version": __version__,
        "extensions": EXTENSIONS,
        "defaults": engine.registry.defaults(),
    }


async def ready_version(engine: Engine, model: str, version: str | None) -> Version:
    """The version that answers, serving (an on-demand one is loaded for it)."""
    served = await engine.resident(model, version)
    served.ensure_ready()
    return served


async def model_metadata(engine: Engine, model: str, version: str | None) -> dict[str, Any]:
    served = await ready_version(engine, model, version)
    versions = engine.registry.versions_of(model)
    body: dict[str, Any] = {
        "name": model,
        "versions": [str(v.version) for v in versions],
        "platform": PLATFORM,
        "inputs": [_tensor(s) for s in served.inputs],
        "outputs": [_tensor(s) for s in served.outputs],
    }
    if served.parameters:
        # inferd's own field (the gRPC message has none: it carries the tensors alone)
        body["parameters"] = [
            {"name": p.name, "type": p.type, "direction": p.direction} for p in served.parameters
        ]
    return body


def statistics(engine: Engine, model: str | None, version: str | None) -> dict[str, Any]:
    registry = engine.registry
    if model is None:
        chosen = list(registry.all_versions())
    elif version is None:
        chosen = registry.versions_of(model)  # 404 for an unknown model
    else:
        chosen = [registry.resolve(model, version)]
    return {"model_stats": [_version_stats(v) for v in chosen]}


def _version_stats(served: Version) -> dict[str, Any]:
    # "instance_stats" is inferd's own (Triton reports a version as a whole); each instance's
    # batches, busy time, queued batches and learned speed, as dispatch sees them
    return {**served.stats.as_dict(), "instance_stats": [i.as_dict() for i in served.instances]}


def _instance_groups(config: ModelConfig) -> list[dict[str, Any]]:
    """Triton's instance_group; instance_count counts as a group of the kind of `runtime`'s
    first provider."""
    if not config.instance_groups:
        gpu = bool(config.runtime.providers) and config.runtime.providers[0] in GPU_PROVIDERS
        kind = "KIND_GPU" if gpu else "KIND_CPU"
        return [{"count": config.instance_count, "kind": kind}]
    groups = []
    for group in config.instance_groups:
        entry: dict[str, Any] = {"count": group.count, "kind": "KIND_" + group.kind.upper()}
        if group.kind == "gpu":
            entry["gpus"] = list(group.gpus or (0,))
        groups.append(entry)
    return groups


def _tensor(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def config_of(served: Version) -> dict[str, Any]:
    config = served.config
    batching = config.dynamic_batching

    def tensor(spec: TensorSpec) -> dict[str, Any]:
        return {
            "name": spec.name,
            "data_type": "TYPE_" + ("STRING" if spec.datatype == "BYTES" else spec.datatype),
            "dims": served_shape(spec, served.batched),
        }

    return {
        "name": served.model,
        "platform": PLATFORM,
        "backend": "onnxruntime",
        "max_batch_size": config.max_batch_size,
        "input": [tensor(s) for s in served.graph_inputs],
        "output": [tensor(s) for s in served.graph_outputs],
        "dynamic_batching": {
            "preferred_batch_size": list(batching.preferred_batch_sizes),
            "max_queue_delay_microseconds": int(batching.max_queue_delay_ms * 1000),
            "default_queue_policy": {"max_queue_size": batching.max_queue_size},
        },
        "instance_group": _instance_groups(config),
        "version_policy": config.version_policy.model_dump(exclude_defaults=True),
        "optimization": {"execution_accelerators": {"providers": list(served.providers)}},
    }
