"""The continuous-batching scheduler, on a fake decoder (tests/fake_decoder.py: numpy, the fast
tier) and on a real exported GPT-2 in both KV cache layouts (concatenated and in place; slow):
a sequence's output never depends on its neighbours, requests join and leave a running batch,
cancelled sequences free their rows, the static baseline keeps its batch closed, the KV budget
and queue limits hold, and a failing observer strands nothing. The in-place layout runs with
its cache in host arrays and in the instance's own memory (`cache_placement: device`, here the
CPU's: the path a GPU instance takes, with the CPU's copies)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from inferd.config.model import GenerationConfig
from inferd.engine.kinds.decoder_parts import GenerationParts
from inferd.errors import InputTooLongError, InvalidInputError, QueueFullError, UnavailableError
from inferd.generation.batch import shared_prefill
from inferd.generation.chat import load_chat_template
from inferd.generation.params import SamplingParams
from inferd.generation.scheduler import Scheduler
from inferd.generation.sequence import Finished, twins
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.step_runner import RunNow
from inferd.observability.observer import Event, GenerationStep, Observer
from inferd.runtime.memory import HostMemory
from inferd.runtime.protocol import DeviceMemory, Repeat
from tests import fake_decoder
from tests.generator_model import Decoder, exported


def _fake() -> Decoder:
    parts = GenerationParts(
        fake_decoder.SHAPE, fake_decoder.tokenizer(), 0, 0, load_chat_template([], None, "")
    )
    fake = fake_decoder.FakeDecoder()
    return Decoder(fake, parts, fake.now)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Decoder]:
    """Each layout exported once for the module (a GPT-2 with torch)."""
    made: dict[str, Decoder] = {}

    def get(layout: str) -> Decoder:
        if layout not in made:
            made[layout] = exported(tmp_path_factory.mktemp(layout), layout)
        return made[layout]

    return get


@pytest.fixture(
    scope="module",
    params=[
        "fake",
        pytest.param("concat", marks=pytest.mark.slow),
        pytest.param("inplace", marks=pytest.mark.slow),
        pytest.param("inplace-device", marks=pytest.mark.slow),
    ],
)
def decoder(request: pytest.FixtureRequest, exports: Callable[[str], Decoder]) -> Decoder:
    if request.param == "fake":
        return _fake()
    if request.param == "inplace-device":
        decoder = exports("inplace")
        assert decoder.session is not None
        return replace(decoder, memory=decoder.session.memory)
    return exports(request.param)


Make = Callable[..., Scheduler]


@pytest.fixture
async def make(decoder: Decoder) -> AsyncIterator[Make]:
    made: list[Scheduler] = []

    def build(
        observer: Observer | None = None, run_now: RunNow | None = None, **overrides: Any
    ) -> Scheduler:
        parts = decoder.parts
        settings = {"max_running": 8, "max_kv_tokens": 4096, **overrides}
        config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, **settings)
        scheduler = Scheduler(
            decoder.run,
            parts.shape,
            parts.tokenizer,
            config,
            parts.eos_id,
            parts.pad_id,
            observer=observer,
            run_now=run_now or decoder.run_now,
            memory=decoder.memory,
        )
        scheduler.start()
        made.append(scheduler)
        return scheduler

    yield build
    for scheduler in made:
        await scheduler.close()


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.001)):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the condition did not come true in time")


def greedy(n: int) -> SamplingParams:
    return SamplingParams(n, temperature=0.0, ignore_eos=True)


async def run(scheduler: Scheduler, prompt: str, params: SamplingParams) -> Finished:
    return await scheduler.submit(scheduler.encode(prompt), params).result()


async def test_greedy_output_is_the_same_alone_and_in_a_busy_mixed_batch(make: Make) -> None:
    scheduler = make()
    prompt = "w5 w9 w12 w3"
    alone = await run(scheduler, prompt, greedy(40))
    others = [
        ("w1", SamplingParams(60, temperature=1.0, seed=i, ignore_eos=True))
        if i % 2
        else (
            "w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 w20 w21",
            SamplingParams(25, temperature=0.7, top_k=20, seed=i, ignore_eos=True),
        )
        for i in range(7)
    ]
    seqs = [scheduler.submit(scheduler.encode(p), params) for p, params in others[:4]]
    await asyncio.sleep(0.005)  # the batch is running: the prompt joins it mid-flight
    target = scheduler.submit(scheduler.encode(prompt), greedy(40))
    seqs += [scheduler.submit(scheduler.encode(p), params) for p, params in others[4:]]
    busy = await target.result()
    await asyncio.gather(*(s.result() for s in seqs))
    assert busy.text == alone.text and busy.completion_tokens == 40
    assert len(set(alone.text.split())) > 3  # a real sequence, not one token repeated


async def test_requests_join_and_leave_a_running_batch(make: Make) -> None:
    scheduler = make(prefill_chunk=2)
    long = scheduler.submit(scheduler.encode("w2"), greedy(200))
    await until(lambda: bool(long.generated))
    shorts = [scheduler.submit(scheduler.encode(f"w{i + 3}"), greedy(5)) for i in range(4)]
    done = await asyncio.gather(*(s.result() for s in shorts))
    assert all(d.reason == "length" for d in done)
    assert not long.done and len(long.generated) < 200  # they finished while it still ran
    assert scheduler.running == 1
    assert (await long.result()).completion_tokens == 200


async def test_a_cancelled_sequence_frees_its_rows_at_the_next_step(make: Make) -> None:
    scheduler = make()
    keep = scheduler.submit(scheduler.encode("w4 w4"), greedy(300))
    drop = scheduler.submit(scheduler.encode("w6 w6"), greedy(300))
    await until(lambda: len(drop.generated) >= 3)
    both = scheduler.kv_tokens
    drop.cancel()
    finished = await drop.result()
    assert finished.reason == "cancelled"
    await until(lambda: scheduler.running == 1)
    assert scheduler.kv_tokens <= both // 2 + 8  # one row is left (a few steps longer)
    await keep.result()
    assert scheduler.running == 0 and scheduler.kv_tokens == 0


async def test_static_batching_keeps_its_batch_closed(make: Make) -> None:
    scheduler = make(scheduling="static")
    first = scheduler.submit(scheduler.encode("w1"), greedy(60))
    await until(lambda: bool(first.generated))
    late = scheduler.submit(scheduler.encode("w2"), greedy(2))
    await late.result()
    assert first.done  # the late one only started after the whole batch ended


async def test_the_kv_budget_and_queue_limits(make: Make) -> None:
    scheduler = make(max_kv_tokens=300, max_waiting=2, max_running=1)
    with pytest.raises(InputTooLongError):
        scheduler.submit(list(range(1, 400)), greedy(5))
    seqs = [scheduler.submit(scheduler.encode("w3"), greedy(250)) for _ in range(2)]
    assert scheduler.waiting == 2
    with pytest.raises(QueueFullError):
        scheduler.submit(scheduler.encode("w9"), greedy(5))
    done = await asyncio.gather(*(s.result() for s in seqs))
    assert all(d.prompt_tokens + d.completion_tokens <= 300 for d in done)


async def test_a_failing_observer_strands_no_sequence(make: Make) -> None:
    class Broken(Observer):
        def observe(self, event: Event) -> None:  # every event: steps, tokens, finished
            raise RuntimeError("observer bug")

    scheduler = make(Broken())
    seqs = [scheduler.submit(scheduler.encode(f"w{i + 1}"), greedy(6)) for i in range(3)]
    done = await asyncio.wait_for(asyncio.gather(*(s.result() for s in seqs)), 10)
    assert [d.completion_tokens for d in done] == [6, 6, 6]
    later = await asyncio.wait_for(run(scheduler, "w9", greedy(3)), 10)  # the loop lives on
    assert later.completion_tokens == 3


async def test_a_request_read_during_a_step_on_the_loop_thread_joins_at_the_next_one(
    decoder: Decoder, make: Make
) -> None:
    """A request whose bytes the event loop reads while the scheduler holds it (a step or block
    on the loop's thread) becomes a new task: it is admitted before the next step, not after
    one more. The arrival is made as a socket's is: a callback queued during the step creates
    the handler's task, which tokenizes and submits."""
    assert decoder.run_now is not None
    loop = asyncio.get_running_loop()
    kinds: list[str] = []
    arrived_at: list[int] = []
    newcomer: list[Seq] = []
    tasks: list[asyncio.Task[None]] = []
    inline = 0

    class Steps(Observer):
        def observe(self, event: Event) -> None:
            if isinstance(event, GenerationStep):
                kinds.append(event.kind)

    async def handler() -> None:  # what a request's task does before it waits for its text
        newcomer.append(scheduler.submit(scheduler.encode("w3 w4"), greedy(4)))

    def read() -> None:  # the socket's callback: the request is read, its task made
        arrived_at.append(len(kinds))
        tasks.append(loop.create_task(handler()))

    def now(*args: Any, repeat: Repeat | None = None) -> dict[str, Any] | None:
        nonlocal inline
        out = decoder.run_now(*args, repeat=repeat)  # type: ignore[misc]
        inline += 1
        if inline == 3:
            loop.call_soon(read)
        return out

    scheduler = make(Steps(), inline_step_ms=1000.0, run_now=now)
    first = scheduler.submit(scheduler.encode("w5 w6"), greedy(60))
    await asyncio.wait_for(until(lambda: bool(newcomer)), 10)
    await asyncio.wait_for(newcomer[0].result(), 10)
    assert kinds[arrived_at[0]] == "prefill", kinds[arrived_at[0] - 2 : arrived_at[0] + 3]
    assert (await asyncio.wait_for(first.result(), 10)).completion_tokens == 60


async def test_quick_steps_run_on_the_loop_thread_and_slow_ones_do_not(
    decoder: Decoder, make: Make
) -> None:
    """After the first (measured) step or block, a decode step under `inline_step_ms` goes
    through `run_now`; with 0 none does, and the text is the same either way. (The bound here is far
    above any step, so a busy machine's slow steps do not change what is tested.)"""
    assert decoder.run_now is not None
    texts = []
    for inline_ms in (1000.0, 0.0):
        calls = 0

        def counted(
            *args: Any, repeat: Repeat | None = None, now: RunNow = decoder.run_now
        ) -> dict[str, Any] | None:
            nonlocal calls
            calls += repeat.steps if repeat else 1  # steps, a block's each counted
            return now(*args, repeat=repeat)

        scheduler = make(inline_step_ms=inline_ms, run_now=counted)
        texts.append((await run(scheduler, "w3 w4", greedy(30))).text)
        if inline_ms:
            # 29 decode steps: all but the first, measured, block (at most block_steps)
            assert calls >= 29 - GenerationConfig().block_steps, calls
        else:
            assert calls == 0
    assert texts[0] == texts[1]


async def test_a_quick_prefill_runs_on_the_loop_thread_after_the_first(
    decoder: Decoder, make: Make
) -> None:
    """The first prefill is measured on a runtime thread; one expected under `inline_step_ms`
    after it goes through `run_now` (with 0, none does), and the text is the same either way."""
    assert decoder.run_now is not None
    prompt = "w7 w8 w9 w10 w11"
    for inline_ms in (1000.0, 0.0):
        prefills = 0

        def counted(
            feeds: dict[str, Any],
            *args: Any,
            repeat: Repeat | None = None,
            now: RunNow = decoder.run_now,
        ) -> dict[str, Any] | None:
            nonlocal prefills
            prefills += feeds["input_ids"].shape[1] > 1  # (a decode step feeds one token a row)
            return now(feeds, *args, repeat=repeat)

        scheduler = make(inline_step_ms=inline_ms, run_now=counted)
        texts = [(await run(scheduler, prompt, greedy(3))).text for _ in range(3)]
        assert texts[0] == texts[1] == texts[2]
        assert prefills == (2 if inline_ms else 0)
        await scheduler.close()


@dataclass
class Recorded:
    """The calls a scheduler made to the runtime: their outputs asked, and their feeds."""

    names: list[tuple[str, ...]]
    feeds: list[dict[str, Any]]
    """Each call's feeds dict itself (held: the id of a freed one may be a later one's)."""

    def longest_block(self) -> int:
        """The most decode steps run on one feeds dict in a row (a block's steps share it)."""
        longest = run = 0
        for i, feeds in enumerate(self.feeds):
            run = run + 1 if i and feeds is self.feeds[i - 1] else 1
            longest = max(longest, run)
        return longest


async def generate(
    decoder: Decoder,
    cases: list[tuple[str, SamplingParams]],
    width: int | None = None,
    eos_id: int | None = None,
    **settings: Any,
) -> tuple[list[Seq], Recorded]:
    """The cases submitted at once to a scheduler on `decoder` (its ranked width replaced by
    `width`, its EOS by `eos_id` where given), each run to its end; and the runtime calls."""
    recorded = Recorded([], [])

    async def run_step(
        feeds: dict[str, Any],
        names: Sequence[str],
        into: dict[str, str],
        repeat: Repeat | None = None,
    ) -> dict[str, Any]:
        for _ in range(repeat.steps if repeat else 1):  # a block's steps, each recorded
            recorded.names.append(tuple(names))
            recorded.feeds.append(feeds)
        return await decoder.run(feeds, names, into, repeat)

    parts = decoder.parts
    shape = parts.shape if width is None else replace(parts.shape, top_width=width)
    config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, **settings)
    scheduler = Scheduler(
        run_step,
        shape,
        parts.tokenizer,
        config,
        parts.eos_id if eos_id is None else eos_id,
        parts.pad_id,
    )
    scheduler.start()
    try:
        seqs = [scheduler.submit(scheduler.encode(prompt), p) for prompt, p in cases]
        for seq in seqs:
            await seq.result()
        return seqs, recorded
    finally:
        await scheduler.close()


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["concat", "inplace"])
@pytest.mark.parametrize(
    "prompts", [["the quick brown"], ["the quick brown", "the quick brown fox jumps over"]]
)
async def test_every_draw_path_gives_the_same_text(
    exports: Callable[[str], Decoder], layout: str, prompts: list[str]
) -> None:
    """`inferd export` ranks the last position's candidates in the graph and draws there too.
    Seed for seed, the tokens are the same whichever draws: the graph, in blocks of steps back
    to back (in place: each step's token fed straight to the next) or a step at a time (the
    concatenated cache: always); Python from the ranked candidates (prefills too, the prompts of
    two lengths included); Python from the full logits."""
    decoder = exports(layout)
    shape = decoder.parts.shape
    assert (shape.top_width, shape.draws) == (64, True)
    cases = [
        (prompts[i % len(prompts)], SamplingParams(40, 0.9, k, p, seed=i, ignore_eos=True))
        for i, (k, p) in enumerate([(50, 1.0), (5, 1.0), (64, 0.8), (20, 0.95), (1, 1.0)])
    ]
    cases.append((prompts[0], SamplingParams(25, temperature=0.0, ignore_eos=True)))
    texts = {}
    for label, width, steps in [
        ("graph blocks", None, 8),
        ("graph steps", None, 1),
        ("python ranked", None, 0),
        ("python logits", 0, 8),
    ]:
        done, recorded = await generate(decoder, cases, width, inline_step_ms=0, block_steps=steps)
        texts[label] = [s.generated for s in done]
        asked = {n for names in recorded.names for n in names}
        # the first call, a prefill: its logits are each row's last token's (inferd's exports
        # compute no other), so prompts of any lengths draw from the ranked candidates
        assert ("top_ids" in recorded.names[0]) == (width is None), label
        # steps that return the drawn tokens, or (in place, in a block) nothing at all
        drawn_in_graph = any(not n or "next_ids" in n for n in recorded.names)
        assert drawn_in_graph == (steps > 0 and width is None), label
        blocks = layout == "inplace" and drawn_in_graph and steps == 8
        assert recorded.longest_block() == (8 if blocks else 1), label
        if not drawn_in_graph:  # Python draws: from the ranked candidates, or the logits
            assert ("top_ids" in asked) == (width is None), label
    assert all(tokens == texts["graph blocks"] for tokens in texts.values()), texts
    assert len({tuple(t) for t in texts["graph blocks"]}) == len(cases)  # six texts, not one


