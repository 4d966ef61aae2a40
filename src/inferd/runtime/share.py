"""The gate every run of every model passes on one machine: the cores shared between models by
weight (inferd.runtime.fair_order holds the order; this module does the waiting).

Without it two busy models each run as if alone: their intra-op threads oversubscribe the
cores and the one with more runs ready (a generator stepping back to back) takes most of them
(the demo's encoder beside its generator on 2 cores: 0.19 of its answers alone, p99 266 ms,
and a cold model's first answer 133 ms; through the gate 0.26, 177 ms and 52 ms, the
generator keeping its tokens, 0.59 of alone: benchmarks/generate_bench.py share). Through
it, runs of different models take the cores in turn, each model its weight's share of
core-seconds while both wait, and a model alone runs as before. What it does not share: the
event loop's own work (HTTP, tokenizing, the generator's sampling). A GPU instance's run
passes without a turn (it holds no core); sharing a GPU between models is left to its
streams.

One per engine (per process); a pool (inferd.runtime.pool) holds its model's `ModelShare`.
Everything here runs on the event loop's thread: a run on a runtime thread is timed and
ended by the coroutine that awaited it. A turn is ended on every path (its run's error, its
caller's cancellation while it waited or ran).
"""

from __future__ import annotations

import asyncio
import time

from inferd.runtime.fair_order import FairOrder, Member, Turn


class RuntimeShare:
    """The process's cores, shared between models' runs in a weighted fair order."""

    def __init__(self, cores: int) -> None:
        self._order = FairOrder(cores)
        self._wakes: dict[Turn, asyncio.Future[None]] = {}
        self._recheck: asyncio.TimerHandle | None = None

    @property
    def cores(self) -> int:
        return self._order.capacity

    def model(self, model: str, weight: float = 1.0) -> ModelShare:
        """The share of `model` (every version of it shares one); `weight` becomes its
        weight."""
        return ModelShare(self, self._order.member(model, weight))

    def given_s(self) -> dict[str, float]:
        """Core-seconds each model's runs took through the gate."""
        return {m.model: m.given_s for m in self._order.members}

    async def _enter(self, turn: Turn) -> None:
        wake = asyncio.get_running_loop().create_future()
        self._wakes[turn] = wake  # (before asking: the order's timer sees it waiting)
        self._wake(self._order.ask(turn, time.monotonic()))
        if turn.started:
            return
        try:
            await wake
        except BaseException:  # cancelled while it waited (or as it started)
            self._wakes.pop(turn, None)
            if turn.started:
                self._leave(turn, 0.0)
            else:
                self._wake(self._order.withdraw(turn, time.monotonic()))
            raise

    def _enter_now(self, turn: Turn) -> bool:
        now = time.monotonic()
        if not self._order.may_start(turn, now):
            return False
        self._wake(self._order.ask(turn, now))
        return turn.started

    def _leave(self, turn: Turn, seconds: float) -> None:
        self._wake(self._order.end(turn, seconds, time.monotonic()))

    def _wake(self, started: list[Turn]) -> None:
        """Resumes the callers of the turns just started; and, when the order will change
        without a run ending (an idle owner's slice passing on), pumps it then."""
        for turn in started:
            wake = self._wakes.pop(turn, None)
            if wake is not None and not wake.done():
                wake.set_result(None)
        if not self._wakes and self._recheck is None:
            return  # nothing waits, nothing due (a model alone)
        now = time.monotonic()
        due = self._order.recheck_at(now)
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        if due is not None:
            self._recheck = asyncio.get_running_loop().call_at(
                asyncio.get_running_loop().time() + max(due - now, 0.0), self._pump
            )

    def _pump(self) -> None:
        self._recheck = None
        self._wake(self._order.pump(time.monotonic()))


class ModelShare:
    """One model's side of the gate: its runs ask for a turn on `cores` of the machine, run,
    and leave with their run time."""

    def __init__(self, share: RuntimeShare, member: Member) -> None:
        self._share = share
        self._member = member

    @property
    def model(self) -> str:
        return self._member.model

    @property
    def weight(self) -> float:
        return self._member.weight

    async def enter(self, cores: int, background: bool = False) -> Turn:
        """Waits for this model's turn for a run on `cores`; the caller `leave`s it after
        the run, whatever the run's outcome. Cancelled while it waits, it holds nothing."""
        turn = self._share._order.turn(self._member, cores, background)
        await self._share._enter(turn)
        return turn

    def enter_now(self, cores: int) -> Turn | None:
        """A serving run's turn when it would start at once (the caller runs it on its own
        thread and `leave`s it); None, holding nothing, when it would wait."""
        turn = self._share._order.turn(self._member, cores)
        return turn if self._share._enter_now(turn) else None

    def leave(self, turn: Turn, seconds: float) -> None:
        """The run of `turn` ended after `seconds` (failed, cancelled or not): its cores go
        to the next turns."""
        self._share._leave(turn, seconds)
