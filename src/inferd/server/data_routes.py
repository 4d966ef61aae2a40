"""The data routes, in one table: inference, served by the data plane's Starlette router
(inferd.server.dataplane), past FastAPI's per-request layers. Each row says where the route
is, what serves it, what its requests reach when they name no model, and what the OpenAPI
schema shows of it. The same table gives the data plane its routes, the schema its entries
(inferd.server.openapi), the early refusal its routes and purposes (inferd.server.shed), the
body limit its text paths, and the jobs the routes a job may run.

A route's endpoint takes the request and the path's parameters as strings, nothing FastAPI
would resolve (`data_route` checks it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel
from starlette.routing import Route

from inferd.front.v2_codec import InferRequest
from inferd.server.dataplane import Endpoint, data_route
from inferd.server.routes import chat_completions, completions, generate, v2
from inferd.server.verb_routes import verb_endpoint
from inferd.verbs.catalog import all_verbs


@dataclass(frozen=True, slots=True)
class DataRoute:
    path: str
    endpoint: Endpoint
    purpose: str | None
    """What a request naming no model reaches ("predict", "embed", "rerank", "generate");
    None: the path names the model. A route with a purpose takes text (its body is bounded by
    `max_text_body_bytes`)."""
    summary: str
    body: type[BaseModel]
    """The JSON body, as the schema shows it (the endpoint reads and checks it itself)."""
    tag: str
    route: Route = field(init=False)
    """The Starlette route that serves it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "route", data_route(self.path, self.endpoint))


VERB_ROUTES = tuple(
    DataRoute(form.path, verb_endpoint(verb, form), verb.purpose, form.summary, form.body, form.tag)
    for verb in all_verbs()
    for form in verb.forms
)
"""Each verb's HTTP forms (inferd.verbs): `/predict`, `/embed`, `/v1/embeddings`, `/rerank`,
a kind's own verb's, ..."""

DATA_ROUTES = (
    *VERB_ROUTES,
    DataRoute("/v2/models/{model}/infer", v2.infer, None, "Inference", InferRequest, "v2"),
    DataRoute(
        "/v2/models/{model}/versions/{version}/infer",
        v2.version_infer,
        None,
        "Inference on a version",
        InferRequest,
        "v2",
    ),
    DataRoute(
        "/generate",
        generate.generate,
        "generate",
        "Generate text",
        generate.GenerateRequest,
        "generation",
    ),
    DataRoute(
        "/v1/completions",
        completions.completions,
        "generate",
        "Completions (OpenAI)",
        completions.CompletionRequest,
        "openai",
    ),
    DataRoute(
        "/v1/chat/completions",
        chat_completions.chat_completions,
        "generate",
        "Chat completions (OpenAI)",
        chat_completions.ChatRequest,
        "openai",
    ),
)

TEXT_PATHS = frozenset(r.path for r in DATA_ROUTES if r.purpose is not None)
"""The routes that take text, whose bodies the body limit bounds tighter."""