@pytest.mark.slow
async def test_a_sequence_that_ends_within_a_block_ends_where_it_would_alone(
    exports: Callable[[str], Decoder],
) -> None:
    """A block runs on past a sequence's end (its EOS, a stop sequence) to the block's last
    step; what it drew after the end is dropped: the text, the token count and the reason are
    those of a step at a time, and a sequence beside it goes on unchanged."""
    decoder = exports("inplace")
    free = SamplingParams(30, temperature=0.7, top_k=40, seed=3, ignore_eos=True)
    (alone,), _ = await generate(decoder, [("the quick brown", free)], block_steps=0)
    ids = alone.generated
    eos = next(t for i, t in enumerate(ids) if i >= 10 and ids.index(t) == i)  # first seen late
    text = decoder.parts.tokenizer.decode(ids)
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cases = [
        ("the quick brown", replace(free, ignore_eos=False)),
        ("the quick brown", replace(free, stop=(stop,))),
        ("a different prompt", replace(free, seed=4, max_new_tokens=40)),
    ]
    results = {}
    for steps in (8, 0):
        done, recorded = await generate(
            decoder, cases, eos_id=eos, inline_step_ms=0, block_steps=steps
        )
        assert all(s.finished is not None for s in done)
        results[steps] = [(s.generated, s.finished.reason, s.finished.text) for s in done]  # type: ignore[union-attr]
        if steps:
            assert recorded.longest_block() == 8
    assert results[8] == results[0]
    (by_eos, eos_reason, _), (by_stop, stop_reason, stop_text), (other, _, _) = results[8]
    assert eos_reason == "stop" and by_eos == ids[: ids.index(eos)]
    assert stop_reason == "stop" and by_stop == ids[: len(by_stop)] and stop not in stop_text
    assert len(other) == 40


