"""What the engine reports as it works, to whoever watches (metrics, drift). A failing observer
is logged and never breaks a request."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from inferd.batching.batcher import BatchRecord
from inferd.generation.observer import GenerationObserver, NoGenerationObserver
from inferd.observability.stats import VersionStats

log = logging.getLogger(__name__)


class EngineObserver(GenerationObserver, Protocol):
    def on_batch(self, model: str, version: str, record: BatchRecord) -> None: ...

    def on_memory_pressure(self, model: str, version: str, rows: int, limit: int) -> None: ...

    def on_texts(
        self,
        model: str,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None: ...


class NoObserver(NoGenerationObserver):
    def on_batch(self, model: str, version: str, record: BatchRecord) -> None:
        return None

    def on_memory_pressure(self, model: str, version: str, rows: int, limit: int) -> None:
        return None

    def on_texts(
        self,
        model: str,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None:
        return None


class VersionBatchObserver:
    """The batcher's observer for one version: its statistics first, then the engine observer."""

    def __init__(
        self,
        model: str,
        version: int,
        stats: VersionStats,
        observer: EngineObserver,
        on_unhealthy: Callable[[str], None],
    ) -> None:
        self._model, self._version = model, str(version)
        self._stats = stats
        self._observer = observer
        self._on_unhealthy = on_unhealthy

    def on_batch(self, record: BatchRecord) -> None:
        self._stats.on_batch(record)
        try:
            self._observer.on_batch(self._model, self._version, record)
        except Exception:
            log.exception("batch observer failed; the batch itself is unaffected")

    def on_memory_pressure(self, rows: int, limit: int) -> None:
        self._stats.memory_pressure_events += 1
        self._observer.on_memory_pressure(self._model, self._version, rows, limit)

    def on_unhealthy(self, reason: str) -> None:
        self._on_unhealthy(reason)


def report_texts(
    observer: EngineObserver,
    model: str,
    token_counts: Sequence[int],
    top_labels: Sequence[str] | None = None,
    top_scores: Sequence[float] | None = None,
) -> None:
    """Calls `observer.on_texts`; its failure is logged, never raised."""
    try:
        observer.on_texts(model, token_counts, top_labels, top_scores)
    except Exception:
        log.exception("text observer failed; the request itself is unaffected")
