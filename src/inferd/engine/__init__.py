"""The engine: the registry of model versions, their loading, admission, and the servables that
answer requests (one class per model kind).

Between `server` and `batching`/`runtime`: the server calls `Engine`; the engine never imports
the server or a web framework, and it is handed its runtime loader by the composition root.
"""

from inferd.engine.engine import Engine
from inferd.engine.kinds.specs import served_shape
from inferd.engine.kinds.text_generation import FINAL, TEXT_INPUT, TEXT_OUTPUT, Generation
from inferd.engine.versions.registry import Readiness
from inferd.engine.versions.version import Version, VersionState
from inferd.engine.versions.version_loader import RuntimeLoader

__all__ = [
    "FINAL",
    "TEXT_INPUT",
    "TEXT_OUTPUT",
    "Engine",
    "Generation",
    "Readiness",
    "RuntimeLoader",
    "Version",
    "VersionState",
    "served_shape",
]
