"""Servables that run on a dynamic batcher over a pool of runtime instances (every kind but
generation, which has its own scheduler): building and starting the batcher from the model's
configuration, and its queue depth, drain and close."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from inferd.batching import BatcherSettings, DynamicBatcher, build_layout
from inferd.config.model import ModelConfig
from inferd.engine.kinds.servable import Servable
from inferd.engine.versions.loading import LoadedModel
from inferd.errors import InferdError
from inferd.observability.observer import Observer
from inferd.runtime.placement import CPU_PROVIDER, available_cores
from inferd.runtime.pool import close_off_loop
from inferd.runtime.protocol import Head, TensorSpec

log = logging.getLogger(__name__)


def start_batcher(
    model: str,
    version: int,
    config: ModelConfig,
    loaded: LoadedModel,
    observer: Observer,
    pad_values: Mapping[str, float] | None = None,
    output: str | None = None,
    head: Head | None = None,
) -> DynamicBatcher:
    """On the event loop: the version's batcher, started. `pad_values` add to the config's
    (a tokenizer's pad id); `output`: the one output a task reads (the others are not
    fetched); `head`: what the batch's outputs become on the runtime's thread."""
    batching = config.dynamic_batching
    pads = {**(pad_values or {})}
    pads.update({o.name: o.pad_value for o in config.inputs if o.pad_value is not None})
    batched = config.max_batch_size > 0
    layout = build_layout(
        loaded.inputs, loaded.outputs, pads, batched, pad_left=batching.padding_side == "left"
    )
    if pads and not layout.mix_lengths:
        log.warning(
            "padding configured but an output has a variable axis no padded input names; "
            "items of different lengths will not share a batch",
            extra={"model": model, "version": version},
        )
    on_cpu = all(r.providers[:1] == (CPU_PROVIDER,) for r in loaded.pool.instances)
    settings = batcher_settings(config, loaded.pool.concurrency, model, str(version), on_cpu)
    run_batch = loaded.pool.run
    if output is not None or head is not None:
        wanted = None if output is None else [output]
        run_batch = functools.partial(loaded.pool.run, output_names=wanted, head=head)
    batcher = DynamicBatcher(layout, settings, run_batch, observer)
    batcher.start()
    return batcher


def batcher_settings(
    config: ModelConfig,
    concurrency: int,
    model: str = "",
    version: str = "",
    on_cpu: bool = False,
) -> BatcherSettings:
    """The batcher's settings from the model's configuration (the one place their defaults
    live). `on_cpu`: every instance runs on the CPU (batches then take their share of the
    queue, when several can run at once on cores of their own)."""
    batching = config.dynamic_batching
    return BatcherSettings(
        max_batch_size=config.max_batch_size,
        max_queue_delay_s=batching.max_queue_delay_ms / 1000.0,
        preferred_batch_sizes=batching.preferred_batch_sizes,
        max_queue_size=batching.max_queue_size,
        max_padding_waste=batching.max_padding_waste,
        max_batch_tokens=batching.max_batch_tokens,
        learn_batch_tokens=batching.learn_batch_tokens,
        length_grouping=batching.length_grouping,
        concurrency=concurrency,
        queue_lanes=min(concurrency, available_cores()) if on_cpu else 1,
        oom_cooldown_s=batching.oom_cooldown_s,
        max_consecutive_failures=batching.max_consecutive_failures,
        max_queue_time_s=(
            None if batching.max_queue_time_ms is None else batching.max_queue_time_ms / 1000.0
        ),
        model=model,
        version=version,
    )


class BatchedServable(Servable):
    def __init__(
        self,
        model: str,
        version: int,
        config: ModelConfig,
        loaded: LoadedModel,
        batcher: DynamicBatcher,
        served: tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]],
        observer: Observer,
    ) -> None:
        inputs, outputs = served
        super().__init__(
            model, version, config, inputs, outputs, loaded.pool.first.providers, observer
        )
        self._pool = loaded.pool
        self._batcher = batcher

    @property
    def batched(self) -> bool:
        return self.config.max_batch_size > 0

    @property
    def queued_items(self) -> int:
        return self._batcher.queued_items

    @property
    def queued_requests(self) -> int:
        return self._batcher.queued_requests

    @property
    def saturated(self) -> bool:
        return self._batcher.admission.saturated

    @property
    def capacity(self) -> int | None:
        return self._batcher.capacity

    def queue_time_refusal(self, arriving: int) -> InferdError | None:
        return self._batcher.admission.queue_time_refusal(arriving)

    async def drain(self, timeout_s: float) -> bool:
        return await self._batcher.drain(timeout_s)

    async def stop(self) -> None:
        await self._batcher.close()

    async def close(self) -> None:
        await self._batcher.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await close_off_loop(pool)
