"""The anchor of benchmarks/generate_bench.py (`--anchor`): onnxruntime-genai's own generation
loop and inferd on the same machine, on the same small random-weight decoder.

onnxruntime-genai's model builder converts Llama (not GPT-2), so the decoder is a Llama of the
demo generator's size (4 layers, hidden 128, 4 heads, vocabulary 4096, context 512), made with
transformers and saved as a folder with inferd's own trained tokenizer. The builder writes
onnxruntime-genai's graph (fp32, CPU); `inferd export` writes inferd's twice (the same
weights): exported with torch, its KV cache concatenated, and with `--kv-cache inplace`,
inferd's own graph (ONNX Runtime's GroupQueryAttention with its rotary embedding, the cache
written in place). Both generate with temperature 0.8, top-k 50, prompts of 32 tokens and
exactly 128 new tokens each:

- onnxruntime-genai: a batch of 1 and a batch of 16 (its batching: one static batch, the
  prompts of equal length) through `Generator.generate_next_token`, in this process;
- inferd: `inferd serve` on each export, 1 and 16 requests kept in flight by a closed loop
  over HTTP (whole answers), tokens counted by the server over a window (as
  benchmarks/generate_bench.py ceiling).

Needs the `anchor` extra: pip install -e ".[anchor]"
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Server, median_of
from inferd.corpus import docstrings, sentences
from inferd.tools.generator import train_tokenizer
from steady import Load, steady_load

MODEL = "anchor-llama"
PROMPT_TOKENS = 32
NEW_TOKENS = 128
LOADS = (1, 16)
LAYOUTS = ("concat", "inplace")


def build_llama(folder: Path) -> None:
    """A random-weight Llama folder (config, safetensors, tokenizer), as a user's would be."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=4096,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    train_tokenizer(docstrings(200_000), 4096).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512})
    )


def convert(folder: Path, genai: Path) -> None:
    cache = str(genai.parent / "cache")
    builder = ["-i", str(folder), "-o", str(genai), "-p", "fp32", "-e", "cpu", "-c", cache]
    subprocess.run(
        [sys.executable, "-m", "onnxruntime_genai.models.builder", *builder],
        check=True,
        capture_output=True,
    )


