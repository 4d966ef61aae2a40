"""The hot routes (inference, embeddings, classification) served without FastAPI's per-request
layers: for these, Starlette's exception middleware, FastAPI's exit-stack middleware, the
router's walk over every route and the request/response wrappers cost as much event-loop time
as our own handling does (py-spy on `/embed` under load), on the thread that also feeds the
runtime.

`HotRoutes` sits innermost among inferd's middlewares, so request ids, observation, auth and
the body limit apply exactly as for every other route. It matches a request against the hot
routes only (method and path, with Starlette's matcher), calls the endpoint with the request
and its path parameters, and answers its exceptions with the app's own handlers, as FastAPI
would; anything else goes on to FastAPI. The same endpoints stay registered with FastAPI too,
which owns their schema and docs (and serves them if the shortcut is ever removed).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Handler = Callable[[Request, Any], Any]
"""An app exception handler: (request, exception) -> a response, or an awaitable of one."""
Endpoint = Callable[..., Any]


def hot_route(path: str, endpoint: Endpoint) -> Route:
    """A POST route for `HotRoutes`: its endpoint must take the request and the path's
    parameters as strings, nothing FastAPI would have to resolve (bodies, dependencies)."""
    route = Route(path, endpoint, methods=["POST"])
    params = inspect.signature(endpoint).parameters
    names = [n for n in params if n != "request"]
    if (
        "request" not in params
        or set(names) != set(route.param_convertors)
        or any(params[n].annotation not in (str, "str") for n in names)
    ):
        raise ValueError(f"{endpoint.__name__} at {path} needs FastAPI to resolve its parameters")
    return route


class HotRoutes:
    def __init__(
        self, app: ASGIApp, routes: Sequence[Route], handlers: Mapping[Any, Handler]
    ) -> None:
        self.app = app
        self.routes = list(routes)
        # what Starlette's ExceptionMiddleware answers; `Exception` itself is left to the
        # outermost ServerErrorMiddleware, as without this shortcut
        self.handlers = {k: v for k, v in handlers.items() if isinstance(k, type)
                         and k is not Exception}  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            for route in self.routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)
                    scope["route"] = route
                    await self._serve(route, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            response: Response = await route.endpoint(request, **scope["path_params"])
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise
            response = await _answer(handler, request, exc)
        try:
            await response(scope, receive, watched)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None or started:
                raise
            await (await _answer(handler, request, exc))(scope, receive, watched)

    def _handler_for(self, exc: Exception) -> Handler | None:
        for cls in type(exc).__mro__:
            if cls in self.handlers:
                return self.handlers[cls]
        return None


async def _answer(handler: Handler, request: Request, exc: Exception) -> Response:
    result = handler(request, exc)
    response: Response = await result if inspect.isawaitable(result) else result
    return response
