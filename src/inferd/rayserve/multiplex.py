"""A request routed to a replica that holds its model: Ray Serve's model multiplexing over
inferd's residency.

A client names the model in the `serve_multiplexed_model_id` header. Serve's proxy routes the
request to a replica whose multiplexed model ids hold it (else to one of those holding the
fewest), by the ids each replica reports to Serve's controller. A replica's ids are what its
inferd engine holds: inferd's residency (on-demand loads, evictions under the replica's own
budget) decides what is in memory, and the ids follow it:

- a request naming a model the replica does not hold registers it with Serve's multiplexing
  (a `@serve.multiplexed` loader, reported to the controller at once as loading); the engine
  loads it when the request reaches it, within the request's deadline, exactly as without Ray
  (`Server-Timing` `load`, the residency metrics);
- every `FOLLOW_EVERY_S` the ids become the models the engine holds and those with a request
  in progress here: a model inferd evicted leaves them, and so does one whose load failed.

Serve's own least-recently-used limit is off (`max_num_models_per_replica=-1`): it counts
models, where inferd's budget is in bytes or versions, and it would unload by its own order.

Serve's HTTP proxy honours the header; Serve's direct ingress (HAProxy) does not read it and
balances on connections (Ray 2.60), so routing by model needs the proxy (docs/ray.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from ray import serve

from inferd.compat.ray_internals import multiplexed_ids
from inferd.engine.engine import Engine

log = logging.getLogger(__name__)

MODEL_ID_HEADER = "serve_multiplexed_model_id"
"""The header that names a request's model to Serve (Ray 2.60's `SERVE_MULTIPLEXED_MODEL_ID`;
`serve-multiplexed-model-id` too)."""
FOLLOW_EVERY_S = 0.1
"""How often the ids follow the engine (Serve pushes a change to its controller as often)."""


class ModelIds:
    """Serve's multiplexed model ids of one replica, following its engine's residency."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._in_progress: Counter[str] = Counter()
        self._warned = False

        async def register(model_id: str) -> str:
            return model_id  # (the engine loads it when the request reaches it)

        self._registered = register
        self._register = serve.multiplexed(max_num_models_per_replica=-1)(register)

    @contextlib.asynccontextmanager
    async def serving(self, model: str) -> AsyncIterator[None]:
        """Around a request for `model` (one the repository has): registered with Serve,
        held until the request ends."""
        self._in_progress[model] += 1
        try:
            await self._register(model)
            yield
        finally:
            self._in_progress[model] -= 1
            if self._in_progress[model] <= 0:
                del self._in_progress[model]

    def known(self, model: str) -> bool:
        return self._engine.registry.config_of(model) is not None

    def held(self) -> set[str]:
        """The models this replica holds: a version in memory, or a request in progress."""
        resident = {facts.model for facts in self._engine.residency_facts() if facts.resident}
        return resident | set(self._in_progress)

    def follow(self) -> bool:
        """Makes Serve's ids of this replica the models it holds; whether they changed."""
        try:
            found = multiplexed_ids(self._registered)
            if found is None:
                return False  # no request has named a model yet: Serve has no ids of it
            ids = found.ids
            held = self.held()
            gone = [model for model in ids if model not in held]
            came = sorted(held - set(ids))
            for model in gone:
                del ids[model]
            for model in came:
                ids[model] = model
            if gone or came:
                found.push()
        except AttributeError as exc:  # (another Ray: the ids then stay as Serve keeps them)
            if not self._warned:
                self._warned = True
                log.warning(
                    "Serve's multiplexed model ids cannot follow inferd's residency",
                    extra={"reason": str(exc)},
                )
            return False
        return bool(gone or came)

    async def run(self) -> None:
        """`follow` every `FOLLOW_EVERY_S` while the engine takes requests."""
        while self._engine.accepting:
            try:
                self.follow()
            except Exception:
                log.exception("Serve's multiplexed model ids did not follow inferd's residency")
            await asyncio.sleep(FOLLOW_EVERY_S)


class ModelAffinity:
    """ASGI middleware of a replica's inferd app: a request naming a model (the header)
    registers it with Serve for the time it runs (`ModelIds.serving`)."""

    def __init__(self, app: Any, ids: ModelIds) -> None:
        self._app = app
        self._ids = ids

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        model = serve.get_multiplexed_model_id() if scope["type"] == "http" else ""
        if not model or not self._ids.known(model):
            # (no model named, or one the repository lacks: the route answers as it would)
            await self._app(scope, receive, send)
            return
        async with self._ids.serving(model):
            await self._app(scope, receive, send)
