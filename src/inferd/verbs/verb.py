"""A verb as one object: what a client may ask of a model (embed texts, classify them, rank
them against a query, run V2 tensors, or a verb a kind brings of its own), in one place.

A `Verb` holds its request type (a pydantic model naming `model` and `version`, which is also
its native HTTP body), how the engine runs it on a servable, the arguments its response cache
keys on, how two versions' answers agree (shadow traffic in a rollout), and its `forms`: each
way a protocol asks for it over HTTP (a path, a body, how the body becomes the request and the
answer becomes JSON). The engine serves every verb through one entry (`Engine.serve`); the
kinds table (inferd.config.kinds) says which kinds accept which verb, and a servable of any
other kind is refused here, with a message naming what the model does instead; the data
plane's routes are the verbs' forms (inferd.server.data_routes). KServe V2 (HTTP and gRPC)
reaches every kind through the `infer` verb, each servable mapping its V2 tensors to its own
answer.

Nothing here imports a web framework: a form is data (a body type and two functions), and the
server builds its endpoint (inferd.server.verb_routes).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from inferd.errors import InvalidInputError

if TYPE_CHECKING:  # (at run time, the engine imports this module, not the other way)
    from inferd.config.model import ModelConfig
    from inferd.engine.kinds.servable import Servable
    from inferd.engine.requests.cached import Argument


class VerbRequest(Protocol):
    """What every verb's request names: the model (None: the default of the verb's purpose)
    and the version (None: the serving one, or a rollout's choice)."""

    @property
    def model(self) -> str | None: ...

    @property
    def version(self) -> str | None: ...


class VerbBody(BaseModel):
    """The fields every task verb's JSON body shares (each names its own beside them)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = Field(
        None,
        description="Default: the one model served that this route's verb fits, or the one "
        "marked default.",
    )
    version: str | None = Field(
        None,
        description="A version of the model; default: the serving one (or a rollout's choice).",
    )


R = TypeVar("R", bound=VerbRequest)
A = TypeVar("A")
B = TypeVar("B", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Served:
    """Who answered a request, and when it arrived (for `latency_ms`)."""

    model: str
    version: str
    started: float
    """`time.perf_counter()` when the request arrived."""

    @property
    def latency_ms(self) -> float:
        """The time since it arrived, as the answers show it."""
        return round((time.perf_counter() - self.started) * 1000, 3)


@dataclass(frozen=True)
class Form(Generic[B, R, A]):
    """One way to ask for a verb over HTTP: its path, its JSON body, how the body becomes the
    verb's request and how the answer becomes the response's JSON (in the form's own words:
    inferd's, OpenAI's, Cohere's, ...)."""

    path: str
    summary: str
    """The OpenAPI schema's summary of the route."""
    body: type[B]
    tag: str
    """The OpenAPI schema's group of the route."""
    request: Callable[[B], R]
    response: Callable[[B, R, A, Served], object]
    """The JSON of the answer (arrays as numpy arrays: the response writer encodes them)."""


@dataclass(frozen=True)
class Verb(Generic[R, A]):
    name: str
    """As the kinds table names it (`Kind.verbs`), and as the response cache keys it."""
    purpose: str | None
    """The task route family whose requests naming no model go to the model marked default
    for it (inferd.config.kinds); None: a request always names its model (V2)."""
    does: str
    """What it does, in the words of a refusal: "embed texts"."""
    run: Callable[[Any, R, float | None], Awaitable[A]]
    """Runs a request on a servable of a kind that accepts the verb, before the deadline."""
    arguments: Callable[[R], Sequence[Argument]]
    """Everything of a request that changes its answer: the response cache's key."""
    agree: Callable[[ModelConfig, A, A], float]
    """How far two versions' answers to one request agree, in [0, 1] (shadow traffic)."""
    forms: tuple[Form[Any, R, A], ...] = ()

    async def answer(self, servable: Servable, request: R, deadline: float | None) -> A:
        """The servable's answer, or a 4004 when its kind does not accept this verb."""
        if self.name not in servable.config.kind.verbs:
            raise InvalidInputError(
                f"model '{servable.model}' is {servable.kind}; it does not {self.does}"
            )
        return await self.run(servable, request, deadline)
