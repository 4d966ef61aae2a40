"""What every request to a model would be refused with now, whatever its body holds: asked
before a request's body is read (`Engine.refusal_before_reading`), so that a server under
overload answers at once instead of reading what it will refuse."""

from __future__ import annotations

from inferd.engine.kinds.servable import Servable
from inferd.engine.requests.admission import Admission
from inferd.engine.versions.registry import Registry
from inferd.errors import InferdError, QueueFullError


def refusal_before_reading(
    admission: Admission,
    registry: Registry,
    model: str | None,
    version: str | None,
    purpose: str | None,
    arriving: int,
) -> InferdError | None:
    """What every request to `model` (or, naming none yet, to any model serving `purpose`)
    would be refused with now: the admission's refusal, or 4290 when each version it could
    reach has a full queue, or when `arriving` (the requests to these models read and not yet
    answered) fill what they all hold, or when each would queue it longer than its
    `max_queue_time_ms`. None when the request must be read to know (an unknown or unready
    model gets its answer there)."""
    refused = admission.refusal()
    if refused is not None:
        return refused
    names = [model] if model is not None else registry.models_for(purpose or "")
    if not names:
        return None
    holders: dict[int, Servable] = {}
    for name in names:
        try:
            target = registry.resolve(name, version)
        except InferdError:
            return None
        if not target.ready:
            return None
        holder = target.servable.holder  # (zero-shot models share their base's queue)
        holders[id(holder)] = holder
    capacities = [h.capacity for h in holders.values()]
    room = None if None in capacities else sum(c or 0 for c in capacities)
    if all(h.saturated for h in holders.values()) or (room is not None and arriving >= room):
        whose = f"model '{model}'" if model is not None else f"every model that can {purpose}"
        return QueueFullError(f"the queue of {whose} is full; retry later", retry_after_s=1.0)
    # too much queued work for the queue-time bound: refused only when every queue it could
    # reach says so (the arriving ones spread over them), the one that frees first
    share = arriving // len(holders)
    overdue = [h.queue_time_refusal(share) for h in holders.values()]
    refusals = [o for o in overdue if o is not None]
    if len(refusals) == len(overdue):
        return min(refusals, key=lambda o: o.retry_after_s or 0.0)
    return None
