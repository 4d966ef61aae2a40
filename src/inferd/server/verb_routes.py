"""The HTTP endpoint of a verb's form (inferd.verbs.verb.Form): the body read and checked
against the form's type, the client's deadline from its header, the engine's one entry, the
answer in the form's words. A client that goes away cancels its request."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from inferd.server.body import read_json
from inferd.server.dataplane import Endpoint
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.responses import json_response
from inferd.server.state import engine_of, header_timeout_s
from inferd.verbs.verb import Form, Served, Verb


def verb_endpoint(verb: Verb[Any, Any], form: Form[Any, Any, Any]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_json(request, form.body, verb.purpose)
        asked = form.request(body)
        timeout_s = header_timeout_s(request)
        async with cancel_on_disconnect(request.receive):
            served, answer = await engine_of(request).serve(verb, asked, timeout_s)
        who = Served(served.model, str(served.version), started)
        return json_response(form.response(body, asked, answer, who))

    endpoint.__name__ = form.path.strip("/").replace("/", "_") or verb.name
    return endpoint
