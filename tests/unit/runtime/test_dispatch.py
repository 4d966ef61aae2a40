"""Dispatch across runtime instances of unequal speed: each batch goes to the instance that
would finish it first (inferd.runtime.dispatch), through the real pool and its threads. The
runtimes are real objects that sleep for their compute time (a CPU instance of known speed:
sleeping releases the GIL as ONNX Runtime does while it computes)."""

from __future__ import annotations

import asyncio
import heapq
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from inferd.runtime import priority
from inferd.runtime.dispatch import LeastCompletion
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, TensorSpec


class SleepingRuntime:
    """Takes `seconds_per_row` for each row of its input; fails when told to."""

    def __init__(self, seconds_per_row: float, fail: bool = False) -> None:
        self.seconds_per_row = seconds_per_row
        self.fail = fail
        self.batches = 0
        self.threads: list[int] = []
        """The thread each run ran on."""

    inputs = (TensorSpec("x", "FP32", (-1, 4), ("batch", None)),)
    outputs = (TensorSpec("y", "FP32", (-1, 4), ("batch", None)),)
    providers = ("CPUExecutionProvider",)

    def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        x = feeds["x"]
        self.threads.append(threading.get_ident())
        time.sleep(self.seconds_per_row * x.shape[0])
        self.batches += 1
        if self.fail:
            raise RuntimeError("instance failed")
        return {"y": x * 2}

    def close(self) -> None:
        pass


def _feeds(rows: int = 1) -> dict[str, Array]:
    return {"x": np.ones((rows, 4), dtype=np.float32)}


async def _clients(pool: InstancePool, clients: int, requests: int) -> None:
    """`clients` closed-loop clients of `requests` requests each."""

    async def client() -> None:
        for _ in range(requests):
            out = await pool.run(_feeds())
            assert out["y"].tolist() == [[2.0] * 4]

    await asyncio.gather(*(client() for _ in range(clients)))


def test_a_slow_instance_gets_batches_in_proportion_to_its_speed() -> None:
    """Four closed-loop clients of one row each over a fast instance (10 ms a row) and one 3x
    slower, on a simulated clock: each instance runs its batches one at a time, in order, and
    each client sends its next request when its answer comes (events in time order)."""
    speeds = (0.010, 0.030)
    dispatch = LeastCompletion([("fast", "cpu"), ("slow", "cpu")])
    free_at = [0.0, 0.0]  # when each instance ends the work it was given
    answers: list[tuple[float, int, int]] = []  # (when, client, instance)
    ran = [0, 0]

    def send(now: float, client: int) -> None:
        index = dispatch.choose(1, now=now)
        dispatch.given(index, 1)
        begins = max(now, free_at[index])
        free_at[index] = begins + speeds[index]
        heapq.heappush(answers, (free_at[index], client, index))

    for client in range(4):
        send(0.0, client)
    while answers[0][0] < 2.0:
        now, client, index = heapq.heappop(answers)
        dispatch.started(index, 1, now=now - speeds[index])
        dispatch.finished(index, 1, speeds[index])
        ran[index] += 1
        send(now, client)
    fast, slow = ran
    share = slow / (fast + slow)
    # 3x slower: at full use it finishes a quarter of the work; round-robin would give it half
    assert slow < fast and 0.20 <= share <= 0.30, (fast, slow)
    fast_speed, slow_speed = (load.seconds_per_element for load in dispatch.loads)
    assert fast_speed == pytest.approx(0.010) and slow_speed == pytest.approx(0.030)


