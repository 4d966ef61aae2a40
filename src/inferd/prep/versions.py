"""Reading a repository version for a preparation step: its ONNX file, metadata and sample plan,
and copying its side files (tokenizer) to the version a step writes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx

from inferd.generation.decoder import DRAW_BIAS, DRAW_UNIFORM, SEQLENS
from inferd.prep.feeds import METADATA_KEY, FeedPlan, spec_plan
from inferd.prep.ranked_logits import ranked_width
from inferd.prep.source_record import SourceError
from inferd.prep.spec import DTYPES, InputSpec
from inferd.prep.writer import copy_beside, publish
from inferd.repository.scan import MODEL_FILE

ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.BOOL: "bool",
}


@dataclass
class VersionModel:
    path: Path
    model: Any  # onnx.ModelProto
    metadata: dict[str, str]
    plan: FeedPlan

    @property
    def node_counts(self) -> Counter[str]:
        return op_counts(self.model)


def op_counts(model: Any) -> Counter[str]:
    return Counter(node.op_type for node in model.graph.node)


def _graph_plan(model: Any) -> FeedPlan:
    """Without export metadata: sample inputs from the graph's own input declarations."""
    initializers = {i.name for i in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = ONNX_DTYPES.get(tensor.elem_type)
        if dtype is None or dtype not in DTYPES:
            continue
        dims: list[int | str] = []
        for i, d in enumerate(tensor.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append("batch" if i == 0 else (d.dim_param or f"axis{i}"))
        specs.append(InputSpec(value.name, tuple(dims), dtype))
    return spec_plan(specs)


def is_inplace_decoder(model: Any) -> bool:
    """Whether an onnx.ModelProto is a decoder with an in-place KV cache."""
    return any(value.name == SEQLENS for value in model.graph.input)


def read_version(path: Path) -> VersionModel:
    model = onnx.load(str(path))
    if is_inplace_decoder(model):
        raise SourceError(
            f"{path.parent.name}/{path.name} is a decoder with an in-place KV cache; optimize "
            "or int8-quantize the plain export (without --kv-cache inplace) instead (`inferd "
            "quantize --to fp16` converts an in-place decoder)"
        )
    metadata = {p.key: p.value for p in model.metadata_props}
    plan = (
        FeedPlan.from_json(metadata[METADATA_KEY])
        if METADATA_KEY in metadata
        else _graph_plan(model)
    )
    if plan.kind == "decoder" and any(v.name == DRAW_UNIFORM for v in model.graph.input):
        plan = replace(plan, draw_width=ranked_width(model))
    bias = next((v for v in model.graph.input if v.name == DRAW_BIAS), None)
    if plan.kind == "decoder" and bias is not None:
        plan = replace(plan, draw_bias=bias.type.tensor_type.shape.dim[1].dim_value)
    return VersionModel(path, model, metadata, plan)


def set_metadata(model: Any, metadata: dict[str, str]) -> None:
    existing = {p.key: p for p in model.metadata_props}
    for key, value in metadata.items():
        entry = existing.get(key) or model.metadata_props.add()
        entry.key, entry.value = key, value


def publish_version(source: Path, stage: Path, folder: Path, version: int) -> tuple[Path, int]:
    """The staged version published as `version` of the model in `folder`, with the side files
    of the version it was made from (its model file `source`); its folder and model file size."""
    copy_side_files(source.parent, stage)
    size = (stage / MODEL_FILE).stat().st_size
    return publish(stage, folder, version), size


def copy_side_files(version_folder: Path, stage: Path) -> list[str]:
    """Everything beside the model file (tokenizer files and the like)."""
    return copy_beside([f for f in sorted(version_folder.iterdir()) if f.name != MODEL_FILE], stage)
