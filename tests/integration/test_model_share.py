"""Models sharing one machine's cores, served by a real inferd: the demo's embedding model
beside a generator of the demo generator's shape (random weights, KV cache in place, on every
core). While the generator is kept busy, the encoder still gets answers at about its share
(equal weights: half of the cores' time while both wait), the generator keeps its share too,
and a cold model's first request is answered promptly (inferd.runtime.share)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from inferd.tools.generator import GeneratorShape, build_generator
from tests.integration.server import RunningServer, start_server

WINDOW_S = 4.0
TOKEN_COUNTS = re.compile(
    r"^inferd_generation_(?:time_to_first_token|inter_token)_seconds_count\{[^}]*\} ([0-9.e+]+)$",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def server(demo_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("share-repo")
    config = yaml.safe_load((demo_repo / "minilm" / "config.yaml").read_text())
    config.pop("default", None)
    config["response_cache"] = {"enabled": False}
    for name in ("minilm", "cold"):
        (repo / name / "1").mkdir(parents=True)
        for item in (demo_repo / "minilm" / "1").iterdir():
            (repo / name / "1" / item.name).symlink_to(item)
        (repo / name / "config.yaml").write_text(yaml.safe_dump(config))
    build_generator(
        repo, "gen", steps=0, shape=GeneratorShape(), corpus_chars=200_000, kv_cache="inplace"
    )
    running = start_server(repo, tmp_path_factory.mktemp("share-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def embed_answers(url: str, clients: int, seconds: float) -> int:
    """Answers `clients` closed-loop clients of /embed (one sentence each) get in `seconds`."""
    answered = [0] * clients
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            n = 0
            while time.monotonic() < stop:
                n += 1
                body = {"model": "minilm", "texts": [f"sentence {index} number {n} to embed"]}
                response = http.post("/embed", json=body)
                assert response.status_code == 200, response.text
                answered[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(answered)


class Generating:
    """Closed-loop clients of /generate (128 tokens each, `ignore_eos`) until stopped."""

    def __init__(self, url: str, clients: int) -> None:
        self._url = url
        self._stop = threading.Event()
        self.failures: list[str] = []
        self._threads = [threading.Thread(target=self._client) for _ in range(clients)]

    def _client(self) -> None:
        body = {"model": "gen", "prompt": "The cores", "max_length": 128, "ignore_eos": True}
        with httpx.Client(base_url=self._url, timeout=60) as http:
            while not self._stop.is_set():
                response = http.post("/generate", json=body)
                if response.status_code != 200:
                    self.failures.append(response.text)

    def __enter__(self) -> Generating:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def tokens_made(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(count) for count in TOKEN_COUNTS.findall(text))


def tokens_per_s(url: str, seconds: float) -> float:
    before = tokens_made(url)
    time.sleep(seconds)
    return (tokens_made(url) - before) / seconds


def test_the_encoder_keeps_its_share_beside_a_busy_generator(server: RunningServer) -> None:
    url = server.url
    embed_answers(url, 2, 1.0)  # warm
    embed_alone = embed_answers(url, 2, WINDOW_S)
    with Generating(url, 8) as generating:
        time.sleep(1.0)  # every generator client in its loop
        gen_alone = tokens_per_s(url, WINDOW_S)
        before = tokens_made(url)
        embed_together = embed_answers(url, 2, WINDOW_S)
        gen_together = (tokens_made(url) - before) / WINDOW_S
        started = time.monotonic()
        cold = httpx.post(url + "/embed", json={"model": "cold", "texts": ["first"]}, timeout=30)
        cold_s = time.monotonic() - started
    assert not generating.failures
    assert cold.status_code == 200
    shares = {"embed": embed_together / embed_alone, "generate": gen_together / gen_alone}
    # each would get about half while both wait; the load generator shares the two cores
    # (ten clients together, two or eight alone) and the machine may be busy with other
    # work, so the bounds leave room. Without the share the encoder got 0.05-0.14 here
    # (the generator's threads held the cores); with it 0.3-0.8, the generator 0.2-0.6
    assert shares["embed"] >= 0.2, shares
    assert shares["generate"] >= 0.12, shares
    # a cold model's first request waits for a slice and the runs it finds, not for the hot
    assert cold_s < 2.0, cold_s
