"""Fair shares of a queue between clients: the fair order (start-time fair queuing over rows,
priority first), the work ahead of a new item by client, and a batcher that serves a polite
client before a flood and admits it while the flood is refused."""

from __future__ import annotations

import asyncio

import numpy as np

from inferd.batching import DynamicBatcher, build_layout
from inferd.batching.fairness import FairShare
from inferd.clients import Client, Priority, client_scope
from inferd.errors import QueueFullError
from inferd.runtime.protocol import TensorSpec
from tests.fakes import FakeRunner, batcher_settings

X = TensorSpec("x", "FP32", (-1, 2), ("batch", None))
Y = TensorSpec("y", "FP32", (-1, 2), ("batch", None))
FLOOD = Client("flood")
POLITE = Client("polite")


def test_one_client_is_served_in_arrival_order() -> None:
    fair = FairShare()
    ranks = [fair.queued(FLOOD, 1) for _ in range(5)]
    assert ranks == sorted(ranks) and not fair.mixed


def test_a_client_that_arrives_behind_a_flood_goes_first() -> None:
    fair = FairShare()
    flood = [fair.queued(FLOOD, 1) for _ in range(100)]
    polite = fair.queued(POLITE, 1)
    assert fair.mixed and polite < flood[1]  # after the flood's first item at most
    assert fair.rows_ahead(POLITE) == 1 + 2  # its own queued row and the flood's first two
    assert fair.rows_ahead(FLOOD) == 100 + 1  # the flood waits behind all its own


def test_a_new_client_waits_behind_many_light_clients_queued_before_it() -> None:
    fair = FairShare()
    for i in range(50):
        fair.queued(Client(f"light-{i}"), 1)
    assert fair.rows_ahead(POLITE) == 50  # each of theirs goes first: the bound still holds
    fair.queued(POLITE, 1)
    assert fair.rows_ahead(POLITE) == 51  # its next: after its first and all of theirs


def test_weights_split_the_rows_and_priority_comes_first() -> None:
    fair = FairShare()
    heavy = Client("heavy", weight=3.0)
    order = sorted(
        [(fair.queued(heavy, 1), "heavy") for _ in range(30)]
        + [(fair.queued(POLITE, 1), "polite") for _ in range(30)]
    )
    first = [name for _, name in order[:40]]
    assert first.count("heavy") == 30 and first.count("polite") == 10
    urgent = Client("urgent", priority=Priority.HIGH)
    assert fair.queued(urgent, 1) < order[0][0]  # ahead of every normal item
    assert fair.rows_ahead(urgent) == 1  # only its own


def test_a_client_leaves_the_books_when_its_rows_are_served() -> None:
    fair = FairShare()
    rank = fair.queued(FLOOD, 2)
    fair.queued(POLITE, 1)
    fair.served(rank)
    fair.left("flood", 2)
    fair.left("polite", 1)
    assert not fair.clients and fair.virtual == rank.start


def make(runner: FakeRunner, **kwargs: object) -> DynamicBatcher:
    layout = build_layout([X], [Y], {}, batched=True)
    batcher = DynamicBatcher(layout, batcher_settings(4, **kwargs), runner)
    batcher.start()
    return batcher


def x(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 2), value, dtype=np.float32)}


async def test_a_polite_client_is_served_before_a_flood_queued_ahead_of_it() -> None:
    runner = FakeRunner()
    batcher = make(runner)
    gate = runner.gate = asyncio.Event()
    with client_scope(FLOOD):
        flood = [asyncio.create_task(batcher.submit(x(1.0), 1)) for _ in range(40)]
    await runner.started.wait()  # the flood's first batch runs; 36 of its rows wait
    with client_scope(POLITE):
        polite = asyncio.create_task(batcher.submit(x(7.0), 1))
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(polite, *flood)
    second = runner.batches[1]["x"][:, 0].tolist()
    assert 14.0 / 2 in second, runner.batches[:3]  # in the batch right after the running one
    await batcher.close()


async def test_under_the_bound_a_flood_is_refused_and_a_polite_client_admitted() -> None:
    runner = FakeRunner()
    batcher = make(runner, max_queue_time_s=0.05)
    runner.delay_s = 0.005  # a batch of four: 5 ms; the bound in force: 50 ms
    with client_scope(FLOOD):
        await batcher.submit(x(1.0), 1)  # a lone run measured: the bound is in force
        await asyncio.gather(*(batcher.submit(x(1.0), 1) for _ in range(12)))  # a queue's
    runner.gate = asyncio.Event()
    runner.started.clear()
    with client_scope(FLOOD):
        flood = [asyncio.create_task(batcher.submit(x(1.0), 1)) for _ in range(200)]
    await runner.started.wait()
    await asyncio.sleep(0.01)
    # the flood is refused as it arrives, once its own queued work reaches the bound
    refused = [t.exception() for t in flood if t.done()]
    assert refused and all(isinstance(e, QueueFullError) for e in refused), refused[:3]
    assert "ahead of this request" in str(refused[0])
    assert batcher.queued_items >= 8  # (a standing queue, not a burst)
    with client_scope(POLITE):  # within its share: admitted
        assert batcher.admission.queue_time_refusal() is None
        polite = asyncio.create_task(batcher.submit(x(7.0), 1))
    runner.gate.set()
    assert (await polite)["y"].tolist() == [[14.0, 14.0]]
    await asyncio.gather(*flood, return_exceptions=True)
    await batcher.close()


async def test_while_a_flood_fills_the_queue_a_polite_batch_carries_none_of_its_rows() -> None:
    # on a CPU a batch's run grows with its rows: the polite client's batch is its own
    runner = FakeRunner(delay_s=0.002)
    batcher = make(runner)
    with client_scope(FLOOD):
        await batcher.submit(x(1.0), 1)  # a lone run and a full batch measured: slices apply
        await asyncio.gather(*(batcher.submit(x(1.0), 1) for _ in range(12)))
    gate = runner.gate = asyncio.Event()
    runner.started.clear()
    with client_scope(FLOOD):
        flood = [asyncio.create_task(batcher.submit(x(1.0), 1)) for _ in range(40)]
    await runner.started.wait()
    with client_scope(POLITE):
        polite = asyncio.create_task(batcher.submit(x(7.0), 1))
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(polite, *flood)
    ran = [b["x"][:, 0].tolist() for b in runner.batches]
    assert [7.0] in ran, ran  # alone in its batch
    await batcher.close()
