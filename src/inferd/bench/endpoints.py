"""The endpoints `inferd bench` can load (a module without dependencies: the CLI reads it)."""

ENDPOINTS = ("embed", "predict", "v1-embeddings", "generate", "v2")
