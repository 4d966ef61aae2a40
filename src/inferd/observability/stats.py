"""Per-version counters in the shape of Triton's statistics extension, plus padding totals.

A `VersionStats` is the batcher's observer for its version (batch counts, queue and compute
time) and is told of every request's outcome by the engine (success and failure counts and
durations). Reading is cheap and lock-free: everything runs on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class BatchFacts(Protocol):
    """What a finished batch reports (the batcher's `BatchRecord` has these)."""

    @property
    def items(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def real_elements(self) -> int: ...
    @property
    def padded_elements(self) -> int: ...
    @property
    def queue_s(self) -> Sequence[float]: ...
    @property
    def run_s(self) -> float: ...
    @property
    def error(self) -> object: ...
    @property
    def token_cap(self) -> int | None: ...


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.ns += int(seconds * 1e9)

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class VersionStats:
    name: str
    version: int
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    batch_infer: dict[int, Duration] = field(default_factory=dict)
    real_elements: int = 0
    padded_elements: int = 0
    memory_pressure_events: int = 0
    batch_token_cap: int | None = None
    """The cap on a batch's padded tokens at the last batch (learned or configured)."""
    cache_hit: Duration = field(default_factory=Duration)
    """Requests answered from the response cache (or by an identical one running)."""
    cache_miss: Duration = field(default_factory=Duration)

    def on_batch(self, record: BatchFacts) -> None:
        self.execution_count += 1
        self.inference_count += record.rows
        self.queue.add(sum(record.queue_s), record.items)
        # as Triton counts it: every request in the batch spent the batch's compute time
        self.compute_infer.add(record.run_s * record.items, record.items)
        self.batch_infer.setdefault(record.rows, Duration()).add(record.run_s)
        self.real_elements += record.real_elements
        self.padded_elements += record.padded_elements
        self.batch_token_cap = record.token_cap
        self.last_inference_ms = int(time.time() * 1000)

    def on_request(self, ok: bool, seconds: float) -> None:
        (self.success if ok else self.fail).add(seconds)

    def on_cache_lookup(self, hit: bool, seconds: float) -> None:
        (self.cache_hit if hit else self.cache_miss).add(seconds)

    def as_dict(self) -> dict[str, Any]:
        zero = Duration().as_dict()
        return {
            "name": self.name,
            "version": str(self.version),
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_dict(),
                "fail": self.fail.as_dict(),
                "queue": self.queue.as_dict(),
                "compute_input": zero,
                "compute_infer": self.compute_infer.as_dict(),
                "compute_output": zero,
                "cache_hit": self.cache_hit.as_dict(),
                "cache_miss": self.cache_miss.as_dict(),
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": zero,
                    "compute_infer": duration.as_dict(),
                    "compute_output": zero,
                }
                for size, duration in sorted(self.batch_infer.items())
            ],
            "out_of_memory_events": self.memory_pressure_events,
            "batch_token_cap": self.batch_token_cap,
            "padding": {
                "real_elements": self.real_elements,
                "padded_elements": self.padded_elements,
                "efficiency": (
                    self.real_elements / self.padded_elements if self.padded_elements else 1.0
                ),
            },
        }
