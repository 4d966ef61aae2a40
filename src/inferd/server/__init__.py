"""The HTTP front end: app factory (inferd.server.app), the data plane and its route table,
routes, middleware, lifespan, error mapping, the uvicorn runner. What it shares with gRPC
(keys, request recording, the V2 views and codecs) lives in inferd.front.

Thin: a route parses, calls the engine, returns. Never imports onnxruntime, nor inferd.grpc_v2:
the composition root (inferd.cli.serve) runs gRPC beside the app.
"""
