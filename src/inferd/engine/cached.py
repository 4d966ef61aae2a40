"""A servable with a response cache in front: the same protocol as the servable it wraps, so
nothing above it knows.

A request's key is what changes its answer: the verb, its inputs (each tensor's name,
datatype, shape and bytes; each text) and the parameters that shape the answer (the outputs
asked for, `k`, `dimensions`). The version is not in the key because the cache is the
version's own. Generation is never cached: it passes through.

Answers are kept read-only (a cached array is shared by every request it answers). A hit
still tells the observer of its texts (drift sees the traffic, not the misses only), and the
request's trace says how it was answered (`cache`: hit, miss or coalesced).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from inferd.engine.response_cache import MISS, ResponseCache
from inferd.engine.servable import Classified, Embeddings, Reranked, Servable
from inferd.generation.chat import Messages
from inferd.generation.params import SamplingRequest
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.observer import Observer
from inferd.observability.trace import current_trace
from inferd.runtime.dispatch import InstanceLoad
from inferd.runtime.protocol import Array, Feeds

Answer = dict[str, Array] | Embeddings | Classified
LookupHook = Callable[[str, float], None]
"""Told of every lookup: how it was answered (hit, miss, coalesced) and how long it took."""

OFF_LOOP_BYTES = 1 << 20
"""Inputs larger than this are hashed on a worker thread (a 64 MB tensor takes tens of ms)."""
PREDICTION_BYTES = 128
"""What one prediction's labels and scores hold, about, beside its probabilities."""


