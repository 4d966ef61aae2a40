"""Every code block of README.md, against a live demo server, so the README cannot drift.

- `curl` commands run as printed (with `--fail-with-body`, so an error answer fails), against a
  real `inferd serve` of the demo repository, plus a small random-weight `docgen` generator
  (the README's is trained; the routes and shapes are the same) and the README's admin key;
- Python blocks run as printed in a fresh interpreter;
- the other commands are checked without running them for minutes: each `inferd` command parses
  with the real CLI, each `pip install` names extras and pins that `pyproject.toml` has, each
  script exists, and a `VAR="$(...)"` assignment runs and must name an existing folder;
- a YAML block is a model config (validated), a JSON block parses.

A command of a kind this test does not know fails it: the test is updated with the README.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from inferd.cli.main import build_parser
from inferd.config.model import ModelConfig
from inferd.tools.demo import build_demo
from inferd.tools.generator import build_generator
from tests.generator_model import SHAPE
from tests.integration.server import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ADMIN_KEY = "change-me"  # the key the README's admin example uses
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SETUP = ("python3 -m venv .venv", ". .venv/bin/activate")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.language or 'text'})"


def readme_blocks() -> list[Block]:
    source = README.read_text()
    return [
        Block(m.group(1), m.group(2), source.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(source)
    ]


def commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = text.replace("\\\n", " ")
    return [c.strip() for c in joined.splitlines() if c.strip() and not c.strip().startswith("#")]


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = build_demo(tmp_path_factory.mktemp("demo") / "repo")
    build_generator(root, "docgen", steps=0, shape=SHAPE, corpus_chars=200_000, kv_cache="inplace")
    keys = tmp_path_factory.mktemp("keys") / "admin.keys"
    keys.write_text(ADMIN_KEY + "\n")
    log = tmp_path_factory.mktemp("logs") / "readme-server.log"
    running = start_server(root, log, "--admin-keys-file", str(keys))
    yield running
    assert running.stop() == 0, running.log()


def _local(text: str, server: RunningServer) -> str:
    address = server.url.removeprefix("http://")
    assert server.grpc_target is not None
    local = text.replace("localhost:8000", address).replace("127.0.0.1:8000", address)
    return local.replace("localhost:8001", server.grpc_target)


def _environment() -> dict[str, str]:
    # `python3` in a README pipe is this interpreter (the README's commands run in its venv)
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


def run_curl(command: str, server: RunningServer) -> str:
    strict = re.sub(r"\bcurl\b", "curl --fail-with-body", _local(command, server))
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", strict],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environment(),
    )
    assert done.returncode == 0, f"{command}\n-> exit {done.returncode}\n{done.stdout}{done.stderr}"
    assert done.stdout.strip(), f"{command}: no answer"
    return done.stdout


def check_inferd(words: list[str]) -> None:
    try:
        build_parser().parse_args(words[1:])
    except SystemExit as exc:
        raise AssertionError(f"README command does not parse: {shlex.join(words)}") from exc


def optional_dependencies() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return extras


def check_pip(words: list[str]) -> None:
    extras = optional_dependencies()
    if "-e" in words:
        target = words[words.index("-e") + 1]
        named = re.fullmatch(r"\.(?:\[([\w,]+)\])?", target)
        assert named, f"pip install -e {target}: not this project"
        for extra in (named.group(1) or "").split(","):
            assert not extra or extra in extras, f"README installs an unknown extra '{extra}'"
        return
    assert "--no-deps" in words, f"unexpected pip command: {shlex.join(words)}"
    pins = {dep for deps in extras.values() for dep in deps}
    for spec in words[words.index("--no-deps") + 1 :]:
        assert spec in pins, f"README pins {spec}, pyproject.toml does not: they must agree"


def check_command(command: str, variables: dict[str, str]) -> None:
    """A command that is not run against the server: checked as described above."""
    assignment = re.fullmatch(r'(\w+)="\$\((.*)\)"', command)
    if assignment:
        done = subprocess.run(
            ["bash", "-c", assignment.group(2)],
            capture_output=True,
            text=True,
            timeout=60,
            env=_environment(),
        )
        assert done.returncode == 0, done.stderr
        folder = Path(done.stdout.strip())
        assert folder.is_dir(), f"{command} names no folder: {folder}"
        variables[assignment.group(1)] = str(folder)
        return
    for part in (p.strip() for p in command.split("&&")):
        if part in SETUP:
            continue
        for name, value in variables.items():
            part = part.replace(f'"${name}"', value)
        words = shlex.split(part.split("#")[0])
        if words[0] == "inferd":
            check_inferd(words)
        elif words[:2] == ["pip", "install"]:
            check_pip(words)
        elif words[0] == "bash":
            assert (ROOT / words[1]).is_file(), f"README runs a missing script {words[1]}"
        else:
            raise AssertionError(f"README command of a kind this test does not check: {part}")


def test_the_readme_has_the_blocks_this_test_reads() -> None:
    kinds = [b.language for b in readme_blocks()]
    assert kinds.count("bash") >= 8 and "python" in kinds and "yaml" in kinds and "json" in kinds


def test_every_readme_code_block_runs(readme_server: RunningServer) -> None:
    variables: dict[str, str] = {}
    ran = 0
    for block in readme_blocks():
        if block.language == "bash":
            for command in commands(block.text):
                if re.match(r"curl\b", command):
                    answer = run_curl(command, readme_server)
                    ran += 1
                    if '"stream": true' not in command:  # a stream is events, not one body
                        json.loads(answer)
                else:
                    check_command(command, variables)
        elif block.language == "python":
            done = subprocess.run(
                [sys.executable, "-c", _local(block.text, readme_server)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{block.name}\n{done.stdout}{done.stderr}"
            ran += 1
        elif block.language == "yaml":
            ModelConfig.model_validate(yaml.safe_load(block.text))
        elif block.language == "json":
            json.loads(block.text)
        else:
            assert block.language == "", f"{block.name}: a block language this test does not know"
    assert ran >= 12, f"only {ran} commands ran against the server"


def test_the_readme_examples_answer_what_it_shows(readme_server: RunningServer) -> None:
    """The answers printed in the README are what the demo answers."""
    predicted = json.loads(
        run_curl(
            """curl -s localhost:8000/predict -d '{"texts": ["I love it!", "This is awful."]}'""",
            readme_server,
        )
    )
    assert predicted["labels"] == ["positive", "negative"] and predicted["model"] == "sentiment"
    shown = next(b for b in readme_blocks() if b.language == "json")
    expected = json.loads(shown.text)["outputs"][0]
    block = next(b for b in readme_blocks() if "sentiment-head/infer" in b.text)
    infer = next(c for c in commands(block.text) if "sentiment-head/infer" in c)
    answer = json.loads(run_curl(infer, readme_server))["outputs"][0]
    assert answer["shape"] == expected["shape"] == [2, 2]
    assert answer["data"] == pytest.approx(expected["data"], abs=5e-4)
    assert answer["data"][0] == pytest.approx(predicted["scores"][0], abs=1e-5)
    for route in ("/rerank", "/v1/rerank"):
        block = next(b for b in readme_blocks() if f"localhost:8000{route} " in b.text)
        lines = block.text.replace("\\\n", " ").splitlines()
        at = next(i for i, line in enumerate(lines) if f"localhost:8000{route} " in line)
        shown = json.loads(lines[at + 1].removeprefix("# ").replace(",...}", "}"))
        ranked = json.loads(run_curl(lines[at], readme_server))
        if route == "/rerank":
            assert [r["index"] for r in ranked] == [r["index"] for r in shown]
            scores = [(r["score"], s["score"]) for r, s in zip(ranked, shown, strict=True)]
        else:
            assert ranked["model"] == shown["model"] == "minilm-rerank"
            pairs = zip(ranked["results"], shown["results"], strict=True)
            assert [r["index"] for r in ranked["results"]] == [s["index"] for s in shown["results"]]
            scores = [(r["relevance_score"], s["relevance_score"]) for r, s in pairs]
        for served, printed in scores:
            assert served == pytest.approx(printed, abs=5e-4), route
