"""API keys over HTTP: Bearer tokens for inference, separate admin keys for what changes server
state (the keys and their rule: inferd.front.keys). Each request let in is served with its
client set (inferd.clients): its API key's, or without API keys its peer address's.

Probes stay open, so load balancers and Kubernetes need no key;
/metrics stays open for the scraper, and the status page (`/`, `/v1/status`) with it: it shows
what the metrics show. Without admin keys, admin routes are refused outright.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.clients import client_scope
from inferd.errors import ErrorCode
from inferd.front.keys import Keys, bearer
from inferd.observability.trace import current_trace
from inferd.server.error_answers import response_for

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
    def __init__(self, app: ASGIApp, keys: Keys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        admin = scope["path"].startswith(ADMIN_PREFIXES)
        peer = scope.get("client")
        address = peer[0] if peer else None
        if not admin and not self.keys.api_keys:
            with client_scope(self.keys.client_for(None, address)) as client:
                current_trace().client = client.name
                await self.app(scope, receive, send)
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        token = bearer(authorization)
        refused = self.keys.refusal(admin, token)
        if refused is not None:
            request_id = str(scope.get("state", {}).get("request_id", ""))
            response = response_for(refused, request_id, scope["path"])
            if refused.code is ErrorCode.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        with client_scope(self.keys.client_for(token, address)) as client:
            current_trace().client = client.name
            await self.app(scope, receive, send)
