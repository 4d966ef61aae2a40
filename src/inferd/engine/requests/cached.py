"""The response cache around every verb: the engine asks `answer` for each request it runs on a
version (`Engine._serve`), whatever the verb, so a new verb is cached as soon as it is served.

A request's key is what changes its answer: the verb and every argument the engine passes the
servable (each tensor's name, datatype, shape and bytes; each text; the parameters that shape
the answer: the outputs asked for, `k`, `dimensions`, `raw_scores`), each argument a part of
its own. The version is not in the key because the cache is the version's own. Generation is
never cached: it is not served through `answer`.

Each API key's client has a partition of its own (its name is a part of every key), so that a
hit's speed never tells one tenant what another asked; a model whose `response_cache` says
`shared_across_keys` keeps one for all. Without API keys every caller is one tenant (an
address is not a tenant: all share one partition).

Answers are kept read-only (a cached array is shared by every request it answers). A hit
still tells the observer of its texts (drift sees the traffic, not the misses only), and the
request's trace says how it was answered (`cache`: hit, miss or coalesced).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from inferd.clients import Client
from inferd.engine.kinds.servable import Servable
from inferd.engine.requests.response_cache import MISS, ResponseCache
from inferd.observability.trace import current_trace
from inferd.runtime.protocol import Array, Feeds

Answer = object
"""What a cached verb answers: V2 outputs, or a verb's answer (a dataclass of arrays and
lists: inferd.verbs)."""
LookupHook = Callable[[str, float], None]
"""Told of every lookup: how it was answered (hit, miss, coalesced) and how long it took."""
T = TypeVar("T")

OFF_LOOP_BYTES = 1 << 20
"""Inputs larger than this are hashed on a worker thread (a 64 MB tensor takes tens of ms)."""
PREDICTION_BYTES = 128
"""What one prediction's labels and scores hold, about, beside its probabilities."""

Argument = str | int | float | bool | None | Sequence[str] | Feeds
"""What a verb takes: texts, numbers, flags, names, V2 tensors."""


async def answer(
    cache: ResponseCache[Any],
    servable: Servable,
    verb: str,
    arguments: Sequence[Argument],
    run: Callable[[], Awaitable[T]],
    deadline: float | None,
    on_lookup: LookupHook,
    partition: str = "",
) -> T:
    """The answer of `verb(*arguments)` from `cache` (or coalesced with an identical request
    running), else `run()`'s, kept for the next; within `partition` (`partition_of`) only."""
    started = time.perf_counter()
    key = await request_key(verb, arguments, partition)

    async def miss() -> T:
        result = await run()
        _freeze(result)
        return result

    result, how = await cache.get_or_run(key, miss, answer_bytes, deadline)
    current_trace().cache = how
    on_lookup(how, time.perf_counter() - started)
    if how != MISS:
        _served_hit(servable, result)
    return result  # type: ignore[no-any-return]


def partition_of(client: Client, shared_across_keys: bool) -> str:
    """The part of a cache `client`'s requests read and fill: its API key's client's own
    (by name: the keys of one client share it), or the one of all ("") when the cache is
    shared across keys or the client came with no key."""
    return client.name if client.keyed and not shared_across_keys else ""


async def request_key(verb: str, arguments: Sequence[Argument], partition: str = "") -> bytes:
    """The key of a request: its partition, then one part per argument. Large inputs (a
    hostile 100k-character batch, a 64 MB tensor) are hashed on a worker thread, so the event
    loop keeps answering."""
    if sum(_size(a) for a in arguments) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_key, verb, arguments, partition)
    return _key(verb, arguments, partition)


def _key(verb: str, arguments: Sequence[Argument], partition: str) -> bytes:
    return _digest(partition.encode(), verb.encode(), *(_part(a) for a in arguments))


def _part(argument: Argument) -> bytes:
    """One argument as bytes, tagged by its type (no two arguments of different types or
    values give the same bytes)."""
    if isinstance(argument, Mapping):
        return b"T" + _feeds_bytes(argument)
    if isinstance(argument, str):
        return b"S" + argument.encode("utf-8", "surrogatepass")
    if argument is None or isinstance(argument, bool | int | float):
        return b"V" + repr(argument).encode()
    return b"L" + _digest(*_texts_bytes(argument))


def _size(argument: Argument) -> int:
    if isinstance(argument, Mapping):
        return sum(int(np.asarray(a).nbytes) for a in argument.values())
    if isinstance(argument, str):
        return len(argument)
    if argument is None or isinstance(argument, bool | int | float):
        return 0
    return sum(len(t) for t in argument)


def _served_hit(servable: Servable, result: object) -> None:
    """What the servable itself does for texts it ran: the trace's counts, the observer."""
    token_counts = getattr(result, "token_counts", None)
    if token_counts is None:  # V2 outputs: no texts of their own to report
        return
    trace = current_trace()
    trace.items = len(token_counts)
    trace.input_length = sum(token_counts)
    predictions = getattr(result, "predictions", None)
    labels = [p.labels[0] for p in predictions] if predictions is not None else None
    scores = [p.scores[0] for p in predictions] if predictions is not None else None
    servable.report_texts(token_counts, labels, scores)


def answer_bytes(result: object) -> int:
    """What an answer holds in memory, near enough to bound the cache by: its arrays, and
    a word for each item of its lists (more for a prediction's labels and scores)."""
    if isinstance(result, dict):
        return sum(_array_bytes(array) for array in result.values())
    total = 0
    for value in _fields(result):
        if isinstance(value, np.ndarray):
            total += _array_bytes(value)
        elif isinstance(value, list):
            each = PREDICTION_BYTES + 8 if value and hasattr(value[0], "labels") else 8
            total += each * len(value)
    return total


def _fields(result: object) -> list[object]:
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return [getattr(result, f.name) for f in dataclasses.fields(result)]
    return []


def _array_bytes(array: Array) -> int:
    if array.dtype == object:
        return sum(len(item) if isinstance(item, bytes | str) else 8 for item in array.flat) + (
            8 * array.size
        )
    return int(array.nbytes)


def _freeze(result: object) -> None:
    arrays = list(result.values()) if isinstance(result, dict) else _fields(result)
    for array in arrays:
        if isinstance(array, np.ndarray):
            array.flags.writeable = False


def _digest(*parts: bytes) -> bytes:
    """One key of many parts: each part's length, then its bytes (no two lists of parts give
    the same stream)."""
    hasher = hashlib.blake2b(digest_size=20)
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.digest()


def _texts_bytes(texts: Sequence[str]) -> list[bytes]:
    return [text.encode("utf-8", "surrogatepass") for text in texts]


def _feeds_bytes(feeds: Feeds) -> bytes:
    hasher = hashlib.blake2b(digest_size=20)
    for name in sorted(feeds):
        array = np.asarray(feeds[name])
        head = f"{name}\0{array.dtype.str}\0{array.shape}".encode()
        hasher.update(len(head).to_bytes(8, "little") + head)
        if array.dtype == object:
            for item in array.flat:
                data = (
                    item if isinstance(item, bytes) else str(item).encode("utf-8", "surrogatepass")
                )
                hasher.update(len(data).to_bytes(8, "little") + data)
        else:
            hasher.update(np.ascontiguousarray(array).data)
    return hasher.digest()
