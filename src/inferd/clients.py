"""Who a request is for: its client, and what the server grants that client.

A client is an API key's (its name and settings in the keys file: inferd.front.keys) or, on
a server without API keys, the peer address's (`addr:<ip>`). The protocol that checked the
key sets it for the request (`client_scope`), and every part below reads it with
`current_client()`: the fair share of the queues, the on-demand loads it may cause, the
partition of the response cache. Work no protocol attributed (a job, an embedding caller)
is `ANONYMOUS`'s.

Sits beside the data path, as config, errors and observability do: imports nothing of inferd.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache


class Priority(IntEnum):
    """How important a client's requests are: higher is more important."""

    LOW = 0
    NORMAL = 1
    HIGH = 2


@dataclass(frozen=True)
class Client:
    name: str
    """The key's `name=` (`key:<12 hex digits of its SHA-256>` when it has none), or
    `addr:<ip>` on a server without API keys, or `anonymous`. Never the key itself."""
    weight: float = 1.0
    """Its share of a queue against the other clients' (a weight of 2 gets twice the share
    of a weight of 1)."""
    priority: Priority = Priority.NORMAL
    loads_per_minute: float | None = None
    """On-demand loads it may cause a minute, on average; None: the server's
    `client_loads_per_minute`; 0: no limit."""
    load_burst: int | None = None
    """On-demand loads it may cause at once (the token bucket's size); None: the server's
    `client_load_burst`."""
    keyed: bool = False
    """Identified by an API key: a tenant of its own (its own partition of the response
    cache). An address or the anonymous client is not: without keys, every caller is one
    tenant."""


ANONYMOUS = Client("anonymous")
"""The client of work that no protocol attributed to one."""

_current: ContextVar[Client] = ContextVar("inferd_client", default=ANONYMOUS)


def current_client() -> Client:
    """The client of the request being served (`ANONYMOUS` when none was set)."""
    return _current.get()


def set_client(client: Client) -> Token[Client]:
    """Makes `client` the current one until `reset_client(token)`."""
    return _current.set(client)


def reset_client(token: Token[Client]) -> None:
    _current.reset(token)


@contextmanager
def client_scope(client: Client) -> Iterator[Client]:
    """`client` is the current client within the block (and in the tasks started in it)."""
    token = _current.set(client)
    try:
        yield client
    finally:
        _current.reset(token)


@lru_cache(maxsize=4096)
def address_client(address: str | None) -> Client:
    """The client of a peer identified by its address alone (`addr:<ip>`; `addr:unknown`
    when the protocol gave none). The server's defaults apply to it."""
    return Client(f"addr:{address or 'unknown'}")
