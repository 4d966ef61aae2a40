"""`Engine.refusal_before_reading`: the answer a request gets from its target alone (a full
queue, the requests already arriving, a shutdown), on fake runtimes held busy on purpose."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

from inferd.config.model import RuntimeOptions
from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.errors import QueueFullError, UnavailableError
from inferd.repository.scan import scan_repository
from tests.unit.engine import asks
from tests.unit.engine.repo import FACTORIES, FakeRuntime, add_model, demo_like

X = {"x": np.ones((1, 4), np.float32)}
QUEUE = 2


def held_engine(root: Path, release: threading.Event) -> Engine:
    """The demo-like models with queues of `QUEUE` items and batches of one; every runtime
    call waits for `release`."""

    def load(path: Path, options: RuntimeOptions) -> FakeRuntime:
        runtime = FACTORIES[path.parent.parent.name]()
        compute = runtime._compute

        def held(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            release.wait(10)
            return compute(feeds)

        runtime._compute = held
        return runtime

    return Engine(ServerSettings(), scan_repository(root), load, root=root)


def small_queues(root: Path) -> Path:
    demo_like(root)
    for name in ("affine", "encoder", "sentiment"):
        path = root / name / "config.yaml"
        path.write_text(
            path.read_text().replace("max_batch_size: 8", "max_batch_size: 1")
            + f"dynamic_batching: {{max_queue_size: {QUEUE}}}\n"
        )
    return root


async def one_by_one(start: Callable[[], Awaitable[object]]) -> list[asyncio.Task[object]]:
    """One request running (held) and `QUEUE` queued behind it."""
    tasks = []
    for _ in range(1 + QUEUE):
        tasks.append(asyncio.create_task(start()))
        for _ in range(5):
            await asyncio.sleep(0.01)
    return tasks


async def test_a_full_queue_refuses_before_reading(tmp_path: Path) -> None:
    release = threading.Event()
    release.set()  # loading embeds the zero-shot labels: let it through
    engine = held_engine(small_queues(tmp_path), release)
    await engine.load_all()
    release.clear()
    running: list[asyncio.Task[object]] = []
    try:
        assert engine.refusal_before_reading("affine") is None
        assert engine.refusal_before_reading("nosuch") is None  # the app answers 404
        assert engine.refusal_before_reading(None, purpose="embed") is None
        # one running and a full queue behind it
        running += await one_by_one(lambda: asks.infer(engine, "affine", None, X))
        refused = engine.refusal_before_reading("affine")
        assert isinstance(refused, QueueFullError), refused
        assert "model 'affine'" in refused.message
        assert engine.refusal_before_reading("affine", version="1") is not None  # named
        # /embed has one model; /predict has two, and refuses only when both are full
        running += await one_by_one(lambda: asks.embed(engine, None, ["good"]))
        assert isinstance(engine.refusal_before_reading(None, purpose="embed"), QueueFullError)
        assert engine.refusal_before_reading(None, purpose="predict") is None  # sentiment
        assert engine.refusal_before_reading("mood") is not None  # the encoder's queue
    finally:
        release.set()
        results = await asyncio.gather(*running, return_exceptions=True)
    assert not [r for r in results if isinstance(r, BaseException)]
    assert engine.refusal_before_reading("affine") is None
    await engine.close()


async def test_requests_already_arriving_count_against_the_queue(tmp_path: Path) -> None:
    release = threading.Event()
    release.set()
    engine = held_engine(small_queues(tmp_path), release)
    await engine.load_all()
    assert engine.refusal_before_reading("affine", arriving=QUEUE - 1) is None
    refused = engine.refusal_before_reading("affine", arriving=QUEUE)
    assert isinstance(refused, QueueFullError)
    # /predict reaches sentiment and the encoder (through mood): room for both queues
    assert engine.refusal_before_reading(None, purpose="predict", arriving=QUEUE) is None
    assert engine.refusal_before_reading(None, purpose="predict", arriving=2 * QUEUE) is not None
    await engine.close()


async def test_a_shutdown_refuses_every_request_before_reading(tmp_path: Path) -> None:
    add_model(tmp_path, "affine", {})
    release = threading.Event()
    release.set()
    engine = held_engine(tmp_path, release)
    await engine.load_all()
    assert await engine.drain(1)
    assert isinstance(engine.refusal_before_reading("affine"), UnavailableError)
    assert isinstance(engine.refusal_before_reading(None, purpose="embed"), UnavailableError)
    await engine.close()
