"""The data plane: inference routes served as plain Starlette routes, ahead of FastAPI.

For these routes FastAPI's per-request layers (its exception middleware's exit stacks, its
router's walk over every route, dependency resolution and the request/response wrappers) cost
as much event-loop time as inferd's own handling does (py-spy on `/embed` under load), on the
thread that also feeds the runtime. `DataPlane` sits innermost among inferd's middlewares, so
request ids, observation, auth and the body limit apply exactly as to every other route; a
request it has no route for (path and method) goes on to FastAPI, which serves the
control plane and the docs. The routes come from one table (inferd.server.data_routes), which
also makes their entries in the OpenAPI schema.

A request is matched once against these routes (what Starlette's `Router` does for a full
match: the route's parameters and the route itself in the scope), then handled by the route.
Errors: Starlette's own `request_response` answers an endpoint's exception with the handlers
the app registered (found, as Starlette's exception middleware arranges it, in the scope).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[..., Awaitable[Response]]
"""`(request, **path_params) -> Response`: a route function as FastAPI registers it."""


def data_route(path: str, endpoint: Endpoint) -> Route:
    """A POST route whose endpoint takes the request and the path's parameters as strings,
    nothing FastAPI would have to resolve (bodies, dependencies)."""
    params = inspect.signature(endpoint).parameters
    names = [n for n in params if n != "request"]

    async def serve(request: Request) -> Response:
        return await endpoint(request, **request.path_params)

    route = Route(path, serve, methods=["POST"], name=endpoint.__name__)
    if (
        "request" not in params
        or set(names) != set(route.param_convertors)
        or any(params[n].annotation not in (str, "str") for n in names)
    ):
        raise ValueError(f"{endpoint.__name__} at {path} needs FastAPI to resolve its parameters")
    return route


class DataPlane:
    def __init__(
        self, app: ASGIApp, routes: Sequence[Route], handlers: Mapping[Any, Callable[..., Any]]
    ) -> None:
        self.app = app
        self.routes = list(routes)
        # the handlers Starlette's exception middleware would use; `Exception` itself is left
        # to the outermost server-error middleware, as for every other route
        self.exception_handlers: tuple[dict[Any, Any], dict[int, Any]] = (
            {k: v for k, v in handlers.items() if k is not Exception},
            {},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # what the router does for a full match, done here once per request; a path that
            # matches with another method (a GET of an inference path) goes on to FastAPI
            for route in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)
                    scope["route"] = route
                    scope["starlette.exception_handlers"] = self.exception_handlers
                    await route.handle(scope, receive, send)
                    return
        await self.app(scope, receive, send)
