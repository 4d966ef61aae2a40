"""The OpenAPI schema at /openapi.json: FastAPI's, of the routes it serves and of the data
routes, whose entries are made from their table (inferd.server.data_routes): the data plane
serves them, FastAPI's routers never see them. Without FastAPI's 422 answers: inferd answers
bad input with 400 and a code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from inferd.server.error_answers import ERROR_RESPONSES, OPENAI_ERROR_RESPONSES, openai_shaped

if TYPE_CHECKING:
    from inferd.server.data_routes import DataRoute


def openapi_body(schema: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads its body itself."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema.model_json_schema()}},
        }
    }


def install_openapi(app: FastAPI, data_routes: Sequence[DataRoute]) -> None:
    """The app's /openapi.json: its own routes' entries and `data_routes`' (made once, when
    the schema is first asked for)."""
    app.openapi = lambda: _schema(app, data_routes)  # type: ignore[method-assign]


def _entry(row: DataRoute) -> APIRoute:
    """What the schema shows of a data route: the entry FastAPI would make of the endpoint,
    with the row's summary, tag and body, and the answers in the route's error shape."""
    return APIRoute(
        row.path,
        row.endpoint,
        methods=["POST"],
        summary=row.summary,
        tags=[row.tag],
        responses=OPENAI_ERROR_RESPONSES if openai_shaped(row.path) else ERROR_RESPONSES,
        openapi_extra=openapi_body(row.body),
    )


def _schema(app: FastAPI, data_routes: Sequence[DataRoute]) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=[*app.routes, *(_entry(row) for row in data_routes)],
        )
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = schema
    return app.openapi_schema
