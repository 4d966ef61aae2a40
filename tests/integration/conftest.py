from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from inferd.tools.demo import build_demo
from tests.integration.server import RunningServer, start_server
from tests.models import build_repository


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "server.log"
    running = start_server(repository, log, "--max-body-bytes", "200000", "--log-sample-rate", "1")
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def demo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_demo(tmp_path_factory.mktemp("demo") / "repo")
    # a second embedding model over the same files, strict about length
    strict = root / "minilm-strict" / "1"
    strict.mkdir(parents=True)
    for name in ("model.onnx", "tokenizer.json"):
        (strict / name).symlink_to(root / "minilm" / "1" / name)
    config = yaml.safe_load((root / "minilm" / "config.yaml").read_text())
    config["tokenizer"] = {"max_tokens": 16, "truncate": False, "max_chars": 500}
    config["max_texts_per_request"] = 8
    config["rollout"] = {"route_key_field": "user"}
    (root / "minilm-strict" / "config.yaml").write_text(yaml.safe_dump(config))
    return root
