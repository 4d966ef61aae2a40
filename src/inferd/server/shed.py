"""Refusing an inference request from its head alone, in the HTTP protocol, before the app.

Under overload most requests are refused: 4290 when the queue of every model they could reach
is full or the server holds `max_in_flight` requests, 5030 while it shuts down. Through the app
each refusal cost about half a millisecond of event-loop time (a task, the middlewares, reading
and parsing the body, tokenizing, the error handler), the loop that also reads every socket:
at 8x the capacity the loop fell behind, refusals waited hundreds of milliseconds inside the
server and seconds in the kernel's buffers. `EarlyRefusal` decides from the method and the
path (the engine's `refusal_before_reading`: nothing in the body can change the answer) and
writes the same answer the app would have written, within the protocol's callback: no task,
no body read (what arrives of it is skipped; the connection stays open for the next request).

What it cannot decide from the head (an unknown model, a model not ready, a queue with room)
goes to the app as before, and is counted as arriving for its model (or purpose) until it is
answered: when the heads read in one turn of the event loop outnumber the room left in the
queues, the rest are refused here too, rather than each refused after its body was read.

These refusals are counted in the request metrics like every other answer; their log lines
are summed, one line per code a second, since a flood of them is what they are for.
"""

from __future__ import annotations

import asyncio
import http
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence

from starlette.routing import Match, Route

from inferd.clients import client_scope
from inferd.engine import Engine
from inferd.errors import ErrorCode, InferdError
from inferd.front.keys import Keys, bearer
from inferd.front.statuses import http_status, retry_after_s
from inferd.observability.metrics import Metrics
from inferd.server.data_routes import DataRoute
from inferd.server.error_answers import response_for
from inferd.server.middleware import request_id_from
from inferd.server.observe import server_timing

log = logging.getLogger(__name__)

LOG_EVERY_S = 1.0
"""Refusals made here are logged as one line per code at most this often."""


class Passed:
    """A request the gate let through, counted as arriving until `release()` (its answer)."""

    __slots__ = ("_arriving", "_key")

    def __init__(self, arriving: Counter[str], key: str) -> None:
        self._arriving = arriving
        self._key = key
        arriving[key] += 1

    def release(self) -> None:
        self._arriving[self._key] -= 1


