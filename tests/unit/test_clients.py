"""The current client: anonymous unless a protocol set one, set for a block and the tasks it
starts, and back to what it was after."""

from __future__ import annotations

import asyncio

from inferd.clients import (
    ANONYMOUS,
    Client,
    Priority,
    address_client,
    client_scope,
    current_client,
    reset_client,
    set_client,
)


def test_without_a_client_set_the_request_is_anonymous() -> None:
    assert current_client() is ANONYMOUS
    assert ANONYMOUS.name == "anonymous" and not ANONYMOUS.keyed
    assert ANONYMOUS.weight == 1.0 and ANONYMOUS.priority is Priority.NORMAL
    assert ANONYMOUS.loads_per_minute is None and ANONYMOUS.load_burst is None


def test_a_scope_sets_the_client_and_restores_the_one_before() -> None:
    alice = Client("alice", weight=2.0, priority=Priority.HIGH, keyed=True)
    with client_scope(alice):
        assert current_client() is alice
        with client_scope(address_client("10.0.0.1")):
            assert current_client().name == "addr:10.0.0.1"
        assert current_client() is alice
    assert current_client() is ANONYMOUS
    token = set_client(alice)
    assert current_client() is alice
    reset_client(token)
    assert current_client() is ANONYMOUS


async def test_tasks_started_in_a_scope_keep_its_client() -> None:
    bob = Client("bob", keyed=True)

    async def whose() -> str:
        await asyncio.sleep(0)
        return current_client().name

    with client_scope(bob):
        task = asyncio.create_task(whose())
    assert await task == "bob"
    # two requests at once, each with its own
    with client_scope(Client("one")):
        first = asyncio.create_task(whose())
    with client_scope(Client("two")):
        second = asyncio.create_task(whose())
    assert await asyncio.gather(first, second) == ["one", "two"]


def test_an_address_client_is_named_by_its_address_and_takes_the_server_defaults() -> None:
    client = address_client("127.0.0.1")
    assert client == Client("addr:127.0.0.1")
    assert address_client("127.0.0.1") is client  # (made once per address)
    assert address_client(None).name == "addr:unknown"
    assert Priority.HIGH > Priority.NORMAL > Priority.LOW
