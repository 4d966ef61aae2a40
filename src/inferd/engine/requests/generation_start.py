"""How the engine starts generations: admitted (an in-flight slot each, what a drain waits
for), routed to a version, queued with the version held in memory; each handle releases its
slot when its stream ends or it is closed, and then its outcome counts in a rollout (a greedy
one may be mirrored to the candidate)."""

from __future__ import annotations

import functools

from inferd.engine.kinds.text_generation import Generation, generator
from inferd.engine.requests.admission import Admission
from inferd.engine.requests.outcomes import Outcomes
from inferd.engine.requests.routing import Routing
from inferd.engine.resident.residency import Residency
from inferd.engine.versions.version import Version
from inferd.errors import UnavailableError
from inferd.generation.chat import Prompt
from inferd.generation.params import SamplingRequest
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.trace import current_trace


class GenerationStart:
    def __init__(
        self, admission: Admission, routing: Routing, residency: Residency, outcomes: Outcomes
    ) -> None:
        self._admission = admission
        self._routing = routing
        self._residency = residency
        self._outcomes = outcomes

    async def start(
        self,
        model: str | None,
        prompt: Prompt,
        sampling: SamplingRequest,
        version: str | None = None,
        n: int = 1,
    ) -> list[Generation]:
        """Admits and queues `n` generations of one prompt (or of chat messages, which the
        model's chat template renders), all or none."""
        admission = self._admission
        entered = 0
        try:
            for _ in range(n):
                admission.enter()
                entered += 1
            served = Routing.named(self._routing.task_model(model, "generate", version))
            # an on-demand model's load (and its wait for room) within the request timeout
            waits_until = admission.deadline_for(served.config, None)
            with self._outcomes.recorded(served, finished_only=True):
                async with self._residency.hold(served, waits_until):
                    seqs = await generator(served.servable).generate(prompt, sampling, n)
                    for _ in seqs:
                        self._residency.enter(served)  # (held until its stream ends)
        except BaseException:
            for _ in range(entered):
                admission.leave()
            raise
        route = current_trace().route
        ending = functools.partial(self._ended, served, route, prompt, sampling)
        return [
            Generation(seq, served.model, served.version, functools.partial(ending, seq))
            for seq in seqs
        ]

    def _ended(
        self,
        served: Version,
        route: str | None,
        prompt: Prompt,
        sampling: SamplingRequest,
        seq: Seq,
    ) -> None:
        """Releases a generation's slot; then its outcome counts (`Outcomes`)."""
        self._admission.leave(isinstance(seq.error, UnavailableError))
        self._residency.leave(served)
        self._outcomes.generation_ended(served, seq, route, prompt, sampling)
