"""The runtime part: ONNX Runtime sessions and the narrow interface the rest of inferd sees.

Only `runtime/onnx_session.py` imports onnxruntime; this package's `__init__` does not, so that
`protocol` and `datatypes` can be imported by parts that must never load onnxruntime.
"""
