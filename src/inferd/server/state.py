"""Typed access to what a route reads from its request: app state objects, the deadline header."""

from __future__ import annotations

from starlette.requests import Request

from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.errors import InvalidInputError

TIMEOUT_HEADER = "x-request-timeout-ms"


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def settings_of(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


def header_timeout_s(request: Request) -> float | None:
    """The client's deadline from `X-Request-Timeout-Ms`, if it sent one."""
    header = request.headers.get(TIMEOUT_HEADER)
    if header is None:
        return None
    if not (header.isascii() and header.isdigit()) or int(header) == 0:
        raise InvalidInputError(f"{TIMEOUT_HEADER} must be a positive integer of milliseconds")
    return int(header) / 1000.0