@pytest.mark.slow
async def test_a_block_ends_early_for_a_newcomer_and_seeds_keep_their_text(
    exports: Callable[[str], Decoder],
) -> None:
    """A block on a runtime thread ends after the step during which a generation arrived
    (there is a free row): the newcomer joins then, not after the block; the numbers the
    running rows drew for the steps not run are given back, so a seeded text is the one it is
    alone, a step at a time."""
    decoder = exports("inplace")
    seeded = ("the quick brown", SamplingParams(40, 0.9, 50, 1.0, seed=7, ignore_eos=True))
    newcomer = ("a newcomer", SamplingParams(10, 0.8, 20, 1.0, seed=8, ignore_eos=True))
    (alone,), _ = await generate(decoder, [seeded], block_steps=0)
    (other,), _ = await generate(decoder, [newcomer], block_steps=0)

    loop = asyncio.get_running_loop()
    scheduler: Scheduler
    late: list[Seq] = []
    blocks: list[tuple[int, int]] = []  # (steps planned, steps run) of each block
    joined = threading.Event()

    def arrive() -> None:
        late.append(scheduler.submit(scheduler.encode(newcomer[0]), newcomer[1]))
        joined.set()

    async def run_step(
        feeds: dict[str, Any],
        names: Sequence[str],
        into: dict[str, str],
        repeat: Repeat | None = None,
    ) -> dict[str, Any]:
        if repeat is None:
            return await decoder.run(feeds, names, into)
        planned, ran = repeat.steps, 0

        def between(k: int) -> bool:
            nonlocal ran
            ran += 1
            if not late and len(blocks) == 1 and k == 2:  # the second block's third step
                loop.call_soon_threadsafe(arrive)
                assert joined.wait(10)
            return repeat.between(k)

        out = await decoder.run(feeds, names, into, Repeat(planned, between))
        blocks.append((planned, ran))
        return out

    parts = decoder.parts
    config = GenerationConfig(
        context_length=512, max_new_tokens_limit=1000, inline_step_ms=0, block_steps=8
    )
    scheduler = Scheduler(run_step, parts.shape, parts.tokenizer, config, None, parts.pad_id)
    scheduler.start()
    try:
        first = scheduler.submit(scheduler.encode(seeded[0]), seeded[1])
        done = await asyncio.wait_for(first.result(), 30)
        await asyncio.wait_for(late[0].result(), 30)
    finally:
        await scheduler.close()
    assert blocks[0] == (8, 8) and blocks[1] == (8, 3), blocks  # ended after the step
    assert done.text == alone.finished.text and first.generated == alone.generated  # type: ignore[union-attr]
    assert late[0].generated == other.generated


