"""Text generation inside the engine: loading a decoder's parts (its KV interface, tokenizer,
EOS and pad tokens), warming it up, and the handle a route holds while a generation runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from inferd.config.model import ModelConfig
from inferd.generation.decoder import DecoderShape, DecoderShapeError
from inferd.generation.kvstore import kv_store
from inferd.generation.sequence import Finished
from inferd.generation.sequence import Sequence as Seq
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import TensorSpec
from inferd.tasks.text import TokenizerError, find_tokenizer

EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|eos|>")


@dataclass(frozen=True)
class GenerationParts:
    shape: DecoderShape
    tokenizer: Tokenizer
    eos_id: int | None
    pad_id: int


def load_generation(
    config: ModelConfig, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
    version_folder: Path, providers: Sequence[str] = ("CPUExecutionProvider",),
) -> GenerationParts:  # fmt: skip
    """Blocking (a worker thread): checks the interface, reads the tokenizer."""
    shape = DecoderShape.of(inputs, outputs)
    if shape.inplace and providers[0] != "CPUExecutionProvider":
        # the cache buffers are host memory bound as both past and present; on a GPU they
        # would have to be device buffers (not built yet)
        raise DecoderShapeError(
            f"a decoder with an in-place KV cache runs on the CPU provider only, not "
            f"{providers[0]}; export it without --kv-cache inplace for a GPU"
        )
    path = find_tokenizer(config.tokenizer, version_folder, version_folder.parent)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a plain Exception for a bad file
        raise TokenizerError(f"cannot read tokenizer {path.name}: {exc}") from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()  # the context window is checked, never silently cut
    eos = config.generation.eos_token_id
    if eos is None:
        eos = next((t for t in (tokenizer.token_to_id(n) for n in EOS_TOKENS) if t is not None),
                   None)  # fmt: skip
    return GenerationParts(shape, tokenizer, eos, eos if eos is not None else 0)


def warm_up_decoder(
    pool: InstancePool, parts: GenerationParts, config: ModelConfig, sizes: Sequence[int]
) -> None:
    store = kv_store(parts.shape, config.generation)
    for rows in sizes:
        rows = max(1, min(rows, config.generation.max_running))
        step = store.prefill([[parts.pad_id, parts.pad_id]] * rows, range(rows), parts.pad_id)
        pool.run_sync(step.feeds, step.into)


class Generation:
    """One admitted generation: the sequence, and the release of its in-flight slot when its
    stream ends or its client goes away (either way its KV rows are freed at the next step)."""

    def __init__(self, seq: Seq, model: str, version: int, release: Callable[[], None]) -> None:
        self.seq = seq
        self.model = model
        self.version = version
        self._release: Callable[[], None] | None = release

    async def stream(self) -> AsyncIterator[str | Finished]:
        try:
            async for event in self.seq.stream():
                yield event
        finally:
            self.close()

    async def result(self) -> Finished:
        try:
            return await self.seq.result()
        finally:
            self.close()

    def close(self) -> None:
        if not self.seq.done:
            self.seq.cancel()
        release, self._release = self._release, None
        if release is not None:
            release()
