"""The record of one request as it flows through the server: what it asked, where its time
went, how it ended. Filled in along the data path; read once, when the response is sent, for
the log line and the metrics.

The observing middleware opens one per request in a context variable (`tracing`); the engine
and the routes fill in `current_trace()` without passing it around. Outside a request (a
library call, a test) `current_trace()` is a detached record that nobody reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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
    load_s: float = 0.0
    """Time waited for the version to load (an on-demand one that was not in memory)."""
    batch_size: int = 0
    input_length: int = 0
    """Tokens for texts, elements for tensors."""
    output_length: int = 0
    items: int = 0
    error_code: int | None = None
    deadline_by_client: bool = False
    """Whether the request's deadline was its client's (a timeout it sent: a header, the V2
    `timeout` parameter, a gRPC deadline) rather than the server's `request_timeout_s`: when
    it passes, the outcome is the client's (`client_deadline`), not a server error."""
    route_key: str | None = None
    """The client's sticky routing key (`X-Inferd-Route-Key`), for rollouts."""
    route: str | None = None
    """stable or canary, when the model is in a rollout and the request named no version."""
    cache: str | None = None
    """How the response cache answered (hit, miss, coalesced); None when the model has none."""
    payload: str | None = None
    """Set only when payload logging is on (a debug setting), truncated and marked."""

    def stages(self) -> dict[str, float]:
        return {
            "queue": self.queue_s,
            "preprocess": self.preprocess_s,
            "inference": self.inference_s,
            "postprocess": self.postprocess_s,
        }


_CURRENT: ContextVar[RequestTrace | None] = ContextVar("inferd_request_trace", default=None)


def current_trace() -> RequestTrace:
    """The trace of the request being served (a detached one outside any request)."""
    trace = _CURRENT.get()
    return trace if trace is not None else RequestTrace(request_id="")


@contextmanager
def tracing(trace: RequestTrace) -> Iterator[RequestTrace]:
    """Makes `trace` the current trace while the block (the request) runs."""
    token = _CURRENT.set(trace)
    try:
        yield trace
    finally:
        _CURRENT.reset(token)
