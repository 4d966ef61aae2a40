"""Where a version's instances run: one `Placement` per runtime instance, from the model's
`instance_groups` (or `instance_count` instances on the providers of `runtime`), each with the
runtime options its session is made with (providers, device, threads), and the providers and
their options a session is given."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.config.model import InstanceGroup, ModelConfig, RuntimeOptions

log = logging.getLogger(__name__)

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
"""The providers that run on a GPU chosen by `device_id`, in ONNX Runtime's preference."""
CPU_PROVIDER = "CPUExecutionProvider"


@dataclass(frozen=True, slots=True)
class Placement:
    name: str
    """Unique in its version: `cpu-0`, `gpu1-0` (the first instance on GPU 1)."""
    kind: str
    """cpu, gpu, or `auto` (instance_count: the providers of `runtime`, as configured)."""
    options: RuntimeOptions


def placements(config: ModelConfig) -> list[Placement]:
    runtime = config.runtime
    if not config.instance_groups:
        count = config.instance_count
        return [Placement(f"instance-{index}", "auto", runtime) for index in range(count)]
    placed: list[Placement] = []
    counters: dict[str, int] = {}
    for group in config.instance_groups:
        for device, options in _devices(group, runtime):
            for _ in range(group.count):
                number = counters.get(device, 0)
                counters[device] = number + 1
                placed.append(Placement(f"{device}-{number}", group.kind, options))
    return placed


def _devices(group: InstanceGroup, runtime: RuntimeOptions) -> list[tuple[str, RuntimeOptions]]:
    """Each device of the group, with the options of its instances."""
    threads = runtime.intra_op_threads if group.threads is None else group.threads
    if group.kind == "cpu":
        options = runtime.model_copy(
            update={"providers": (CPU_PROVIDER,), "intra_op_threads": threads, "device_id": None}
        )
        return [("cpu", options)]
    wanted = tuple(p for p in runtime.providers if p in GPU_PROVIDERS)
    providers = (*(wanted or ("CUDAExecutionProvider",)), CPU_PROVIDER)
    return [
        (
            f"gpu{device}",
            runtime.model_copy(
                update={"providers": providers, "intra_op_threads": threads, "device_id": device}
            ),
        )
        for device in group.gpus or (0,)
    ]


def solo_placement(config: ModelConfig, cores: int | None = None) -> Placement | None:
    """The solo instance (`solo_threads`): a CPU session on `solo_threads` threads that takes
    the batches that would run alone. None when not configured, or when it would have no more
    threads than the instances it stands beside. ValueError beside GPU instances: a GPU
    instance already has its device for each batch (the GPU form of this is more streams,
    not more threads)."""
    wanted = config.solo_threads
    if wanted == 0:
        return None
    if wanted == "auto":
        wanted = cores if cores is not None else available_cores()
    placed = placements(config)
    if any(p.kind == "gpu" or any(q in GPU_PROVIDERS for q in p.options.providers) for p in placed):
        raise ValueError("solo_threads applies to CPU instances only")
    narrow = max(p.options.intra_op_threads for p in placed)
    if narrow != 0 and wanted <= narrow:
        return None  # no wider than the instances: it would add nothing
    update: dict[str, object] = {
        "providers": (CPU_PROVIDER,),
        "intra_op_threads": wanted,
        "device_id": None,
    }
    if "allow_spinning" not in config.runtime.model_fields_set:
        # it runs only when no other batch does, so its threads' spin between runs takes no
        # core that other work wants, and a lone request does not wait for them to wake
        update["allow_spinning"] = True
    return Placement("solo", "cpu", config.runtime.model_copy(update=update))


def cores_held(options: RuntimeOptions, providers: Sequence[str], cores: int) -> int:
    """The cores a run of an instance holds, of the `cores` this process may use: its
    intra-op threads (0, ONNX Runtime's choice: every core); none for an instance on a GPU
    (`providers`: the session's own), whose run waits on its device."""
    if any(p in GPU_PROVIDERS for p in providers):
        return 0
    threads = options.intra_op_threads or cores
    return min(threads, cores)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def confined_threads() -> int | None:
    """The intra-op threads of a session that leaves their count to ONNX Runtime, when this
    process may run on fewer CPUs than the machine has (`taskset`, a cpuset): the physical
    cores among those it may use. None when it may use them all, where ONNX Runtime's own
    choice (a thread per physical core, each pinned to one) is right. Left to itself under a
    narrower affinity it counts the machine's cores and pins its threads to some outside the
    process's set (its threading guide: it works badly under taskset unless the count is
    set); a server on core 0 of two had an intra-op thread pinned to core 1."""
    try:
        allowed = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return None
    if len(allowed) >= (os.cpu_count() or 0):
        return None
    cores = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            core = (
                (topology / "physical_package_id").read_text(),
                (topology / "core_id").read_text(),
            )
        except OSError:
            return len(allowed)
        cores.add(core)
    return len(cores)


def one_instance(config: ModelConfig) -> ModelConfig:
    """The config with only its first instance (a load check): the first group's, on its
    first device."""
    if not config.instance_groups:
        return config.model_copy(update={"instance_count": 1})
    first = config.instance_groups[0]
    group = first.model_copy(update={"count": 1, "gpus": first.gpus[:1]})
    return config.model_copy(update={"instance_groups": (group,)})


def resolve_providers(wanted: Sequence[str], available: Sequence[str]) -> list[str]:
    """The wanted providers this build has, in order, always ending with the CPU provider."""
    chosen = [p for p in wanted if p in available and p != CPU_PROVIDER]
    missing = [p for p in wanted if p not in available]
    if missing:
        log.warning(
            "execution providers not available in this onnxruntime build, skipped",
            extra={"providers": missing, "available": list(available)},
        )
    chosen.append(CPU_PROVIDER)
    return chosen


def provider_options(provider: str, options: RuntimeOptions) -> dict[str, str]:
    """The options a session gives `provider` (its GPU, CUDA's arena strategy and limit)."""
    chosen: dict[str, str] = {}
    if provider in GPU_PROVIDERS and options.device_id is not None:
        chosen["device_id"] = str(options.device_id)
    if provider == "CUDAExecutionProvider":
        strategy = {"next_power_of_two": "kNextPowerOfTwo", "same_as_requested": "kSameAsRequested"}
        chosen["arena_extend_strategy"] = strategy[options.cuda_arena_extend_strategy]
        if options.gpu_mem_limit_mb is not None:
            chosen["gpu_mem_limit"] = str(options.gpu_mem_limit_mb * 1024 * 1024)
    return chosen
