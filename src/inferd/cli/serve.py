"""`inferd serve`: settings in, a running server out."""

from __future__ import annotations

import logging
import sys

from inferd.config.server import ServerSettings
from inferd.engine.manager import ModelManager
from inferd.errors import ConfigError
from inferd.observability.logs import configure_logging
from inferd.repository.scan import scan_repository
from inferd.server.instruments import build_metrics
from inferd.server.runner import run_server
from inferd.tools.demo import DemoUnavailable, build_demo

log = logging.getLogger(__name__)


def serve(settings: ServerSettings) -> int:
    configure_logging(settings.log_level, json_format=settings.log_format == "json")
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000.0)
    repository = settings.repository
    if repository is None:
        repository = settings.demo_repository.expanduser()
        log.info("no repository given: serving the demo", extra={"repository": str(repository)})
        try:
            build_demo(repository)
        except DemoUnavailable as exc:
            raise ConfigError(
                f"no model repository given (--repo DIR, INFERD_REPOSITORY) and {exc}"
            ) from exc
    entries = scan_repository(repository)
    metrics = build_metrics(entries) if settings.metrics else None
    manager = ModelManager(settings, entries, observer=metrics, root=repository)
    run_server(settings, manager, metrics)
    return 0