class CachedServable(Servable):
    def __init__(self, inner: Servable, cache: ResponseCache[Answer], on_lookup: LookupHook):
        super().__init__(
            inner.model,
            inner.version,
            inner.config,
            inner.inputs,
            inner.outputs,
            inner.providers,
            Observer(),
            (inner.graph_inputs, inner.graph_outputs),
            inner.parameters,
        )
        self.inner = inner
        self.cache = cache
        self._on_lookup = on_lookup

    # -- what it is: the inner servable's ----------------------------------------------------

    @property
    def queued_items(self) -> int:
        return self.inner.queued_items

    @property
    def instances(self) -> Sequence[InstanceLoad]:
        return self.inner.instances

    @property
    def holder(self) -> Servable:
        return self.inner.holder

    @property
    def saturated(self) -> bool:
        return self.inner.saturated

    @property
    def capacity(self) -> int | None:
        return self.inner.capacity

    # -- requests ------------------------------------------------------------------------

    async def infer(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None,
        deadline: float | None,
        max_rows_per_request: int,
    ) -> dict[str, Array]:
        if sum(int(np.asarray(a).nbytes) for a in feeds.values()) > OFF_LOOP_BYTES:
            hashed = await asyncio.to_thread(_feeds_bytes, feeds)  # the loop keeps serving
        else:
            hashed = _feeds_bytes(feeds)
        key = _digest(b"infer", hashed, *_texts_bytes(output_names or ()))
        outputs, _ = await self._cached(
            key,
            lambda: self.inner.infer(feeds, output_names, deadline, max_rows_per_request),
            deadline,
        )
        assert isinstance(outputs, dict)
        return outputs

    async def embed(
        self, texts: Sequence[str], deadline: float | None, dimensions: int | None = None
    ) -> Embeddings:
        key = await _text_key(b"embed", str(dimensions).encode(), texts)
        answer, how = await self._cached(
            key, lambda: self.inner.embed(texts, deadline, dimensions), deadline
        )
        assert isinstance(answer, Embeddings)
        if how != MISS:
            self._served_hit(texts, answer.token_counts)
        return answer

    async def classify(self, texts: Sequence[str], k: int, deadline: float | None) -> Classified:
        key = await _text_key(b"classify", str(k).encode(), texts)
        answer, how = await self._cached(
            key, lambda: self.inner.classify(texts, k, deadline), deadline
        )
        assert isinstance(answer, Classified)
        if how != MISS:
            top = answer.predictions
            labels, scores = [p.labels[0] for p in top], [p.scores[0] for p in top]
            self._served_hit(texts, answer.token_counts, labels, scores)
        return answer

    async def generate(self, prompt: str | Messages, sampling: SamplingRequest) -> Seq:
        return await self.inner.generate(prompt, sampling)

    async def rerank(
        self, query: str, texts: Sequence[str], raw_scores: bool, deadline: float | None
    ) -> Reranked:
        return await self.inner.rerank(query, texts, raw_scores, deadline)  # (not cached)

    async def _cached(
        self, key: bytes, run: Callable[[], Awaitable[Answer]], deadline: float | None
    ) -> tuple[Answer, str]:
        started = time.perf_counter()

        async def miss() -> Answer:
            answer = await run()
            _freeze(answer)
            return answer

        answer, how = await self.cache.get_or_run(key, miss, answer_bytes, deadline)
        current_trace().cache = how
        self._on_lookup(how, time.perf_counter() - started)
        return answer, how

    def _served_hit(
        self,
        texts: Sequence[str],
        token_counts: Sequence[int],
        labels: Sequence[str] | None = None,
        scores: Sequence[float] | None = None,
    ) -> None:
        """What the servable itself does for texts it ran: the trace's counts, the observer."""
        trace = current_trace()
        trace.items = len(texts)
        trace.input_length = sum(token_counts)
        self.inner.report_texts(token_counts, labels, scores)

    # -- life ----------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> bool:
        return await self.inner.drain(timeout_s)

    async def stop(self) -> None:
        await self.inner.stop()

    async def close(self) -> None:
        self.cache.clear()
        await self.inner.close()

    def report_texts(
        self,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None:
        self.inner.report_texts(token_counts, top_labels, top_scores)


def answer_bytes(answer: Answer) -> int:
    """What an answer holds in memory, near enough to bound the cache by."""
    if isinstance(answer, Embeddings):
        return answer.vectors.nbytes + 8 * len(answer.token_counts)
    if isinstance(answer, Classified):
        rows = len(answer.predictions)
        return answer.probabilities.nbytes + (PREDICTION_BYTES + 8) * rows
    return sum(_array_bytes(array) for array in answer.values())


def _array_bytes(array: Array) -> int:
    if array.dtype == object:
        return sum(len(item) if isinstance(item, bytes | str) else 8 for item in array.flat) + (
            8 * array.size
        )
    return int(array.nbytes)


def _freeze(answer: Answer) -> None:
    arrays = (
        [answer.vectors]
        if isinstance(answer, Embeddings)
        else [answer.probabilities]
        if isinstance(answer, Classified)
        else list(answer.values())
    )
    for array in arrays:
        if isinstance(array, np.ndarray):
            array.flags.writeable = False


async def _text_key(verb: bytes, parameter: bytes, texts: Sequence[str]) -> bytes:
    """The key of a text request; large texts (a hostile 100k-character batch) are hashed on
    a worker thread, so the event loop keeps answering."""
    if sum(len(t) for t in texts) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(lambda: _digest(verb, parameter, *_texts_bytes(texts)))
    return _digest(verb, parameter, *_texts_bytes(texts))


def _digest(*parts: bytes) -> bytes:
    """One key of many parts: each part's length, then its bytes (no two lists of parts give
    the same stream)."""
    hasher = hashlib.blake2b(digest_size=20)
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.digest()


def _texts_bytes(texts: Sequence[str]) -> list[bytes]:
    return [text.encode("utf-8", "surrogatepass") for text in texts]


def _feeds_bytes(feeds: Feeds) -> bytes:
    hasher = hashlib.blake2b(digest_size=20)
    for name in sorted(feeds):
        array = np.asarray(feeds[name])
        head = f"{name}\0{array.dtype.str}\0{array.shape}".encode()
        hasher.update(len(head).to_bytes(8, "little") + head)
        if array.dtype == object:
            for item in array.flat:
                data = (
                    item if isinstance(item, bytes) else str(item).encode("utf-8", "surrogatepass")
                )
                hasher.update(len(data).to_bytes(8, "little") + data)
        else:
            hasher.update(np.ascontiguousarray(array).data)
    return hasher.digest()
