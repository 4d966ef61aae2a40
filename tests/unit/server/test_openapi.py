"""The schema's entries of the data routes come from their table: every row is listed, with its
body, its summary and tag, and its answers in its error shape; no 422 anywhere."""

from __future__ import annotations

from fastapi import FastAPI

from inferd.server.data_routes import DATA_ROUTES, TEXT_PATHS
from inferd.server.error_answers import openai_shaped
from inferd.server.openapi import install_openapi


def test_every_data_route_is_in_the_schema_as_its_row_says() -> None:
    app = FastAPI(title="t", version="0")
    install_openapi(app, DATA_ROUTES)
    schema = app.openapi()
    assert set(schema["paths"]) == {row.path for row in DATA_ROUTES}
    for row in DATA_ROUTES:
        entry = schema["paths"][row.path]["post"]
        assert (entry["summary"], entry["tags"]) == (row.summary, [row.tag])
        body = entry["requestBody"]["content"]["application/json"]["schema"]
        model = row.body.model_json_schema()
        assert (body["title"], set(body["properties"])) == (
            model["title"],
            set(model["properties"]),
        )
        shape = "OpenAIErrorBody" if openai_shaped(row.path) else "ErrorBody"
        error = entry["responses"]["429"]["content"]["application/json"]["schema"]
        assert error == {"$ref": f"#/components/schemas/{shape}"}
        assert "422" not in entry["responses"]


def test_the_text_paths_are_the_routes_with_a_purpose() -> None:
    assert {
        "/predict",
        "/embed",
        "/rerank",
        "/v1/rerank",
        "/v1/embeddings",
        "/tag",
        "/generate",
        "/v1/completions",
        "/v1/chat/completions",
    } == TEXT_PATHS
