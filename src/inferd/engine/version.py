"""One served model version: its batcher, its state, and its inference calls.

A version is one of three kinds: a tensor model (KServe V2 tensors in and out), a text model
(embedding or text-classification, through its tokenizer), or a zero-shot classifier, which has
no runtime of its own and scores texts with the embeddings of its base model.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections.abc import Sequence

import numpy as np

from inferd.batching import BatcherSettings, DynamicBatcher, Timing, build_layout
from inferd.config.model import ModelConfig
from inferd.engine.loading import LoadedModel
from inferd.engine.observer import (
    EngineObserver,
    NoObserver,
    VersionBatchObserver,
    report_texts,
)
from inferd.engine.text import Classified, Embeddings, TextPipeline
from inferd.engine.validation import validate_feeds
from inferd.errors import InvalidInputError, UnavailableError
from inferd.generation.params import SamplingParams
from inferd.generation.scheduler import Scheduler
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.stats import VersionStats
from inferd.observability.trace import RequestTrace
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, TensorSpec
from inferd.tasks.classification import top_k
from inferd.tasks.zero_shot import ZeroShotTask

log = logging.getLogger(__name__)

TEXT_INPUT = "text"


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    FAILED = "FAILED"
    UNLOADED = "UNLOADED"


class ServedVersion:
    """A version as the rest of inferd sees it. Created LOADING; `attach` makes it READY."""

    def __init__(
        self,
        model: str,
        version: int,
        config: ModelConfig,
        observer: EngineObserver | None = None,
    ) -> None:
        self.model = model
        self.version = version
        self.config = config
        self.state = VersionState.LOADING
        self.reason: str | None = None
        self.superseded = False
        """Failed, but an older version serves in its place (readiness is not held back)."""
        self.inputs: tuple[TensorSpec, ...] = ()
        """What clients send over V2 (for text models: a BYTES `text` input)."""
        self.outputs: tuple[TensorSpec, ...] = ()
        self.model_inputs: tuple[TensorSpec, ...] = ()
        """What the ONNX model itself takes."""
        self.providers: tuple[str, ...] = ()
        self.load_s: float | None = None
        self.text: TextPipeline | None = None
        self.zero_shot: ZeroShotTask | None = None
        self.base: ServedVersion | None = None
        self._pool: InstancePool | None = None
        self._batcher: DynamicBatcher | None = None
        self.generator: Scheduler | None = None
        self.stats = VersionStats(model, version)
        self._observer: EngineObserver = observer or NoObserver()

    @property
    def batched(self) -> bool:
        return self.config.max_batch_size > 0

    @property
    def ready(self) -> bool:
        return self.state is VersionState.READY

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def batcher(self) -> DynamicBatcher | None:
        return self._batcher

    # -- becoming ready ------------------------------------------------------------------

    def attach(self, loaded: LoadedModel) -> None:
        """On the event loop: builds and starts the batcher (the scheduler for a decoder), then
        marks the version ready."""
        if loaded.generation is not None:
            self._attach_generator(loaded)
            return
        config = self.config
        batching = config.dynamic_batching
        pad_values = {o.name: o.pad_value for o in config.inputs if o.pad_value is not None}
        if loaded.text is not None:
            pad_values = {**loaded.text.pad_values(), **pad_values}
        layout = build_layout(
            loaded.inputs,
            loaded.outputs,
            pad_values,
            self.batched,
            pad_left=batching.padding_side == "left",
        )
        if pad_values and not layout.mix_lengths:
            log.warning(
                "padding configured but an output has a variable axis no padded input names; "
                "items of different lengths will not share a batch",
                extra={"model": self.model, "version": self.version},
            )
        settings = BatcherSettings(
            max_batch_size=config.max_batch_size,
            max_queue_delay_s=batching.max_queue_delay_ms / 1000.0,
            preferred_batch_sizes=batching.preferred_batch_sizes,
            max_queue_size=batching.max_queue_size,
            max_padding_waste=batching.max_padding_waste,
            max_batch_tokens=batching.max_batch_tokens,
            length_grouping=batching.length_grouping,
            concurrency=loaded.pool.concurrency,
            oom_cooldown_s=batching.oom_cooldown_s,
            label=f"{self.model}/{self.version}",
        )
        run_batch = loaded.pool.run
        if loaded.text is not None:  # fetch only the output the task reads
            run_batch = functools.partial(loaded.pool.run, output_names=[loaded.text.output])
        self._pool = loaded.pool
        watcher = VersionBatchObserver(
            self.model, self.version, self.stats, self._observer, self._unhealthy
        )
        self._batcher = DynamicBatcher(layout, settings, run_batch, watcher)
        self._batcher.start()
        self.model_inputs = loaded.inputs
        self.text = loaded.text
        self.inputs, self.outputs = _served_specs(loaded)
        self.providers = loaded.pool.first.providers
        self.load_s = loaded.load_s
        self.state = VersionState.READY

    def _attach_generator(self, loaded: LoadedModel) -> None:
        parts = loaded.generation
        if parts is None:
            raise ValueError("not a generation model")
        self.generator = Scheduler(
            loaded.pool.run, parts.shape, parts.tokenizer, self.config.generation, parts.eos_id,
            parts.pad_id, model=self.model, version=str(self.version), observer=self._observer,
        )  # fmt: skip
        self.generator.start()
        self._pool = loaded.pool
        self.model_inputs = loaded.inputs
        self.inputs, self.outputs = loaded.inputs, loaded.outputs
        self.providers = loaded.pool.first.providers
        self.load_s = loaded.load_s
        self.state = VersionState.READY

    def generate(self, prompt: str, params: SamplingParams) -> Seq:
        """Tokenizes and queues a generation (4002 over the window, 4290 when full)."""
        self._check_ready()
        if self.generator is None:
            raise InvalidInputError(f"model '{self.model}' does not generate text")
        return self.generator.submit(self.generator.encode(prompt), params)

    async def attach_zero_shot(self, base: ServedVersion) -> None:
        """Embeds the label descriptions with `base` and marks this classifier ready."""
        if self.config.zero_shot is None:
            raise ValueError("not a zero-shot model")
        task = ZeroShotTask(self.config.zero_shot)
        embedded = await base.embed(task.descriptions, deadline=None)
        task.set_label_vectors(embedded.vectors)
        self.zero_shot, self.base = task, base
        self.inputs = (TensorSpec(TEXT_INPUT, "BYTES", (-1,), ("batch",)),)
        self.outputs = _label_outputs(len(task.labels))
        self.providers = base.providers
        self.state = VersionState.READY

    def fail(self, reason: str) -> None:
        self.state = VersionState.FAILED
        self.reason = reason

    def _unhealthy(self, reason: str) -> None:
        log.error("version unhealthy", extra={"model": self.model, "version": self.version})
        self.fail(reason)

    def _ready_batcher(self) -> DynamicBatcher:
        batcher = self._batcher
        if batcher is None or self.state is not VersionState.READY:
            raise UnavailableError(
                f"model '{self.model}' version {self.version} is not ready "
                f"({self.state.value.lower()})"
            )
        return batcher

    def _check_ready(self) -> None:
        if self.state is not VersionState.READY:
            raise UnavailableError(
                f"model '{self.model}' version {self.version} is not ready "
                f"({self.state.value.lower()})"
            )

    # -- tasks ---------------------------------------------------------------------------

    async def embed(
        self,
        texts: Sequence[str],
        deadline: float | None,
        dimensions: int | None = None,
        trace: RequestTrace | None = None,
    ) -> Embeddings:
        if self.text is None or self.text.embedding is None:
            raise InvalidInputError(f"model '{self.model}' does not embed texts")
        result = await self.text.embed(self._ready_batcher(), texts, deadline, dimensions, trace)
        report_texts(self._observer, self.model, result.token_counts)
        return result

    async def classify(
        self,
        texts: Sequence[str],
        k: int,
        deadline: float | None,
        trace: RequestTrace | None = None,
    ) -> Classified:
        self._check_ready()
        if self.zero_shot is not None and self.base is not None:
            embedded = await self.base.embed(texts, deadline, trace=trace)
            started = time.perf_counter()
            probabilities = self.zero_shot.probabilities(embedded.vectors)
            predictions = top_k(probabilities, self.zero_shot.labels, k)
            result = Classified(predictions, probabilities, embedded.token_counts)
            if trace is not None:
                trace.postprocess_s += time.perf_counter() - started
        elif self.text is None or self.text.classification is None:
            raise InvalidInputError(f"model '{self.model}' does not classify texts")
        else:
            result = await self.text.classify(self._ready_batcher(), texts, k, deadline, trace)
        report_texts(
            self._observer,
            self.model,
            result.token_counts,
            [p.labels[0] for p in result.predictions],
            [p.scores[0] for p in result.predictions],
        )
        return result

    @property
    def embeds(self) -> bool:
        return self.text is not None and self.text.embedding is not None

    @property
    def classifies(self) -> bool:
        return self.zero_shot is not None or (
            self.text is not None and self.text.classification is not None
        )

    # -- KServe V2 -----------------------------------------------------------------------

    async def infer(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None,
        deadline: float | None,
        max_rows_per_request: int,
        trace: RequestTrace | None = None,
    ) -> dict[str, Array]:
        """Validates, queues, and returns the requested outputs (all when none are named).

        Text models take their texts as a BYTES input named `text`."""
        self._check_ready()
        if output_names:
            known = {o.name for o in self.outputs}
            unknown = sorted(set(output_names) - known)
            if unknown:
                raise InvalidInputError(
                    f"unknown output(s) {unknown}; the model gives {sorted(known)}"
                )
        if self.generator is not None:
            raise InvalidInputError(
                f"model '{self.model}' generates text: use POST /generate or /v1/completions"
            )
        if self.text is not None or self.zero_shot is not None:
            outputs = await self._infer_texts(feeds, deadline, trace)
        else:
            rows = validate_feeds(feeds, self.inputs, self.batched, max_rows_per_request)
            timing = Timing()
            outputs = await self._ready_batcher().submit(feeds, rows, deadline, timing)
            if trace is not None:
                trace.items = rows
                trace.input_length = sum(int(a.size) for a in feeds.values())
                trace.output_length = sum(int(a.size) for a in outputs.values())
                trace.queue_s, trace.inference_s = timing.queue_s, timing.run_s
                trace.batch_size = timing.batch_rows
        if output_names:
            return {name: outputs[name] for name in output_names}
        return outputs

    async def _infer_texts(
        self, feeds: Feeds, deadline: float | None, trace: RequestTrace | None
    ) -> dict[str, Array]:
        if set(feeds) != {TEXT_INPUT}:
            raise InvalidInputError(
                f"model '{self.model}' takes texts: one BYTES input named '{TEXT_INPUT}'"
            )
        array = feeds[TEXT_INPUT]
        if (
            array.dtype != np.dtype(object)
            or array.ndim not in (1, 2)
            or (array.ndim == 2 and array.shape[1] != 1)
        ):
            raise InvalidInputError(f"input '{TEXT_INPUT}' must be BYTES of shape [n] or [n, 1]")
        texts = [str(t) for t in array.reshape(-1)]
        if self.embeds:
            embedded = await self.embed(texts, deadline, trace=trace)
            return {"embedding": embedded.vectors}
        classified = await self.classify(texts, 1, deadline, trace)
        return {
            "label": np.array([p.labels[0] for p in classified.predictions], dtype=object),
            "score": np.array([p.scores[0] for p in classified.predictions], dtype=np.float32),
            "probabilities": classified.probabilities.astype(np.float32),
        }

    # -- shutdown ------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> bool:
        if self.generator is not None:
            return await self.generator.drain(timeout_s)
        if self._batcher is None:
            return True
        return await self._batcher.drain(timeout_s)

    async def close(self) -> None:
        if self.generator is not None:
            await self.generator.close()
        if self._batcher is not None:
            await self._batcher.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.get_running_loop().run_in_executor(None, pool.close)
        self.state = VersionState.UNLOADED


def _label_outputs(classes: int) -> tuple[TensorSpec, ...]:
    return (
        TensorSpec("label", "BYTES", (-1,), ("batch",)),
        TensorSpec("score", "FP32", (-1,), ("batch",)),
        TensorSpec("probabilities", "FP32", (-1, classes), ("batch", None)),
    )


def _served_specs(loaded: LoadedModel) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    text = loaded.text
    if text is None:
        return loaded.inputs, loaded.outputs
    inputs = (TensorSpec(TEXT_INPUT, "BYTES", (-1,), ("batch",)),)
    if text.embedding is not None:
        dim = text.embedding.dimension or -1
        return inputs, (TensorSpec("embedding", "FP32", (-1, dim), ("batch", None)),)
    if text.classification is None:
        raise ValueError("a text model either embeds or classifies")
    return inputs, _label_outputs(len(text.classification.labels))
