"""API keys: Bearer tokens for inference, separate admin keys for what changes server state.

Keys come from files (one per line), never from command lines where `ps` would show them. Keys
are compared in constant time. Probes stay open, so load balancers and Kubernetes need no key;
/metrics stays open for the scraper. Without admin keys, admin routes are refused outright.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.errors import ConfigError
from inferd.server.errors import error_response

OPEN_PATHS = frozenset({"/health", "/ready", "/v2/health/live", "/v2/health/ready", "/metrics"})
ADMIN_PREFIXES = ("/v2/repository/models/",)


def read_keys(path: Path | None) -> tuple[bytes, ...]:
    if path is None:
        return ()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the key file: {exc.strerror or exc}") from exc
    keys = tuple(
        line.strip().encode() for line in lines if line.strip() and not line.startswith("#")
    )
    if not keys:
        raise ConfigError(f"{path}: the key file holds no key")
    return keys


def _matches(presented: bytes, keys: Iterable[bytes]) -> bool:
    found = False
    for key in keys:  # no early exit: the time taken does not depend on which key matched
        found |= hmac.compare_digest(presented, key)
    return found


class AuthMiddleware:
    def __init__(self, app: ASGIApp, api_keys: tuple[bytes, ...], admin_keys: tuple[bytes, ...]):
        self.app = app
        self.api_keys = api_keys
        self.admin_keys = admin_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        admin = scope["path"].startswith(ADMIN_PREFIXES)
        keys = self.admin_keys if admin else self.api_keys
        if not admin and not keys:
            await self.app(scope, receive, send)
            return
        request_id = str(scope.get("state", {}).get("request_id", ""))
        if admin and not keys:
            response = error_response(
                403, 4030, "admin routes are off: the server has no admin keys", request_id
            )
            await response(scope, receive, send)
            return
        presented = b""
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                presented = value[7:].strip()
                break
        if not presented or not _matches(presented, keys):
            what = "an admin key" if admin else "an API key"
            response = error_response(
                401, 4010, f"this route needs {what}: Authorization: Bearer <key>", request_id
            )
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
