"""The record of one request as it flows through the server: what it asked, where its time
went, how it ended. Filled in along the data path; read once, when the response is sent, for
the log line and the metrics.

The observing middleware opens one per request in a context variable (`tracing`); the engine
and the routes fill in `current_trace()` without passing it around. Outside a request (a
library call, a test) `current_trace()` is a detached record that nobody reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

STAGE_FIELDS = {
    "tokenize": "preprocess_s",
    "parse": "preprocess_s",
    "respond": "postprocess_s",
    "load": "load_s",
}
"""The stages timed by `RequestTrace.mark` that also add to one of its stage durations (the
others, such as generation's `prefill` and `decode`, are intervals only)."""
PARTS_KEPT = 16
"""Batches recorded for one request (a request over the batch size runs in parts)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One generated answer of a request: its prompt's and its own tokens, when it was
    created, when its first token came (None when none did) and when it ended."""

    prompt_tokens: int
    completion_tokens: int
    created: float
    first_token_at: float | None
    ended: float
    shares_prompt: bool = False
    """Another answer to the same prompt (of one request's `n`): its prompt counts once."""


@dataclass(frozen=True, slots=True)
class BatchPart:
    """One batch a request's items ran in: when they were queued, when the batch started, how
    long it ran, its rows, and its serial number (the same for every request in it)."""

    enqueued_at: float
    started: float
    run_s: float
    rows: int
    serial: int


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
    client: str | None = None
    """Whose request it is (`inferd.clients.Client.name`: the key's name, `addr:<ip>`),
    set by the protocol that checked its key; never the key itself."""
    route_key: str | None = None
    """The client's sticky routing key (`X-Inferd-Route-Key`), for rollouts."""
    route: str | None = None
    """stable or canary, when the model is in a rollout and the request named no version."""
    cache: str | None = None
    """How the response cache answered (hit, miss, coalesced); None when the model has none."""
    payload: str | None = None
    """Set only when payload logging is on (a debug setting), truncated and marked."""
    traceparent: str | None = None
    """The W3C `traceparent` the client sent (HTTP header or gRPC metadata), and its
    `tracestate`: the parent of the request's span when traces are exported."""
    tracestate: str | None = None
    trace_id: str | None = None
    """The trace its span went into, when spans are exported (its log line names it)."""
    intervals: list[tuple[str, float, float]] = field(default_factory=list)
    """The stages it went through, named, with when each began and ended (`mark`)."""
    batches: list[BatchPart] = field(default_factory=list)
    """The batches its items ran in (at most PARTS_KEPT)."""
    answers: list[Answer] = field(default_factory=list)
    """The answers it generated (`answered`)."""

    def answered(self, answer: Answer) -> None:
        """Records a generated answer, and its `prefill` (to its first token) and `decode`
        stages."""
        self.answers.append(answer)
        if answer.first_token_at is not None:
            self.mark("prefill", answer.created, answer.first_token_at)
            self.mark("decode", answer.first_token_at, answer.ended)

    def mark(self, stage: str, started: float, ended: float | None = None) -> float:
        """Records a stage that ran from `started` to `ended` (now when not given): its
        interval, and its time added to the stage's duration (STAGE_FIELDS). The end."""
        end = time.perf_counter() if ended is None else ended
        self.intervals.append((stage, started, end))
        duration_field = STAGE_FIELDS.get(stage)
        if duration_field is not None:
            setattr(self, duration_field, getattr(self, duration_field) + end - started)
        return end

    def stages(self) -> dict[str, float]:
        return {
            "queue": self.queue_s,
            "preprocess": self.preprocess_s,
            "inference": self.inference_s,
            "postprocess": self.postprocess_s,
        }


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C `traceparent` (None when it is missing, malformed, or all
    zeros, which the standard says is invalid)."""
    if traceparent is None:
        return None
    found = _TRACEPARENT.match(traceparent.strip())
    if found is None or found.group(1) == "0" * 32:
        return None
    return found.group(1)


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
