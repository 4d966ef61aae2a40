"""The reranker: a cross-encoder that scores (query, text) pairs, one batch item per pair, on
the text kinds' batcher (token batching, length grouping) and tokenizer (its pair form).

The model's output holds one logit per pair; the score is its sigmoid, or the logit itself for
a request asking `raw_scores` (text-embeddings-inference's flag) or a model configured so
(`rerank.activation: none`). Over KServe V2 it takes a BYTES `query` (one element) and BYTES
`texts`, and answers FP32 `scores` in the order of the texts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from inferd.engine.kinds.build import BuildContext
from inferd.engine.kinds.text_models import TextServable
from inferd.errors import InvalidInputError
from inferd.observability.trace import current_trace
from inferd.runtime.protocol import Array, Feeds, TensorSpec
from inferd.verbs.rerank import Reranked

QUERY, TEXTS, SCORES = "query", "texts", "scores"
RERANK_INPUTS = (
    TensorSpec(QUERY, "BYTES", (1,), (None,)),
    TensorSpec(TEXTS, "BYTES", (-1,), ("batch",)),
)
RERANK_OUTPUTS = (TensorSpec(SCORES, "FP32", (-1,), ("batch",)),)


class RerankServable(TextServable):
    kind = "a reranker"

    def __init__(self, ctx: BuildContext) -> None:
        outputs = ctx.loaded.outputs
        name = ctx.config.rerank.output or outputs[0].name
        spec = next((o for o in outputs if o.name == name), None)
        if spec is None:
            raise ValueError(f"rerank.output '{name}' is not an output of the model")
        if spec.shape and spec.shape[-1] not in (1, -1):
            raise ValueError(
                f"output '{name}' has {spec.shape[-1]} logits a pair; a reranker's has one"
            )
        super().__init__(ctx, name, RERANK_OUTPUTS, RERANK_INPUTS)
        self._sigmoid = ctx.config.rerank.activation == "sigmoid"

    @classmethod
    def build(cls, ctx: BuildContext) -> RerankServable:
        return cls(ctx)

    async def rerank(
        self, query: str, texts: Sequence[str], raw_scores: bool, deadline: float | None
    ) -> Reranked:
        trace = current_trace()
        started = time.perf_counter()
        encoder = self._encoder
        if self._off_loop([query, *texts]):
            encoder.check(texts)
            encoded = await asyncio.to_thread(encoder.encode_pairs, query, texts)
        else:
            encoded = encoder.encode_pairs(query, texts)
        trace.mark("tokenize", started)
        outputs = await self._run_encoded(encoded, deadline)
        started = time.perf_counter()
        logits = np.array([float(np.asarray(out).reshape(-1)[0]) for out in outputs])
        scores = 1.0 / (1.0 + np.exp(-logits)) if self._sigmoid and not raw_scores else logits
        result = Reranked(scores.astype(np.float32), encoded.token_counts)
        trace.mark("respond", started)
        trace.output_length = len(texts)
        self.report_texts(result.token_counts)
        return result

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        query, texts = pairs_of(feeds)
        return {SCORES: (await self.rerank(query, texts, False, deadline)).scores}


def pairs_of(feeds: Feeds) -> tuple[str, list[str]]:
    """A V2 request to a reranker: BYTES `query` of one element, BYTES `texts` [n] or [n, 1]."""
    if set(feeds) != {QUERY, TEXTS}:
        raise InvalidInputError(
            f"a reranker takes two BYTES inputs, '{QUERY}' (one text) and '{TEXTS}'"
        )
    query, texts = feeds[QUERY], feeds[TEXTS]
    if query.dtype != np.dtype(object) or query.size != 1:
        raise InvalidInputError(f"input '{QUERY}' must be BYTES holding one text")
    if (
        texts.dtype != np.dtype(object)
        or texts.ndim not in (1, 2)
        or (texts.ndim == 2 and texts.shape[1] != 1)
    ):
        raise InvalidInputError(f"input '{TEXTS}' must be BYTES of shape [n] or [n, 1]")
    return str(query.reshape(-1)[0]), [str(t) for t in texts.reshape(-1)]
