"""Locust load for inferd, for teams that use Locust; the bodies are `inferd bench`'s own.

    locust -f benchmarks/lib/locustfile.py --host http://127.0.0.1:8000
    INFERD_ENDPOINT=v2 INFERD_MODEL=mymodel locust -f benchmarks/lib/locustfile.py --headless \\
        -u 32 -r 8 -t 60s --host http://127.0.0.1:8000

INFERD_ENDPOINT: embed (default), predict, v1-embeddings, generate or v2; INFERD_MODEL: the
model (default: the server's); INFERD_LENGTHS: generated text lengths in words (default
loguniform:8-100); INFERD_BATCH: texts per request (default 1). Errors are told apart by
inferd's error code, as `inferd bench` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from locust import FastHttpUser, task

from inferd.bench.workload import Lengths, build_workload

_cycle: dict[str, tuple[str, Callable[[], bytes]]] = {}


def _bodies(host: str) -> tuple[str, Callable[[], bytes]]:
    if host not in _cycle:
        lengths = Lengths.parse(os.environ.get("INFERD_LENGTHS", "loguniform:8-100"))
        workload = build_workload(
            host,
            os.environ.get("INFERD_ENDPOINT", "embed"),
            os.environ.get("INFERD_MODEL"),
            inputs=None,
            lengths=lengths,
            count=256,
            batch=int(os.environ.get("INFERD_BATCH", "1")),
            max_new_tokens=32,
            v2_length=16,
            seed=0,
        )
        _cycle[host] = (workload.path, workload.cycle())
    return _cycle[host]


class InferdUser(FastHttpUser):
    @task
    def infer(self) -> None:
        path, next_body = _bodies(self.host or "")
        headers = {"content-type": "application/json"}
        with self.client.post(
            path, data=next_body(), catch_response=True, headers=headers
        ) as response:
            if response.status_code != 200:
                try:
                    body = response.json()
                    error = body.get("error")  # OpenAI's shape (the /v1 routes) holds it inside
                    code = (error if isinstance(error, dict) else body).get("code")
                except (ValueError, AttributeError):
                    code = None
                response.failure(f"HTTP {response.status_code}, code {code}")
