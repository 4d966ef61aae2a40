"""Debian's `chromium`, headless, driven over the Chrome DevTools Protocol (a websocket on a
loopback port): open a page, evaluate script in it, take a screenshot. Started and stopped by
the test that uses it, in a profile folder of its own."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect


class Chromium:
    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        binary = shutil.which("chromium")
        if binary is None:
            raise RuntimeError("chromium is needed: apt-get install chromium (scripts/test.sh)")
        profile.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",  # it picks a free port and writes it down
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        self._stack = contextlib.ExitStack()
        try:
            port = int(port_file.read_text().split()[0])
            pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            target = next(p for p in pages if p["type"] == "page")
            self._socket: ClientConnection = self._stack.enter_context(
                connect(target["webSocketDebuggerUrl"], max_size=64 * 2**20)
            )
            self._ids = itertools.count(1)
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command and its result (events arriving before it are skipped)."""
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=30))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def run_no_scripts(self) -> None:
        """The pages opened from now on run none of their scripts (what a browser with
        scripts off, or a page before its scripts, shows); `evaluate` still reads them."""
        self.call("Emulation.setScriptExecutionDisabled", value=True)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while self.evaluate("document.readyState") != "complete":
            assert time.monotonic() < deadline, f"{url} did not load"
            time.sleep(0.05)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        stack = getattr(self, "_stack", None)
        if stack is not None:
            stack.close()
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5)
