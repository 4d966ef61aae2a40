"""Loading a version off the event loop: runtimes, served specs, text pipeline, warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.config.model import ModelConfig, RuntimeOptions
from inferd.engine.kinds.decoder_parts import GenerationParts, load_generation, warm_up_decoder
from inferd.engine.kinds.specs import apply_overrides, check_batch_axis
from inferd.engine.kinds.text_pipeline import TextPipeline
from inferd.runtime.datatypes import numpy_dtype
from inferd.runtime.placement import available_cores, cores_held, placements, solo_placement
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Runtime, TensorSpec

RuntimeFactory = Callable[[RuntimeOptions], Runtime]
"""Makes one instance with the options of its placement."""


@dataclass(frozen=True)
class LoadedModel:
    """What loading produced: warmed-up instances, the model's specs, the text pipeline."""

    pool: InstancePool
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    text: TextPipeline | None
    load_s: float
    generation: GenerationParts | None = None


def load_instances(
    config: ModelConfig, factory: RuntimeFactory, version_folder: Path | None = None
) -> LoadedModel:
    """Blocking: creates a runtime per placement (inferd.runtime.placement), applies
    overrides, builds the text pipeline for text models, warms every instance up. Runs on a
    worker thread; on failure it closes what it created and raises."""
    started = time.perf_counter()
    instances: list[Runtime] = []
    kind = config.kind
    placed = placements(config)
    solo = solo_placement(config) if kind.batched else None
    try:
        for placement in placed:
            instances.append(factory(placement.options))
        if solo is not None:  # last: the pool knows it by its place
            instances.append(factory(solo.options))
        first = instances[0]
        # a decoder's batch is the scheduler's (its scalar inputs have no batch axis)
        batched = config.max_batch_size > 0 and kind.batched
        inputs = apply_overrides(first.inputs, config.inputs, batched, "inputs")
        outputs = apply_overrides(first.outputs, config.outputs, batched, "outputs")
        if batched:
            check_batch_axis(inputs, "inputs")
            check_batch_axis(outputs, "outputs")
        text = None
        if kind.tokenizer:
            if version_folder is None:
                raise ValueError("a text model needs its folder to find its tokenizer")
            text = TextPipeline(config, inputs, version_folder)
        generation = None
        if kind.decoder:
            if version_folder is None:
                raise ValueError("a generation model needs its folder to find its tokenizer")
            generation = load_generation(config, inputs, outputs, version_folder, first.providers)
        every = (*placed, *([solo] if solo else []))
        cores = available_cores()
        pool = InstancePool(
            instances,
            placed=[(p.name, p.kind) for p in every],
            solo=solo is not None,
            cores=[
                cores_held(p.options, i.providers, cores)
                for p, i in zip(every, instances, strict=True)
            ],
        )
        if generation is not None:
            warm_up_decoder(pool, generation, config, config.warmup_batch_sizes)
        for size in () if generation is not None else config.warmup_batch_sizes:
            rows = min(size, config.max_batch_size) if batched else 1
            pool.run_sync(synthetic_feeds(inputs, rows, batched))
    except BaseException:
        for instance in instances:
            instance.close()
        raise
    return LoadedModel(pool, inputs, outputs, text, time.perf_counter() - started, generation)


def synthetic_feeds(inputs: Sequence[TensorSpec], rows: int, batched: bool) -> dict[str, Array]:
    """Zeros of the right dtype; variable axes get length 1 (the batch axis gets `rows`)."""
    feeds: dict[str, Array] = {}
    for spec in inputs:
        shape = [1 if d == -1 else d for d in spec.shape]
        if batched and shape:
            shape[0] = rows
        dtype = numpy_dtype(spec.datatype)
        if dtype == np.dtype(object):
            feeds[spec.name] = np.full(shape, "", dtype=object)
        else:
            feeds[spec.name] = np.zeros(shape, dtype=dtype)
    return feeds
