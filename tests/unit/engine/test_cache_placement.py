"""Where a generator's in-place KV cache lives (`generation.cache_placement`). The runtimes here
are stand-ins that report a memory's device: a GPU cannot run on this machine, and the rule
only reads the device's name (the device path itself runs on the CPU in
tests/unit/generation/test_scheduler.py and on a GPU in benchmarks/gpu_check.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest

from inferd.config.model import GenerationConfig
from inferd.engine.kinds.text_generation import cache_memory
from inferd.generation.decoder import DecoderShape
from inferd.runtime.memory import HostMemory
from inferd.runtime.protocol import Runtime


@dataclass
class Placed:
    device: str


@dataclass
class Instance:
    memory: Placed


def shape(dtype: type[np.generic]) -> DecoderShape:
    names = ("past_key_values.0.key", "past_key_values.0.value")
    return DecoderShape(1, 2, 4, np.dtype(dtype), names, names, inplace=True)


def runtimes(*devices: str) -> list[Runtime]:
    return [cast(Runtime, Instance(Placed(d))) for d in devices]


def placed(placement: str, dtype: type[np.generic], *devices: str) -> Any:
    config = GenerationConfig(cache_placement=placement)  # type: ignore[arg-type]
    return cache_memory(config, shape(dtype), runtimes(*devices))


def test_auto_keeps_the_cache_where_its_attention_runs() -> None:
    cpu = placed("auto", np.float32, "cpu")
    assert isinstance(cpu, Placed) and cpu.device == "cpu"  # the instance's own (host) memory
    # an FP32 cache's attention runs on the CPU beside a CUDA instance: the cache stays there
    assert isinstance(placed("auto", np.float32, "cuda:0"), HostMemory)
    fp16 = placed("auto", np.float16, "cuda:0")
    assert isinstance(fp16, Placed) and fp16.device == "cuda:0"


def test_an_explicit_placement_is_taken_as_said() -> None:
    assert isinstance(placed("host", np.float16, "cuda:0"), HostMemory)
    assert placed("device", np.float32, "cuda:1").device == "cuda:1"
    assert placed("device", np.float32, "cpu", "cpu").device == "cpu"  # host memory: shared


def test_a_device_cache_refuses_several_gpu_instances() -> None:
    with pytest.raises(ValueError, match="lives on one device"):
        placed("device", np.float16, "cuda:0", "cuda:1")
    assert isinstance(placed("host", np.float16, "cuda:0", "cuda:1"), HostMemory)
