"""What a servable is built from: the version's identity and configuration, what loading
produced (warm runtimes, specs, the tokenizer's parts), and whom it reports to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from inferd.config.model import ModelConfig
from inferd.engine.versions.loading import LoadedModel
from inferd.observability.observer import Observer


@dataclass(frozen=True)
class BuildContext:
    model: str
    version: int
    config: ModelConfig
    loaded: LoadedModel
    observer: Observer
    """The engine's observer (metrics, drift)."""
    batch_observer: Observer
    """The version's own: its statistics and health first, then the engine's observer."""
    max_request_rows: int
    """The most rows (batch-axis entries) one V2 request may carry (the server's setting)."""
    quiet: Callable[[], bool] = field(default=lambda: False)
    """Whether the server holds no request but the caller's (nothing else waits for the event
    loop: work that would stall it for a moment may run on it)."""
