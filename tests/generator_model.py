"""A real (random-weight) GPT-2 decoder for the generation tests: a byte-level BPE tokenizer
trained on stdlib docstrings and a small GPT-2 exported by `inferd export`, built once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.tools.generator import GeneratorShape, build_generator

SHAPE = GeneratorShape(layers=2, heads=2, hidden=64, context=512, vocab=512)
MODEL = "tinygen"


def build_generator_repo(
    root: Path, config: dict[str, Any] | None = None, kv_cache: str = "concat"
) -> Path:
    """`root/tinygen/1` with its tokenizer and config; returns the repository. `kv_cache`:
    the decoder's layout (concatenated past + new, or in place)."""
    build_generator(
        root,
        MODEL,
        steps=0,
        shape=SHAPE,
        corpus_chars=200_000,
        kv_cache=kv_cache,
        config={
            "generation": {
                "context_length": SHAPE.context,
                "max_new_tokens": 32,
                "max_new_tokens_limit": 1000,
                "max_running": 8,
                "max_kv_tokens": 8 * SHAPE.context,
                "eos_token_id": 0,
            },
            **(config or {}),
        },
    )
    return root
