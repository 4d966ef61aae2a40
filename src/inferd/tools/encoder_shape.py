"""A BERT-style encoder's shape (layers, widths, vocabulary), and random weights of that shape
in Hugging Face BERT names (inferd.tools.encoder_graph builds the graph from them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class EncoderShape:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536
    vocab: int = 30522
    max_positions: int = 512
    layer_norm_eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def random_weights(shape: EncoderShape, seed: int = 0) -> dict[str, npt.NDArray[np.float32]]:
    """Weights in Hugging Face BERT names, drawn like BERT's initializer (std 0.02)."""
    rng = np.random.default_rng(seed)

    def normal(*dims: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    h, i = shape.hidden, shape.intermediate
    w: dict[str, npt.NDArray[np.float32]] = {
        "embeddings.word_embeddings.weight": normal(shape.vocab, h),
        "embeddings.position_embeddings.weight": normal(shape.max_positions, h),
        "embeddings.token_type_embeddings.weight": normal(2, h),
        "embeddings.LayerNorm.weight": np.ones(h, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(h, np.float32),
    }

    for n in range(shape.layers):
        p = f"encoder.layer.{n}."
        for name in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ):
            w[p + name + ".weight"] = normal(h, h)
            w[p + name + ".bias"] = np.zeros(h, np.float32)
        w[p + "intermediate.dense.weight"] = normal(i, h)
        w[p + "intermediate.dense.bias"] = np.zeros(i, np.float32)
        w[p + "output.dense.weight"] = normal(h, i)
        w[p + "output.dense.bias"] = np.zeros(h, np.float32)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = np.ones(h, np.float32)
            w[p + ln + ".bias"] = np.zeros(h, np.float32)
    return w
