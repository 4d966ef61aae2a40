"""Building the server's metrics and drift monitors from the repository, before models load."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import orjson

from inferd.observability.drift import DriftMonitor, DriftObserver
from inferd.observability.metrics import Metrics
from inferd.observability.observer import Observer, Observers
from inferd.repository.scan import ModelEntry

log = logging.getLogger(__name__)


def build_metrics(entries: Sequence[ModelEntry]) -> tuple[Metrics, Observer]:
    """The server's metrics, and the observer the engine reports to (the metrics and the drift
    monitors of the models that have drift on)."""
    labels: dict[str, Sequence[str]] = {}
    drift: dict[str, DriftMonitor] = {}
    for entry in entries:
        config = entry.config
        if config is None:
            continue
        if config.zero_shot is not None:
            labels[entry.name] = [label.name for label in config.zero_shot.labels]
        elif config.kind.section == "classification" and config.classification.labels:
            labels[entry.name] = list(config.classification.labels)
        if not config.kind.drift or not config.drift.enabled:
            continue
        reference = None
        if config.drift.reference_file is not None:
            path = entry.folder / config.drift.reference_file
            try:
                reference = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError) as exc:
                log.error(
                    "drift reference file unreadable; the first requests are the reference",
                    extra={
                        "model": entry.name,
                        "file": config.drift.reference_file,
                        "reason": str(exc),
                    },
                )
        drift[entry.name] = DriftMonitor(
            entry.name,
            reference_size=config.drift.reference_size,
            window=config.drift.window,
            threshold=config.drift.threshold,
            reference=reference,
        )
    metrics = Metrics([e.name for e in entries], labels)
    return metrics, Observers([metrics, DriftObserver(drift, metrics.on_drift)])
