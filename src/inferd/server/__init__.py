"""The HTTP layer: app factory, routes, middleware, lifespan, error mapping, the uvicorn runner.

Thin: a route parses, calls the engine, returns. Never imports onnxruntime.
"""

from inferd.server.app import create_app

__all__ = ["create_app"]
