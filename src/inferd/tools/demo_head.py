"""The demo's tensor model: a sentiment classifier head over all-MiniLM-L6-v2 embeddings.

It is the demo's zero-shot `sentiment` classifier written as a plain ONNX graph, so that KServe V2
clients have a real tensor model to call: FP32 `embedding` `[n, 384]` (what `/embed` returns) in,
FP32 `probabilities` `[n, labels]` out, a temperature softmax over the cosine similarity with each
label's embedded description. The label vectors are computed here, once, by the demo's own
encoder, through the same tokenizer settings the server uses, so the head's probabilities match
`/predict`'s scores for `sentiment`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inferd.config.model import RuntimeOptions, TokenizerConfig
from inferd.runtime.onnx_session import OnnxSession
from inferd.tasks.text_feeds import TextEncoder

INPUT = "embedding"
OUTPUT = "probabilities"


def label_vectors(
    encoder_file: Path, tokenizer_file: Path, texts: Sequence[str]
) -> npt.NDArray[np.float32]:
    """The mean-pooled, L2-normalized embedding of each text: `[len(texts), hidden]`."""
    encoder = TextEncoder(tokenizer_file, TokenizerConfig(), max_texts=len(texts))
    session = OnnxSession(encoder_file, RuntimeOptions(intra_op_threads=1))
    try:
        rows = [
            session.run(item, ["mean_pooled"])["mean_pooled"][0]
            for item in encoder.encode(texts).items
        ]
    finally:
        session.close()
    vectors = np.stack(rows).astype(np.float32)
    norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    unit: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32)
    return unit


def build_head(
    encoder_file: Path, tokenizer_file: Path, labels: Sequence[dict[str, str]], temperature: float
) -> Any:
    """The head as an ONNX model (returned, not saved): normalize, cosine, softmax."""
    from onnx import TensorProto, helper, numpy_helper

    vectors = label_vectors(
        encoder_file, tokenizer_file, [label["description"] for label in labels]
    )
    weights = (vectors.T / temperature).astype(np.float32)  # [hidden, labels]
    hidden, count = weights.shape
    graph = helper.make_graph(
        [
            helper.make_node("LpNormalization", [INPUT], ["unit"], axis=1, p=2),
            helper.make_node("MatMul", ["unit", "label_weights"], ["logits"]),
            helper.make_node("Softmax", ["logits"], [OUTPUT], axis=1),
        ],
        "sentiment_head",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["batch", hidden])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", count])],
        [numpy_helper.from_array(weights, "label_weights")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what ONNX Runtime 1.18, the oldest we support, reads
    model.doc_string = "labels: " + ", ".join(label["name"] for label in labels)
    helper.set_model_props(model, {"inferd.labels": ",".join(label["name"] for label in labels)})
    return model
