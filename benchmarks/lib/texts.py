"""The benchmarks' English texts and the per-model settings and statistics they read: texts
of 8-128 tokens, log-uniform (many short, some long), for /embed on the demo model."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Server
from tests.text_corpus import sentences

MIN_TOKENS, MAX_TOKENS = 8, 128


def make_texts(tokenizer: Tokenizer, count: int, seed: int = 0) -> list[str]:
    """`count` texts whose token counts are log-uniform in [8, 128] (many short, some long)."""
    rng = np.random.default_rng(seed)
    words = " ".join(sentences(400)).split()
    texts = []
    for _ in range(count):
        target = round(math.exp(rng.uniform(math.log(MIN_TOKENS), math.log(MAX_TOKENS))))
        start = int(rng.integers(0, len(words) - 200))
        n = max(1, target // 2)
        text = " ".join(words[start : start + n])
        while len(tokenizer.encode(text).ids) < target and n < 200:
            n += 1
            text = " ".join(words[start : start + n])
        ids = tokenizer.encode(text).ids[1:-1][: target - 2]  # keep exactly `target` with specials
        texts.append(tokenizer.decode(ids))
    return texts


def stats(server: Server, model: str = "minilm") -> dict[str, float]:
    body = httpx.get(server.url + f"/v2/models/{model}/versions/1/stats", timeout=5).json()
    (s,) = body["model_stats"]
    return {
        "real": s["padding"]["real_elements"],
        "padded": s["padding"]["padded_elements"],
        "rows": s["inference_count"],
        "batches": s["execution_count"],
    }


def apply_overrides(config: dict[str, Any], overrides: dict[str, object]) -> dict[str, Any]:
    """Model config overrides by dotted key (dynamic_batching.max_padding_waste=0.1)."""
    for dotted, value in overrides.items():
        *parents, key = dotted.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return config
