"""A decoder's parts, read when it loads (off the event loop): its KV interface, tokenizer, EOS
and pad tokens; and its warm-up through the KV store that will serve it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from inferd.config.model import ModelConfig
from inferd.generation.chat import ChatTemplate, load_chat_template
from inferd.generation.decoder import DecoderShape
from inferd.generation.kv_layout import kv_store
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import TensorSpec
from inferd.tasks.text_feeds import TokenizerError, find_tokenizer

EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|eos|>")


@dataclass(frozen=True)
class GenerationParts:
    shape: DecoderShape
    tokenizer: Tokenizer
    eos_id: int | None
    pad_id: int
    chat: ChatTemplate


def load_generation(
    config: ModelConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    version_folder: Path,
    providers: Sequence[str] = ("CPUExecutionProvider",),
) -> GenerationParts:
    """Blocking (a worker thread): checks the interface, reads the tokenizer and the chat
    template."""
    shape = DecoderShape.of(inputs, outputs)
    path = find_tokenizer(config.tokenizer, version_folder, version_folder.parent)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a plain Exception for a bad file
        raise TokenizerError(f"cannot read tokenizer {path.name}: {exc}") from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()  # the context window is checked, never silently cut
    eos = config.generation.eos_token_id
    if eos is None:
        eos = next(
            (t for t in (tokenizer.token_to_id(n) for n in EOS_TOKENS) if t is not None), None
        )
    eos_text = tokenizer.id_to_token(eos) if eos is not None else None
    chat = load_chat_template(
        [path.parent, version_folder, version_folder.parent],
        config.generation.chat_template,
        eos_text or "",
    )
    return GenerationParts(shape, tokenizer, eos, eos if eos is not None else 0, chat)


def warm_up_decoder(
    pool: InstancePool, parts: GenerationParts, config: ModelConfig, sizes: Sequence[int]
) -> None:
    store = kv_store(parts.shape, config.generation)
    for rows in sizes:
        rows = max(1, min(rows, config.generation.max_running))
        step = store.prefill([[parts.pad_id, parts.pad_id]] * rows, range(rows), parts.pad_id)
        pool.run_sync(step.feeds, step.into)
