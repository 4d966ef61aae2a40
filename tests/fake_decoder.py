"""A fake decoder for the scheduler's unit tests (no ONNX Runtime, no torch): the concatenating
KV interface of a real export, with one layer, one head and head_dim 1, whose next token is a
function of every real token the row has seen. Each key cache entry holds its token id, so a
row whose cache were mixed up with another's (a compaction or slot bug) would answer other
tokens: greedy output alone and in a busy batch must agree."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

from inferd.generation.decoder import DecoderShape
from inferd.runtime.protocol import Array, Repeat, TensorSpec

VOCAB = 64
EOS = "<|endoftext|>"
WORDS = [EOS, *(f"w{i}" for i in range(1, VOCAB))]

INPUTS = (
    TensorSpec("input_ids", "INT64", (-1, -1), ("batch", "sequence")),
    TensorSpec("attention_mask", "INT64", (-1, -1), ("batch", "total")),
    TensorSpec("position_ids", "INT64", (-1, -1), ("batch", "sequence")),
    TensorSpec("past_key_values.0.key", "FP32", (-1, 1, -1, 1), ("batch", None, "past", None)),
    TensorSpec("past_key_values.0.value", "FP32", (-1, 1, -1, 1), ("batch", None, "past", None)),
)
OUTPUTS = (
    TensorSpec("logits", "FP32", (-1, -1, VOCAB), ("batch", "sequence", None)),
    TensorSpec("present.0.key", "FP32", (-1, 1, -1, 1), ("batch", None, "total", None)),
    TensorSpec("present.0.value", "FP32", (-1, 1, -1, 1), ("batch", None, "total", None)),
)
SHAPE = DecoderShape.of(INPUTS, OUTPUTS)


def next_token(seen_sum: Array, seen_count: Array) -> Array:
    """A hash of the row's tokens (their sum and count); never EOS (0): sequences end by
    length."""
    mixed = seen_sum.astype(np.int64) * 2654435761 + seen_count.astype(np.int64) * 40503
    return (mixed >> 7) % (VOCAB - 1) + 1


def step(feeds: Mapping[str, Array]) -> dict[str, Array]:
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    past = feeds["past_key_values.0.key"]
    rows, width = ids.shape
    new = ids.astype(np.float32).reshape(rows, 1, width, 1)
    present = np.concatenate([past, new], axis=2)
    since = past.shape[2]
    seen = np.cumsum(present[:, 0, :, 0] * mask, axis=1)[:, since:]
    count = np.cumsum(mask, axis=1)[:, since:]
    logits = np.full((rows, width, VOCAB), -10.0, np.float32)
    chosen = next_token(seen, count)
    for r in range(rows):
        logits[r, np.arange(width), chosen[r]] = 10.0
    return {"logits": logits, "present.0.key": present, "present.0.value": present.copy()}


class FakeDecoder:
    """The scheduler's `run`: one step, after an optional pause the test controls."""

    def __init__(self) -> None:
        self.steps = 0
        self.rows: list[int] = []
        self.now_steps = 0
        """Steps run through `now` (on the caller's thread)."""

    async def __call__(
        self,
        feeds: dict[str, Array],
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
        repeat: Repeat | None = None,
    ) -> dict[str, Array]:
        assert repeat is None  # blocks of steps are for in-place decoders that draw in-graph
        self.steps += 1
        self.rows.append(int(feeds["input_ids"].shape[0]))
        await asyncio.sleep(0)  # a real step runs on a worker thread: the loop moves on
        return step(feeds)

    def now(
        self,
        feeds: dict[str, Array],
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
        repeat: Repeat | None = None,
    ) -> dict[str, Array] | None:
        """The scheduler's `run_now`: the step on the calling thread."""
        assert repeat is None
        self.steps += 1
        self.now_steps += 1
        self.rows.append(int(feeds["input_ids"].shape[0]))
        return step(feeds)


def tokenizer() -> Tokenizer:
    made = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token=EOS))
    made.pre_tokenizer = pre_tokenizers.Whitespace()
    return made
