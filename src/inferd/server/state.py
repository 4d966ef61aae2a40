"""Typed access to the objects the lifespan puts on `app.state`."""

from __future__ import annotations

from fastapi import Request

from inferd.config.server import ServerSettings
from inferd.engine.manager import ModelManager


def manager_of(request: Request) -> ModelManager:
    manager: ModelManager = request.app.state.manager
    return manager


def settings_of(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings
