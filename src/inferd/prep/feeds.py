"""Sample inputs for a model: for tracing, for parity checks, for timing and accuracy reports.

A `FeedPlan` says how to make realistic inputs for one model (token ids below the vocabulary
size, padded attention masks, a KV cache of the right shape) and is stored as JSON in the ONNX
file's metadata at export, so `inferd optimize` and `inferd quantize` can make the same kind of
inputs for a version without its PyTorch source.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from inferd.prep.spec import BATCH_AXIS, InputSpec

Feeds = dict[str, np.ndarray]
METADATA_KEY = "inferd.feeds"
ENCODER_CASES = ((1, 7), (2, 16), (4, 5), (3, 31))
DECODER_CASES = ((1, 9), (2, 1), (3, 4), (4, 16))
TIMING_CASES = ((1, 16), (8, 32), (8, 64))


@dataclass(frozen=True)
class FeedPlan:
    kind: str  # "encoder", "decoder", "module"
    input_names: tuple[str, ...] = ()
    vocab: int = 0
    layers: int = 0
    heads: int = 0
    head_dim: int = 0
    max_length: int = 128
    specs: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    draw_width: int = 0
    """A decoder that draws its next token in the graph (inferd.prep.graph_draw) from this
    many candidates: its draw inputs are fed too (greedy)."""
    draw_bias: int = 0
    """A decoder whose ranking takes a bias (inferd.prep.ranked_logits), over this many
    tokens: fed zeros."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> FeedPlan:
        data = json.loads(text)
        data["input_names"] = tuple(data.get("input_names", ()))
        data["specs"] = tuple(data.get("specs", ()))
        return FeedPlan(**data)

    @property
    def parity_cases(self) -> tuple[tuple[int, int], ...]:
        return DECODER_CASES if self.kind == "decoder" else ENCODER_CASES

    def maker(self) -> Callable[[int, int, np.random.Generator], Feeds]:
        if self.kind == "encoder":
            return encoder_feeds(list(self.input_names), self.vocab)
        if self.kind == "decoder":
            return decoder_feeds(
                self.layers, self.heads, self.head_dim, self.vocab, self.draw_width, self.draw_bias
            )
        return spec_feeds([InputSpec(**{**s, "shape": tuple(s["shape"])}) for s in self.specs])

    def cases(self, shapes: tuple[tuple[int, int], ...], seed: int = 0) -> list[Feeds]:
        rng = np.random.default_rng(seed)
        make = self.maker()
        return [make(b, min(n, self.max_length), rng) for b, n in shapes]


def encoder_feeds(input_names: list[str], vocab: int) -> Callable[..., Feeds]:
    def make(batch: int, length: int, rng: np.random.Generator) -> Feeds:
        ids = rng.integers(0, vocab, (batch, length)).astype(np.int64)
        mask = np.zeros((batch, length), dtype=np.int64)
        for row in range(batch):  # the first row is full length, the others padded
            mask[row, : length if row == 0 else int(rng.integers(1, length + 1))] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return feeds

    return make


def decoder_feeds(
    layers: int, heads: int, head_dim: int, vocab: int, draw_width: int = 0, draw_bias: int = 0
) -> Callable[..., Feeds]:
    from inferd.generation.decoder import DRAW_BIAS, idle_bias, idle_draw_feeds
    from inferd.runtime.kv_names import PAST, cache_names

    past_names = cache_names(layers, PAST)

    def make(batch: int, length: int, rng: np.random.Generator) -> Feeds:
        # long chunks are prefills (no past); short ones are decode steps over a past
        past = 0 if length >= 8 else int(rng.integers(1, 12))
        total = past + length
        mask = np.ones((batch, total), dtype=np.int64)
        for row in range(1, batch):  # left padding, as in a batch of unequal prompts
            mask[row, : int(rng.integers(0, max(1, total - length)))] = 0
        positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)[:, past:]
        feeds: Feeds = {
            "input_ids": rng.integers(0, vocab, (batch, length)).astype(np.int64),
            "attention_mask": mask,
            "position_ids": positions.astype(np.int64),
        }
        for name in past_names:
            feeds[name] = rng.standard_normal((batch, heads, past, head_dim)).astype(np.float32)
        if draw_width:
            feeds.update(idle_draw_feeds(batch, draw_width))
        if draw_bias:
            feeds[DRAW_BIAS] = idle_bias(draw_bias)
        return feeds

    return make


def spec_feeds(specs: list[InputSpec]) -> Callable[..., Feeds]:
    axes: list[str] = []
    for s in specs:
        axes.extend(n for n in s.dynamic_axes.values() if n not in axes)

    def make(batch: int, length: int, rng: np.random.Generator) -> Feeds:
        sizes = {name: (batch if name == BATCH_AXIS else length) for name in axes}
        return {s.name: s.sample(sizes, rng) for s in specs}

    return make


def spec_plan(specs: list[InputSpec]) -> FeedPlan:
    return FeedPlan(kind="module", specs=tuple(asdict(s) for s in specs))
