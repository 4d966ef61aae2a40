"""What a request's outcome feeds: its version's statistics and, in a rollout, the version's
window (inferd.engine.rollout.router), with shadow traffic: a request routed to the stable
version may run again on the candidate, in the background, the two answers compared
(inferd.engine.requests.agreement)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from inferd.engine.kinds.text_generation import generator
from inferd.engine.requests.agreement import tokens as agreeing_tokens
from inferd.engine.rollout import Rollouts
from inferd.engine.versions.version import Version
from inferd.errors import ErrorCode, InferdError
from inferd.generation.chat import Prompt
from inferd.generation.params import SamplingRequest
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.trace import current_trace

T = TypeVar("T")


class Outcomes:
    def __init__(self, rollouts: Rollouts) -> None:
        self._rollouts = rollouts

    @contextmanager
    def recorded(self, served: Version, finished_only: bool = False) -> Iterator[None]:
        """Records the request's outcome and duration in the version's statistics, and for
        a rollout: every error but shedding (4290, 4291) counts as a failure there (the
        versions of a rollout share their clients, so a client's mistakes fall on both alike,
        while an input one version runs and the other refuses is the candidate's fault).
        `finished_only`: what runs inside is only a request's start (a generation's): only
        a failure is recorded for the rollout, and nothing in the statistics."""
        started = time.perf_counter()
        ok = failed = False
        try:
            yield
            ok = True
        except InferdError as exc:
            failed = exc.code not in (ErrorCode.QUEUE_FULL, ErrorCode.TOO_MANY_LOADS)
            raise
        except Exception:
            failed = True
            raise
        finally:
            seconds = time.perf_counter() - started
            if not finished_only:
                served.stats.on_request(ok, seconds)
            if failed or not finished_only:
                trace = current_trace()
                # the version's own time: its queue wait is judged apart (it grows with the
                # share of traffic a version takes, not with what the version does)
                own = max(seconds - trace.queue_s, 0.0)
                self._rollouts.router.record(
                    served.model, served.version, failed, own, trace.queue_s, trace.route
                )

    def mirror(
        self,
        served: Version,
        run: Callable[[Version], Awaitable[T]],
        agree: Callable[[T], float],
    ) -> None:
        """For a request a rollout routed to its stable version, maybe the same request on
        the candidate, in the background, compared (inferd.engine.rollout: shadow traffic)."""
        if current_trace().route != "stable":
            return
        candidate = self._rollouts.shadow_target(served.model)
        if candidate is not None:
            self._rollouts.router.mirror(served.model, run(candidate), agree)

    def generation_ended(
        self,
        served: Version,
        seq: Seq,
        route: str | None,
        prompt: Prompt,
        sampling: SamplingRequest,
    ) -> None:
        """A finished generation counts in a rollout (its latency is the time per generated
        token, its queue time the time to the first token: a generation's length is the
        prompt's, not the version's doing), and a greedy one routed to the stable version may
        run again on the candidate, its tokens compared."""
        finished = seq.finished
        if finished is None or finished.reason == "cancelled":
            return  # its client left: neither version's failure
        failed = finished.reason == "error"
        per_token = finished.total_s / max(finished.completion_tokens, 1)
        first = finished.first_token_s or 0.0
        rollouts = self._rollouts
        rollouts.router.record(served.model, served.version, failed, per_token, first, route)
        if route != "stable" or failed or not seq.params.greedy:
            return
        candidate = rollouts.shadow_target(served.model)
        if candidate is None:
            return
        stable_tokens = list(seq.generated)

        async def shadow() -> list[int]:
            (mirrored,) = await generator(candidate.servable).generate(prompt, sampling)
            await mirrored.result()
            return list(mirrored.generated)

        rollouts.router.mirror(
            served.model, shadow(), lambda tokens: agreeing_tokens(stable_tokens, tokens)
        )
