"""The one observer interface of the data path: its events, and the one guarded fan-out.

The batcher, the generation scheduler, the engine and the job worker report what happens (a
batch ran, a runtime turned unhealthy, texts were served, a decode step ran) as an event: a
small frozen dataclass below. An `Observer` sees every event through `observe` and acts on the
kinds it watches (metrics, drift, a version's statistics); the base ignores them all.
`notify` hands one event to one observer and logs its failure: observing never breaks a
request. `Observers` fans an event out to several, each guarded on its own.

Imports nothing of the data path (observability sits beside it): a batch's facts are a protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from inferd.observability.stats import BatchFacts

log = logging.getLogger(__name__)


class Event:
    """What the data path reports; each kind is a frozen dataclass."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class BatchRan(Event):
    """A batch ran (or failed: `record.error`)."""

    model: str
    version: str
    record: BatchFacts


@dataclass(frozen=True, slots=True)
class MemoryPressure(Event):
    """An out-of-memory failure lowered the batch size limit to `limit` rows."""

    model: str
    version: str
    rows: int
    limit: int


@dataclass(frozen=True, slots=True)
class Unhealthy(Event):
    """The runtime fails even one item at a time, again and again."""

    model: str
    version: str
    reason: str


@dataclass(frozen=True, slots=True)
class TextsServed(Event):
    """A request's texts were served (with the top label and score of each, classifiers)."""

    model: str
    token_counts: Sequence[int]
    top_labels: Sequence[str] | None = None
    top_scores: Sequence[float] | None = None


@dataclass(frozen=True, slots=True)
class GenerationStep(Event):
    """Prefill or decode steps ran, `rows` rows each, `seconds` each (one for a prefill or a
    single step, a block's steps in order); `kind` "idle": the state after the queue emptied
    (no steps)."""

    model: str
    version: str
    kind: str
    rows: int
    seconds: Sequence[float]
    running: int
    waiting: int
    kv_tokens: int
    kv_limit: int


@dataclass(frozen=True, slots=True)
class GenerationTokens(Event):
    """Time to first token of new sequences, and gaps between tokens of running ones."""

    model: str
    first_token_s: Sequence[float]
    inter_token_s: Sequence[float]


@dataclass(frozen=True, slots=True)
class GenerationFinished(Event):
    """A sequence ended (stop, length, cancelled, error)."""

    model: str
    reason: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class RolloutDecided(Event):
    """A rollout decided (start, advance, hold, promote, rollback, abort, failed); `weight`:
    the candidate's share of traffic after it."""

    model: str
    decision: str
    weight: float


@dataclass(frozen=True, slots=True)
class Routed(Event):
    """A request of a model in a rollout was answered by `route` (stable, canary)."""

    model: str
    version: str
    route: str
    failed: bool


@dataclass(frozen=True, slots=True)
class ShadowOutcome(Event):
    """A shadowed request was compared (`agreement`: the window's mean so far), failed on the
    candidate, or was shed."""

    model: str
    outcome: str
    agreement: float | None


@dataclass(frozen=True, slots=True)
class JobEnded(Event):
    """A job ended a run: succeeded, failed, or requeued (its route was shedding)."""

    outcome: str
    seconds: float


@dataclass(frozen=True, slots=True)
class JobsWaiting(Event):
    """The job queue's depth (waiting and running, every process sharing it)."""

    depth: int


@dataclass(frozen=True, slots=True)
class JobsLost(Event):
    """The job store lost its data: `count` jobs it held when last read are lost."""

    count: int


class Observer:
    def observe(self, event: Event) -> None:
        """Sees one event; an observer acts on the kinds it watches and ignores the rest."""


def notify(observer: Observer, event: Event) -> None:
    """Hands `event` to `observer`; a failure is logged with its traceback, never raised."""
    try:
        observer.observe(event)
    except Exception:
        log.exception(
            "observer failed; the request is unaffected",
            extra={"observer": type(observer).__qualname__, "event": type(event).__name__},
        )


class Observers(Observer):
    """Several observers as one; each is called on its own guard."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

    def observe(self, event: Event) -> None:
        for o in self.observers:
            notify(o, event)
