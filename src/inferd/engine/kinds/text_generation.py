"""Text generation inside the engine: the generator servable (its continuous-batching
scheduler) and the handle a route holds while a generation runs."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable

import numpy as np

from inferd.config.model import GenerationConfig
from inferd.engine.kinds.build import BuildContext
from inferd.engine.kinds.decoder_parts import GenerationParts
from inferd.engine.kinds.servable import ParameterSpec, Servable
from inferd.errors import InputTooLongError, InvalidInputError
from inferd.generation.chat import Conversation, Prompt
from inferd.generation.chat_tokens import ChatEncoder
from inferd.generation.constraint import Constraint, Grammars
from inferd.generation.decoder import DecoderShape
from inferd.generation.params import SamplingRequest
from inferd.generation.scheduler import Scheduler
from inferd.generation.sequence import Finished
from inferd.generation.sequence import Sequence as Seq
from inferd.runtime.memory import HostMemory
from inferd.runtime.pool import close_off_loop
from inferd.runtime.protocol import Array, DeviceMemory, Feeds, Runtime, TensorSpec
from inferd.tasks.text_feeds import OFF_LOOP_CHARS

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
FINAL = "triton_final_response"
GENERATION_INPUTS = (TensorSpec(TEXT_INPUT, "BYTES", (1,), (None,)),)
"""What a client sends a generator over KServe V2 (Triton's generate interface): the prompt."""
GENERATION_OUTPUTS = (TensorSpec(TEXT_OUTPUT, "BYTES", (1,), (None,)),)
"""What it answers: the whole text, or a streamed response's piece of it."""
GENERATION_PARAMETERS = (
    *(
        ParameterSpec(name, kind, "request")
        for name, kind in (
            ("max_tokens", "int64"),
            ("temperature", "double"),
            ("top_k", "int64"),
            ("top_p", "double"),
            ("repetition_penalty", "double"),
            ("presence_penalty", "double"),
            ("frequency_penalty", "double"),
            ("seed", "int64"),
            ("stop", "string"),
            ("ignore_eos", "bool"),
            ("timeout", "int64"),
            ("triton_enable_empty_final_response", "bool"),
        )
    ),
    *(
        ParameterSpec(name, kind, "response")
        for name, kind in (
            (FINAL, "bool"),
            ("finish_reason", "string"),
            ("prompt_tokens", "int64"),
            ("completion_tokens", "int64"),
        )
    ),
)
"""The request parameters a generation reads (its sampling settings, the V2 `timeout` in
microseconds, Triton's empty final response) and those its responses carry."""


def cache_memory(
    config: GenerationConfig, shape: DecoderShape, runtimes: list[Runtime]
) -> DeviceMemory:
    """Where the scheduler's in-place KV cache lives (`cache_placement`): the runtime
    instance's own memory, or the host's. A cache on a GPU is that GPU's: its steps run there
    alone (ValueError, failing the load, for a generator of several GPU instances)."""
    memory = runtimes[0].memory
    placement = config.cache_placement
    if placement == "auto":
        # ONNX Runtime's CUDA provider has GroupQueryAttention for FP16 and BF16 only: an
        # FP32 decoder's attention runs on the CPU, which a cache on the GPU would have to
        # cross to at every step (GPU check: 85 against 390 tokens/s at 1 in flight)
        on_device = memory.device == "cpu" or shape.dtype != np.dtype(np.float32)
        placement = "device" if on_device else "host"
    if placement == "host":
        return HostMemory()
    if memory.device != "cpu" and len(runtimes) > 1:
        raise ValueError(
            f"a generator's KV cache lives on one device ({memory.device}): give it one GPU "
            "instance, or set generation.cache_placement: host"
        )
    return memory


class GeneratorServable(Servable):
    kind = "a text generator"

    def __init__(self, ctx: BuildContext, parts: GenerationParts) -> None:
        loaded = ctx.loaded
        super().__init__(
            ctx.model,
            ctx.version,
            ctx.config,
            GENERATION_INPUTS,
            GENERATION_OUTPUTS,
            loaded.pool.first.providers,
            ctx.observer,
            graph=(loaded.inputs, loaded.outputs),
            parameters=GENERATION_PARAMETERS,
        )
        self._pool = loaded.pool
        self._chat = parts.chat
        self._chat_encoder = ChatEncoder(parts.tokenizer)
        self._grammars = Grammars(parts.tokenizer, parts.eos_id)
        self._scheduler = Scheduler(
            loaded.pool.run,
            parts.shape,
            parts.tokenizer,
            ctx.config.generation,
            parts.eos_id,
            parts.pad_id,
            model=ctx.model,
            version=str(ctx.version),
            observer=ctx.observer,
            run_now=loaded.pool.run_now,
            memory=cache_memory(ctx.config.generation, parts.shape, loaded.pool.instances),
        )
        self._scheduler.start()

    @classmethod
    def build(cls, ctx: BuildContext) -> GeneratorServable:
        parts = ctx.loaded.generation
        if parts is None:
            raise ValueError(f"model '{ctx.model}' is a decoder without its generation parts")
        return cls(ctx, parts)

    async def generate(self, prompt: Prompt, sampling: SamplingRequest, n: int = 1) -> list[Seq]:
        """Tokenizes and queues `n` generations of one prompt, which share its prefill (4002
        over the character cap or the window, 4290 when full, 4006 for a constraint that
        does not compile); chat messages are rendered through the model's chat template
        first. A long prompt is tokenized on a worker thread, off the event loop. With a
        seed, answer i draws from seed + i: each is the same on its own as in the set."""
        params = sampling.resolve(self.config.generation)
        text, encode = self._encoder(prompt)
        limit = self.config.tokenizer.max_chars
        if len(text) > limit:
            raise InputTooLongError(f"the prompt has {len(text)} characters; the limit is {limit}")
        self._scheduler.refuse_when_full(n)  # before the prompt is tokenized
        constraints: list[Constraint | None] = [None] * n
        if sampling.grammar is not None:  # (compiled off the loop, or taken from the cache)
            constraints = [await self._grammars.constraint(sampling.grammar) for _ in range(n)]
        ids = await asyncio.to_thread(encode) if len(text) > OFF_LOOP_CHARS else encode()
        seeds = [None if params.seed is None else (params.seed + i) % 2**63 for i in range(n)]
        return self._scheduler.submit_twins(
            ids,
            [dataclasses.replace(params, seed=seed) for seed in seeds],
            constraints,
        )

    def _encoder(self, prompt: Prompt) -> tuple[str, Callable[[], list[int]]]:
        """The prompt's text, and what makes its token ids: chat messages rendered through
        the model's chat template, their content's special tokens kept as text unless the
        config says otherwise (inferd.generation.chat_tokens)."""
        if isinstance(prompt, str):
            return prompt, functools.partial(self._scheduler.encode, prompt)
        chat = prompt if isinstance(prompt, Conversation) else Conversation(prompt)
        if self.config.generation.chat_content_special_tokens:
            text = self._chat.render(chat.messages, chat.tools)
            return text, functools.partial(self._scheduler.encode, text)
        parts = self._chat.render_parts(chat.messages, chat.tools)
        text = "".join(piece for piece, _ in parts)
        return text, functools.partial(self._chat_encoder.encode, parts)

    @property
    def queued_items(self) -> int:
        return self._scheduler.waiting

    @property
    def queued_requests(self) -> int:
        return self._scheduler.waiting_requests

    @property
    def kv_usage(self) -> tuple[int, int] | None:
        return self._scheduler.kv_usage

    @property
    def saturated(self) -> bool:
        return self._scheduler.saturated

    @property
    def capacity(self) -> int | None:
        return self._scheduler.capacity

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        raise InvalidInputError(
            f"model '{self.model}' generates text: use POST /generate or /v1/completions "
            f"(or, over gRPC, ModelInfer with a BYTES '{TEXT_INPUT}')"
        )

    async def drain(self, timeout_s: float) -> bool:
        return await self._scheduler.drain(timeout_s)

    async def stop(self) -> None:
        await self._scheduler.close()

    async def close(self) -> None:
        await self._scheduler.close()
        self._grammars.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await close_off_loop(pool)


class Generation:
    """One admitted generation: the sequence, and what its end does (`ended`: the release of
    its in-flight slot, its outcome counted) when its stream ends or its client goes away
    (either way its KV rows are freed at the next step)."""

    def __init__(self, seq: Seq, model: str, version: int, ended: Callable[[], None]) -> None:
        self.seq = seq
        self.model = model
        self.version = version
        self._ended: Callable[[], None] | None = ended

    async def stream(self, joined: bool = True) -> AsyncIterator[str | Finished]:
        try:
            async for event in self.seq.stream(joined):
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
        ended, self._ended = self._ended, None
        if ended is not None:
            ended()


def generator(servable: Servable) -> GeneratorServable:
    """`servable` as the generator it is; a 4004 for a kind that does not generate."""
    if not isinstance(servable, GeneratorServable):
        raise InvalidInputError(
            f"model '{servable.model}' is {servable.kind}; it does not generate text"
        )
    return servable
