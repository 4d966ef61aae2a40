"""API keys over HTTP: Bearer tokens for inference, separate admin keys for what changes server
state (the keys and their rule: inferd.front.keys).

Probes stay open, so load balancers and Kubernetes need no key;
/metrics stays open for the scraper, and the status page (`/`, `/v1/status`) with it: it shows
what the metrics show. Without admin keys, admin routes are refused outright.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.errors import ErrorCode
from inferd.front.keys import Keys, bearer
from inferd.server.errors import response_for

OPEN_PATHS = frozenset(
    {
        "/health",
        "/ready",
        "/v2/health/live",
        "/v2/health/ready",
        "/metrics",
        "/",
        "/status.js",
        "/v1/status",
    }
)
ADMIN_PREFIXES = ("/v2/repository/models/",)


class AuthMiddleware:
    def __init__(self, app: ASGIApp, api_keys: tuple[bytes, ...], admin_keys: tuple[bytes, ...]):
        self.app = app
        self.keys = Keys(api_keys, admin_keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        admin = scope["path"].startswith(ADMIN_PREFIXES)
        if not admin and not self.keys.api_keys:
            await self.app(scope, receive, send)
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        refused = self.keys.refusal(admin, bearer(authorization))
        if refused is not None:
            request_id = str(scope.get("state", {}).get("request_id", ""))
            response = response_for(refused, request_id, scope["path"])
            if refused.code is ErrorCode.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