def test_the_pool_accounts_for_every_batch_its_threads_ran() -> None:
    """The real pool and its threads: each instance's counts are the batches it ran, nothing
    stays queued, and the instances' speeds are learned (not their values: the runtimes'
    compute is a sleep, whose length a loaded machine stretches)."""
    fast, slow = SleepingRuntime(0.002), SleepingRuntime(0.006)
    pool = InstancePool([fast, slow], placed=[("cpu-0", "cpu"), ("cpu-1", "cpu")])
    try:
        asyncio.run(_clients(pool, clients=4, requests=40))
    finally:
        pool.close()
    loads = {load.name: load for load in pool.loads}
    assert fast.batches + slow.batches == 160 and fast.batches > 0
    assert loads["cpu-0"].batches == fast.batches and loads["cpu-1"].batches == slow.batches
    assert all(load.queued_batches == 0 and load.queued_elements == 0 for load in pool.loads)
    assert loads["cpu-0"].seconds_per_element is not None


def test_a_lone_batch_goes_to_the_fastest_instance() -> None:
    slow, fast = SleepingRuntime(0.030), SleepingRuntime(0.005)
    pool = InstancePool([slow, fast], placed=[("cpu-0", "cpu"), ("gpu0-0", "gpu")])

    async def measure_then_one_at_a_time() -> None:
        await asyncio.gather(pool.run(_feeds()), pool.run(_feeds()))  # each gets measured
        before = slow.batches
        for _ in range(10):
            await pool.run(_feeds())
        assert slow.batches == before  # never the slow one while the fast one is free

    try:
        asyncio.run(measure_then_one_at_a_time())
    finally:
        pool.close()
    assert fast.batches >= 10


def test_a_cancelled_batch_keeps_the_accounting_right() -> None:
    runtime = SleepingRuntime(0.05)
    pool = InstancePool([runtime])

    async def cancel_one() -> None:
        task = asyncio.create_task(pool.run(_feeds()))
        waiting = asyncio.create_task(pool.run(_feeds()))  # queued behind the first
        await asyncio.sleep(0.01)
        task.cancel()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # the instance stays busy until its run ends: the cancelled run finished first
        assert pool.loads[0].queued_batches == 0
        assert (await pool.run(_feeds()))["y"].shape == (1, 4)

    try:
        asyncio.run(cancel_one())
    finally:
        pool.close()
    load = pool.loads[0]
    assert load.queued_batches == 0 and load.queued_elements == 0
    assert runtime.batches == 2  # the waiting one never ran


def test_a_failing_instance_counts_failures_and_does_not_learn_a_speed() -> None:
    pool = InstancePool([SleepingRuntime(0.001, fail=True)], placed=[("gpu0-0", "gpu")])

    async def run() -> None:
        with pytest.raises(RuntimeError):
            await pool.run(_feeds())

    try:
        asyncio.run(run())
    finally:
        pool.close()
    load = pool.loads[0]
    assert load.failures == 1 and load.batches == 0 and load.seconds_per_element is None
    assert load.as_dict()["kind"] == "gpu"


def test_instances_of_one_device_share_their_speed_so_a_slow_first_run_starves_neither() -> None:
    """Two instances of one GPU: the first run of one was slow (its warm-up, or a wait behind
    its twin on the device). Learned apart, it would count as 10x slower and never be chosen
    while its twin ran, so every batch would queue behind the twin with the device idle
    between them; learned together, a busy instance's next batch goes to the free one."""
    dispatch = LeastCompletion([("gpu0-0", "gpu"), ("gpu0-1", "gpu"), ("cpu-0", "cpu")])
    dispatch.given(0, 10)
    dispatch.started(0, 10, now=0.0)
    dispatch.finished(0, 10, 0.100)  # 10 ms an element: a slow first run
    for _ in range(20):
        dispatch.given(1, 10)
        dispatch.started(1, 10, now=0.0)
        dispatch.finished(1, 10, 0.010)  # 1 ms an element, its usual speed
    gpu0, gpu1, cpu = dispatch.loads
    assert gpu0.seconds_per_element == gpu1.seconds_per_element == pytest.approx(0.001, rel=0.15)
    assert cpu.seconds_per_element is None  # another device: its own
    for busy, free in ((1, 0), (0, 1)):
        dispatch.given(busy, 10)
        dispatch.started(busy, 10, now=1.0)
        assert dispatch.choose(10, now=1.001, among=2) == free
        dispatch.finished(busy, 10, 0.010)


