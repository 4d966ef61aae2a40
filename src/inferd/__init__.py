"""inferd: a production inference server for ONNX models."""

__version__ = "0.1.0"
