"""The continuous-batching scheduler, on a fake decoder (tests/fake_decoder.py: numpy, the fast
tier) and on a real exported GPT-2 in both KV cache layouts (concatenated and in place; slow):
a sequence's output never depends on its neighbours, requests join and leave a running batch,
cancelled sequences free their rows, the static baseline keeps its batch closed, the KV budget
and queue limits hold, and a failing observer strands nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from inferd.config.model import GenerationConfig
from inferd.engine.decoder_parts import GenerationParts
from inferd.engine.loading import load_instances
from inferd.errors import InputTooLongError, QueueFullError
from inferd.generation.chat import load_chat_template
from inferd.generation.params import SamplingParams
from inferd.generation.scheduler import RunNow, RunStep, Scheduler
from inferd.generation.sequence import Finished
from inferd.observability.observer import Observer
from inferd.repository.scan import scan_model
from inferd.runtime.onnx_session import OnnxSession
from tests import fake_decoder
from tests.generator_model import MODEL, build_generator_repo


@dataclass(frozen=True)
class Decoder:
    run: RunStep
    parts: GenerationParts
    run_now: RunNow | None = None


def _fake() -> Decoder:
    parts = GenerationParts(
        fake_decoder.SHAPE, fake_decoder.tokenizer(), 0, 0, load_chat_template([], None, "")
    )
    fake = fake_decoder.FakeDecoder()
    return Decoder(fake, parts, fake.now)


def _exported(root: Path, kv_cache: str) -> Decoder:
    build_generator_repo(root, kv_cache=kv_cache)
    entry = scan_model(root / MODEL)
    assert entry.config is not None
    path = entry.versions[-1].path
    config = entry.config
    loaded = load_instances(config, lambda options: OnnxSession(path, options), path.parent)
    assert loaded.generation is not None
    return Decoder(loaded.pool.run, loaded.generation, loaded.pool.run_now)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Decoder]:
    """Each layout exported once for the module (a GPT-2 with torch)."""
    made: dict[str, Decoder] = {}

    def get(layout: str) -> Decoder:
        if layout not in made:
            made[layout] = _exported(tmp_path_factory.mktemp(layout), layout)
        return made[layout]

    return get


@pytest.fixture(
    scope="module",
    params=[
        "fake",
        pytest.param("concat", marks=pytest.mark.slow),
        pytest.param("inplace", marks=pytest.mark.slow),
    ],
)
def decoder(request: pytest.FixtureRequest, exports: Callable[[str], Decoder]) -> Decoder:
    if request.param == "fake":
        return _fake()
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
        def on_generation_finished(self, *args: object) -> None:
            raise RuntimeError("observer bug")

        def on_generation_step(self, *args: object) -> None:
            raise RuntimeError("observer bug")

        def on_generation_tokens(
            self, model: str, first: Sequence[float], gaps: Sequence[float]
        ) -> None:
            raise RuntimeError("observer bug")

    scheduler = make(Broken())
    seqs = [scheduler.submit(scheduler.encode(f"w{i + 1}"), greedy(6)) for i in range(3)]
    done = await asyncio.wait_for(asyncio.gather(*(s.result() for s in seqs)), 10)
    assert [d.completion_tokens for d in done] == [6, 6, 6]
    later = await asyncio.wait_for(run(scheduler, "w9", greedy(3)), 10)  # the loop lives on
    assert later.completion_tokens == 3


async def test_quick_steps_run_on_the_loop_thread_and_slow_ones_do_not(
    decoder: Decoder, make: Make
) -> None:
    """After the first (measured) step, a decode step under `inline_step_ms` goes through
    `run_now`; with 0 none does, and the text is the same either way. (The bound here is far
    above any step, so a busy machine's slow steps do not change what is tested.)"""
    assert decoder.run_now is not None
    texts = []
    for inline_ms in (1000.0, 0.0):
        calls = 0

        def counted(*args: Any, now: RunNow = decoder.run_now) -> dict[str, Any] | None:
            nonlocal calls
            calls += 1
            return now(*args)

        scheduler = make(inline_step_ms=inline_ms, run_now=counted)
        texts.append((await run(scheduler, "w3 w4", greedy(30))).text)
        if inline_ms:
            assert calls >= 25, calls  # all but the prefill and the first, measured, step
        else:
            assert calls == 0
    assert texts[0] == texts[1]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["concat", "inplace"])
@pytest.mark.parametrize(
    "prompts", [["the quick brown"], ["the quick brown", "the quick brown fox jumps over"]]
)
async def test_ranked_candidates_give_the_text_the_logits_give(
    exports: Callable[[str], Decoder], layout: str, prompts: list[str]
) -> None:
    """`inferd export` ranks the last position's candidates in the graph; sampling from them
    gives, seed for seed, the text that sampling from the full logits gives: in decode steps,
    and in prefills whose prompts all end at the last position (left-padded ones; right-padded
    ones of one length); prompts of two lengths make an in-place prefill take the logits."""
    decoder = exports(layout)
    shape = decoder.parts.shape
    assert shape.top_width == 64
    cases = [
        SamplingParams(40, temperature=0.9, top_k=k, top_p=p, seed=i, ignore_eos=True)
        for i, (k, p) in enumerate([(50, 1.0), (5, 1.0), (64, 0.8), (20, 0.95), (1, 1.0)])
    ]
    texts = {}
    for width in (shape.top_width, 0):
        asked: list[str] = []

        async def recorded(
            feeds: dict[str, Any],
            names: Sequence[str],
            into: dict[str, str],
            asked: list[str] = asked,
        ) -> dict[str, Any]:
            asked.extend(names)
            return await decoder.run(feeds, names, into)

        parts = decoder.parts
        scheduler = Scheduler(
            recorded,
            replace(shape, top_width=width),
            parts.tokenizer,
            GenerationConfig(context_length=512, max_new_tokens_limit=1000, inline_step_ms=0),
            parts.eos_id,
            parts.pad_id,
        )
        scheduler.start()
        try:
            seqs = [
                scheduler.submit(scheduler.encode(prompts[i % len(prompts)]), p)
                for i, p in enumerate(cases)
            ]
            texts[width] = [(await s.result()).text for s in seqs]
        finally:
            await scheduler.close()
        assert ("top_ids" in asked) == (width > 0)  # each path was the one taken
    assert texts[shape.top_width] == texts[0]
    assert len(set(texts[0])) == len(cases)  # five different draws, not one text
