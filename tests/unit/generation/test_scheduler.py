"""The continuous-batching scheduler on a real ONNX decoder (random-weight GPT-2, in process),
in both KV cache layouts (concatenated and in place): a sequence's output never depends on its
neighbours, requests join and leave a running batch, cancelled sequences free their rows, and
the static baseline keeps its batch closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from inferd.config.model import GenerationConfig
from inferd.engine.loading import LoadedModel, load_instances
from inferd.engine.manager import onnx_runtime_loader
from inferd.errors import InputTooLongError, QueueFullError
from inferd.generation.params import SamplingParams
from inferd.generation.scheduler import Scheduler
from inferd.generation.sequence import Finished
from inferd.repository.scan import scan_model
from tests.generator_model import MODEL, build_generator_repo


@pytest.fixture(scope="module", params=["concat", "inplace"])
def repo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_generator_repo(tmp_path_factory.mktemp("gen"), kv_cache=request.param)


@pytest.fixture(scope="module")
def loaded(repo: Path) -> LoadedModel:
    entry = scan_model(repo / MODEL)
    assert entry.config is not None
    path = entry.versions[-1].path
    return load_instances(entry.config, lambda: onnx_runtime_loader(path, entry.config.runtime),
                          path.parent)  # fmt: skip


Make = Callable[..., Any]


@pytest.fixture
async def make(loaded: LoadedModel) -> AsyncIterator[Make]:
    made: list[Scheduler] = []

    def build(**overrides: Any) -> Scheduler:
        parts = loaded.generation
        assert parts is not None
        settings = {"max_running": 8, "max_kv_tokens": 4096, **overrides}
        config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, **settings)
        scheduler = Scheduler(loaded.pool.run, parts.shape, parts.tokenizer, config,
                              parts.eos_id, parts.pad_id)  # fmt: skip
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
    prompt = "Return a new list containing all items from the iterable"
    alone = await run(scheduler, prompt, greedy(40))
    others = [
        ("Open", SamplingParams(60, temperature=1.0, seed=i, ignore_eos=True)) if i % 2 else
        ("A much longer prompt about sockets, files and the state of the module " * 2,
         SamplingParams(25, temperature=0.7, top_k=20, seed=i, ignore_eos=True))
        for i in range(7)
    ]  # fmt: skip
    seqs = [scheduler.submit(scheduler.encode(p), params) for p, params in others[:4]]
    await asyncio.sleep(0.01)  # the batch is running: the prompt joins it mid-flight
    target = scheduler.submit(scheduler.encode(prompt), greedy(40))
    seqs += [scheduler.submit(scheduler.encode(p), params) for p, params in others[4:]]
    busy = await target.result()
    await asyncio.gather(*(s.result() for s in seqs))
    assert busy.text == alone.text and busy.completion_tokens == 40


async def test_requests_join_and_leave_a_running_batch(make: Make) -> None:
    scheduler = make(prefill_chunk=2)
    long = scheduler.submit(scheduler.encode("Long"), greedy(200))
    await until(lambda: bool(long.generated))
    shorts = [scheduler.submit(scheduler.encode(f"Short {i}"), greedy(5)) for i in range(4)]
    done = await asyncio.gather(*(s.result() for s in shorts))
    assert all(d.reason == "length" for d in done)
    assert not long.done and len(long.generated) < 200  # they finished while it still ran
    assert scheduler.running == 1
    assert (await long.result()).completion_tokens == 200


async def test_a_cancelled_sequence_frees_its_rows_at_the_next_step(make: Make) -> None:
    scheduler = make()
    keep = scheduler.submit(scheduler.encode("Keep going"), greedy(300))
    drop = scheduler.submit(scheduler.encode("Drop me"), greedy(300))
    await until(lambda: len(drop.generated) >= 3)
    both = scheduler.kv_tokens
    drop.cancel()
    finished = await drop.result()
    assert finished.reason == "cancelled"
    await until(lambda: scheduler.running == 1)
    assert scheduler.kv_tokens <= both // 2 + 4  # one row is left (a few steps longer)
    await keep.result()
    assert scheduler.running == 0 and scheduler.kv_tokens == 0


async def test_static_batching_keeps_its_batch_closed(make: Make) -> None:
    scheduler = make(scheduling="static")
    first = scheduler.submit(scheduler.encode("First"), greedy(60))
    await until(lambda: bool(first.generated))
    late = scheduler.submit(scheduler.encode("Late"), greedy(2))
    await late.result()
    assert first.done  # the late one only started after the whole batch ended


async def test_the_kv_budget_and_queue_limits(make: Make) -> None:
    scheduler = make(max_kv_tokens=300, max_waiting=2, max_running=1)
    with pytest.raises(InputTooLongError):
        scheduler.submit(list(range(1, 400)), greedy(5))
    seqs = [scheduler.submit(scheduler.encode("Budget"), greedy(250)) for _ in range(2)]
    assert scheduler.waiting == 2
    with pytest.raises(QueueFullError):
        scheduler.submit(scheduler.encode("One too many"), greedy(5))
    done = await asyncio.gather(*(s.result() for s in seqs))
    # max_new_tokens was cut to what the budget holds: prompt + new <= 300
    assert all(d.prompt_tokens + d.completion_tokens <= 300 for d in done)
