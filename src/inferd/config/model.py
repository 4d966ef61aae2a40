"""Per-model configuration: `<repo>/<model>/config.yaml`.

Every field has a default, so a folder with just `1/model.onnx` is a valid model. Names, shapes
and datatypes come from the ONNX file unless `inputs` / `outputs` override them. `ModelConfig`
is the whole file; its larger sections are modules of their own (`batching`, `instances`,
`text`, `generation`, `rollout`), every one of them importable from here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inferd.config.batching import DynamicBatchingConfig
from inferd.config.generation_section import GenerationConfig
from inferd.config.instances import InstanceGroup, RuntimeOptions
from inferd.config.kinds import KINDS, Kind, TaskName
from inferd.config.rollout import RolloutConfig
from inferd.config.section import Section
from inferd.config.text_sections import (
    ClassificationConfig,
    DriftConfig,
    EmbeddingConfig,
    RerankConfig,
    TokenizerConfig,
    ZeroShotConfig,
    ZeroShotLabel,
)

__all__ = [
    "ClassificationConfig",
    "DriftConfig",
    "DynamicBatchingConfig",
    "EmbeddingConfig",
    "GenerationConfig",
    "InstanceGroup",
    "ModelConfig",
    "RerankConfig",
    "ResponseCacheConfig",
    "RolloutConfig",
    "RuntimeOptions",
    "TensorOverride",
    "TokenizerConfig",
    "V2Datatype",
    "VersionPolicy",
    "ZeroShotConfig",
    "ZeroShotLabel",
]

V2Datatype = Literal[
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
]


class VersionPolicy(Section):
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


class TensorOverride(Section):
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


class ResponseCacheConfig(Section):
    enabled: bool = Field(
        False,
        description="Keep answers to repeated requests (V2 tensors, /embed, /predict, /rerank "
        "and their OpenAI and gRPC forms) and answer an identical request from memory; one "
        "identical to a request still running waits for its answer instead of running "
        "again. Generation is never cached.",
    )
    max_mb: float = Field(
        64.0,
        gt=0,
        description="Memory each serving version's cache holds at most (its answers' arrays); "
        "the least recently used answers go first.",
    )
    ttl_s: float = Field(300.0, gt=0, description="Longest an answer is kept, used or not.")
    shared_across_keys: bool = Field(
        False,
        description="Answer a request from another API key's answers too. Off by default: "
        "each key's client (keys of one `name=` are one client) has its answers of its own, "
        "so that a hit's speed never tells one tenant what another asked. Without API keys "
        "every caller shares the cache either way.",
    )


class ModelConfig(Section):
    name: str | None = Field(None, description="Defaults to the folder name.")
    platform: Literal["onnxruntime_onnx"] = Field(
        "onnxruntime_onnx", description="The only backend: ONNX Runtime."
    )
    max_batch_size: int = Field(
        8, ge=0, description="Largest batch the runtime gets; 0 means the model has no batch axis."
    )
    dynamic_batching: DynamicBatchingConfig = DynamicBatchingConfig()
    instance_count: int = Field(
        1,
        ge=1,
        description="ONNX Runtime sessions for each version, on the providers of `runtime` "
        "(give instance_groups instead to place them on devices).",
    )
    instance_groups: tuple[InstanceGroup, ...] = Field(
        (),
        description="Where each version's instances run: groups of cpu instances, and of gpu "
        "instances on given devices. Each batch goes to the instance that would finish it "
        "first (its measured speed and the work already given to it).",
    )
    solo_threads: int | Literal["auto"] = Field(
        0,
        description="An extra CPU instance with this many intra-op threads (auto: the cores "
        "this process may use) that takes a batch when it would run alone: no other batch "
        "running or waiting. A lone request then has every core, while under load the "
        "instances run side by side as configured. Its threads spin between runs (it runs "
        "only when nothing else does) unless runtime.allow_spinning is set. 0: none. CPU "
        "instances only.",
    )
    solo_inline_ms: float = Field(
        10.0,
        ge=0,
        description="A batch for the solo instance (solo_threads) expected to take under this "
        "runs on the event loop's own thread when the server holds no other request: no "
        "handoff to a runtime thread and back (0.1-0.4 ms a request on 2 cores). The loop "
        "waits for the run, so a request arriving meanwhile is read after it. 0: always on a "
        "runtime thread.",
    )
    weight: float = Field(
        1.0,
        gt=0,
        description="This model's share of the machine's cores beside the other models "
        "(its runs: encoder batches, a generator's prefills and decode steps): while models "
        "wait for cores, each gets core-seconds in proportion to its weight (1 and 1: "
        "equal; 2 and 1: two thirds and one third). A model alone uses every core whatever "
        "its weight; a model that was idle takes the next turn. Its versions share it.",
    )
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
    task: TaskName = Field(
        "tensor",
        description="; ".join(f"{k.name}: {k.description}" for k in KINDS.values()) + ".",
    )
    tokenizer: TokenizerConfig = TokenizerConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    classification: ClassificationConfig = ClassificationConfig()
    zero_shot: ZeroShotConfig | None = Field(
        None, description="Required for task zero-shot-classification."
    )
    generation: GenerationConfig = GenerationConfig()
    rerank: RerankConfig = RerankConfig()
    drift: DriftConfig = DriftConfig()
    rollout: RolloutConfig = RolloutConfig()
    response_cache: ResponseCacheConfig = ResponseCacheConfig()
    max_texts_per_request: int = Field(
        128, ge=1, description="Most texts one request may carry (4005 above)."
    )
    default: bool = Field(
        False,
        description="Answer the task routes that name no model (`/predict`, `/embed`, "
        "`/generate`, `/v1/...`) when several models serve the task; one default per task.",
    )
    residency: Literal["pinned", "on_demand"] = Field(
        "pinned",
        description="pinned: loaded at start and kept until an admin unloads it. on_demand: "
        "loaded by its first request (requests arriving meanwhile wait for that load within "
        "their deadlines) and evicted, least recently used first, when a load would take the "
        "versions in memory over the server's model_memory_budget_mb or max_loaded_versions; "
        "never while a request to it is in flight or queued, or while it is in a rollout. A "
        "zero-shot model's base is kept like a pinned one.",
    )

    @model_validator(mode="after")
    def _unique_overrides(self) -> ModelConfig:
        for kind, items in (("inputs", self.inputs), ("outputs", self.outputs)):
            names = [t.name for t in items]
            if len(names) != len(set(names)):
                raise ValueError(f"{kind} names must be unique")
        if any(o.pad_value is not None for o in self.outputs):
            raise ValueError("pad_value applies to inputs only")
        if (self.kind.loads == "base") != (self.zero_shot is not None):
            raise ValueError("zero_shot is required for, and only for, zero-shot-classification")
        if self.default and self.kind.purpose is None:
            raise ValueError("default applies to task models (tensor models are always named)")
        if self.instance_groups and "instance_count" in self.model_fields_set:
            raise ValueError("give instance_count or instance_groups, not both")
        if isinstance(self.solo_threads, int) and self.solo_threads < 0:
            raise ValueError("solo_threads must be 0 (none), a thread count, or auto")
        return self

    @property
    def kind(self) -> Kind:
        """What its task makes of it (inferd.config.kinds)."""
        return KINDS[self.task]

    @property
    def purpose(self) -> str | None:
        """The task route that can answer with this model when a request names none."""
        return self.kind.purpose

    @property
    def needs_versions(self) -> bool:
        """A model built over a base (zero-shot) has no file of its own: it uses its base's."""
        return self.kind.needs_versions
