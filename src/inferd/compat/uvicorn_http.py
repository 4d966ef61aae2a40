"""uvicorn's httptools protocol, which inferd's bounded HTTP protocol subclasses
(inferd.server.http_limits): not a public API of uvicorn.

Written for uvicorn 0.55 (`WRITTEN_FOR`; pyproject.toml pins the series). What the subclass
relies on, and tests/unit/compat/test_uvicorn_contract.py checks on the installed uvicorn: the
protocol's hooks it overrides and calls (`HOOKS`), the attributes it reads (`ATTRIBUTES`), and
the request cycle's constructor, which it calls to stand a finished cycle for a request it
answered itself (`CYCLE_PARAMETERS`, and its `response_complete` flag)."""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

WRITTEN_FOR = "0.55"
HOOKS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_header",
    "on_headers_complete",
    "on_message_complete",
    "on_response_complete",
)
ATTRIBUTES = (
    "loop",
    "transport",
    "parser",
    "cycle",
    "flow",
    "server_state",
    "scope",
    "client",
    "url",
    "headers",
    "logger",
    "access_logger",
    "access_log",
)
CYCLE_PARAMETERS = (
    "scope",
    "transport",
    "flow",
    "logger",
    "access_logger",
    "access_log",
    "default_headers",
    "message_event",
    "expect_100_continue",
    "keep_alive",
    "on_response",
)

__all__ = [
    "ATTRIBUTES",
    "CYCLE_PARAMETERS",
    "HOOKS",
    "WRITTEN_FOR",
    "HttpToolsProtocol",
    "RequestResponseCycle",
]
