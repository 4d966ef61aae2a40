"""`ModelManager`: every version of every model, loaded in the background, drained on shutdown.

Owns the admission of inference requests (the in-flight count that a drain waits on) and the
readiness answer. A model or version that fails to load is recorded with its reason and never
keeps the others from serving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from inferd.config.model import GenerationConfig, ModelConfig, RuntimeOptions
from inferd.config.server import ServerSettings
from inferd.engine.generation import Generation
from inferd.engine.loading import LoadedModel, load_instances
from inferd.engine.memory import MemoryGate
from inferd.engine.observer import EngineObserver
from inferd.engine.text import Classified, Embeddings
from inferd.engine.version import ServedVersion, VersionState
from inferd.errors import (
    ConfigError,
    InferdError,
    InvalidInputError,
    NotFoundError,
    QueueFullError,
    UnavailableError,
)
from inferd.generation.params import SamplingParams
from inferd.observability.trace import RequestTrace
from inferd.repository.scan import ModelEntry, scan_model, task_defaults, valid_name
from inferd.runtime.protocol import Array, Feeds, Runtime

log = logging.getLogger(__name__)

RuntimeLoader = Callable[[Path, RuntimeOptions], Runtime]


def onnx_runtime_loader(path: Path, options: RuntimeOptions) -> Runtime:
    from inferd.runtime.onnx_session import OnnxSession  # the only road to onnxruntime

    return OnnxSession(path, options)


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str
    models: dict[str, dict[str, object]] = field(default_factory=dict)


class ModelManager:
    def __init__(
        self,
        settings: ServerSettings,
        entries: Sequence[ModelEntry],
        runtime_loader: RuntimeLoader = onnx_runtime_loader,
        observer: EngineObserver | None = None,
        root: Path | None = None,
    ) -> None:
        self._settings = settings
        self._entries = {e.name: e for e in entries}
        self._loader = runtime_loader
        self._observer = observer
        self._root = root
        self.unloaded: set[str] = set()
        self.versions: dict[str, dict[int, ServedVersion]] = {}
        self.model_errors: dict[str, str] = {}
        for entry in entries:
            if entry.error is not None or entry.config is None:
                self.model_errors[entry.name] = entry.error or "no configuration"
                continue
            if not entry.config.needs_versions:  # zero-shot: one virtual version
                self.versions[entry.name] = {
                    1: ServedVersion(entry.name, 1, entry.config, observer)
                }
                continue
            self.versions[entry.name] = {
                v.version: ServedVersion(entry.name, v.version, entry.config, observer)
                for v in entry.versions
            }
        self.loaded_at: dict[str, int] = {}
        """Model name -> when its first version became ready (epoch seconds)."""
        self.loading_done = False
        self.draining = False
        self.accepting = True
        self._memory = MemoryGate(settings.max_memory_mb, settings.max_gpu_memory_fraction)
        self._in_flight = 0
        self._no_in_flight = asyncio.Event()
        self._no_in_flight.set()

    def model_folders(self) -> dict[str, tuple[ModelConfig, Path]]:
        """Every model with a valid config, and its folder."""
        return {
            name: (entry.config, entry.folder)
            for name, entry in self._entries.items()
            if entry.config is not None
        }

    # -- loading ---------------------------------------------------------------------------

    async def load_all(self) -> None:
        """Loads every selected version, `load_concurrency` at a time. Never raises."""
        for name, error in self.model_errors.items():
            log.error("model not loaded", extra={"model": name, "reason": error})
        limit = asyncio.Semaphore(self._settings.load_concurrency)

        async def load(entry: ModelEntry, served: ServedVersion) -> None:
            async with limit:
                await self._load_version(entry, served)

        jobs = [
            load(self._entries[name], served)
            for name, versions in self.versions.items()
            for served in versions.values()
            if served.config.needs_versions
        ]
        try:
            await asyncio.gather(*jobs)
            for name in list(self.versions):
                await self._fall_back(name)
            for versions in self.versions.values():  # derived models, once bases are up
                for served in versions.values():
                    if not served.config.needs_versions:
                        await self._load_zero_shot(served)
        finally:
            self.loading_done = True
        ready = sum(v.ready for vs in self.versions.values() for v in vs.values())
        log.info("model loading finished", extra={"ready_versions": ready})

    async def _fall_back(self, name: str) -> bool:
        """With a `latest` policy and no selected version serving, the newest older version
        that loads serves instead: a broken new version never takes the model down."""
        entry = self._entries[name]
        config = entry.config
        versions = self.versions.get(name, {})
        if config is None or not config.needs_versions or any(v.ready for v in versions.values()):
            return True
        policy = config.version_policy
        if policy.all or policy.specific is not None:
            return False
        for candidate in sorted(entry.available, key=lambda v: -v.version):
            if candidate.version in versions:
                continue
            served = ServedVersion(name, candidate.version, config, self._observer)
            versions[candidate.version] = served
            await self._load_version(entry, served)
            if served.ready:
                log.warning(
                    "serving an older version: the selected ones failed to load",
                    extra={"model": name, "version": candidate.version},
                )
                for failed in versions.values():
                    if failed.state is VersionState.FAILED:
                        failed.superseded = True  # reported, but the model serves
                return True
        return False

    async def _load_version(self, entry: ModelEntry, served: ServedVersion) -> None:
        config: ModelConfig = served.config
        path = next(v.path for v in entry.available if v.version == served.version)
        loop = asyncio.get_running_loop()
        try:
            loaded: LoadedModel = await loop.run_in_executor(
                None,
                load_instances,
                config,
                lambda: self._loader(path, config.runtime),
                path.parent,
            )
        except Exception as exc:  # any failure: bad file, bad overrides, warm-up error
            reason = _reason(exc)
            served.fail(reason)
            log.error(
                "model version failed to load",
                extra={"model": served.model, "version": served.version, "reason": reason},
            )
            return
        if self.draining:
            await loop.run_in_executor(None, loaded.pool.close)
            served.fail("the server began draining while this version loaded")
            return
        served.attach(loaded)
        self.loaded_at.setdefault(served.model, int(time.time()))
        log.info(
            "model version ready",
            extra={
                "model": served.model,
                "version": served.version,
                "load_ms": round(loaded.load_s * 1000, 1),
                "providers": list(served.providers),
                "instances": config.instance_count,
            },
        )

    async def _load_zero_shot(self, served: ServedVersion) -> None:
        zero_shot = served.config.zero_shot
        if zero_shot is None:
            return
        try:
            base = self.resolve(zero_shot.base_model)
            if base.config.task != "embedding":
                raise InvalidInputError(
                    f"base model '{zero_shot.base_model}' is not an embedding model"
                )
            await served.attach_zero_shot(base)
            self.loaded_at.setdefault(served.model, int(time.time()))
        except Exception as exc:  # the base is missing, failed, or cannot embed the labels
            reason = _reason(exc)
            served.fail(reason)
            log.error(
                "zero-shot model failed to load", extra={"model": served.model, "reason": reason}
            )
            return
        log.info(
            "zero-shot model ready",
            extra={
                "model": served.model,
                "base": zero_shot.base_model,
                "labels": len(zero_shot.labels),
            },
        )

    # -- repository changes (admin) -------------------------------------------------------

    async def load_model(self, name: str) -> ServedVersion:
        """Reads a model's folder again and loads the versions its policy selects that do not
        serve yet. Versions no longer selected are drained and closed only once a selected
        version serves: a new version that fails to load leaves the previous one serving."""
        if self._root is None or not valid_name(name) or not (self._root / name).is_dir():
            raise NotFoundError(f"no model folder '{name}' in the repository")
        entry = scan_model(self._root / name)
        if entry.error is not None or entry.config is None:
            raise InvalidInputError(f"model '{name}' cannot load: {entry.error}")
        if not entry.config.needs_versions:
            raise InvalidInputError("a zero-shot model follows its base model; load that one")
        others = [e for n, e in self._entries.items() if n != name and n in self.versions]
        try:
            task_defaults([*others, entry])
        except ConfigError as exc:
            raise InvalidInputError(f"model '{name}' cannot load: {exc}") from exc
        self._entries[name] = entry
        self.model_errors.pop(name, None)
        self.unloaded.discard(name)
        current = self.versions.setdefault(name, {})
        fresh = []
        for version in entry.versions:
            existing = current.get(version.version)
            if existing is not None and existing.ready:
                continue
            served = ServedVersion(name, version.version, entry.config, self._observer)
            current[version.version] = served
            fresh.append(served)
        for served in fresh:
            await self._load_version(entry, served)
        selected = {v.version for v in entry.versions}
        if not any(current[v].ready for v in selected if v in current):
            failures = "; ".join(f"version {s.version}: {s.reason}" for s in fresh if s.reason)
            for served in fresh:
                current.pop(served.version, None)
            serving = sorted(n for n, v in current.items() if v.ready)
            raise UnavailableError(
                f"model '{name}' did not load ({failures}); still serving: {serving or 'none'}"
            )
        for number in sorted(set(current) - selected):
            retired = current.pop(number)
            await retired.drain(self._settings.drain_timeout_s)
            await retired.close()
            log.info("version retired", extra={"model": name, "version": number})
        self.loaded_at.setdefault(name, int(time.time()))
        return self.resolve(name)

    async def unload_model(self, name: str) -> None:
        """Drains and closes every version of a model; it then answers 404 until loaded."""
        if name not in self.versions:
            raise NotFoundError(f"model '{name}' is not loaded")
        versions = self.versions.pop(name)
        self.unloaded.add(name)
        for served in versions.values():
            await served.drain(self._settings.drain_timeout_s)
            await served.close()
        log.info("model unloaded", extra={"model": name})

    def index(self) -> list[dict[str, str]]:
        """The repository extension's index: every model and version with its state."""
        rows = []
        for name in sorted(set(self._entries) | set(self.versions)):
            if name in self.unloaded:
                rows.append({"name": name, "state": "UNAVAILABLE", "reason": "unloaded"})
                continue
            if name in self.model_errors:
                rows.append(
                    {"name": name, "state": "UNAVAILABLE", "reason": self.model_errors[name]}
                )
                continue
            for number, served in sorted(self.versions.get(name, {}).items()):
                row = {"name": name, "version": str(number), "state": served.state.value}
                if served.reason:
                    row["reason"] = served.reason
                rows.append(row)
        return rows

    # -- lookup and readiness --------------------------------------------------------------

    def resolve(self, model: str, version: str | None = None) -> ServedVersion:
        """The version that answers: the one named, else the highest ready one."""
        if not valid_name(model) or (model not in self.versions and model not in self.model_errors):
            raise NotFoundError(f"unknown model '{model}'")
        if model in self.model_errors:
            raise UnavailableError(f"model '{model}' failed to load: {self.model_errors[model]}")
        versions = self.versions[model]
        if version is not None:
            if not version.isdigit() or int(version) not in versions:
                raise NotFoundError(
                    f"model '{model}' has no served version '{version}'; served: {sorted(versions)}"
                )
            return versions[int(version)]
        ready = [v for v in versions.values() if v.ready]
        if ready:
            return max(ready, key=lambda v: v.version)
        newest = versions[max(versions)]
        return newest  # not ready: its infer() answers 5030 with the state

    def readiness(self, strict: bool) -> Readiness:
        models: dict[str, dict[str, object]] = {}
        problems: list[str] = []
        for name, error in self.model_errors.items():
            models[name] = {"ready": False, "reason": error}
            problems.append(f"model '{name}' failed: {error}")
        for name, versions in self.versions.items():
            states = {
                str(n): {"state": v.state.value, **({"reason": v.reason} if v.reason else {})}
                for n, v in versions.items()
            }
            model_ready = any(v.ready for v in versions.values())
            models[name] = {"ready": model_ready, "versions": states}
            for n, v in versions.items():
                if v.state is VersionState.FAILED and not v.superseded:
                    problems.append(f"model '{name}' version {n} failed: {v.reason}")
            if not model_ready and self.loading_done:
                problems.append(f"model '{name}' has no ready version")
        if self.draining:
            return Readiness(False, "draining", models)
        if not self.loading_done:
            return Readiness(False, "loading models", models)
        any_ready = any(m.get("ready") for m in models.values())
        if not any_ready:
            return Readiness(False, "; ".join(problems) or "no model in the repository", models)
        if strict and problems:
            return Readiness(False, "; ".join(problems), models)
        return Readiness(True, "ready", models)

    # -- inference ------------------------------------------------------------------------

    def deadline_for(self, served: ServedVersion, timeout_s: float | None) -> float:
        if timeout_s is not None:
            chosen = min(timeout_s, self._settings.max_request_timeout_s)
        else:
            chosen = served.config.request_timeout_s or self._settings.request_timeout_s
        return asyncio.get_running_loop().time() + chosen

    async def infer(
        self,
        model: str,
        version: str | None,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
    ) -> tuple[ServedVersion, dict[str, Array]]:
        async with self._admit():
            served = self.resolve(model, version)
            _name(trace, served)
            deadline = self.deadline_for(served, timeout_s)
            with _outcome(served):
                outputs = await served.infer(
                    feeds, output_names, deadline, self._settings.max_request_rows, trace
                )
        return served, outputs

    async def embed(
        self,
        model: str | None,
        texts: Sequence[str],
        dimensions: int | None = None,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
    ) -> tuple[ServedVersion, Embeddings]:
        async with self._admit():
            served = self.resolve(model) if model else self.default_model("embed")
            _name(trace, served)
            deadline = self.deadline_for(served, timeout_s)
            with _outcome(served):
                return served, await served.embed(texts, deadline, dimensions, trace)

    async def classify(
        self,
        model: str | None,
        texts: Sequence[str],
        k: int = 1,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
    ) -> tuple[ServedVersion, Classified]:
        async with self._admit():
            served = self.resolve(model) if model else self.default_model("predict")
            _name(trace, served)
            deadline = self.deadline_for(served, timeout_s)
            with _outcome(served):
                return served, await served.classify(texts, k, deadline, trace)

    def defaults(self) -> dict[str, str]:
        """Purpose ("embed", "predict", "generate") -> the model that answers requests naming
        none: the one served for that purpose, else the one marked `default: true`."""
        fits: dict[str, list[str]] = {}
        marked: dict[str, str] = {}
        for name, versions in self.versions.items():
            if name in self.unloaded:
                continue
            config = next(iter(versions.values())).config
            if config.purpose is None:
                continue
            fits.setdefault(config.purpose, []).append(name)
            if config.default:
                marked[config.purpose] = name
        chosen = {purpose: names[0] for purpose, names in fits.items() if len(names) == 1}
        return {**marked, **chosen}

    def default_model(self, purpose: str) -> ServedVersion:
        """The model that serves `purpose` when a request names none (see `defaults`)."""
        chosen = self.defaults().get(purpose)
        if chosen is not None:
            return self.resolve(chosen)
        fits = sorted(
            name
            for name, versions in self.versions.items()
            if next(iter(versions.values())).config.purpose == purpose and name not in self.unloaded
        )
        if not fits:
            raise NotFoundError(f"no model here can {purpose}; see GET /v1/models")
        raise InvalidInputError(
            f"several models can {purpose} ({fits}) and none is the default: name one in "
            "'model' (or set default: true in one's config.yaml)"
        )

    def start_generation(
        self,
        model: str | None,
        prompt: str,
        params_for: Callable[[GenerationConfig], SamplingParams],
        trace: RequestTrace | None = None,
    ) -> Generation:
        """Admits and queues a generation. The returned handle holds an in-flight slot (what
        a drain waits for) until its stream ends or it is closed."""
        self._enter()
        try:
            served = self.resolve(model) if model else self.default_model("generate")
            _name(trace, served)
            seq = served.generate(prompt, params_for(served.config.generation))
        except BaseException:
            self._leave()
            raise
        return Generation(seq, served.model, served.version, self._leave)

    def _enter(self) -> None:
        if not self.accepting:
            raise UnavailableError("the server is shutting down", retry_after_s=1.0)
        self._memory.check()
        if self._in_flight >= self._settings.max_in_flight:
            raise QueueFullError(
                f"the server holds {self._in_flight} requests in flight, its limit",
                retry_after_s=1.0,
            )
        self._in_flight += 1
        self._no_in_flight.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._no_in_flight.set()

    @asynccontextmanager
    async def _admit(self) -> AsyncIterator[None]:
        """Counts a request as in flight (what a drain waits for) from admission to answer."""
        self._enter()
        try:
            yield
        finally:
            self._leave()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def queue_depths(self) -> list[tuple[str, str, int]]:
        return [
            (name, str(n), v.batcher.queued_items)
            for name, versions in self.versions.items()
            for n, v in versions.items()
            if v.batcher is not None
        ]

    def model_states(self) -> list[tuple[str, str, bool, float | None]]:
        return [
            (name, str(n), v.ready, v.load_s)
            for name, versions in self.versions.items()
            for n, v in versions.items()
        ]

    # -- shutdown --------------------------------------------------------------------------

    def begin_drain(self) -> None:
        """Readiness turns false; requests are still accepted (the grace period)."""
        self.draining = True

    async def drain(self, timeout_s: float) -> bool:
        """Refuses new requests and waits for admitted ones. True when all finished in time."""
        self.draining = True
        self.accepting = False
        try:
            await asyncio.wait_for(self._no_in_flight.wait(), timeout_s)
        except TimeoutError:
            log.warning("drain timed out", extra={"in_flight": self._in_flight})
            return False
        return True

    async def close(self) -> None:
        self.accepting = False
        for versions in self.versions.values():
            for served in versions.values():
                await served.close()


def _name(trace: RequestTrace | None, served: ServedVersion) -> None:
    if trace is not None:
        trace.model, trace.version = served.model, str(served.version)


@contextmanager
def _outcome(served: ServedVersion) -> Iterator[None]:
    """Records the request's success or failure and duration in the version's statistics."""
    started = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        served.stats.on_request(ok, time.perf_counter() - started)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, InferdError):
        return exc.message
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__
