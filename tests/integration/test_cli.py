"""The `inferd` command line, run as a user runs it."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from inferd import __version__
from tests.integration.server import RunningServer, start_server
from tests.models import write_config


def inferd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_version() -> None:
    result = inferd("--version")
    assert result.returncode == 0 and __version__ in result.stdout


def test_repo_check_reports_each_version_and_the_broken_one(repository: Path) -> None:
    result = inferd("repo", "check", str(repository))
    assert result.returncode == 1  # the broken model
    out = result.stdout
    assert "affine" in out and "version 1: OK" in out and "version 2: OK" in out
    assert "input  x: FP32 [-1, 4]" in out
    assert "broken" in out and "FAILS" in out
    assert "sequence" in out and "output hidden: FP32 [-1, -1, 2]" in out


def test_repo_check_passes_on_a_clean_repository(tmp_path: Path, repository: Path) -> None:
    clean = tmp_path / "clean"
    (clean / "affine").mkdir(parents=True)
    for item in (repository / "affine").rglob("*"):
        target = clean / "affine" / item.relative_to(repository / "affine")
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.read_bytes())
    result = inferd("repo", "check", str(clean))
    assert result.returncode == 0, result.stdout
    assert "all models would load" in result.stdout


def test_config_file_error_names_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text("port: 8080\nmax_queue: 3\n")
    result = inferd("serve", "--config", str(config))
    assert result.returncode == 2
    assert str(config) in result.stderr and "unknown key 'max_queue'" in result.stderr


def test_serve_without_a_repository_builds_and_serves_the_demo(tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    server = start_server(None, tmp_path / "log", "--demo-repository", str(demo))
    try:
        assert httpx.get(server.url + "/ready", timeout=5).status_code == 200
        models = {m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]}
        assert models == {"minilm", "sentiment", "topics", "sentiment-head", "minilm-rerank"}
    finally:
        assert server.stop() == 0
    assert (demo / "minilm" / "1" / "model.onnx").is_file()
    assert (demo / "minilm" / "1" / "tokenizer.json").is_file()


def test_demo_command_builds_a_repository_that_repo_check_passes(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = inferd("demo", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert str(out) in result.stdout
    # the build says what it does as it starts, and its time as it ends
    assert re.search(r"^demo: the demo repository .* \.\.\.$", result.stderr, re.M)
    assert re.search(r"^demo: the demo repository .*: \d+\.\d s$", result.stderr, re.M)
    check = inferd("repo", "check", str(out))
    assert check.returncode == 0, check.stdout
    assert "sentiment: zero-shot over 'minilm'" in check.stdout


def test_file_env_and_flag_reach_the_running_server(tmp_path: Path, repository: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(f"repository: {repository}\nmax_body_bytes: 10\nstrict_readiness: true\n")
    import os

    env = {**os.environ, "INFERD_STRICT_READINESS": "false", "INFERD_MAX_BODY_BYTES": "20"}
    server: RunningServer = start_server(
        None, tmp_path / "log", "--config", str(config), "--max-body-bytes", "100000", env=env
    )
    try:
        # env turned strict readiness off: the broken model no longer blocks readiness
        ready = httpx.get(server.url + "/ready", timeout=5)
        assert ready.status_code == 200 and "broken" in ready.text
        # the flag's body limit (100000) beats the env's (20) and the file's (10)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        assert httpx.post(server.url + "/v2/models/affine/infer", json=body).status_code == 200
    finally:
        assert server.stop() == 0


def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        result = inferd("serve", "--port", port, "--repo", str(tmp_path))
    assert result.returncode == 3
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"inferd: cannot listen on 127.0.0.1:{port}: address already in use "
        "(another server there? --port chooses another)"
    ]


def test_a_bad_flag_shows_the_subcommand_usage() -> None:
    result = inferd("bench", "run", "http://127.0.0.1:1", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: inferd bench run")
    assert "unrecognized arguments: --no-such-flag" in result.stderr
    assert inferd("serve", "--nope").stderr.startswith("usage: inferd serve")


def test_bench_help_names_the_defaults() -> None:
    out = inferd("bench", "run", "--help").stdout
    assert "(default: 10.0)" in out and "(default: closed)" in out and "(default: 0)" in out


def test_a_configuration_error_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text("max_queue: 3\n")
    result = inferd("serve", "--config", str(config))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"inferd: configuration error: {config}")


def _classifier(root: Path, name: str, default: bool) -> None:
    write_config(
        root / name,
        {
            "task": "zero-shot-classification",
            "default": default,
            "zero_shot": {"base_model": "minilm", "labels": [{"name": "a"}, {"name": "b"}]},
        },
    )


def test_two_defaults_for_one_task_stop_the_start(tmp_path: Path) -> None:
    _classifier(tmp_path, "first", True)
    _classifier(tmp_path, "second", True)
    result = inferd("serve", "--repo", str(tmp_path), "--port", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "inferd: configuration error: two models are the default of /predict: 'first' and "
        "'second' (default: true in both config.yaml files; keep one)"
    )


def test_an_empty_repository_warns(tmp_path: Path) -> None:
    server = start_server(tmp_path, tmp_path / "log", wait_loaded=False)
    try:
        ready = httpx.get(server.url + "/ready", timeout=5)
        assert ready.status_code == 503
    finally:
        assert server.stop() == 0
    warnings = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    assert any(
        w["level"] == "warning" and "holds no model folder" in w["event"] for w in warnings
    ), server.log()
