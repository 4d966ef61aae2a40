"""The registry: every model of the repository and every version of each, with the questions
the rest of inferd asks of them (which version answers, which model is a task's default, what
is ready, what the repository index says). Routes ask through these methods only.

The loader changes what is registered (`add`, `replace_versions`, `remove_model`, `fail_model`);
nothing else does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from inferd.config.model import ModelConfig
from inferd.engine.requests.cached import Answer
from inferd.engine.requests.response_cache import ResponseCache
from inferd.engine.versions.version import Version, VersionState
from inferd.errors import InvalidInputError, NotFoundError, UnavailableError
from inferd.repository.scan import ModelEntry, valid_name
from inferd.runtime.dispatch import InstanceLoad


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str
    models: dict[str, dict[str, object]] = field(default_factory=dict)


@dataclass(frozen=True)
class ServedModel:
    """A model with a ready version, as `/v1/models` lists it."""

    name: str
    newest: Version
    loaded_at: int
    default_for: tuple[str, ...]


class Registry:
    def __init__(self, entries: Sequence[ModelEntry]) -> None:
        self.entries: dict[str, ModelEntry] = {e.name: e for e in entries}
        self._versions: dict[str, dict[int, Version]] = {}
        self._errors: dict[str, str] = {}
        self._unloaded: set[str] = set()
        self._loaded_at: dict[str, int] = {}
        self._purposes: tuple[dict[str, list[str]], dict[str, str]] | None = None
        for entry in entries:
            if entry.error is not None or entry.config is None:
                self._errors[entry.name] = entry.error or "no configuration"
            elif not entry.config.needs_versions:  # zero-shot: one virtual version
                self._versions[entry.name] = {1: Version(entry.name, 1, entry.config)}
            else:
                self._versions[entry.name] = {
                    v.version: Version(entry.name, v.version, entry.config) for v in entry.versions
                }

    # -- queries ---------------------------------------------------------------------------

    def resolve(self, model: str, version: str | None = None) -> Version:
        """The version that answers: the one named, else the highest ready one (else the
        newest, whose requests then get 5030 with its state)."""
        if not valid_name(model) or (model not in self._versions and model not in self._errors):
            raise NotFoundError(f"unknown model '{model}'")
        if model in self._errors:
            raise UnavailableError(f"model '{model}' failed to load: {self._errors[model]}")
        versions = self._versions[model]
        if version is not None:
            # isascii: str.isdigit also accepts digits that int() refuses ("²")
            if not (version.isascii() and version.isdigit()) or int(version) not in versions:
                raise NotFoundError(
                    f"model '{model}' has no served version '{version}'; served: {sorted(versions)}"
                )
            return versions[int(version)]
        ready = [v for v in versions.values() if v.ready]
        if ready:
            return max(ready, key=lambda v: v.version)
        return versions[max(versions)]

    def versions_of(self, model: str) -> list[Version]:
        """Every registered version of `model`, oldest first (404 for an unknown model)."""
        self.resolve(model)
        return [v for _, v in sorted(self._versions.get(model, {}).items())]

    def all_versions(self) -> Iterator[Version]:
        for versions in self._versions.values():
            yield from versions.values()

    def models(self) -> list[str]:
        return sorted(self._versions)

    def config_of(self, model: str) -> ModelConfig | None:
        versions = self._versions.get(model)
        return next(iter(versions.values())).config if versions else None

    def _by_purpose(self) -> tuple[dict[str, list[str]], dict[str, str]]:
        """Purpose -> the models serving it, and -> the one marked `default: true`; kept until
        the registered models change (a task route naming no model asks on every request)."""
        if self._purposes is None:
            fits: dict[str, list[str]] = {}
            marked: dict[str, str] = {}
            for name in self._versions:
                config = self.config_of(name)
                if config is None or config.purpose is None:
                    continue
                fits.setdefault(config.purpose, []).append(name)
                if config.default:
                    marked[config.purpose] = name
            self._purposes = (fits, marked)
        return self._purposes

    def defaults(self) -> dict[str, str]:
        """Purpose ("embed", "predict", "generate") -> the model that answers requests naming
        none: the one model served for that purpose, else the one marked `default: true`."""
        fits, marked = self._by_purpose()
        only = {purpose: names[0] for purpose, names in fits.items() if len(names) == 1}
        return {**marked, **only}

    def models_for(self, purpose: str) -> list[str]:
        """The models serving `purpose` ("embed", "predict", "generate")."""
        return self._by_purpose()[0].get(purpose, [])

    def default_for(self, purpose: str) -> Version:
        chosen = self.defaults().get(purpose)
        if chosen is not None:
            return self.resolve(chosen)
        fits = sorted(self._by_purpose()[0].get(purpose, []))
        if not fits:
            raise NotFoundError(f"no model here can {purpose}; see GET /v1/models")
        raise InvalidInputError(
            f"several models can {purpose} ({fits}) and none is the default: name one in "
            "'model' (or set default: true in one's config.yaml)"
        )

    def served_models(self) -> list[ServedModel]:
        default_for: dict[str, list[str]] = {}
        for purpose, name in sorted(self.defaults().items()):
            default_for.setdefault(name, []).append(purpose)
        served = []
        for name, versions in sorted(self._versions.items()):
            ready = [v for v in versions.values() if v.ready or v.standby]
            if ready:
                newest = max(ready, key=lambda v: v.version)
                served.append(
                    ServedModel(
                        name, newest, self._loaded_at.get(name, 0), tuple(default_for.get(name, ()))
                    )
                )
        return served

    def index(
        self, withdrawn: Callable[[str], Sequence[int]] = lambda model: ()
    ) -> list[dict[str, str]]:
        """The repository extension's index: every model and version with its state; the
        versions a rollout withdrew (`withdrawn`) as UNAVAILABLE, with why."""
        rows = []
        for name in sorted(set(self.entries) | set(self._versions)):
            if name in self._unloaded:
                rows.append({"name": name, "state": "UNAVAILABLE", "reason": "unloaded"})
                continue
            if name in self._errors:
                rows.append({"name": name, "state": "UNAVAILABLE", "reason": self._errors[name]})
                continue
            versions = self._versions.get(name, {})
            for number in sorted({*versions, *withdrawn(name)}):
                served = versions.get(number)
                row = {"name": name, "version": str(number)}
                if served is None:
                    row["state"] = "UNAVAILABLE"
                    row["reason"] = "withdrawn: a rollout rolled it back or was aborted"
                else:
                    row["state"] = served.state.value
                    if served.reason:
                        row["reason"] = served.reason
                rows.append(row)
        return rows

    def readiness(
        self,
        strict: bool,
        loading_done: bool,
        draining: bool,
        never_fits: Callable[[Version], str | None] = lambda version: None,
    ) -> Readiness:
        """`never_fits`: why a version can never load under the memory budgets (a reason of
        its own, as a failed version's), None when it may."""
        models: dict[str, dict[str, object]] = {}
        problems: list[str] = []
        for name, error in self._errors.items():
            models[name] = {"ready": False, "reason": error}
            problems.append(f"model '{name}' failed: {error}")
        for name, versions in self._versions.items():
            states = {
                str(n): {"state": v.state.value, **({"reason": v.reason} if v.reason else {})}
                for n, v in versions.items()
            }
            too_large = {n: why for n, v in versions.items() if (why := never_fits(v))}
            model_ready = any(
                v.ready or (v.standby and n not in too_large) for n, v in versions.items()
            )
            models[name] = {"ready": model_ready, "versions": states}
            for n, v in versions.items():
                if v.state is VersionState.FAILED and not v.superseded:
                    problems.append(f"model '{name}' version {n} failed: {v.reason}")
                elif n in too_large:
                    states[str(n)]["reason"] = too_large[n]
                    problems.append(too_large[n])
            if not model_ready and loading_done:
                problems.append(f"model '{name}' has no ready version")
        if draining:
            return Readiness(False, "draining", models)
        if not loading_done:
            return Readiness(False, "loading models", models)
        if not any(m.get("ready") for m in models.values()):
            return Readiness(False, "; ".join(problems) or "no model in the repository", models)
        if strict and problems:
            return Readiness(False, "; ".join(problems), models)
        return Readiness(True, "ready", models)

    def errors(self) -> dict[str, str]:
        return dict(self._errors)

    def queue_depths(self) -> list[tuple[str, str, int]]:
        return [(v.model, str(v.version), v.queued_items) for v in self.all_versions() if v.ready]

    def waiting_requests(self) -> int:
        """Requests waiting to start, over every version serving."""
        return sum(v.queued_requests for v in self.all_versions() if v.ready)

    def kv_usages(self) -> list[tuple[str, str, int, int]]:
        """Each generator serving: its KV cache tokens held and the most it may hold."""
        return [
            (v.model, str(v.version), *usage)
            for v in self.all_versions()
            if (usage := v.kv_usage) is not None
        ]

    def model_states(self) -> list[tuple[str, str, bool, float | None]]:
        return [(v.model, str(v.version), v.ready, v.load_s) for v in self.all_versions()]

    def instance_loads(self) -> list[tuple[str, str, InstanceLoad]]:
        return [
            (v.model, str(v.version), load)
            for v in self.all_versions()
            if v.ready
            for load in v.instances
        ]

    def cache_states(self) -> list[tuple[str, str, ResponseCache[Answer]]]:
        return [
            (v.model, str(v.version), cache)
            for v in self.all_versions()
            if v.ready and (cache := v.cache) is not None
        ]

    # -- changes (the loader's) ------------------------------------------------------------

    def versions_map(self, model: str) -> dict[int, Version]:
        """The loader's handle on a model's versions (created empty when new)."""
        if model not in self._versions:
            self._purposes = None
        return self._versions.setdefault(model, {})

    def mark_loaded(self, model: str, at: int) -> None:
        self._loaded_at.setdefault(model, at)

    def changed(self) -> None:
        """A model's versions changed (a reload retired some): answers are asked anew."""
        self._purposes = None

    def register_entry(self, entry: ModelEntry) -> None:
        self._purposes = None  # its config (task, default) may have changed
        self.entries[entry.name] = entry
        self._errors.pop(entry.name, None)
        self._unloaded.discard(entry.name)

    def remove_model(self, model: str) -> dict[int, Version]:
        """Takes a model out (it answers 404 until loaded again); returns its versions."""
        if model not in self._versions:
            raise NotFoundError(f"model '{model}' is not loaded")
        self._purposes = None
        self._unloaded.add(model)
        return self._versions.pop(model)

    def serving_entries(self, besides: str) -> list[ModelEntry]:
        """The entries of the models registered now, but `besides`."""
        return [e for n, e in self.entries.items() if n != besides and n in self._versions]
