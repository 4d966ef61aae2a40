"""What a server is made of, built from its settings: the engine over the model repository (the
demo's, built first, when none is given) with its runtime, its metrics, its API and admin keys
(read once, here, for every protocol) and its job store. The one place both composition roots
build it from: `inferd serve` (inferd.cli.serve, which adds the HTTP app,
gRPC and the runner) and a Ray Serve replica (inferd.rayserve.replica, which adds its app)."""

from __future__ import annotations

import logging

from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.engine.versions.version_loader import RuntimeLoader
from inferd.errors import ConfigError
from inferd.front.keys import Keys, read_keys
from inferd.jobs.store import JobStore
from inferd.jobs.store_choice import open_store
from inferd.observability.metrics import Metrics
from inferd.observability.observer import Observer
from inferd.repository.scan import scan_repository
from inferd.runtime.onnx_session import OnnxSession
from inferd.server.instruments import build_metrics
from inferd.tools.demo import DemoUnavailable, build_demo

log = logging.getLogger(__name__)


def build_engine(
    settings: ServerSettings, runtime: RuntimeLoader = OnnxSession
) -> tuple[Engine, Metrics | None]:
    """The engine of a server (or of a Ray Serve replica) and its metrics: the repository
    scanned (the demo's, built first, when none is given), `runtime` opening its instances."""
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
    entries = scan_repository(repository, settings.model_name)
    if not entries:
        log.warning(
            "the repository holds no model folder: serving nothing until one is loaded "
            "(<repo>/<model>/<version>/model.onnx; inferd repo check tells what would load)",
            extra={"repository": str(repository)},
        )
    metrics, observer = build_metrics(entries) if settings.metrics else (None, None)
    engine = Engine(settings, entries, runtime, observer=observer, root=repository)
    return engine, metrics


def read_access(settings: ServerSettings) -> Keys:
    """The server's API and admin keys, from the files its settings name (none: open)."""
    return Keys(read_keys(settings.api_keys_file), read_keys(settings.admin_keys_file))


def open_jobs(settings: ServerSettings, metrics: Metrics | None) -> JobStore:
    """The job store its settings choose, reporting to `metrics` (jobs a store lost)."""
    return open_store(settings, metrics or Observer())
