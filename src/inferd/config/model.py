"""Per-model configuration: `<repo>/<model>/config.yaml`.

Every field has a default, so a folder with just `1/model.onnx` is a valid model. Names, shapes
and datatypes come from the ONNX file unless `inputs` / `outputs` override them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

V2Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "BYTES",
]  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DynamicBatchingConfig(_Strict):
    max_queue_delay_ms: float = Field(
        2.0,
        ge=0,
        description="Longest a queued request waits for others to join its batch while another "
        "batch is running. On an idle runtime a request is dispatched at once.",
    )
    preferred_batch_sizes: tuple[int, ...] = Field(
        (), description="Batch sizes that are dispatched as soon as they are reached."
    )
    max_queue_size: int = Field(
        1024, ge=1, description="Requests queued per version; over it, 429 (code 4290)."
    )
    max_padding_waste: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Items of different lengths share a batch only while padded elements stay "
        "under this share of the batch.",
    )

    @model_validator(mode="after")
    def _sizes_positive(self) -> DynamicBatchingConfig:
        if any(size < 1 for size in self.preferred_batch_sizes):
            raise ValueError("preferred_batch_sizes must be positive")
        return self


class RuntimeOptions(_Strict):
    providers: tuple[str, ...] = Field(
        ("CPUExecutionProvider",),
        description="Execution providers in order of preference; CPU is always the fallback.",
    )
    intra_op_threads: int = Field(0, ge=0, description="0 lets ONNX Runtime choose.")
    inter_op_threads: int = Field(0, ge=0, description="0 lets ONNX Runtime choose.")
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="ONNX Runtime's graph optimizations applied when the session loads."
    )
    execution_mode: Literal["sequential", "parallel"] = Field(
        "sequential", description="parallel runs independent branches of the graph at once."
    )
    allow_spinning: bool = Field(
        False,
        description="Let ONNX Runtime's idle threads spin for work. Off by default: in a server "
        "the event loop and the load share the cores, and spinning burns the CPU they need.",
    )


class VersionPolicy(_Strict):
    """Exactly one of `latest`, `all`, `specific` (Triton's version_policy)."""

    latest: int | None = Field(None, ge=1, description="Serve the N highest versions (default 1).")
    all: bool = Field(False, description="Serve every version.")
    specific: tuple[int, ...] | None = Field(None, description="Serve these versions.")

    @model_validator(mode="after")
    def _one_policy(self) -> VersionPolicy:
        chosen = sum([self.latest is not None, self.all, self.specific is not None])
        if chosen > 1:
            raise ValueError("give only one of latest, all, specific")
        if self.specific is not None and not self.specific:
            raise ValueError("specific needs at least one version")
        return self

    def select(self, available: list[int]) -> list[int]:
        """The versions to serve, ascending."""
        ordered = sorted(available)
        if self.all:
            return ordered
        if self.specific is not None:
            return sorted(v for v in ordered if v in set(self.specific))
        return ordered[-(self.latest or 1) :]


class TensorOverride(_Strict):
    """Overrides what the ONNX file says of an input or output, or adds what it cannot say."""

    name: str = Field(description="The input or output, as the ONNX file names it.")
    datatype: V2Datatype | None = Field(None, description="The KServe V2 datatype to serve.")
    shape: tuple[int, ...] | None = Field(
        None, description="Without the batch axis when max_batch_size > 0; -1 is variable."
    )
    pad_value: float | None = Field(
        None,
        description="Inputs only: variable axes are padded with this value so items of "
        "different lengths can share a batch (e.g. 0 for token ids and attention masks).",
    )


class ModelConfig(_Strict):
    name: str | None = Field(None, description="Defaults to the folder name.")
    platform: Literal["onnxruntime_onnx"] = Field(
        "onnxruntime_onnx", description="The only backend: ONNX Runtime."
    )
    max_batch_size: int = Field(
        8, ge=0, description="Largest batch the runtime gets; 0 means the model has no batch axis."
    )
    dynamic_batching: DynamicBatchingConfig = DynamicBatchingConfig()
    instance_count: int = Field(1, ge=1, description="ONNX Runtime sessions for each version.")
    runtime: RuntimeOptions = RuntimeOptions()
    version_policy: VersionPolicy = VersionPolicy()
    inputs: tuple[TensorOverride, ...] = Field(
        (), description="Overrides for inputs (pad values, datatypes, shapes); see below."
    )
    outputs: tuple[TensorOverride, ...] = Field((), description="Overrides for outputs.")
    request_timeout_s: float | None = Field(
        None, gt=0, description="Deadline for this model's requests; the server's when unset."
    )
    warmup_batch_sizes: tuple[int, ...] = Field(
        (1,), description="Synthetic batches run before a version is marked ready."
    )

    @model_validator(mode="after")
    def _unique_overrides(self) -> ModelConfig:
        for kind, items in (("inputs", self.inputs), ("outputs", self.outputs)):
            names = [t.name for t in items]
            if len(names) != len(set(names)):
                raise ValueError(f"{kind} names must be unique")
        if any(o.pad_value is not None for o in self.outputs):
            raise ValueError("pad_value applies to inputs only")
        return self
