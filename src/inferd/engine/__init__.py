"""The engine: loaded model versions, their life, and the inference entry point.

Between `server` and `batching`/`runtime`: the server calls the engine; the engine never imports
the server or a web framework.
"""

from inferd.engine.manager import ModelManager
from inferd.engine.version import ServedVersion, VersionState

__all__ = ["ModelManager", "ServedVersion", "VersionState"]
