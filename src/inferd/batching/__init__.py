"""The dynamic batcher: queue, admission and shedding, deadlines, batch formation, padding and
slicing back, the runtime's health as its batches show it.

Pure asyncio and numpy. May import the runtime's interface (`runtime.protocol`), `errors` and
the observer interface (`observability.observer`), never a web framework and never onnxruntime.
"""

from inferd.batching.backlog import Timing
from inferd.batching.batcher import DynamicBatcher
from inferd.batching.execution import BatchRecord
from inferd.batching.layout import BatchLayout, build_layout
from inferd.batching.settings import BatcherSettings

__all__ = [
    "BatchLayout",
    "BatchRecord",
    "BatcherSettings",
    "DynamicBatcher",
    "Timing",
    "build_layout",
]
