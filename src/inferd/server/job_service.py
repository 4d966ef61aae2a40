"""The server's side of asynchronous jobs (inferd.jobs): the store the composition root opened
(inferd.jobs.store_choice), the worker of this process, and how a job's route runs here:
through the data plane itself (the same parsing, validation, engine calls and error answers as
a request on the wire), with a request made in memory. Authentication and the body limit
were applied to `POST /v1/jobs`.

A job belongs to the API key that submitted it: the job keeps a hash of the key (never the
key), and another key reading it gets the 404 of an unknown job. Without API keys, jobs have
no owner. A job the store lost has no known owner: its id answers it as lost to any key.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import orjson
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.errors import ErrorCode, InvalidInputError
from inferd.jobs.callback import Callbacks
from inferd.jobs.machine_share import JobShare
from inferd.jobs.record import Job
from inferd.jobs.store import JobStore
from inferd.jobs.worker import JobWorker
from inferd.observability.live import LiveWindow
from inferd.observability.observer import Observer
from inferd.observability.trace import RequestTrace, current_trace, tracing
from inferd.server.dataplane import DataPlane
from inferd.server.error_answers import error_response

log = logging.getLogger(__name__)

CLIENTS_QUIET_S = 1.0
"""With no client request for this long, jobs are not held to their share."""


def owner_of(api_key: bytes | None) -> str | None:
    """The owner a job submitted with `api_key` keeps: a hash of the key (None: no key)."""
    if api_key is None:
        return None
    return hashlib.sha256(b"inferd-job-owner:" + api_key).hexdigest()[:32]


class Jobs:
    def __init__(
        self,
        settings: ServerSettings,
        engine: Engine,
        app: ASGIApp,
        routes: Sequence[Route],
        handlers: Any,
        observer: Observer,
        live: LiveWindow,
        store: JobStore,
        owned: bool = False,
    ) -> None:
        """`store`: where jobs are kept (this process, or Redis); `owned`: the server has API
        keys, so jobs belong to the key that submitted them."""
        self._settings = settings
        self.owned = owned
        self._engine = engine
        self._app = app
        self._routes = list(routes)
        self._plane = DataPlane(_no_route, self._routes, handlers)
        self.store = store
        hosts = [h for h in settings.jobs_callback_hosts.split(",") if h.strip()]
        self.callbacks = Callbacks(hosts)
        self._share = JobShare(settings.jobs_max_share, live.idle_s, CLIENTS_QUIET_S)
        self.worker = JobWorker(
            self.store,
            self._run_route,
            self._may_take,
            observer,
            settings.jobs_concurrency,
            settings.jobs_max_attempts,
            settings.jobs_claim_after_s / 3,
            self.callbacks,
        )

    async def start(self) -> None:
        await self.store.open()
        if self.store.kind == "process":
            log.warning(
                "jobs are kept in this process only (no jobs_redis_url): a restart loses "
                "queued jobs and other processes do not share them"
            )
        else:
            log.info("jobs on Redis", extra={"prefix": self._settings.jobs_redis_prefix})
        self.worker.start()

    async def stop(self) -> None:
        await self.worker.stop(self._settings.drain_timeout_s)
        await self.store.close()

    # -- the HTTP side -------------------------------------------------------------------

    def check(self, route: str, body: dict[str, Any], callback_url: str | None) -> None:
        """4004 for a job that could never run: a route that is no inference route, a
        streaming body, a callback to a host the server does not allow."""
        if not any(self._matches(r, route) for r in self._routes):
            raise InvalidInputError(f"'{route}' is not an inference route a job can run")
        if body.get("stream") is True:
            raise InvalidInputError("a job cannot stream: its answer is read once it is done")
        if callback_url is not None:
            self.callbacks.check(callback_url)

    async def submit(
        self, route: str, body: dict[str, Any], callback_url: str | None, api_key: bytes | None
    ) -> Job:
        self.check(route, body, callback_url)
        job = Job(
            route=route,
            body=orjson.dumps(body),
            callback_url=callback_url,
            owner=owner_of(api_key) if self.owned else None,
            traceparent=current_trace().traceparent,
        )
        return await self.store.submit(job)

    async def get(self, job_id: str, api_key: bytes | None) -> Job | None:
        """The job, if it is `api_key`'s to read (any job, without API keys); else None."""
        job = await self.store.get(job_id)
        if job is None or not self.owned or job.owner is None:
            return job
        return job if job.owner == owner_of(api_key) else None

    def detail(self) -> dict[str, Any]:
        """The job store as `/ready` shows it."""
        return {"store": self.store.kind, **self.store.reach.detail()}

    @staticmethod
    def _matches(route: Route, path: str) -> bool:
        match, _ = route.matches({"type": "http", "path": path, "method": "POST"})
        return match is Match.FULL

    # -- the worker's side ---------------------------------------------------------------

    def _may_take(self) -> bool:
        """Ready, not draining, no client's request waiting in a queue, and, while clients
        come, within the jobs' share of the time (`JobShare`). (Waiting also for no request
        in flight at all took a third fewer jobs through at half load for no better client
        p99: benchmarks/jobs_bench.py.)"""
        engine = self._engine
        if not engine.loader.done or engine.admission.draining or not engine.accepting:
            return False
        if engine.registry.waiting_requests():  # (asked every few ms: no list made)
            return False
        return self._share.ready()

    async def _run_route(self, route: str, body: bytes, job_id: str) -> tuple[int, bytes]:
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": route,
            "raw_path": route.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("job", 0),
            "server": ("inferd", 0),
            "app": self._app,
            "state": {"request_id": f"job-{job_id}"},
        }
        sent = False
        never = asyncio.Event()

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()  # a job's "client" never leaves
            return {"type": "http.disconnect"}

        status = 500
        chunks: list[bytes] = []

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        with tracing(RequestTrace(request_id=f"job-{job_id}")) as trace:
            await self._plane(scope, receive, send)
        # its work, not its waits: what the share counts
        self._share.spent(trace.preprocess_s + trace.inference_s + trace.postprocess_s)
        return status, b"".join(chunks)


async def _no_route(scope: Scope, receive: Receive, send: Send) -> None:
    response: Response = error_response(
        404, int(ErrorCode.NOT_FOUND), f"no inference route {scope['path']}", ""
    )
    await response(scope, receive, send)
