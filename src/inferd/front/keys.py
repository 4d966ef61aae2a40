"""API keys: Bearer tokens for inference, separate admin keys for what changes server state;
the one rule every protocol applies with them (inferd.server.auth over HTTP, the gate of
inferd.grpc_v2 over gRPC).

Keys come from files (one per line), never from command lines where `ps` would show them. Keys
are compared in constant time. Without admin keys, admin actions are refused outright.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from inferd.errors import ConfigError, ForbiddenError, InferdError, UnauthorizedError


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


class Keys:
    """The server's API and admin keys, and the one rule every protocol applies with them."""

    def __init__(self, api_keys: tuple[bytes, ...], admin_keys: tuple[bytes, ...]) -> None:
        self.api_keys = api_keys
        self.admin_keys = admin_keys

    def refusal(self, admin: bool, presented: bytes | None) -> InferdError | None:
        """Why a request with the bearer token `presented` (None: none) may not go on; None
        when it may. Inference needs an API key when the server has any; admin actions
        always need an admin key, and are off when the server has none."""
        keys = self.admin_keys if admin else self.api_keys
        if not admin and not keys:
            return None
        if admin and not keys:
            return ForbiddenError("admin routes are off: the server has no admin keys")
        if not presented or not _matches(presented, keys):
            what = "an admin key" if admin else "an API key"
            return UnauthorizedError(f"this route needs {what}: Authorization: Bearer <key>")
        return None


def bearer(authorization: bytes | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` value."""
    if authorization is None or authorization[:7].lower() != b"bearer ":
        return None
    return authorization[7:].strip() or None