class EarlyRefusal:
    """The protocol's hook: `answer(method, url, headers, keep_alive, received_at)` returns a
    `_Refusal` (the protocol writes it and adds the server's default headers) for a request
    refused whatever its body, a `Passed` for an inference request let through, else None."""

    def __init__(
        self,
        engine: Engine,
        routes: Sequence[DataRoute],
        metrics: Metrics | None,
        keys: Keys | None = None,
    ) -> None:
        """`routes`: the inference routes (inferd.server.data_routes), each with the purpose
        its requests serve when they name no model; a route whose path names the model
        (`{model}`) has None. `keys`: the server's API keys, to know whose request it is
        (the fair share of a queue is a client's)."""
        self._engine = engine
        self._keys = keys or Keys((), ())
        pairs = [(row.route, row.purpose) for row in routes]
        self._exact = {r.path: (r, p) for r, p in pairs if not r.param_convertors}
        self._patterned = [(r, p) for r, p in pairs if r.param_convertors]
        self._metrics = metrics
        self._arriving: Counter[str] = Counter()
        self._refused: Counter[int] = Counter()
        self._held = 0
        """Of the refusals counted in `_refused`, those held back to pace their client."""
        self._flush: asyncio.TimerHandle | None = None

    def answer(
        self,
        method: bytes,
        url: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        keep_alive: bool,
        received_at: float,
        address: str | None = None,
    ) -> _Refusal | Passed | None:
        if method != b"POST":
            return None
        path = url.split(b"?", 1)[0]
        if b"%" in path:  # escaped paths are the router's to decode
            return None
        found = self._route_of(path.decode("latin-1"))
        if found is None:
            return None
        route, purpose, params = found
        model = params.get("model")
        key = model if model is not None else f"/{purpose}"
        client = self._keys.client_for(bearer(_header(headers, b"authorization")), address)
        with client_scope(client):
            refused = self._engine.refusal_before_reading(
                model, params.get("version"), purpose, self._arriving[key]
            )
        if refused is None:
            return Passed(self._arriving, key)
        request_id = request_id_from(headers)
        where = (route.path, path.decode("latin-1"))
        return _Refusal(self, refused, request_id, where, model, received_at)

    def _route_of(self, path: str) -> tuple[Route, str | None, dict[str, str]] | None:
        exact = self._exact.get(path)
        if exact is not None:
            return exact[0], exact[1], {}
        if not self._patterned or not path.startswith("/v2/"):
            return None
        scope = {"type": "http", "path": path, "method": "POST", "root_path": ""}
        for route, purpose in self._patterned:
            match, child = route.matches(scope)
            if match is Match.FULL:
                return route, purpose, dict(child["path_params"])
        return None

    def record(
        self, endpoint: str, model: str | None, status: int, code: int, s: float, held: bool
    ) -> None:
        """Counts a refusal written (`_Refusal.render`)."""
        if self._metrics is not None:
            self._metrics.on_request(endpoint, model, status, code, s)
            if held:
                self._metrics.on_paced(endpoint)
        self._refused[code] += 1
        self._held += held
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(LOG_EVERY_S, self._log)

    def _log(self) -> None:
        self._flush = None
        for code, count in sorted(self._refused.items()):
            log.warning(
                "requests refused before reading",
                extra={
                    "code": code,
                    "requests": count,
                    "window_s": LOG_EVERY_S,
                    "paced": self._held if code == ErrorCode.QUEUE_FULL else 0,
                },
            )
        self._refused.clear()
        self._held = 0


class _Refusal:
    """A request refused from its head, written by the protocol now or once its client's last
    `Retry-After` is over (inferd.server.http_limits paces a client that retries sooner)."""

    __slots__ = (
        "_endpoint",
        "_error",
        "_gate",
        "_model",
        "_path",
        "_received_at",
        "_request_id",
        "pace_s",
    )

    def __init__(
        self,
        gate: EarlyRefusal,
        error: InferdError,
        request_id: bytes,
        where: tuple[str, str],
        model: str | None,
        received_at: float,
    ) -> None:
        """`where`: the route's path (the metrics' endpoint) and the request's."""
        self._gate = gate
        self._error = error
        self._request_id = request_id
        self._endpoint, self._path = where
        self._model = model
        self._received_at = received_at
        # a 429 paces its client by the Retry-After it says (whole seconds, 1 at least); a
        # 5030 does not (a drain: the client should go elsewhere)
        retry = retry_after_s(error)
        paced = http_status(error) == 429 and retry is not None
        self.pace_s = float(max(1, math.ceil(retry))) if paced and retry is not None else 0.0

    def render(self, held_s: float) -> bytes:
        response = response_for(self._error, self._request_id.decode(), self._path)
        name, timing = server_timing(self._received_at)
        if held_s > 0:
            timing += b", hold;dur=%.3f" % (held_s * 1000)
        head = [
            b"HTTP/1.1 %d %s\r\n" % (response.status_code, _reason(response.status_code)),
            *(n + b": " + v + b"\r\n" for n, v in response.raw_headers),
            b"x-request-id: " + self._request_id + b"\r\n",
            name + b": " + timing + b"\r\n",
            b"\r\n",
        ]
        # the latency metrics count the decision, not the hold: a paced flood must not lift
        # the p99 of the answers (inferd_refusals_paced counts the holds)
        seconds = time.perf_counter() - self._received_at - held_s
        code = int(self._error.code)
        status = response.status_code
        self._gate.record(self._endpoint, self._model, status, code, seconds, held_s > 0)
        return b"".join(head) + bytes(response.body)


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for found, value in headers:
        if found == name:
            return value
    return None


def _reason(status: int) -> bytes:
    return http.HTTPStatus(status).phrase.encode("latin-1")
