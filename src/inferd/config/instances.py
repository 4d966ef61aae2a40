"""Where and how a version's instances run: ONNX Runtime's options (`runtime`) and the
groups of instances on the CPU and on GPUs (`instance_groups`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inferd.config.section import Section


class RuntimeOptions(Section):
    providers: tuple[str, ...] = Field(
        ("CPUExecutionProvider",),
        description="Execution providers in order of preference; CPU is always the fallback.",
    )
    intra_op_threads: int = Field(
        0,
        ge=0,
        description="0 lets ONNX Runtime choose (a thread per physical core); in a process "
        "confined to fewer CPUs than the machine has (taskset, a cpuset), the physical cores "
        "among those it may use.",
    )
    inter_op_threads: int = Field(0, ge=0, description="0 lets ONNX Runtime choose.")
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="ONNX Runtime's graph optimizations applied when the session loads."
    )
    execution_mode: Literal["sequential", "parallel"] = Field(
        "sequential", description="parallel runs independent branches of the graph at once."
    )
    memory_arena: bool = Field(
        True,
        description="ONNX Runtime's CPU memory arena: fast reuse, but it keeps its high-water "
        "mark (batch x sequence length sets the peak).",
    )
    memory_pattern: bool = Field(
        True, description="Plan memory from the first run's shapes (helps fixed shapes)."
    )
    arena_shrink_above_elements: int | None = Field(
        None,
        ge=1,
        description="After a run whose largest input holds more elements than this (an "
        "unusually large batch), give the arena's free memory back to the system.",
    )
    cuda_arena_extend_strategy: Literal["next_power_of_two", "same_as_requested"] = Field(
        "same_as_requested",
        description="How the CUDA arena grows; same_as_requested wastes less device memory.",
    )
    gpu_mem_limit_mb: int | None = Field(
        None,
        ge=1,
        description="The CUDA provider's arena limit (ONNX Runtime's gpu_mem_limit), in MiB; "
        "unset: the whole device. A run that needs more fails as out of memory (5070, its "
        "batch halved and retried).",
    )
    allow_spinning: bool = Field(
        False,
        description="Let ONNX Runtime's idle threads spin for work. Off by default: in a server "
        "the event loop and the load share the cores, and spinning burns the CPU they need. "
        "The solo instance (solo_threads) spins unless this is set.",
    )
    stop_spinning_after_run: bool = Field(
        False,
        description="With allow_spinning: the threads spin while a run lasts and stop when it "
        "returns (ONNX Runtime's session.force_spinning_stop): no core burnt between runs, "
        "for machines shared with other work. It costs latency: the next run wakes them "
        "(a lone short text 0.2-0.7 ms slower on the solo instance: benchmarks/ab_bench.py "
        "--lone).",
    )
    device_id: int | None = Field(
        None,
        ge=0,
        description="The GPU of the CUDA and TensorRT providers (device 0 when unset). Set per "
        "instance by instance_groups; when set, a build without a GPU provider fails the load "
        "instead of falling back to the CPU.",
    )


class InstanceGroup(Section):
    """Instances of one kind (Triton's instance_group): `count` on the CPU, or `count` on
    each listed GPU."""

    count: int = Field(1, ge=1, description="Instances (on each GPU of `gpus` for kind gpu).")
    kind: Literal["cpu", "gpu"] = Field("cpu", description="cpu, or gpu (the CUDA provider).")
    gpus: tuple[int, ...] = Field((), description="kind gpu: the device ids; device 0 when empty.")
    threads: int | None = Field(
        None,
        ge=0,
        description="ONNX Runtime intra-op threads of each instance (runtime.intra_op_threads "
        "when unset; 0 lets ONNX Runtime choose).",
    )

    @model_validator(mode="after")
    def _gpus_for_gpu(self) -> InstanceGroup:
        if self.kind == "cpu" and self.gpus:
            raise ValueError("gpus applies to kind gpu only")
        if len(set(self.gpus)) != len(self.gpus) or any(g < 0 for g in self.gpus):
            raise ValueError("gpus must be distinct device ids, 0 or above")
        return self
