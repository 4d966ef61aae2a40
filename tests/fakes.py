"""A fake runtime for the batcher's unit tests (never in the package): records every batch; and
the batcher's settings as the engine builds them from a model's configuration."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from inferd.batching import BatcherSettings
from inferd.config.model import ModelConfig
from inferd.engine.kinds.batched import batcher_settings as engine_batcher_settings
from inferd.errors import InferdError
from inferd.runtime.protocol import Array


class Clock:
    """A clock a test sets by hand (`now`)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeRunner:
    """`run_batch` for a DynamicBatcher: y = 2x (+ pooled sums), after an optional delay.

    `gate`, when set, holds every batch until the test opens it, so tests control timing with
    events instead of sleeps.
    """

    delay_s: float = 0.0
    gate: asyncio.Event | None = None
    fail_with: InferdError | Exception | None = None
    batches: list[dict[str, Array]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, feeds: dict[str, Array]) -> dict[str, Array]:
        self.batches.append(feeds)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        outputs: dict[str, Array] = {}
        if "x" in feeds:
            outputs["y"] = feeds["x"] * 2
        if "ids" in feeds:
            ids = feeds["ids"]
            outputs["hidden"] = ids.astype(np.float32)[..., None] + 0.5
            outputs["pooled"] = ids.sum(axis=1)
        return outputs

    @property
    def batch_sizes(self) -> list[int]:
        return [int(next(iter(b.values())).shape[0]) for b in self.batches]


def batcher_settings(max_batch_size: int, **overrides: Any) -> BatcherSettings:
    """A batcher's settings as a model with this `max_batch_size` and the configuration's
    defaults gets them, with `overrides` (BatcherSettings field names)."""
    config = ModelConfig(max_batch_size=max_batch_size)
    return replace(
        engine_batcher_settings(config, concurrency=1, model="m", version="1"), **overrides
    )
