"""Ray Serve's private state that inferd's replicas read and write: a replica's multiplexed
model ids (inferd.rayserve.multiplex makes them follow inferd's residency) and whether the
node's Serve takes HTTP requests with its direct ingress (HAProxy).

Written for Ray 2.60 (`WRITTEN_FOR`; pyproject.toml pins the series). What it relies on, and
tests/integration/test_compat_ray.py checks on the Ray installed: `serve.multiplexed` keeps
its `_ModelMultiplexWrapper` on the function it decorates (`WRAPPER`); the wrapper holds the
replica's ids in its `models` mapping, and sends them to Serve's controller at its next push
when its flag (`PUSH`) is set; `ray.serve._private.constants.RAY_SERVE_ENABLE_HA_PROXY`. With
another Ray, `multiplexed_ids` raises AttributeError naming what is missing (the replica then
leaves the ids as Serve keeps them)."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

WRITTEN_FOR = "2.60"
WRAPPER = "__serve_multiplex_wrapper"
"""Where Serve keeps a multiplexed function's state, on the function it decorates."""
PUSH = "_push_multiplexed_replica_info"
"""The wrapper's flag that sends the replica's model ids to its controller at the next push."""


class MultiplexedIds:
    """A replica's multiplexed model ids, as Serve's wrapper of `registered` holds them."""

    def __init__(self, wrapper: Any) -> None:
        if not hasattr(wrapper, PUSH):  # (assigning it would succeed and push nothing)
            raise AttributeError(f"Serve's multiplexing has no {PUSH}")
        self._wrapper = wrapper
        self.ids: OrderedDict[str, Any] = wrapper.models

    def push(self) -> None:
        """Sends the ids to Serve's controller at the next push (within 0.1 s)."""
        setattr(self._wrapper, PUSH, True)


def multiplexed_ids(registered: Callable[..., Any]) -> MultiplexedIds | None:
    """The ids of the replica whose multiplexed loader is `registered` (the function before
    `serve.multiplexed` decorated it); None until a request has named a model. Raises
    AttributeError when this Ray keeps them otherwise."""
    wrapper = getattr(registered, WRAPPER, None)
    return None if wrapper is None else MultiplexedIds(wrapper)


def haproxy_ingress() -> bool:
    """Whether this node's Serve takes HTTP requests with HAProxy (Ray 2.60 reads it from the
    environment of `ray start`)."""
    try:
        from ray.serve._private.constants import RAY_SERVE_ENABLE_HA_PROXY
    except ImportError:  # (a private name: another Ray may not have it)
        return os.environ.get("RAY_SERVE_ENABLE_HA_PROXY", "0") == "1"
    return bool(RAY_SERVE_ENABLE_HA_PROXY)
