"""Text models: the embedding and the classifier servables, over what they share (the
tokenizer, one batch item per text). Both also take their texts over KServe V2 (a BYTES input
named `text`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from inferd.batching import Timing
from inferd.engine.kinds.batched import BatchedServable, start_batcher
from inferd.engine.kinds.build import BuildContext
from inferd.engine.kinds.servable import TEXT_INPUT, Servable
from inferd.errors import InvalidInputError
from inferd.observability.trace import current_trace
from inferd.runtime.protocol import Array, Feeds, Head, TensorSpec
from inferd.runtime.reduction import POOLED
from inferd.tasks.classification import ClassificationTask, top_k
from inferd.tasks.embedding import EmbeddingTask
from inferd.tasks.text_feeds import EncodedTexts
from inferd.verbs.classify import Classified
from inferd.verbs.embed import Embeddings


def texts_of(model: str, feeds: Feeds) -> list[str]:
    """The texts of a V2 request to a text model: one BYTES input `text`, [n] or [n, 1]."""
    if set(feeds) != {TEXT_INPUT}:
        raise InvalidInputError(
            f"model '{model}' takes texts: one BYTES input named '{TEXT_INPUT}'"
        )
    array = feeds[TEXT_INPUT]
    if (
        array.dtype != np.dtype(object)
        or array.ndim not in (1, 2)
        or (array.ndim == 2 and array.shape[1] != 1)
    ):
        raise InvalidInputError(f"input '{TEXT_INPUT}' must be BYTES of shape [n] or [n, 1]")
    return [str(t) for t in array.reshape(-1)]


TEXT_INPUTS = (TensorSpec(TEXT_INPUT, "BYTES", (-1,), ("batch",)),)


def label_outputs(classes: int) -> tuple[TensorSpec, ...]:
    """What a classifier answers over V2."""
    return (
        TensorSpec("label", "BYTES", (-1,), ("batch",)),
        TensorSpec("score", "FP32", (-1,), ("batch",)),
        TensorSpec("probabilities", "FP32", (-1, classes), ("batch", None)),
    )


def label_arrays(classified: Classified) -> dict[str, Array]:
    return {
        "label": np.array([p.labels[0] for p in classified.predictions], dtype=object),
        "score": np.array([p.scores[0] for p in classified.predictions], dtype=np.float32),
        "probabilities": classified.probabilities.astype(np.float32),
    }


class TextServable(BatchedServable):
    """What the text kinds share: their tokenizer, one batch item per text, and the one
    model output their task reads (the others are not fetched)."""

    def __init__(
        self,
        ctx: BuildContext,
        output: str,
        outputs: tuple[TensorSpec, ...],
        inputs: tuple[TensorSpec, ...] = TEXT_INPUTS,
        head: Head | None = None,
    ) -> None:
        """`head`: what the batch's `output` becomes on the runtime's thread (its task's
        reduction of the whole batch; inferd.runtime.protocol.Head)."""
        text = ctx.loaded.text
        if text is None:
            raise ValueError(f"model '{ctx.model}' is a text model without its tokenizer")
        batcher = start_batcher(
            ctx.model,
            ctx.version,
            ctx.config,
            ctx.loaded,
            ctx.batch_observer,
            text.pad_values(),
            output,
            head,
        )
        super().__init__(
            ctx.model,
            ctx.version,
            ctx.config,
            ctx.loaded,
            batcher,
            (inputs, outputs),
            ctx.observer,
        )
        self._encoder = text.encoder
        self._quiet = ctx.quiet
        self._output = output
        """The output each item's answer is read from (a head's, where the task has one)."""

    async def _run_texts(
        self, texts: Sequence[str], deadline: float | None, spans: bool = False
    ) -> tuple[EncodedTexts, list[Array]]:
        """Each text's output (the task's one), in order; with `spans`, the encoded texts
        say where each token lies."""
        started = time.perf_counter()
        if self._off_loop(texts):
            self._encoder.check(texts)  # its refusals cost nothing: answered here
            encoded = await asyncio.to_thread(self._encoder.encode, texts, spans)
        else:
            encoded = self._encoder.encode(texts, spans)
        current_trace().mark("tokenize", started)
        return encoded, await self._run_encoded(encoded, deadline)

    def _off_loop(self, texts: Sequence[str]) -> bool:
        """Whether `texts` are tokenized on a worker thread: a large request must not stall
        the event loop, nor a middling one a loop that other requests wait for."""
        return self._encoder.heavy(texts, quiet=self._quiet())

    async def _run_encoded(self, encoded: EncodedTexts, deadline: float | None) -> list[Array]:
        """Each encoded item's output, in order, through the version's batcher."""
        trace = current_trace()
        trace.items = len(encoded.items)
        trace.input_length = sum(encoded.token_counts)
        timing = Timing()
        try:
            outputs = await self._batcher.submit_items(encoded.items, deadline, timing)
        finally:  # (a request that failed or timed out shows how far it got)
            timing.fill(trace)
        return [out[self._output] for out in outputs]


class EmbeddingServable(TextServable):
    kind = "an embedding model"

    def __init__(self, ctx: BuildContext) -> None:
        self._task = EmbeddingTask(ctx.config.embedding, ctx.loaded.outputs)
        dim = self._task.dimension or -1
        outputs = (TensorSpec("embedding", "FP32", (-1, dim), ("batch", None)),)
        self._mask = ctx.config.tokenizer.attention_mask
        head = self._task.batch_head(self._mask)
        super().__init__(ctx, self._task.output, outputs, head=head)
        self._pooled = head is not None
        if head is not None:  # each item's output is its pooled vector already ([1, h])
            self._output = POOLED

    @classmethod
    def build(cls, ctx: BuildContext) -> EmbeddingServable:
        return cls(ctx)

    async def embed(
        self, texts: Sequence[str], deadline: float | None, dimensions: int | None = None
    ) -> Embeddings:
        task = self._task
        task.check_dimensions(dimensions)
        encoded, outputs = await self._run_texts(texts, deadline)
        started = time.perf_counter()
        mask = self._mask
        if self._pooled:
            vectors = np.concatenate(outputs)
        else:
            vectors = np.stack(
                [
                    task.pool(out, item.get(mask) if mask else None)
                    for out, item in zip(outputs, encoded.items, strict=True)
                ]
            )
        result = Embeddings(task.finish(vectors, dimensions), encoded.token_counts)
        trace = current_trace()
        trace.mark("respond", started)
        trace.output_length = int(result.vectors.size)
        self.report_texts(result.token_counts)
        return result

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        embedded = await self.embed(texts_of(self.model, feeds), deadline)
        return {"embedding": embedded.vectors}


class LabelsOverV2(Servable):
    """A text classifier's KServe V2 answer: its texts in (BYTES `text`), the top label, its
    score and every probability out."""

    async def classify(self, texts: Sequence[str], k: int, deadline: float | None) -> Classified:
        raise NotImplementedError  # (each classifier kind answers it)

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        return label_arrays(await self.classify(texts_of(self.model, feeds), 1, deadline))


class ClassifierServable(TextServable, LabelsOverV2):
    kind = "a text classifier"

    def __init__(self, ctx: BuildContext) -> None:
        self._task = ClassificationTask(ctx.config.classification, ctx.loaded.outputs)
        super().__init__(ctx, self._task.output, label_outputs(len(self._task.labels)))

    @classmethod
    def build(cls, ctx: BuildContext) -> ClassifierServable:
        return cls(ctx)

    async def classify(self, texts: Sequence[str], k: int, deadline: float | None) -> Classified:
        task = self._task
        encoded, outputs = await self._run_texts(texts, deadline)
        started = time.perf_counter()
        logits = np.concatenate([out.reshape(1, -1) for out in outputs])
        probabilities = task.probabilities(logits)
        result = Classified(
            top_k(probabilities, task.labels, k), probabilities, encoded.token_counts
        )
        trace = current_trace()
        trace.mark("respond", started)
        trace.output_length = len(texts) * k
        report_classified(self, result)
        return result


def report_classified(servable: Servable, result: Classified) -> None:
    servable.report_texts(
        result.token_counts,
        [p.labels[0] for p in result.predictions],
        [p.scores[0] for p in result.predictions],
    )
