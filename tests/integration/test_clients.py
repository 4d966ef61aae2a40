"""Clients on a real server: each API key (or, without keys, each peer address) is a client
of its own; the on-demand loads one may cause are limited (429, code 4291, Retry-After) while
a pinned model beside them keeps serving; the response cache is kept per key unless the model
shares it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.server import RunningServer, start_server
from tests.models import affine_model, write_config

ON_DEMAND = {"max_batch_size": 8, "residency": "on_demand", "runtime": {"intra_op_threads": 1}}
MODELS = [f"m{i}" for i in range(6)]
KEYS = (
    "# two tenants; bob takes the server's limits\n"
    "alice-key  name=alice weight=2 priority=high loads_per_minute=1 load_burst=2\n"
    "bob-key name=bob\n"
    "bob-new-key name=bob\n"
)


def body(value: float = 1.0) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [value] * 4}]}


def infer(url: str, model: str, key: str | None = None, value: float = 1.0) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(
        f"{url}/v2/models/{model}/infer", json=body(value), headers=headers, timeout=60
    )


def repository(root: Path) -> Path:
    """Six on-demand models and a pinned one; two pinned ones with a response cache, kept per
    key (`cached`) or shared across keys (`shared`)."""
    for name in MODELS:
        affine_model(root / name / "1" / "model.onnx")
        write_config(root / name, ON_DEMAND)
    affine_model(root / "pinned" / "1" / "model.onnx")
    write_config(root / "pinned", {"max_batch_size": 8})
    for name, shared in (("cached", False), ("shared", True)):
        affine_model(root / name / "1" / "model.onnx")
        cache = {"enabled": True, "shared_across_keys": shared}
        write_config(root / name, {"max_batch_size": 8, "response_cache": cache})
    return root


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Two tenants' keys; at most six versions in memory (three pinned); three loads at once
    and one a minute for a client whose key says nothing."""
    root = repository(tmp_path_factory.mktemp("clients-repo"))
    keys = root.parent / "api.keys"
    keys.write_text(KEYS)
    running = start_server(
        root,
        tmp_path_factory.mktemp("clients-logs") / "server.log",
        *("--api-keys-file", str(keys), "--max-loaded-versions", "6"),
        *("--client-loads-per-minute", "1", "--client-load-burst", "3"),
    )
    yield running
    assert running.stop() == 0, running.log()


def refused_for_loads(answer: httpx.Response) -> bool:
    if answer.status_code != 429:
        return False
    assert answer.json()["code"] == 4291, answer.text
    assert float(answer.headers["retry-after"]) >= 1
    return True


def test_each_key_causes_loads_up_to_its_limit_and_resident_models_cost_nothing(
    keyed: RunningServer,
) -> None:
    url = keyed.url
    # alice: two loads at once (her key's burst), then refused with her own code
    for model in ("m0", "m1"):
        answer = infer(url, model, "alice-key", 2.0)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [5.0] * 4
    refused = infer(url, "m2", "alice-key")
    assert refused_for_loads(refused)
    message = refused.json()["error"]
    assert "client 'alice'" in message and "1 a minute, 2 at once" in message
    assert "alice-key" not in message
    # a model in memory is never counted: alice goes on using hers
    for _ in range(5):
        assert infer(url, "m0", "alice-key").status_code == 200
        assert infer(url, "m1", "alice-key").status_code == 200
    # bob is another client, with the server's limits (three at once), over his two keys
    for model, key in (("m2", "bob-key"), ("m3", "bob-new-key"), ("m4", "bob-key")):
        answer = infer(url, model, key)
        assert answer.status_code == 200, answer.text
    assert refused_for_loads(infer(url, "m5", "bob-new-key"))
    # the pinned model never loads: nobody's limit touches it
    assert infer(url, "pinned", "alice-key").status_code == 200
    assert infer(url, "pinned", "bob-key").status_code == 200
    log = keyed.log()
    assert "alice-key" not in log and "bob-key" not in log
    # each request's log line names its client (the key's name, never the key)
    assert {"alice", "bob"} <= {line.get("client") for line in request_lines(log, 4291)}


def request_lines(log: str, code: int) -> list[dict[str, Any]]:
    """The server's request log lines of the answers with `code`."""
    lines = (json.loads(text) for text in log.splitlines() if text.startswith("{"))
    return [line for line in lines if line.get("event") == "request" and line["code"] == code]


