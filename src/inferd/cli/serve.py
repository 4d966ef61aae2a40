"""`inferd serve`: settings in, a running server out."""

from __future__ import annotations

import sys

from inferd.config.server import ServerSettings
from inferd.engine.manager import ModelManager
from inferd.errors import ConfigError
from inferd.observability.logs import configure_logging
from inferd.repository.scan import scan_repository
from inferd.server.runner import run_server


def serve(settings: ServerSettings) -> int:
    configure_logging(settings.log_level, json_format=settings.log_format == "json")
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000.0)
    if settings.repository is None:
        raise ConfigError(
            "no model repository given: pass --repo DIR, set INFERD_REPOSITORY, "
            "or set 'repository' in the --config file"
        )
    entries = scan_repository(settings.repository)
    run_server(settings, ModelManager(settings, entries))
    return 0