@pytest.mark.slow
async def test_a_cache_in_the_instances_memory_gives_the_same_tokens_and_stays_there(
    exports: Callable[[str], Decoder],
) -> None:
    """The device-resident path (the cache and the drawn tokens in the instance's own memory,
    bound by address) against host arrays, on the same real decoder: the same tokens, seed for
    seed, through prefills, single steps, blocks of steps drawn in the graph and compaction as
    sequences leave; and what crosses between the host and that memory (the probe: the
    session's host arrays and the memory's own reads and writes) is the steps' small inputs and
    tokens, far less than one copy of the cache, where host arrays send the whole cache
    through each run."""
    decoder = exports("inplace")
    session = decoder.session
    assert session is not None
    shape = decoder.parts.shape
    config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, max_running=8)
    cases = [
        (prompt, SamplingParams(n, temperature=t, top_k=k, seed=i, ignore_eos=True))
        for i, (prompt, n, t, k) in enumerate(
            [
                ("Return the number of items", 40, 0.0, 0),
                ("a", 12, 0.9, 40),
                ("Open the file and read", 33, 0.7, 20),
                ("the quick brown fox jumps over the lazy dog", 25, 1.0, 0),
                ("Raise ValueError when", 50, 0.8, 50),
            ]
        )
    ]

    async def generate(memory: DeviceMemory) -> tuple[list[list[int]], int, int]:
        before = session.host_bytes
        scheduler = Scheduler(
            decoder.run,
            shape,
            decoder.parts.tokenizer,
            config,
            decoder.parts.eos_id,
            decoder.parts.pad_id,
            run_now=decoder.run_now,
            memory=memory,
        )
        scheduler.start()
        try:
            seqs = [scheduler.submit(scheduler.encode(p), params) for p, params in cases]
            for seq in seqs:
                await asyncio.wait_for(seq.result(), 60)
        finally:
            await scheduler.close()
        crossed = session.host_bytes - before + memory.to_host_bytes + memory.to_device_bytes
        return [s.generated for s in seqs], crossed, sum(len(s.generated) for s in seqs)

    on_host, host_crossed, tokens = await generate(HostMemory())
    placed = session.memory
    assert placed.device == "cpu"
    on_device, device_crossed, _ = await generate(placed)
    assert on_device == on_host
    assert placed.to_host_bytes > 0 and placed.to_device_bytes > 0  # tokens out, tokens in
    rows = config.max_running
    cache_bytes = (
        len(shape.past_names) * rows * shape.heads * 512 * shape.head_dim * shape.dtype.itemsize
    )
    assert device_crossed < cache_bytes / 4, (device_crossed, cache_bytes)
    # host arrays: each step reads and writes at least the running rows' cache
    row_bytes = cache_bytes // rows
    assert host_crossed > tokens * row_bytes, (host_crossed, tokens, row_bytes)


