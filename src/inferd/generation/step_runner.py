"""Where a generation step runs: on the event loop's thread when it is expected to take under
`inline_step_ms` and the runtime is free now (no handoff to a thread; the loop then gets a turn
after the scheduler's work), else on a runtime thread (inferd.runtime.pool). The expectation
comes from the steps' own run times, as moving averages."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol

from inferd.config.model import GenerationConfig
from inferd.generation.sequence import Sequence as Seq
from inferd.runtime.protocol import Array, Bound, Repeat


class RunStep(Protocol):
    """Runs a step (or a `Repeat` of it) on a runtime thread (inferd.runtime.pool)."""

    def __call__(
        self,
        feeds: Bound,
        output_names: Sequence[str],
        into: dict[str, str],
        repeat: Repeat | None = None,
    ) -> Awaitable[dict[str, Array]]: ...


class RunNow(Protocol):
    """Runs a step (or a `Repeat` of it) on the calling thread when the runtime is free now;
    None, having run nothing, when it is not."""

    def __call__(
        self,
        feeds: Bound,
        output_names: Sequence[str],
        into: dict[str, str],
        repeat: Repeat | None = None,
    ) -> dict[str, Array] | None: ...


class StepRunner:
    def __init__(self, run: RunStep, run_now: RunNow | None, config: GenerationConfig) -> None:
        self._run = run
        self._run_now = run_now
        self._config = config
        self.held_loop = False
        """Whether a step ran on the event loop's thread (the loop gets a turn); the
        scheduler clears it."""
        self.decode_s: float | None = None
        """The last decode steps' run time (a moving average; None before the first, which
        runs on a runtime thread): under `inline_step_ms`, a step runs on the event loop's
        thread (`run_now`)."""
        self._prefill_token_s: float | None = None
        """The last prefills' run time per token they computed (rows x their longest prompt;
        a moving average, None before the first): a prefill expected under `inline_step_ms`
        runs on the event loop's thread too."""

    async def run(
        self,
        feeds: Bound,
        names: Sequence[str],
        into: dict[str, str],
        expected_s: float | None,
        repeat: Repeat | None = None,
    ) -> dict[str, Array]:
        """A prefill, or a decode step (or a block of them, `repeat`): on the event loop's
        thread when it is expected to take (`expected_s`, a step's for a block) under
        `inline_step_ms` and the runtime is free, else on a runtime thread. The caller times
        it."""
        out = None
        quick = expected_s is not None and expected_s * 1000 < self._config.inline_step_ms
        if quick and self._run_now is not None:
            out = self._run_now(feeds, names, into, repeat=repeat)
        inline = out is not None
        if out is None:
            out = await self._run(feeds, names, into, repeat=repeat)
        self.held_loop = self.held_loop or inline
        return out

    def prefill_s(self, computed: int) -> float | None:
        """What a prefill computing `computed` tokens (rows x the longest prompt) is expected
        to take (None before the first)."""
        per_token = self._prefill_token_s
        return None if per_token is None else per_token * computed

    def learn_prefill(self, seconds: float, computed: int) -> None:
        self._prefill_token_s = _moving(self._prefill_token_s, seconds / computed)

    def learn_decode(self, seconds: float) -> None:
        """A decode step's time, into the moving average that `run` is given."""
        self.decode_s = _moving(self.decode_s, seconds)

    def block_length(self, rows: list[Seq]) -> int:
        """Steps in the next block: at most `block_steps`; none past a sequence's last token
        (so no row outgrows its window); and, when steps run on the loop's thread, only as
        many as fit in `inline_step_ms` (a request waiting for a row waits for the block)."""
        config = self._config
        steps = min(config.block_steps, *(s.params.max_new_tokens - len(s.generated) for s in rows))
        if self.decode_s is not None and self.decode_s * 1000 < config.inline_step_ms:
            steps = min(steps, int(config.inline_step_ms / 1000 / self.decode_s))
        return max(1, steps)


def _moving(average: float | None, value: float) -> float:
    """A run time's moving average (the value itself when there is none yet)."""
    return value if average is None else 0.8 * average + 0.2 * value
