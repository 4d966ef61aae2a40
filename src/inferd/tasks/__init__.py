"""Pre- and post-processing per task: tokenization, pooling, classification, zero-shot.

May import `batching` and the runtime interface; never a web framework, never onnxruntime.
"""