async def test_twins_prefill_their_prompt_once_and_each_is_its_answer_alone(
    decoder: Decoder, make: Make
) -> None:
    """Three answers to one prompt (a request's `n`): one prefill row, the others a copy of
    its cache; each answer is the one its parameters give alone."""
    prompt = "w3 w7 w1 w9 w4"
    params = [SamplingParams(30, temperature=0.8, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    alone = [await run(make(), prompt, p) for p in params]
    rows: list[int] = []

    async def counting(
        feeds: dict[str, Any], names: Sequence[str], into: dict[str, str], repeat: Any = None
    ) -> dict[str, Any]:
        tokens = feeds["input_ids"]
        if tokens.shape[1] > 1:  # a prefill
            rows.append(int(tokens.shape[0]))
        return await decoder.run(feeds, names, into, repeat)

    parts = decoder.parts
    # one prompt a prefill: the twins join their first's all the same (no prefill of their own)
    config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, prefill_chunk=1)
    scheduler = Scheduler(
        counting,
        parts.shape,
        parts.tokenizer,
        config,
        parts.eos_id,
        parts.pad_id,
        memory=decoder.memory,
    )
    scheduler.start()
    try:
        twins = scheduler.submit_twins(scheduler.encode(prompt), params, [None] * 3)
        together = [await seq.result() for seq in twins]
    finally:
        await scheduler.close()
    assert rows == [1]
    assert [d.text for d in together] == [d.text for d in alone]


def test_a_twin_whose_first_is_not_in_the_prefill_computes_its_own_prompt() -> None:
    tokenizer = fake_decoder.tokenizer()
    params = [SamplingParams(5)] * 3
    first, second, third = twins([1, 2, 3], params, [None] * 3, tokenizer, 0, 512)
    other = twins([4, 5], params[:1], [None], tokenizer, 0, 512)[0]
    order, source = shared_prefill([first, other, second, third])
    assert order == [first, other, second, third] and source == [0, 1, 0, 0]
    order, source = shared_prefill([third, other, second])  # (the first joined before)
    assert order == [third, other, second] and source == [0, 1, 2]


async def test_a_constrained_draw_is_the_same_in_the_graph_in_blocks_and_in_python(
    decoder: Decoder,
) -> None:
    """A decoder exported by inferd takes each constrained row's mask as a bias on its
    ranking: the row then draws in the graph (in blocks of steps, or a step at a time, or from
    the ranked candidates in Python) as from the whole vocabulary's logits in Python, token
    for token; every answer matches its regex."""
    from inferd.generation import grammar
    from inferd.generation.constraint import Grammars

    parts = decoder.parts
    pattern = r"w[0-9]{1,2}( w[0-9]{1,2}){3,8}"
    request = grammar.regex(pattern, "regex")
    cases = [SamplingParams(40, temperature=0.9, top_k=20, seed=s) for s in range(4)]
    cases.append(SamplingParams(40, temperature=0.0))
    # the grammar's end ends the answer, past which nothing is drawn, EOS ignored or not
    cases.append(SamplingParams(40, temperature=0.9, top_k=20, seed=5, ignore_eos=True))
    cases.append(SamplingParams(40, temperature=0.9, top_k=20, seed=9, stop=("w7",)))

    async def answers(in_python: bool, block_steps: int) -> list[str]:
        """`in_python`: each draw from the whole vocabulary's logits, in Python (as a row
        that asks for log-probabilities draws, whatever the graph can do)."""
        config = GenerationConfig(
            context_length=512, max_new_tokens_limit=1000, block_steps=block_steps
        )

        async def run(
            feeds: dict[str, Any], names: Sequence[str], into: dict[str, str], repeat: Any = None
        ) -> dict[str, Any]:
            paths.append("block" if repeat else "ranked" if "top_ids" in names else "logits")
            return await decoder.run(feeds, names, into, repeat)

        scheduler = Scheduler(
            run,
            parts.shape,
            parts.tokenizer,
            config,
            parts.eos_id,
            parts.pad_id,
            memory=decoder.memory,
        )
        grammars = Grammars(parts.tokenizer, parts.eos_id)
        scheduler.start()
        try:
            ids = scheduler.encode("w1 w2")
            seqs = [
                scheduler.submit_twins(
                    ids,
                    [replace(p, logprobs=0) if in_python else p],
                    [await grammars.constraint(request)],
                )[0]
                for p in cases
            ]
            return [(await s.result()).text for s in seqs]
        finally:
            await scheduler.close()
            grammars.close()

    if decoder.parts.tokenizer.decoder is None:  # (the fake's word tokenizer)
        grammars = Grammars(parts.tokenizer, parts.eos_id)
        with pytest.raises(InvalidInputError, match="cannot hold answers to a form"):
            await grammars.constraint(request)
        grammars.close()
        return
    paths: list[str] = []
    python = await answers(in_python=True, block_steps=0)
    assert all(re.fullmatch(pattern, text) for text in python[:-1]), python
    assert "w7" not in python[-1]  # (the stop string ends it, wherever it falls)
    assert "ranked" not in paths and "block" not in paths
    paths.clear()
    assert await answers(in_python=False, block_steps=0) == python
    assert "ranked" in paths  # (the graph's candidates, its bias on them)
    paths.clear()
    assert await answers(in_python=False, block_steps=4) == python
    assert ("block" in paths) == parts.shape.inplace


async def test_more_answers_at_once_than_the_waiting_line_holds_are_a_4005(make: Make) -> None:
    from inferd.errors import TooManyItemsError

    scheduler = make(max_waiting=2)
    with pytest.raises(TooManyItemsError, match="holds 2"):
        scheduler.submit_twins(scheduler.encode("w1"), [greedy(3)] * 3, [None] * 3)
    (alone,) = scheduler.submit_twins(scheduler.encode("w1"), [greedy(3)], [None])
    assert (await alone.result()).completion_tokens == 3


class StalledPrefill:
    """A decoder whose first step (a prefill) never returns: a close arrives during it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        await asyncio.Event().wait()


async def test_a_close_during_a_prefill_answers_its_sequences() -> None:
    # the sequences of a prefill in progress are in neither the waiting line nor the batch:
    # a close (a drain out of time, an unload) must still end their streams, with 5030
    parts = _fake().parts
    stalled = StalledPrefill()
    config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, max_running=8)
    scheduler = Scheduler(stalled, parts.shape, parts.tokenizer, config, parts.eos_id, parts.pad_id)
    scheduler.start()
    seq = scheduler.submit(scheduler.encode("hello there"), greedy(8))
    await asyncio.wait_for(stalled.entered.wait(), 5)
    await scheduler.close()
    with pytest.raises(UnavailableError, match="the model stopped"):
        await asyncio.wait_for(seq.result(), 5)
