"""Which version answers a request: the version it names, else its rollout's choice for it (by
its route key: inferd.engine.rollout.router), else the highest ready one; a request naming no
model goes to the default model of its purpose. The model and version chosen are written in
the request's trace."""

from __future__ import annotations

from inferd.engine.rollout import Rollouts
from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version
from inferd.errors import InferdError, InvalidInputError
from inferd.observability.trace import current_trace


class Routing:
    def __init__(self, registry: Registry, rollouts: Rollouts) -> None:
        self._registry = registry
        self._rollouts = rollouts

    def choose(self, model: str | None, purpose: str | None, version: str | None) -> Version:
        """The version for a request of a verb with `purpose` (None: the request names its
        model, as V2's do)."""
        if purpose is not None:
            return self.task_model(model, purpose, version)
        if not model:
            raise InvalidInputError("name the model")
        return self.resolve(model, version)

    def task_model(self, model: str | None, purpose: str, version: str | None = None) -> Version:
        """`resolve`, for `model` or, naming none, for the default model for `purpose`."""
        if not model:
            model = self._registry.default_for(purpose).model
        return self.resolve(model, version)

    def resolve(self, model: str, version: str | None) -> Version:
        """The version named, else the rollout's choice for this request, else the highest
        ready one."""
        if version is None:
            trace = current_trace()
            routed = self._rollouts.router.choose(model, trace.route_key)
            if routed is not None:
                number, trace.route = routed
                if trace.route == "baseline":
                    baseline = self._rollouts.baseline(model)
                    if baseline is not None:
                        return baseline
                    trace.route = "stable"  # (closed since it was chosen)
                return self._registry.resolve(model, str(number))
        return self._registry.resolve(model, version)

    def route_key_field(self, model: str | None, purpose: str | None) -> str | None:
        """The request field that names the route key for `model` (naming none: the default
        model for `purpose`); None when none is configured or the model is not known yet
        (its request gets that answer when it runs)."""
        if not model:
            try:
                model = self._registry.default_for(purpose or "").model
            except InferdError:
                return None
        config = self._registry.config_of(model)
        return config.rollout.route_key_field if config is not None else None

    @staticmethod
    def named(served: Version) -> Version:
        """`served`, its model and version written in the request's trace."""
        trace = current_trace()
        trace.model, trace.version = served.model, str(served.version)
        return served