def test_expected_completion_counts_backlog_and_speed() -> None:
    dispatch = LeastCompletion([("a", "cpu"), ("b", "cpu")])
    # a: 1 ms per element, b: 3 ms per element
    dispatch.given(0, 10)
    dispatch.started(0, 10, now=0.0)
    dispatch.finished(0, 10, 0.010)
    dispatch.given(1, 10)
    dispatch.started(1, 10, now=0.0)
    dispatch.finished(1, 10, 0.030)
    assert dispatch.choose(10, now=1.0) == 0  # both free: the fast one
    dispatch.given(0, 40)  # a has 40 ms of work queued
    dispatch.started(0, 40, now=1.0)
    assert dispatch.choose(10, now=1.0) == 1  # b finishes 10 elements in 30 ms < 40 + 10
    assert dispatch.choose(10, now=1.025) == 0  # a is 25 ms in: 15 + 10 < 30
    # an unmeasured instance counts as fast as the fastest measured one
    fresh = LeastCompletion([("a", "cpu"), ("new", "gpu")])
    fresh.given(0, 1)
    fresh.started(0, 1, now=0.0)
    fresh.finished(0, 1, 0.001)
    fresh.given(0, 5)
    assert fresh.choose(1, now=0.0) == 1


def test_a_lone_batch_runs_on_the_solo_instance_and_a_crowd_on_the_others() -> None:
    narrow = [SleepingRuntime(0.01), SleepingRuntime(0.01)]
    solo = SleepingRuntime(0.005)  # all the cores: faster alone
    pool = InstancePool(
        [*narrow, solo],
        placed=[("instance-0", "auto"), ("instance-1", "auto"), ("solo", "cpu")],
        solo=True,
    )
    try:
        assert pool.concurrency == 2  # the solo instance adds no concurrency

        async def one_at_a_time() -> None:
            for _ in range(5):
                await pool.run(_feeds())

        asyncio.run(one_at_a_time())
        assert (solo.batches, narrow[0].batches, narrow[1].batches) == (5, 0, 0)

        async def together() -> None:  # two at once: one alone first, then one beside it
            await asyncio.gather(pool.run(_feeds()), pool.run(_feeds()))

        asyncio.run(together())
        assert solo.batches == 6 and narrow[0].batches + narrow[1].batches == 1
        loads = {load.name: load.batches for load in pool.loads}
        assert loads == {
            "instance-0": narrow[0].batches,
            "instance-1": narrow[1].batches,
            "solo": 6,
        }
    finally:
        pool.close()


def test_a_lone_batch_runs_on_the_loops_thread_when_short_and_the_server_quiet() -> None:
    narrow = SleepingRuntime(0.01)
    solo = SleepingRuntime(0.002)
    pool = InstancePool([narrow, solo], placed=[("instance-0", "auto"), ("solo", "cpu")], solo=True)
    held = [1]  # the requests the server holds
    pool.inline_when_quiet(0.05, lambda: held[0] <= 1)

    async def runs() -> list[bool]:
        here = []
        loop_thread = threading.get_ident()
        for rows, requests in ((1, 1), (1, 1), (40, 1), (1, 2), (1, 1)):
            held[0] = requests
            out = await pool.run(_feeds(rows))
            assert out["y"].shape == (rows, 4)
            here.append(solo.threads[-1] == loop_thread)
        return here

    try:
        # its speed unknown: a runtime thread; then 2 ms expected: here; 80 ms: a runtime
        # thread; another request held: a runtime thread
        assert asyncio.run(runs()) == [False, True, False, False, True]
    finally:
        pool.close()
    assert narrow.batches == 0 and solo.batches == 5
    assert pool.loads[1].batches == 5 and pool.loads[1].queued_batches == 0


