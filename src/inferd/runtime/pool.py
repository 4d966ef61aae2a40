"""The sync-to-async bridge: N runtime instances of one version, each run on its own thread,
one batch at a time, each batch on the instance expected to finish it first
(inferd.runtime.dispatch).

ONNX Runtime releases the GIL while it computes, so the event loop keeps forming the next batch
while a batch runs here.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence

from inferd.errors import OutOfMemoryError
from inferd.runtime import priority
from inferd.runtime.dispatch import InstanceLoad, LeastCompletion
from inferd.runtime.fair_order import Turn
from inferd.runtime.protocol import Array, Bound, Head, Repeat, Runtime
from inferd.runtime.reduction import Reduction
from inferd.runtime.run_threads import RunThreads
from inferd.runtime.share import ModelShare


class InstancePool:
    """Runs feeds on the instance expected to finish them first; `concurrency` batches may
    run at once (one per instance).

    With a solo instance (the last one, `solo`: a session on every core), a serving batch that
    would run alone (no other serving batch running or given to an instance; background work
    runs only on cores nothing else wants) runs there; any other batch goes to the other
    instances by expected completion. Light traffic gets all the cores per request, heavy
    traffic the instances side by side."""

    def __init__(
        self,
        instances: Sequence[Runtime],
        thread_name: str = "inferd-run",
        placed: Sequence[tuple[str, str]] | None = None,
        solo: bool = False,
        cores: Sequence[int] | None = None,
    ) -> None:
        """`placed`: each instance's (name, kind), for its statistics; `cores`: the cores
        each one's run holds (its intra-op threads; 0: none, as a GPU instance's; not given:
        some), for the share of the machine between models (`share_cores`) and the priority
        of the threads that run them."""
        if len(instances) < (2 if solo else 1):
            raise ValueError("an instance pool needs at least one instance besides its solo one")
        self._instances = list(instances)
        self._solo = len(self._instances) - 1 if solo else None
        self._narrow = len(self._instances) - (1 if solo else 0)
        self._serving = 0
        """Serving (not background) batches given to an instance and not finished."""
        self._cores = list(cores) if cores is not None else [1] * len(self._instances)
        if len(self._cores) != len(self._instances):
            raise ValueError("one core count per instance")
        self._threads = RunThreads(len(self._instances), thread_name, any(self._cores))
        names = placed or [(f"instance-{i}", "auto") for i in range(len(self._instances))]
        if len(names) != len(self._instances):
            raise ValueError("one (name, kind) per instance")
        self._dispatch = LeastCompletion(names)
        self._turns: list[asyncio.Lock] | None = None
        self._solo_inline_s = 0.0
        self._quiet: Callable[[], bool] = lambda: False
        self._share: ModelShare | None = None

    def share_cores(self, share: ModelShare) -> None:
        """Every run from now on takes its model's turn on the machine's cores through
        `share` (inferd.runtime.share), holding its instance's cores; a run of an instance
        that holds none (a GPU instance's) passes without a turn."""
        self._share = share

    def inline_when_quiet(self, bound_s: float, quiet: Callable[[], bool]) -> None:
        """A batch for the solo instance runs on the calling thread (the event loop's) when
        it is expected to take under `bound_s` and `quiet()` says nothing else waits for the
        loop (the server holds no other request): at one request at a time the handoff to a
        runtime thread and back is all the loop would gain, and it costs 0.1-0.4 ms here."""
        self._solo_inline_s = bound_s
        self._quiet = quiet

    @property
    def concurrency(self) -> int:
        """Batches that may run at once: one per instance (the solo one takes a batch only
        when no other runs, so it adds none)."""
        return self._narrow

    @property
    def first(self) -> Runtime:
        return self._instances[0]

    @property
    def instances(self) -> list[Runtime]:
        return list(self._instances)

    @property
    def loads(self) -> list[InstanceLoad]:
        """Each instance's queued work, learned speed and totals."""
        return self._dispatch.loads

    def _instance_turns(self) -> list[asyncio.Lock]:
        # Made on first use so that they bind to the running loop, not the one at construction.
        if self._turns is None:
            self._turns = [asyncio.Lock() for _ in self._instances]
        return self._turns

    async def run(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
        repeat: Repeat | None = None,
        head: Head | None = None,
    ) -> dict[str, Array]:
        """The outputs of `feeds` run on an instance's thread (`head`: applied to them there,
        inferd.runtime.protocol.Head)."""
        elements = _elements(feeds, repeat)
        background = priority.in_background()
        index = self._choose(elements, background)
        if index == self._solo and self._solo_runs_here(index, elements):
            here = self._run_here(index, elements, feeds, output_names, into, repeat, head)
            if here is not None:
                return here
        self._dispatch.given(index, elements)
        if not background:
            self._serving += 1
        ran_s, ok = 0.0, None
        try:
            async with self._instance_turns()[index]:  # (FIFO: batches run in the order given)
                # then the model's turn on the cores (the instance's lock first: a turn is
                # never held waiting for an instance)
                turn = await self._enter(index, background)
                started = time.perf_counter()
                self._dispatch.started(index, elements, started)
                ok = False
                try:
                    run = asyncio.get_running_loop().run_in_executor(
                        self._threads.for_now(),
                        functools.partial(
                            _run, self._instances[index], feeds, output_names, into, repeat, head
                        ),
                    )
                    try:
                        result = await asyncio.shield(run)
                        ok = True
                        return result
                    finally:
                        if not run.done():  # cancelled: the instance is busy until its run ends
                            await asyncio.wait([run])
                finally:
                    ran_s = time.perf_counter() - started
                    self._leave(turn, ran_s)
        finally:
            self._dispatch.finished(index, elements, ran_s, ok)
            if not background:
                self._serving -= 1

    def run_now(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
        repeat: Repeat | None = None,
    ) -> dict[str, Array] | None:
        """Runs a serving batch on the calling thread (the event loop's) when the instance
        chosen for it is free; None, having run nothing, when it is not (or the work is
        background): the caller awaits `run`. For steps shorter than a thread handoff; the
        loop waits for the whole run."""
        if priority.in_background():
            return None
        elements = _elements(feeds, repeat)
        index = self._choose(elements, False)
        if self._instance_turns()[index].locked():
            return None  # (nothing else runs on the loop meanwhile: no need to take the turn)
        return self._run_here(index, elements, feeds, output_names, into, repeat)

    async def _enter(self, index: int, background: bool) -> Turn | None:
        """The model's turn on the cores for a run on instance `index` (None: no share, or
        an instance that holds no cores)."""
        if self._share is None or not self._cores[index]:
            return None
        return await self._share.enter(self._cores[index], background)

    def _leave(self, turn: Turn | None, seconds: float) -> None:
        if turn is not None and self._share is not None:
            self._share.leave(turn, seconds)

    def _solo_runs_here(self, index: int, elements: int) -> bool:
        """Whether a batch chosen for the solo instance runs on the loop's thread
        (`inline_when_quiet`)."""
        speed = self._dispatch.loads[index].seconds_per_element
        return (
            speed is not None
            and speed * elements < self._solo_inline_s
            and not self._instance_turns()[index].locked()
            and self._quiet()
        )

    def _run_here(
        self,
        index: int,
        elements: int,
        feeds: Bound,
        output_names: Sequence[str] | None,
        into: Mapping[str, str] | None,
        repeat: Repeat | None,
        head: Head | None = None,
    ) -> dict[str, Array] | None:
        """A serving batch on instance `index`, on the calling thread; None, having run
        nothing, when its model's turn on the cores would have to wait."""
        turn = None
        if self._share is not None and self._cores[index]:
            turn = self._share.enter_now(self._cores[index])
            if turn is None:
                return None
        self._dispatch.given(index, elements)
        self._serving += 1
        started = time.perf_counter()
        self._dispatch.started(index, elements, started)
        ok = False
        try:
            result = _run(self._instances[index], feeds, output_names, into, repeat, head)
            ok = True
            return result
        finally:
            ran_s = time.perf_counter() - started
            self._dispatch.finished(index, elements, ran_s, ok)
            self._serving -= 1
            self._leave(turn, ran_s)

    def _choose(self, elements: int, background: bool) -> int:
        solo = self._solo
        if (
            solo is not None
            and not background  # its runtime's own threads are not lowered
            and self._serving == 0  # background batches run only on cores left idle
            and not self._dispatch.loads[solo].queued_batches
        ):
            return solo  # it would run alone: on every core
        return self._dispatch.choose(elements, among=self._narrow)

    def run_sync(self, feeds: Bound, into: Mapping[str, str] | None = None) -> dict[str, Array]:
        """Runs on every instance in turn (warm-up), on the calling thread."""
        result: dict[str, Array] = {}
        for instance in self._instances:
            result = instance.run(feeds, None, into)
        return result

    def close(self) -> None:
        self._threads.shutdown()
        for instance in self._instances:
            instance.close()


def _elements(feeds: Bound, repeat: Repeat | None) -> int:
    """The work given to an instance, for its expected completion (`repeat`: every run)."""
    return sum(int(array.size) for array in feeds.values()) * (repeat.steps if repeat else 1)


def _run(
    instance: Runtime,
    feeds: Bound,
    output_names: Sequence[str] | None,
    into: Mapping[str, str] | None,
    repeat: Repeat | None,
    head: Head | None = None,
) -> dict[str, Array]:
    reduced = getattr(instance, "run_reduced", None) if isinstance(head, Reduction) else None
    if reduced is not None and repeat is None and not into:
        try:  # where the batch lies (an ONNX Runtime instance's device)
            return dict(reduced(feeds, head))
        except MemoryError as exc:
            raise OutOfMemoryError("the host ran out of memory reducing the batch") from exc
    if repeat is None:
        outputs = instance.run(feeds, output_names, into)
    else:
        outputs = instance.run_steps(feeds, output_names, into, repeat)
    if head is None:
        return outputs
    try:
        return head(feeds, outputs)
    except MemoryError as exc:  # the host's, reducing a large batch: halved like the device's
        raise OutOfMemoryError("the host ran out of memory reducing the batch's outputs") from exc


async def close_off_loop(pool: InstancePool) -> None:
    """Closes `pool` on a worker thread, the event loop free meanwhile, and keeps no reference
    to it once closed: an executor's work item outlives its call by a moment (its thread drops
    it after setting the result, and the awaiting coroutine may resume first), so what it holds
    is a box that the close empties; the runtimes are then freed by the next collection."""
    box = [pool]
    del pool
    await asyncio.get_running_loop().run_in_executor(None, _close_boxed, box)


def _close_boxed(box: list[InstancePool]) -> None:
    box.pop().close()
