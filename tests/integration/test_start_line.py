"""Where the server listens, said once at start (the real ports, `--port 0` included), and
its logs: JSON off a terminal, text lines with the time on one (a real pty)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.server import free_port

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|ERROR|DEBUG) ")


def _command(repository: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "inferd", "serve", "--repo", str(repository), *args]


def _lines_until(read: Callable[[], str | None], pattern: str, limit_s: float = 60) -> list[str]:
    """Lines read with `read()` until one holds `pattern` (that one last)."""
    lines: list[str] = []
    buffered = ""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        chunk = read()
        if chunk is None:
            continue
        if chunk == "":
            break
        buffered += chunk
        while "\n" in buffered:
            line, buffered = buffered.split("\n", 1)
            lines.append(line.rstrip("\r"))
            if pattern in line:
                return lines
    raise AssertionError(f"no line with {pattern!r} in:\n" + "\n".join(lines))


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(5)


def test_port_0_is_said_in_the_start_line_and_answers(repository: Path) -> None:
    grpc_port = free_port()
    process = subprocess.Popen(
        _command(repository, "--port", "0", "--grpc-port", str(grpc_port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stream = process.stderr

    def read() -> str | None:
        ready, _, _ = select.select([stream], [], [], 0.5)
        return os.read(stream.fileno(), 65536).decode() if ready else None

    try:
        lines = _lines_until(read, "listening on")
        entries = [json.loads(line) for line in lines]  # off a terminal: JSON, every line
        start = entries[-1]
        assert start["event"].startswith("listening on http://127.0.0.1:")
        http_url, grpc_url = start["http_url"], start["grpc_url"]
        assert http_url in start["event"] and grpc_url in start["event"]
        assert grpc_url == f"grpc://127.0.0.1:{grpc_port}"
        port = int(http_url.rsplit(":", 1)[1])
        assert port not in (0, 8000)
        assert sum("listening on" in e["event"] for e in entries) == 1
        assert httpx.get(http_url + "/health", timeout=5).status_code == 200
        with grpc.insecure_channel(grpc_url.removeprefix("grpc://")) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert answer.status in (
                health_pb2.HealthCheckResponse.SERVING,
                health_pb2.HealthCheckResponse.NOT_SERVING,
            )
    finally:
        stopped = _stop(process)
        stream.close()
        assert stopped == 0


def _on_a_terminal(repository: Path, *args: str) -> tuple[list[str], subprocess.Popen[bytes], int]:
    """A server whose stdout and stderr are a pty: its lines up to the start line, the
    process, and the pty's side the test reads (closed by the caller after the stop)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        _command(repository, "--port", "0", "--grpc-port", "0", *args),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)

    def read() -> str | None:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if not ready:
            return None
        try:
            return os.read(leader, 65536).decode()
        except OSError:  # the child closed the terminal
            return ""

    try:
        lines = [line for line in _lines_until(read, "listening on") if line.strip()]
    except BaseException:
        _stop(process)
        os.close(leader)
        raise
    return lines, process, leader


def test_on_a_terminal_the_log_is_text_with_the_time(repository: Path) -> None:
    lines, process, leader = _on_a_terminal(repository)
    try:
        assert lines and all(TEXT_LINE.match(line) for line in lines), lines
        start = lines[-1]
        assert "listening on http://127.0.0.1:" in start and "gRPC off" in start, start
        url = re.search(r"http://127\.0\.0\.1:\d+", start)
        assert url is not None
        assert httpx.get(url.group(0) + "/health", timeout=5).status_code == 200
    finally:
        assert _stop(process) == 0
        os.close(leader)


def test_json_when_asked_on_a_terminal(repository: Path) -> None:
    lines, process, leader = _on_a_terminal(repository, "--log-format", "json")
    try:
        assert json.loads(lines[-1])["http_url"].startswith("http://127.0.0.1:")
        assert all(json.loads(line)["level"] for line in lines)
    finally:
        assert _stop(process) == 0
        os.close(leader)
