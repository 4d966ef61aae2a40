"""A service the process runs beside the HTTP app, in the app's lifespan (gRPC is one): started
before the app takes requests, stopped once the engine drained and the jobs stopped, before the
engine closes. The composition root (inferd.cli.serve) hands the app its companions; the app and
the runner know them by this protocol alone."""

from __future__ import annotations

from typing import Protocol


class Companion(Protocol):
    @property
    def name(self) -> str:
        """What it serves, as the start line names it ("gRPC")."""
        ...

    @property
    def url(self) -> str | None:
        """Where it listens once started, its real port (None: it is off)."""
        ...

    async def start(self) -> None:
        """Listens; raises OSError when it cannot (the app then does not start)."""
        ...

    async def stop(self) -> None:
        """Stops listening, giving the calls still running a moment to finish."""
        ...
