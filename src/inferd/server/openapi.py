"""The OpenAPI schema at /openapi.json: FastAPI's, for the routes it serves and for the data
routes (inferd.server.data_routes), without its 422 answers: inferd answers bad input with 400
and a code."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def openapi_body(schema: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads its body itself."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema.model_json_schema()}},
        }
    }