def test_a_refusal_for_loads_over_grpc_is_resource_exhausted_with_the_code(
    keyed: RunningServer,
) -> None:
    """(After the test above: alice's loads are spent for a minute.)"""
    assert keyed.grpc_target is not None
    with grpcclient.InferenceServerClient(keyed.grpc_target) as client:
        tensor = grpcclient.InferInput("x", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        alice = {"authorization": "Bearer alice-key"}
        resident = [m for m in MODELS if infer(keyed.url, m, "alice-key").status_code == 200]
        cold = [m for m in MODELS if m not in resident]
        assert resident and cold, resident
        answer = client.infer(resident[0], [tensor], headers=alice)
        assert answer.as_numpy("y").tolist() == [[3.0] * 4]
        with pytest.raises(InferenceServerException) as caught:
            client.infer(cold[0], [tensor], headers=alice)
        assert "RESOURCE_EXHAUSTED" in str(caught.value.status())
        assert "[4291]" in str(caught.value.message()) and "client 'alice'" in str(
            caught.value.message()
        )
    # the call's log line is written once its answer has gone out: a moment after
    grpc_lines: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while not grpc_lines and time.monotonic() < deadline:
        time.sleep(0.05)
        lines = request_lines(keyed.log(), 4291)
        grpc_lines = [line for line in lines if line["method"] == "gRPC"]
    assert grpc_lines and all(line["client"] == "alice" for line in grpc_lines), grpc_lines


def test_churning_clients_are_held_to_their_limits_while_a_pinned_model_serves(
    tmp_path: Path,
) -> None:
    """Two clients without keys (two peer addresses) name six on-demand models in turn; each
    is refused 4291 once its loads are spent, and a pinned model served beside them answers
    every request."""
    root = repository(tmp_path / "repo")
    running = start_server(
        root,
        tmp_path / "server.log",
        *("--max-loaded-versions", "5", "--client-loads-per-minute", "6"),
        *("--client-load-burst", "2"),
    )
    outcomes: dict[str, list[int]] = {"127.0.0.2": [], "127.0.0.3": [], "pinned": []}
    stop = threading.Event()

    def churn(address: str) -> None:
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(base_url=running.url, transport=transport, timeout=60) as http:
            for turn in range(18):
                answer = http.post(f"/v2/models/{MODELS[turn % 6]}/infer", json=body())
                if answer.status_code == 429:
                    assert refused_for_loads(answer)
                    assert f"client 'addr:{address}'" in answer.json()["error"]
                outcomes[address].append(answer.status_code)

    def pinned() -> None:
        with httpx.Client(base_url=running.url, timeout=60) as http:
            while not stop.is_set():
                outcomes["pinned"].append(
                    http.post("/v2/models/pinned/infer", json=body()).status_code
                )

    try:
        serving = threading.Thread(target=pinned)
        serving.start()
        churners = [threading.Thread(target=churn, args=(a,)) for a in ("127.0.0.2", "127.0.0.3")]
        for thread in churners:
            thread.start()
        for thread in churners:
            thread.join()
        stop.set()
        serving.join()
        for address in ("127.0.0.2", "127.0.0.3"):
            seen = outcomes[address]
            assert set(seen) <= {200, 429}, seen
            # its own two loads, and what the other left in memory: the rest refused
            assert seen.count(429) >= 6, seen
        assert outcomes["pinned"] and set(outcomes["pinned"]) == {200}
        # a client that loaded nothing yet still has its own loads
        assert infer(running.url, "m5").status_code == 200
        # over gRPC too, the client is the peer's address: the same bucket as its HTTP calls
        assert running.grpc_target is not None
        refusals = []
        with grpcclient.InferenceServerClient(running.grpc_target) as client:
            tensor = grpcclient.InferInput("x", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
            for model in MODELS:
                try:
                    client.infer(model, [tensor])
                except InferenceServerException as exc:
                    refusals.append(str(exc.message()))
        assert refusals and all("[4291]" in r for r in refusals), refusals
        assert all("client 'addr:127.0.0.1'" in r for r in refusals), refusals
    finally:
        stop.set()
        assert running.stop() == 0, running.log()


def test_the_response_cache_is_kept_per_key_unless_the_model_shares_it(
    keyed: RunningServer,
) -> None:
    def how(model: str, key: str) -> str:
        answer = infer(keyed.url, model, key, 7.0)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [15.0] * 4
        return answer.headers["x-inferd-cache"]

    # per key: another tenant's identical request is a miss, its own repeat a hit
    assert how("cached", "alice-key") == "miss"
    assert how("cached", "alice-key") == "hit"
    assert how("cached", "bob-key") == "miss"
    assert how("cached", "bob-key") == "hit"
    assert how("cached", "bob-new-key") == "hit"  # the same client (name=bob), another key
    # shared across keys: one tenant's answer is the other's hit
    assert how("shared", "alice-key") == "miss"
    assert how("shared", "bob-key") == "hit"


def test_a_client_back_before_its_retry_after_is_paced_for_loads_too(tmp_path: Path) -> None:
    """A 429 the app makes (4291: the client's loads are spent) is paced as one from the
    head: on a connection that comes back before its `Retry-After`, it is held back until
    then (1 s at most), and counted; a client that waits as told is answered at once."""
    running = start_server(
        repository(tmp_path / "repo"),
        tmp_path / "server.log",
        *("--client-loads-per-minute", "1", "--client-load-burst", "1"),
    )
    try:
        with httpx.Client(base_url=running.url, timeout=60) as http:
            assert http.post("/v2/models/m0/infer", json=body()).status_code == 200
            first = http.post("/v2/models/m1/infer", json=body())
            assert refused_for_loads(first) and "hold;dur=" not in first.headers["server-timing"]
            started = time.perf_counter()
            again = http.post("/v2/models/m2/infer", json=body())  # back at once
            waited = time.perf_counter() - started
            assert refused_for_loads(again) and "hold;dur=" in again.headers["server-timing"]
            assert 0.5 <= waited < 5, waited
            time.sleep(1.1)  # as told (the pace is 1 s at most)
            polite = http.post("/v2/models/m3/infer", json=body())
            assert refused_for_loads(polite) and "hold;dur=" not in polite.headers["server-timing"]
        metrics = httpx.get(running.url + "/metrics", timeout=5).text
        assert 'inferd_refusals_paced_total{endpoint="/v2/models/{model}/infer"} 1.0' in metrics
    finally:
        assert running.stop() == 0, running.log()
