"""The record of one request as it flows through the server: what it asked, where its time
went, how it ended. Filled in along the data path; read once, when the response is sent, for
the log line and the metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class RequestTrace:
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None
    version: str | None = None
    preprocess_s: float = 0.0
    queue_s: float = 0.0
    inference_s: float = 0.0
    postprocess_s: float = 0.0
    batch_size: int = 0
    input_length: int = 0
    """Tokens for texts, elements for tensors."""
    output_length: int = 0
    items: int = 0
    error_code: int | None = None
    payload: str | None = None
    """Set only when payload logging is on (a debug setting), truncated and marked."""

    def stages(self) -> dict[str, float]:
        return {
            "queue": self.queue_s,
            "preprocess": self.preprocess_s,
            "inference": self.inference_s,
            "postprocess": self.postprocess_s,
        }
