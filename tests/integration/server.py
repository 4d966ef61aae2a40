"""The integration tests start servers the way `inferd bench` does (inferd.bench.launch)."""

from inferd.bench.launch import (
    RunningServer,
    free_port,
    free_ports,
    start_server,
    wait_loaded_models,
)

__all__ = ["RunningServer", "free_port", "free_ports", "start_server", "wait_loaded_models"]
