"""The one observer interface of the data path, and the one guard every caller uses.

The batcher, the generation scheduler and the engine report what happens (a batch ran, a
runtime turned unhealthy, texts were served, a decode step ran) to an `Observer`. Every method
is a no-op here: an observer overrides what it watches (metrics, drift, a version's statistics).
`notify` calls one observer method and logs its failure: observing never breaks a request.
`Observers` fans one event out to several, each guarded on its own.

Imports nothing of the data path (observability sits beside it): a batch's facts are a protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from inferd.observability.stats import BatchFacts

log = logging.getLogger(__name__)


class Observer:
    def on_batch(self, model: str, version: str, record: BatchFacts) -> None:
        """A batch ran (or failed: `record.error`)."""

    def on_memory_pressure(self, model: str, version: str, rows: int, limit: int) -> None:
        """An out-of-memory failure lowered the batch size limit to `limit` rows."""

    def on_unhealthy(self, model: str, version: str, reason: str) -> None:
        """The runtime fails even one item at a time, again and again."""

    def on_texts(
        self,
        model: str,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None:
        """A request's texts were served (with the top label and score of each, classifiers)."""

    def on_generation_step(
        self,
        model: str,
        version: str,
        kind: str,
        rows: int,
        seconds: Sequence[float],
        running: int,
        waiting: int,
        kv_tokens: int,
        kv_limit: int,
    ) -> None:
        """Prefill or decode steps ran, `rows` rows each, `seconds` each (one for a prefill or
        a single step, a block's steps in order); `kind` "idle": the state after the queue
        emptied (no steps)."""

    def on_generation_tokens(
        self, model: str, first_token_s: Sequence[float], inter_token_s: Sequence[float]
    ) -> None:
        """Time to first token of new sequences, and gaps between tokens of running ones."""

    def on_generation_finished(
        self, model: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """A sequence ended (stop, length, cancelled, error)."""

    def on_rollout(self, model: str, decision: str, weight: float) -> None:
        """A rollout decided (start, advance, hold, promote, rollback, abort); `weight`: the
        candidate's share of traffic after it."""

    def on_routed(self, model: str, version: str, route: str, failed: bool) -> None:
        """A request of a model in a rollout was answered by `route` (stable, canary)."""

    def on_shadow(self, model: str, outcome: str, agreement: float | None) -> None:
        """A shadowed request was compared (`agreement`: the window's mean so far), failed on
        the candidate, or was shed."""

    def on_job(self, outcome: str, seconds: float) -> None:
        """A job ended a run: succeeded, failed, or requeued (its route was shedding)."""

    def on_jobs_waiting(self, depth: int) -> None:
        """The job queue's depth (waiting and running, every process sharing it)."""

    def on_jobs_lost(self, count: int) -> None:
        """The job store lost its data: `count` jobs it held when last read are lost."""


def notify(method: Callable[..., object], *args: object) -> None:
    """Calls `method(*args)`; a failure is logged with its traceback, never raised."""
    try:
        method(*args)
    except Exception:
        log.exception(
            "observer failed; the request is unaffected",
            extra={"observer": getattr(method, "__qualname__", repr(method))},
        )


class Observers(Observer):
    """Several observers as one; each is called on its own guard."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

    def on_batch(self, model: str, version: str, record: BatchFacts) -> None:
        for o in self.observers:
            notify(o.on_batch, model, version, record)

    def on_memory_pressure(self, model: str, version: str, rows: int, limit: int) -> None:
        for o in self.observers:
            notify(o.on_memory_pressure, model, version, rows, limit)

    def on_unhealthy(self, model: str, version: str, reason: str) -> None:
        for o in self.observers:
            notify(o.on_unhealthy, model, version, reason)

    def on_texts(
        self,
        model: str,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None:
        for o in self.observers:
            notify(o.on_texts, model, token_counts, top_labels, top_scores)

    def on_generation_step(
        self,
        model: str,
        version: str,
        kind: str,
        rows: int,
        seconds: Sequence[float],
        running: int,
        waiting: int,
        kv_tokens: int,
        kv_limit: int,
    ) -> None:
        for o in self.observers:
            notify(
                o.on_generation_step,
                model,
                version,
                kind,
                rows,
                seconds,
                running,
                waiting,
                kv_tokens,
                kv_limit,
            )

    def on_generation_tokens(
        self, model: str, first_token_s: Sequence[float], inter_token_s: Sequence[float]
    ) -> None:
        for o in self.observers:
            notify(o.on_generation_tokens, model, first_token_s, inter_token_s)

    def on_generation_finished(
        self, model: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        for o in self.observers:
            notify(o.on_generation_finished, model, reason, prompt_tokens, completion_tokens)

    def on_rollout(self, model: str, decision: str, weight: float) -> None:
        for o in self.observers:
            notify(o.on_rollout, model, decision, weight)

    def on_routed(self, model: str, version: str, route: str, failed: bool) -> None:
        for o in self.observers:
            notify(o.on_routed, model, version, route, failed)

    def on_shadow(self, model: str, outcome: str, agreement: float | None) -> None:
        for o in self.observers:
            notify(o.on_shadow, model, outcome, agreement)

    def on_job(self, outcome: str, seconds: float) -> None:
        for o in self.observers:
            notify(o.on_job, outcome, seconds)

    def on_jobs_waiting(self, depth: int) -> None:
        for o in self.observers:
            notify(o.on_jobs_waiting, depth)

    def on_jobs_lost(self, count: int) -> None:
        for o in self.observers:
            notify(o.on_jobs_lost, count)