def export(folder: Path, repo: Path, layout: str) -> None:
    args = [str(folder), "--repo", str(repo), "--model", MODEL, "--kv-cache", layout]
    subprocess.run(
        [sys.executable, "-m", "inferd", "export", *args], check=True, capture_output=True
    )
    path = repo / MODEL / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["generation"].update(
        {
            "max_new_tokens_limit": NEW_TOKENS,
            "max_running": 16,
            "max_kv_tokens": 16 * 512,
            "max_waiting": 1024,
        }
    )
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def prompts(tokenizer_file: Path, count: int) -> list[list[int]]:
    """Token ids of `count` prompts of PROMPT_TOKENS tokens each, from the corpus."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    ids = tokenizer.encode(" ".join(sentences(400))).ids
    return [ids[i * PROMPT_TOKENS : (i + 1) * PROMPT_TOKENS] for i in range(count)]


def genai_tokens_per_s(genai: Path, batch: list[list[int]], rounds: int) -> float:
    """onnxruntime-genai's loop: a static batch, every sequence to exactly NEW_TOKENS."""
    import onnxruntime_genai as og

    model = og.Model(str(genai))
    results = []
    for seed in range(rounds + 1):
        params = og.GeneratorParams(model)
        total = PROMPT_TOKENS + NEW_TOKENS
        params.set_search_options(
            max_length=total,
            min_length=total,  # no early end: every sequence makes NEW_TOKENS
            do_sample=True,
            top_k=50,
            temperature=0.8,
            batch_size=len(batch),
            random_seed=seed,
        )
        generator = og.Generator(model, params)
        started = time.perf_counter()
        generator.append_tokens(np.array(batch, dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        elapsed = time.perf_counter() - started
        if seed:  # the first batch warms up
            results.append(len(batch) * NEW_TOKENS / elapsed)
        del generator
    return median_of(results)


def inferd_load(url: str, texts: list[str], load: int, window_s: float) -> Load:
    bodies = [
        {
            "prompt": text,
            "max_length": NEW_TOKENS,
            "temperature": 0.8,
            "top_k": 50,
            "seed": i,
            "ignore_eos": True,
        }
        for i, text in enumerate(texts)
    ]
    return steady_load(url, load, [orjson.dumps(b) for b in bodies], 3.0, window_s)


@dataclass(frozen=True)
class Result:
    genai_tokens_per_s: float
    inferd: dict[str, Load]
    """Per KV cache layout: inferd's median round (by tokens/s)."""


def run(rounds: int, window_s: float) -> dict[int, Result]:
    """Per load: onnxruntime-genai's tokens/s, and inferd's (with its decode steps) per
    KV cache layout."""
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory(prefix="inferd-anchor-") as tmp:
        root = Path(tmp)
        folder, genai = root / "hf", root / "genai"
        build_llama(folder)
        convert(folder, genai)
        for layout in LAYOUTS:
            export(folder, root / layout, layout)
        ids = prompts(folder / "tokenizer.json", 64)
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        texts = [tokenizer.decode(p) for p in ids]
        theirs: dict[int, list[float]] = {n: [] for n in LOADS}
        ours: dict[tuple[str, int], list[Load]] = {(k, n): [] for k in LAYOUTS for n in LOADS}
        for _ in range(rounds):
            for load in LOADS:
                theirs[load].append(genai_tokens_per_s(genai, ids[:load], 3))
            for layout in LAYOUTS:
                server = Server(root / layout)
                try:
                    for load in LOADS:
                        ours[layout, load].append(inferd_load(server.url, texts, load, window_s))
                finally:
                    server.stop()
            print({n: (theirs[n][-1], *(ours[k, n][-1] for k in LAYOUTS)) for n in LOADS})
    return {
        n: Result(
            median_of(theirs[n]),
            {k: _median_round(ours[k, n]) for k in LAYOUTS},
        )
        for n in LOADS
    }


def _median_round(loads: list[Load]) -> Load:
    return sorted(loads, key=lambda m: m.tokens_per_s)[len(loads) // 2]


def report(results: dict[int, Result], rounds: int, window_s: float) -> str:
    rows = [
        f"| {load} | {layout} | {r.genai_tokens_per_s:.0f} | {m.tokens_per_s:.0f} | "
        f"**{m.tokens_per_s / r.genai_tokens_per_s:.2f}x** | {m.step_ms:.2f} | "
        f"{m.step_share:.0%} |"
        for load, r in results.items()
        for layout, m in r.inferd.items()
    ]
    return "\n".join(
        [
            "#### The anchor: onnxruntime-genai's own loop on the same decoder",
            "",
            "Command: `python benchmarks/generate_bench.py --anchor` (needs the `anchor` extra). "
            "A random-weight Llama of the demo generator's size (4 layers, hidden 128, "
            "vocabulary 4096), converted by onnxruntime-genai's model builder (fp32, CPU) and "
            "exported by `inferd export` (the same weights), its KV cache concatenated and in "
            f"place (`--kv-cache inplace`); prompts of {PROMPT_TOKENS} tokens, exactly "
            f"{NEW_TOKENS} new tokens, temperature 0.8, top-k 50. onnxruntime-genai: a static "
            "batch of 1 or 16 in process (no server, no HTTP); inferd: 1 or 16 requests in "
            "flight over HTTP from a Python client on the same cores, tokens counted by the "
            f"server over {window_s:.0f} s. Medians of {rounds} rounds (inferd's: the median "
            "round by tokens/s).",
            "",
            "| requests at once | inferd KV cache | onnxruntime-genai tokens/s | inferd tokens/s "
            "| inferd / genai | inferd decode step ms | inferd time in decode steps |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
