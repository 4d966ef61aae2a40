"""A real (random-weight) GPT-2 decoder for the generation tests: a byte-level BPE tokenizer
trained on stdlib docstrings and a small GPT-2 exported by `inferd export`, built once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.engine.kinds.decoder_parts import GenerationParts
from inferd.engine.versions.loading import load_instances
from inferd.generation.step_runner import RunNow, RunStep
from inferd.repository.scan import scan_model
from inferd.runtime.onnx_session import OnnxSession
from inferd.runtime.protocol import DeviceMemory
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


@dataclass(frozen=True)
class Decoder:
    run: RunStep
    parts: GenerationParts
    run_now: RunNow | None = None
    session: OnnxSession | None = None
    memory: DeviceMemory | None = None
    """Where an in-place cache lives (None: host arrays)."""


def exported(root: Path, kv_cache: str) -> Decoder:
    build_generator_repo(root, kv_cache=kv_cache)
    return load_decoder(root)


def load_decoder(root: Path) -> Decoder:
    """The decoder of a repository `build_generator_repo` made, loaded as inferd loads it."""
    entry = scan_model(root / MODEL)
    assert entry.config is not None
    path = entry.versions[-1].path
    config = entry.config
    sessions: list[OnnxSession] = []

    def session(options: Any) -> OnnxSession:
        sessions.append(OnnxSession(path, options))
        return sessions[-1]

    loaded = load_instances(config, session, path.parent)
    assert loaded.generation is not None
    return Decoder(loaded.pool.run, loaded.generation, loaded.pool.run_now, sessions[0])
