"""Small torch modules that the `inferd export` tests load as `tests.prep_modules:FACTORY`."""

from __future__ import annotations

import torch
from torch import nn


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.5), nn.Linear(32, 4))


class TinyTransformer(nn.Module):
    """Token ids [batch, sequence] -> hidden states [batch, sequence, 32]: embedding, one
    self-attention block with a padding mask, layer norms; the sequence axis is dynamic."""

    def __init__(self, vocab: int = 50, hidden: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, 64), nn.GELU(), nn.Linear(64, hidden))
        self.norm2 = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / (q.shape[-1] ** 0.5)
        scores = scores.masked_fill(attention_mask[:, None, :] == 0, -1e9)
        x = self.norm1(x + self.dropout(self.out(scores.softmax(-1) @ v)))
        return self.norm2(x + self.dropout(self.ff(x)))


def tiny_transformer() -> nn.Module:
    torch.manual_seed(0)
    return TinyTransformer()


class StuckInTraining(nn.Module):
    """Dropout whose `train()` is overridden so that eval() cannot switch it off: PyTorch keeps
    dropping activations, the exported graph does not. The parity check must catch it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.dropout = nn.Dropout(0.5)

    def train(self, mode: bool = True) -> StuckInTraining:
        return self  # deliberately never leaves training mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.linear(x))


def stuck_in_training() -> nn.Module:
    torch.manual_seed(0)
    return StuckInTraining()


class Spectrum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x).abs()  # no ONNX operator for this in the TorchScript exporter


def spectrum() -> nn.Module:
    return Spectrum()


def not_a_module() -> object:
    return object()


class Widen(nn.Module):
    """x [batch, 16] -> [batch, 4096] through a weight the graph builds by expanding a small
    parameter: ONNX Runtime's constant folding (`inferd optimize`) stores the expanded weight
    whole, so the optimized file is far larger than its source."""

    def __init__(self) -> None:
        super().__init__()
        self.seed = nn.Parameter(torch.randn(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.seed.expand(16, 4096)


def widen() -> nn.Module:
    torch.manual_seed(0)
    return Widen()
