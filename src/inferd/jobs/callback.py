"""Job callbacks: when a job finishes, its record is POSTed to the URL the client gave, if
that URL's host is one the server allows (`jobs_callback_hosts`): a server must not be made
to send requests wherever a client asks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx
import orjson

from inferd.errors import InvalidInputError
from inferd.jobs.record import Job

log = logging.getLogger(__name__)

ATTEMPTS = 3
FIRST_PAUSE_S = 1.0
TIMEOUT_S = 10.0
MAX_URL_CHARS = 2048


class Callbacks:
    def __init__(self, allowed_hosts: Sequence[str]) -> None:
        self.allowed_hosts = frozenset(h.strip().lower() for h in allowed_hosts if h.strip())
        self._client: httpx.AsyncClient | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def check(self, url: str) -> None:
        """4004 unless `url` is a well-formed http(s) URL to an allowed host (host, or
        host:port)."""
        malformed = InvalidInputError(
            "callback_url must be an http or https URL (no spaces or control characters, a "
            f"host, a port from 1 to 65535, at most {MAX_URL_CHARS} characters)"
        )
        if len(url) > MAX_URL_CHARS or any(not ("!" <= c <= "~") for c in url):
            raise malformed
        try:
            parts = urlsplit(url)
            port = parts.port
            httpx.URL(url)  # what sends it must read it too
        except (ValueError, httpx.InvalidURL) as exc:
            raise malformed from exc
        if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
            raise malformed
        if not self.allowed_hosts:
            raise InvalidInputError("callbacks are off: the server allows no callback host")
        host = parts.hostname.lower()
        named = {host, f"{host}:{port}"} if port else {host}
        if not named & self.allowed_hosts:
            raise InvalidInputError(
                f"callback host '{parts.netloc}' is not allowed; allowed: "
                f"{sorted(self.allowed_hosts)}"
            )

    def send(self, url: str, job: Job) -> None:
        """POSTs the job's record to `url` in the background (a few tries, then logged)."""
        task = asyncio.get_running_loop().create_task(self._send(url, job))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, url: str, job: Job) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False)
        body = orjson.dumps(job.view())
        headers = {"content-type": "application/json", "x-inferd-job-id": job.id}
        if job.traceparent is not None:  # the submitter's trace goes on to its callback
            headers["traceparent"] = job.traceparent
        pause = FIRST_PAUSE_S
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = await self._client.post(url, content=body, headers=headers)
                if response.status_code < 500:
                    if response.status_code >= 400:
                        log.warning(
                            "a job callback was refused",
                            extra={"job_id": job.id, "status": response.status_code},
                        )
                    return
                reason = f"status {response.status_code}"
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            if attempt < ATTEMPTS:
                await asyncio.sleep(pause)
                pause *= 2
        log.warning(
            "a job callback failed",
            extra={"job_id": job.id, "attempts": ATTEMPTS, "reason": reason},
        )

    async def close(self, timeout_s: float = 5.0) -> None:
        if self._sending:
            _, left = await asyncio.wait(self._sending, timeout=timeout_s)
            for task in left:
                task.cancel()
        if self._client is not None:
            await self._client.aclose()
