"""The data plane's router: which endpoints it may take, and that it answers as FastAPI would
(path parameters, the route in the scope, exception handlers, everything else passed on)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from inferd.server.data_routes import DATA_ROUTES
from inferd.server.dataplane import DataPlane, data_route


class Boom(Exception):
    pass


class Body(BaseModel):
    x: int


async def run(request: Request, name: str) -> JSONResponse:
    if name == "boom":
        raise Boom("exploded")
    route = request.scope["route"].path
    return JSONResponse({"name": name, "route": route, "body": (await request.body()).decode()})


async def typed(body: Body) -> dict[str, int]:
    return {"x": body.x}


async def read(name: str) -> dict[str, str]:
    return {"read": name}


async def on_boom(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=418)


def make_app() -> FastAPI:
    app = FastAPI()
    app.post("/items/{name}/run")(run)
    app.get("/items/{name}/run")(read)
    app.post("/typed")(typed)
    app.add_exception_handler(Boom, on_boom)
    app.add_middleware(
        DataPlane, routes=[data_route("/items/{name}/run", run)], handlers=app.exception_handlers
    )
    return app


def test_only_endpoints_fastapi_need_not_resolve_are_taken() -> None:
    with pytest.raises(ValueError, match="typed at /typed"):
        data_route("/typed", typed)  # a body model: FastAPI must parse and validate it
    for row in DATA_ROUTES:  # inferd's own: each takes the request and path params
        assert data_route(row.path, row.endpoint).path == row.path == row.route.path


async def test_data_plane_answers_as_fastapi_would_and_the_rest_pass_on() -> None:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        served = await client.post("/items/abc/run", content=b"payload")
        assert served.json() == {"name": "abc", "route": "/items/{name}/run", "body": "payload"}
        boom = await client.post("/items/boom/run")
        assert (boom.status_code, boom.json()) == (418, {"error": "exploded"})
        assert (await client.get("/items/abc/run")).json() == {"read": "abc"}  # not POST
        assert (await client.post("/typed", json={"x": 3})).json() == {"x": 3}
        assert (await client.post("/nowhere")).status_code == 404
