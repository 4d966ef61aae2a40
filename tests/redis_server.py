"""Debian's `redis-server`, started for a test on a free loopback port in a folder of its own
(no persistence unless asked), and stopped after. `RedisProcess` can also be killed and started
again on the same port: with its data (AOF on) or empty."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.integration.server import free_port


class RedisProcess:
    def __init__(self, folder: Path, appendonly: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is needed: apt-get install redis-server (scripts/test.sh)"
            )
        self.binary = binary
        self.folder = folder
        self.appendonly = appendonly
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "yes" if self.appendonly else "no",
                "--dir", str(self.folder),
                "--logfile", str(self.folder / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 15
        try:
            while True:
                try:
                    client.ping()
                    return
                except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        log = self.folder / "redis.log"
                        text = log.read_text() if log.exists() else ""
                        raise RuntimeError(f"redis-server did not start:\n{text}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no save."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def restart_empty(self) -> None:
        """Killed, its data removed, and started again on the same port."""
        self.kill()
        for path in self.folder.iterdir():
            if path.name != "redis.log":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


@contextmanager
def redis_server(folder: Path, appendonly: bool = False) -> Iterator[str]:
    """A running Redis; yields its URL."""
    server = RedisProcess(folder, appendonly)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
