"""The integration tests start servers the way `inferd bench` does (inferd.bench.server)."""

from inferd.bench.server import (
    RunningServer,
    free_port,
    free_ports,
    start_server,
    wait_loaded_models,
)

__all__ = ["RunningServer", "free_port", "free_ports", "start_server", "wait_loaded_models"]
