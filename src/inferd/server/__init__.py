"""The HTTP layer: app factory (inferd.server.app), routes, middleware, lifespan, error
mapping, the uvicorn runner; and what HTTP and gRPC share (keys, request recording, the V2
views).

Thin: a route parses, calls the engine, returns. Never imports onnxruntime. The package
imports none of its modules itself, so the gRPC service can use the shared ones without
loading the app.
"""
