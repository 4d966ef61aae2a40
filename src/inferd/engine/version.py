"""One served model version: its runtime instances, its batcher, its state, its inference call."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from inferd.batching import BatcherSettings, BatchObserver, DynamicBatcher, build_layout
from inferd.config.model import ModelConfig
from inferd.engine.specs import apply_overrides, check_batch_axis
from inferd.engine.validation import validate_feeds
from inferd.errors import InvalidInputError, UnavailableError
from inferd.runtime.datatypes import numpy_dtype
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, Runtime, TensorSpec

log = logging.getLogger(__name__)

RuntimeFactory = Callable[[], Runtime]


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    FAILED = "FAILED"
    UNLOADED = "UNLOADED"


@dataclass(frozen=True)
class LoadedModel:
    """What loading produced off the event loop: warmed-up instances and the served specs."""

    pool: InstancePool
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    load_s: float


def load_instances(config: ModelConfig, factory: RuntimeFactory) -> LoadedModel:
    """Blocking: creates `instance_count` runtimes, applies overrides, warms every instance up.

    Runs on a worker thread. Raises on any failure after closing what it created.
    """
    started = time.perf_counter()
    instances: list[Runtime] = []
    try:
        for _ in range(config.instance_count):
            instances.append(factory())
        first = instances[0]
        batched = config.max_batch_size > 0
        inputs = apply_overrides(first.inputs, config.inputs, batched, "inputs")
        outputs = apply_overrides(first.outputs, config.outputs, batched, "outputs")
        if batched:
            check_batch_axis(inputs, "inputs")
            check_batch_axis(outputs, "outputs")
        pool = InstancePool(instances)
        for size in config.warmup_batch_sizes:
            rows = min(size, config.max_batch_size) if batched else 1
            pool.run_sync(synthetic_feeds(inputs, rows, batched))
    except BaseException:
        for instance in instances:
            instance.close()
        raise
    return LoadedModel(pool, inputs, outputs, time.perf_counter() - started)


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


class ServedVersion:
    """A version as the rest of inferd sees it. Created in LOADING; `attach` makes it READY."""

    def __init__(self, model: str, version: int, config: ModelConfig) -> None:
        self.model = model
        self.version = version
        self.config = config
        self.state = VersionState.LOADING
        self.reason: str | None = None
        self.inputs: tuple[TensorSpec, ...] = ()
        self.outputs: tuple[TensorSpec, ...] = ()
        self.providers: tuple[str, ...] = ()
        self.load_s: float | None = None
        self._pool: InstancePool | None = None
        self._batcher: DynamicBatcher | None = None

    @property
    def batched(self) -> bool:
        return self.config.max_batch_size > 0

    @property
    def ready(self) -> bool:
        return self.state is VersionState.READY

    @property
    def batcher(self) -> DynamicBatcher | None:
        return self._batcher

    def attach(self, loaded: LoadedModel, observer: BatchObserver | None = None) -> None:
        """On the event loop: builds and starts the batcher, then marks the version ready."""
        config = self.config
        pad_values = {o.name: o.pad_value for o in config.inputs if o.pad_value is not None}
        layout = build_layout(loaded.inputs, loaded.outputs, pad_values, self.batched)
        if pad_values and not layout.mix_lengths:
            log.warning(
                "padding configured but an output has a variable axis no padded input names; "
                "items of different lengths will not share a batch",
                extra={"model": self.model, "version": self.version},
            )
        batching = config.dynamic_batching
        settings = BatcherSettings(
            max_batch_size=config.max_batch_size,
            max_queue_delay_s=batching.max_queue_delay_ms / 1000.0,
            preferred_batch_sizes=batching.preferred_batch_sizes,
            max_queue_size=batching.max_queue_size,
            max_padding_waste=batching.max_padding_waste,
            concurrency=loaded.pool.concurrency,
        )
        self._pool = loaded.pool
        self._batcher = DynamicBatcher(layout, settings, loaded.pool.run, observer)
        self._batcher.start()
        self.inputs, self.outputs = loaded.inputs, loaded.outputs
        self.providers = loaded.pool.first.providers
        self.load_s = loaded.load_s
        self.state = VersionState.READY

    def fail(self, reason: str) -> None:
        self.state = VersionState.FAILED
        self.reason = reason

    async def infer(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None,
        deadline: float | None,
        max_rows_per_request: int,
    ) -> dict[str, Array]:
        """Validates, queues, and returns the requested outputs (all when none are named)."""
        batcher = self._batcher
        if batcher is None or self.state is not VersionState.READY:
            raise UnavailableError(
                f"model '{self.model}' version {self.version} is not ready "
                f"({self.state.value.lower()})"
            )
        if output_names:
            known = {o.name for o in self.outputs}
            unknown = sorted(set(output_names) - known)
            if unknown:
                raise InvalidInputError(
                    f"unknown output(s) {unknown}; the model gives {sorted(known)}"
                )
        rows = validate_feeds(feeds, self.inputs, self.batched, max_rows_per_request)
        outputs = await batcher.submit(feeds, rows, deadline)
        if output_names:
            return {name: outputs[name] for name in output_names}
        return outputs

    async def drain(self, timeout_s: float) -> bool:
        if self._batcher is None:
            return True
        return await self._batcher.drain(timeout_s)

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.get_running_loop().run_in_executor(None, pool.close)
        self.state = VersionState.UNLOADED
