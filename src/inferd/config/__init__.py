"""Typed settings for the server and for each model. Imports nothing of inferd but `errors`."""

from inferd.config.model import (
    DynamicBatchingConfig,
    ModelConfig,
    RuntimeOptions,
    TensorOverride,
    VersionPolicy,
)
from inferd.config.server_settings import ServerSettings, load_server_settings

__all__ = [
    "DynamicBatchingConfig",
    "ModelConfig",
    "RuntimeOptions",
    "ServerSettings",
    "TensorOverride",
    "VersionPolicy",
    "load_server_settings",
]
