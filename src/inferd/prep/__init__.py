"""Model preparation before serving: `inferd export`, `inferd optimize`, `inferd quantize`.

Offline tools of the `export` extra (torch, transformers, onnx); serving never imports them. They
may use ONNX Runtime's own tools (transformer fusions, quantization) directly, which is why this
part is the one exception to "only runtime/onnx_session.py imports onnxruntime".
"""
