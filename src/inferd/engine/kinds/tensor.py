"""The tensor servable: KServe V2 tensors in and out, through the version's batcher."""

from __future__ import annotations

from inferd.batching import Timing
from inferd.engine.kinds.batched import BatchedServable, start_batcher
from inferd.engine.kinds.build import BuildContext
from inferd.engine.kinds.validation import validate_feeds
from inferd.observability.trace import current_trace
from inferd.runtime.protocol import Array, Feeds


class TensorServable(BatchedServable):
    kind = "a tensor model"

    @classmethod
    def build(cls, ctx: BuildContext) -> TensorServable:
        loaded = ctx.loaded
        batcher = start_batcher(ctx.model, ctx.version, ctx.config, loaded, ctx.batch_observer)
        servable = cls(
            ctx.model,
            ctx.version,
            ctx.config,
            loaded,
            batcher,
            (loaded.inputs, loaded.outputs),
            ctx.observer,
        )
        servable._max_rows = ctx.max_request_rows
        return servable

    _max_rows = 4096
    """The most rows one request may carry (the server's `max_request_rows`)."""

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        rows = validate_feeds(feeds, self.inputs, self.batched, self._max_rows)
        timing = Timing()
        trace = current_trace()
        trace.items = rows
        trace.input_length = sum(int(a.size) for a in feeds.values())
        try:
            outputs = await self._batcher.submit(feeds, rows, deadline, timing)
        finally:  # (a request that failed or timed out shows how far it got)
            timing.fill(trace)
        trace.output_length = sum(int(a.size) for a in outputs.values())
        return outputs
