"""Debian's `redis-server`, started for a test on a free loopback port in a folder of its own
(no persistence unless asked), and stopped after."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.integration.server import free_port


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A running Redis; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is needed: apt-get install redis-server (scripts/test.sh)")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(folder),
            "--logfile", str(folder / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (
                        (folder / "redis.log").read_text()
                        if (folder / "redis.log").exists()
                        else ""
                    )
                    raise RuntimeError(f"redis-server did not start:\n{log}") from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
