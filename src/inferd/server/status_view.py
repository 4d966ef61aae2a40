"""What the status page shows, as one JSON snapshot (`GET /v1/status`): each model with its
versions, their state and a rollout's split; the last seconds of its traffic (requests per
second, p50 and p99, from the live window); and each version's running totals (requests,
batches and the rows in them, real and padded elements, cache lookups), from which the page
draws the mean batch size and padding efficiency between two snapshots."""

from __future__ import annotations

import time
from typing import Any

from inferd import __version__
from inferd.engine import Engine, Version
from inferd.observability.live import LiveWindow


def snapshot(engine: Engine, live: LiveWindow, jobs: dict[str, Any]) -> dict[str, Any]:
    figures = live.figures()
    registry = engine.registry
    depths = {(m, v): n for m, v, n in engine.queue_depths()}
    models: list[dict[str, Any]] = []
    for entry in registry.index():
        name = entry["name"]
        if models and models[-1]["name"] == name:
            continue  # one row per model: its versions are read below
        versions = registry.versions_map(name) if "version" in entry else {}
        config = registry.config_of(name)
        models.append(
            {
                "name": name,
                "task": config.task if config is not None else None,
                "state": entry["state"] if "version" not in entry else None,
                "reason": entry.get("reason") if "version" not in entry else None,
                "versions": [
                    _version(v, depths.get((name, str(n)), 0)) for n, v in sorted(versions.items())
                ],
                "rollout": engine.rollouts.view.split(name),
                "live": figures[name].as_dict() if name in figures else None,
            }
        )
    return {
        "server": {"name": "inferd", "version": __version__},
        "time": time.time(),
        "ready": engine.readiness(strict=True).ready,
        "in_flight": engine.in_flight,
        "window_s": live.window_s,
        "models": models,
        "jobs": jobs,
    }


def _version(served: Version, queue_depth: int) -> dict[str, Any]:
    stats = served.stats
    return {
        "version": str(served.version),
        "state": served.state.value,
        "reason": served.reason,
        "queue_depth": queue_depth,
        # what its load added to memory, while it is in memory (inferd.engine.resident.residency);
        # nothing where the load measured none (not "0 MB")
        "resident_mb": (
            max(0.1, round(served.footprint_bytes / 2**20, 1))
            if served.ready and served.footprint_bytes
            else None
        ),
        # and to the memory used on each GPU its instances run on (by GPU index)
        "resident_device_mb": (
            {str(gpu): round(held / 2**20, 1) for gpu, held in served.device_footprint.items()}
            if served.ready and served.device_footprint
            else None
        ),
        "requests": stats.success.count + stats.fail.count,
        "failures": stats.fail.count,
        "batches": stats.execution_count,
        "rows": stats.inference_count,
        "real_elements": stats.real_elements,
        "padded_elements": stats.padded_elements,
        "cache_hits": stats.cache_hit.count,
        "cache_misses": stats.cache_miss.count,
    }
