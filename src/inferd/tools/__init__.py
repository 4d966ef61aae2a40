"""Offline tools (model building, export, quantization, load testing): never on the request path."""