def test_the_solo_instance_is_placed_for_cpu_instances_only() -> None:
    from inferd.config.model import ModelConfig
    from inferd.runtime.placement import solo_placement

    wide = solo_placement(
        ModelConfig(instance_count=3, runtime={"intra_op_threads": 1}, solo_threads="auto"),
        cores=8,
    )
    assert wide is not None and wide.options.intra_op_threads == 8 and wide.kind == "cpu"
    # it runs only when nothing else does: its threads spin between runs, unless the model's
    # runtime says otherwise in so many words
    assert wide.options.allow_spinning
    # and keep spinning after a run: a lone request's next run finds them awake
    assert not wide.options.stop_spinning_after_run
    quiet = solo_placement(
        ModelConfig(runtime={"intra_op_threads": 1, "allow_spinning": False}, solo_threads=2),
        cores=2,
    )
    assert quiet is not None and not quiet.options.allow_spinning
    assert solo_placement(ModelConfig(solo_threads=0)) is None
    # no wider than its instances: it would add nothing
    assert (
        solo_placement(ModelConfig(runtime={"intra_op_threads": 4}, solo_threads=4), cores=4)
        is None
    )
    with pytest.raises(ValueError, match="CPU instances only"):
        solo_placement(
            ModelConfig(instance_groups=[{"kind": "gpu", "count": 1}], solo_threads=2), cores=4
        )
    with pytest.raises(ValueError, match="solo_threads"):
        ModelConfig(solo_threads=-1)


def test_run_now_runs_on_the_calling_thread_only_when_the_instance_is_free() -> None:
    runtime = SleepingRuntime(0.05)
    pool = InstancePool([runtime])

    async def steps() -> None:
        out = pool.run_now(_feeds(2))
        assert out is not None and out["y"].shape == (2, 4)
        busy = asyncio.create_task(pool.run(_feeds()))
        await asyncio.sleep(0.01)  # the instance is running `busy` on its thread
        assert pool.run_now(_feeds()) is None  # nothing ran: the caller awaits run()
        await busy
        assert pool.loads[0].queued_batches == 0
        priority.background()  # background work never takes the loop's thread
        assert pool.run_now(_feeds()) is None

    try:
        asyncio.run(steps())
    finally:
        pool.close()
    assert runtime.batches == 2
    load = pool.loads[0]
    assert load.queued_batches == 0 and load.batches == 2


def test_a_head_reduces_the_outputs_on_the_thread_that_ran_them() -> None:
    """A task's head (inferd.runtime.protocol.Head) gets the batch's feeds and outputs on the
    runtime's thread, not the event loop's, and its result is what the caller gets."""
    runtime = SleepingRuntime(0.001)
    pool = InstancePool([runtime])
    seen: list[int] = []

    def head(feeds: Mapping[str, Array], outputs: dict[str, Array]) -> dict[str, Array]:
        seen.append(threading.get_ident())
        return {"sum": outputs["y"].sum(axis=1) + feeds["x"].shape[0]}

    async def run() -> dict[str, Array]:
        return await pool.run(_feeds(2), head=head)

    try:
        result = asyncio.run(run())
    finally:
        pool.close()
    assert seen == runtime.threads and seen[0] != threading.get_ident()
    assert set(result) == {"sum"} and result["sum"].tolist() == [10.0, 10.0]


def test_a_head_out_of_host_memory_is_out_of_memory() -> None:
    """A head that runs out of host memory reducing a large batch fails as out of memory
    (5070: the batcher halves the batch), not as an internal error."""
    from inferd.errors import OutOfMemoryError

    pool = InstancePool([SleepingRuntime(0.001)])

    def head(feeds: Mapping[str, Array], outputs: dict[str, Array]) -> dict[str, Array]:
        raise MemoryError("Unable to allocate 3.00 GiB for an array")

    try:
        with pytest.raises(OutOfMemoryError, match="host ran out of memory"):
            asyncio.run(pool.run(_feeds(2), head=head))
    finally:
        pool.close()
