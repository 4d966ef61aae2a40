"""`inferd bench` against a real inferd on 127.0.0.1 with a small model: its counts match the
server's /metrics, open and closed loops, the report renders with its plots, tuning writes its
recommendation, comparison reports both sides, and the Locust file runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
import yaml

from inferd.bench.launch import free_port
from inferd.bench.load import CLIENT_ERROR, closed_loop
from inferd.cli.main import main
from inferd.errors import ErrorCode
from tests.integration.server import RunningServer, start_server
from tests.models import slow_model, write_config

MODEL = "mlp"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-repo")
    slow_model(root / MODEL / "1" / "model.onnx", layers=96, width=256)  # about 2 ms a row
    write_config(root / MODEL, {"max_batch_size": 16})
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(repo, tmp_path_factory.mktemp("bench-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def requests_counted(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(
        float(v)
        for v in re.findall(
            r'^inferd_requests_total\{[^}]*endpoint="/v2/models/\{model\}/infer"'
            r"[^}]*\} ([0-9.e+]+)$",
            text,
            re.MULTILINE,
        )
    )


def bench(*args: str) -> int:
    return main(["bench", *args])


class Figures(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.figures = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        if tag == "figure":
            self.figures += 1


def test_closed_loop_counts_match_the_server_and_the_report_renders(
    server: RunningServer, tmp_path: Path
) -> None:
    before = requests_counted(server.url)
    out = tmp_path / "report"
    code = bench(
        "run",
        server.url,
        "--endpoint",
        "v2",
        "--model",
        MODEL,
        "--levels",
        "1,4,16",
        "--requests",
        "150",
        "--duration",
        "20",
        "--warmup",
        "0",
        "--p99-budget-ms",
        "60000",
        "--out",
        str(out),
    )
    assert code == 0
    after = requests_counted(server.url)
    report = json.loads((out / "report.json").read_text())
    (series,) = report["series"].values()
    steps = series["steps"]
    assert [s["level"] for s in steps] == [1, 4, 16]
    for step in steps:
        assert step["requests"] == step["ok"] == 150 and step["errors"] == {}
        counted = sum(step["server"]["requests"].values())
        assert counted == step["requests"]  # the server counted exactly what the tool sent
        assert step["server"]["mean_batch_size"] >= 1
        assert step["p50_ms"] <= step["p99_ms"] <= step["max_ms"]
    assert after - before == 450
    assert steps[2]["server"]["mean_batch_size"] > steps[0]["server"]["mean_batch_size"]
    page = Figures()
    page.feed((out / "report.html").read_text())
    assert page.figures == 2 and page.images == ["throughput.png", "latency.png"]
    for image in page.images:
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 0 <= series["recommended"] < 3
    assert "within the budget of 60000 ms" in series["knee"]
    assert report["meta"]["p99 budget"] == "60000 ms"


def test_the_load_client_records_each_answer_and_each_failure(server: RunningServer) -> None:
    """What a load step records, request by request: a good answer, inferd's stable error code
    from a refused one's body, and a connection that never answered (nothing listening; no
    answer within the timeout) as a client error, never an exception out of the loop."""
    path = f"/v2/models/{MODEL}/infer"
    good = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.5] * 256}]}
    ).encode()
    bodies = iter([good, b'{"inputs": [{"name": "x"'])
    run = asyncio.run(closed_loop(server.url, path, lambda: next(bodies), 1, 30.0, 2))
    assert [(s.status, s.code) for s in run.samples] == [(200, 0), (400, ErrorCode.INVALID_INPUT)]
    first, second = run.samples  # when each came, in the step's time: after it was sent
    assert first.latency_s <= first.done_s <= second.done_s - second.latency_s + 1e-6
    assert second.done_s <= run.elapsed_s and 0 < run.sending_s < second.done_s

    closed = f"http://127.0.0.1:{free_port()}"
    run = asyncio.run(closed_loop(closed, path, lambda: good, 2, 30.0, 4))
    assert [(s.status, s.code) for s in run.samples] == [(0, CLIENT_ERROR)] * 4

    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        run = asyncio.run(closed_loop(url, path, lambda: good, 1, 30.0, 1, timeout_s=0.5))
    assert [(s.status, s.code) for s in run.samples] == [(0, CLIENT_ERROR)]
    assert 0.5 <= run.samples[0].latency_s < 5


def test_open_loop_sends_at_the_rate(server: RunningServer, tmp_path: Path) -> None:
    code = bench(
        "run",
        server.url,
        "--endpoint",
        "v2",
        "--model",
        MODEL,
        "--mode",
        "open",
        "--levels",
        "40",
        "--duration",
        "3",
        "--requests",
        "1000",
        "--warmup",
        "0",
        "--out",
        str(tmp_path),
    )
    assert code == 0
    (series,) = json.loads((tmp_path / "report.json").read_text())["series"].values()
    (step,) = series["steps"]
    assert 70 <= step["requests"] <= 190  # Poisson arrivals at 40/s for 3 s
    assert step["ok"] == step["requests"] and step["dropped"] == 0
    assert "no p99 budget given" in series["knee"]  # what the recommendation assumed


def test_tune_finds_and_writes_a_setting(repo: Path, tmp_path: Path) -> None:
    code = bench(
        "tune",
        str(repo),
        "--model",
        MODEL,
        "--endpoint",
        "v2",
        "--budget-ms",
        "2000",
        "--grid",
        "max_batch_size=[1, 16]",
        "--levels",
        "1,8",
        "--requests",
        "60",
        "--duration",
        "10",
        "--warmup",
        "0",
        "--write",
        "--out",
        str(tmp_path),
    )
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["series"]) == {"max_batch_size=1", "max_batch_size=16"}
    assert "max_batch_size" in report["meta"]["recommendation"]
    written = yaml.safe_load((repo / MODEL / "config.yaml").read_text())
    assert written["max_batch_size"] in (1, 16)
    write_config(repo / MODEL, {"max_batch_size": 16})  # as the other tests expect


def test_compare_two_configurations(repo: Path, tmp_path: Path) -> None:
    code = bench(
        "compare",
        str(repo),
        str(repo),
        "--model",
        MODEL,
        "--b-set",
        "max_batch_size=1",
        "--endpoint",
        "v2",
        "--levels",
        "2,8",
        "--requests",
        "60",
        "--duration",
        "10",
        "--warmup",
        "0",
        "--out",
        str(tmp_path),
    )
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["series"]) == 2
    assert "x req/s" in report["meta"]["ratios (B/A)"]


def test_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench("run", "http://127.0.0.1:9", "--out", str(tmp_path)) == 2
    assert "not reachable" in capsys.readouterr().out
    assert bench("run", str(tmp_path / "nope"), "--out", str(tmp_path)) == 2
    assert bench("run", "http://127.0.0.1:9", "--lengths", "weird") == 2
    assert "fixed:N" in capsys.readouterr().out
    assert bench("run", "http://127.0.0.1:9", "--mode", "open") == 2
    assert "--levels" in capsys.readouterr().out


def test_the_locust_file_runs(server: RunningServer, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "benchmarks" / "lib" / "locustfile.py"),
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--host",
            server.url,
            "--csv",
            str(tmp_path / "stats"),
            "--only-summary",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "INFERD_MODEL": MODEL, "INFERD_ENDPOINT": "v2"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    stats = (tmp_path / "stats_stats.csv").read_text().splitlines()
    aggregated = next(line for line in stats if ",Aggregated," in line).split(",")
    assert int(aggregated[2]) > 0 and int(aggregated[3]) == 0  # requests, failures
