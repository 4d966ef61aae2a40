"""A request's route key from its body: the field a model's config names
(`rollout.route_key_field`), read when the `X-Inferd-Route-Key` header gave none. The key keeps
a client on one version for a whole rollout (inferd.engine.rollout)."""

from __future__ import annotations

from collections.abc import Collection, MutableMapping
from typing import Any

from inferd.engine import Engine
from inferd.errors import InvalidInputError
from inferd.front.recording import ROUTE_KEY_MAX
from inferd.observability.trace import current_trace


def take_route_key(
    engine: Engine,
    fields: MutableMapping[str, Any],
    model: str | None,
    purpose: str | None,
    own_fields: Collection[str] = (),
) -> None:
    """Notes the route key `fields` holds for `model` (naming none: the default model for
    `purpose`), and removes its field from `fields` unless the route has a field of that name
    (`own_fields`: OpenAI's `user`, say), so that the route's schema does not refuse it."""
    name = engine.route_key_field(model, purpose)
    if name is None or name not in fields:
        return
    value = fields[name] if name in own_fields else fields.pop(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInputError(f"the route key '{name}' must be a string or an integer")
    trace = current_trace()
    if trace.route_key is None:
        trace.route_key = str(value)[:ROUTE_KEY_MAX]
