"""The dynamic batcher: queue, deadlines, batch formation, padding and slicing back.

Pure asyncio and numpy. May import the runtime's interface (`runtime.protocol`), `errors` and
the observer interface (`observability.observer`), never a web framework and never onnxruntime.
"""

from inferd.batching.batcher import BatcherSettings, BatchRecord, DynamicBatcher, Timing
from inferd.batching.layout import BatchLayout, build_layout

__all__ = [
    "BatchLayout",
    "BatchRecord",
    "BatcherSettings",
    "DynamicBatcher",
    "Timing",
    "build_layout",
]
