"""`inferd quantize --to fp16` of a decoder with an in-place KV cache (prep.quantize_decoder),
then both versions served side by side by a real inferd on 127.0.0.1 with the cache in the
instance's memory (`cache_placement: device`, its path on a CPU as on a GPU): the fp16 version's
cache is fp16 at the graph's edge, its drawing float32, and its greedy text that of fp32."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import onnxruntime as ort
import pytest
import yaml

from inferd.cli.main import main
from inferd.prep.quantize_decoder import drawing_nodes
from tests.generator_model import MODEL, build_generator_repo
from tests.integration.server import RunningServer, start_server

PROMPTS = ["Return the number of items", "Open the file", "A"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_generator_repo(tmp_path_factory.mktemp("fp16-decoder"), kv_cache="inplace")
    assert main(["quantize", "--repo", str(root), "--model", MODEL, "--to", "fp16"]) == 0
    config_path = root / MODEL / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["version_policy"] = {"all": True}
    config["generation"]["cache_placement"] = "device"
    config_path.write_text(yaml.safe_dump(config))
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(repo, tmp_path_factory.mktemp("fp16-logs") / "server.log")
    yield running
    running.stop()


def test_the_cache_is_fp16_at_the_edge_and_the_drawing_float32(repo: Path) -> None:
    fp32, fp16 = (repo / MODEL / v / "model.onnx" for v in ("1", "2"))
    session = ort.InferenceSession(str(fp16), providers=["CPUExecutionProvider"])
    before = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
    types = {v.name: v.type for v in (*session.get_inputs(), *session.get_outputs())}
    was = {v.name: v.type for v in (*before.get_inputs(), *before.get_outputs())}
    assert set(types) == set(was)
    for name, kind in types.items():
        cache = name.startswith(("past_key_values.", "present."))
        assert kind == ("tensor(float16)" if cache else was[name]), name
    model = onnx.load(str(fp16))
    graph = onnx.shape_inference.infer_shapes(model).graph
    elem = {v.name: v.type.tensor_type.elem_type for v in (*graph.value_info, *graph.output)}
    drawing = set(drawing_nodes(onnx.load(str(fp32)).graph))  # (named as the conversion does)
    assert len(drawing) > 10  # the sampling in the graph: nothing it computes is fp16
    half = [o for n in model.graph.node if n.name in drawing for o in n.output]
    assert not [o for o in half if elem.get(o) == onnx.TensorProto.FLOAT16]
    assert fp16.stat().st_size < 0.6 * fp32.stat().st_size
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["inferd.quantized"] == "fp16" and meta["inferd.quantized_from"] == "1"
    report = json.loads((repo / ".inferd/reports" / MODEL / "quantize-2-fp16.json").read_text())
    assert report["greedy_agreement"] >= 0.98 and not report["problems"]
    assert (
        report["accuracy"]["max_abs"]["logits"] < 0.05 * report["accuracy"]["value_range"]["logits"]
    )


def test_int8_of_an_in_place_decoder_is_refused_with_the_way_out(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quantize", "--repo", str(repo), "--model", MODEL, "--from-version", "1"]) == 2
    assert "`inferd quantize --to fp16` converts an in-place decoder" in capsys.readouterr().err
    samples = repo / "samples.txt"
    samples.write_text("a text\n")
    command = ["quantize", "--repo", str(repo), "--model", MODEL, "--to", "fp16"]
    assert main([*command, "--samples", str(samples)]) == 2
    assert "--samples does not apply to an in-place decoder" in capsys.readouterr().err
    assert not (repo / MODEL / "3").exists()


def test_both_versions_serve_the_same_greedy_text(server: RunningServer) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for prompt in PROMPTS:
            texts = []
            for version in ("1", "2"):
                body = {
                    "model": MODEL,
                    "version": version,
                    "prompt": prompt,
                    "max_length": 16,
                    "temperature": 0,
                    "ignore_eos": True,
                }
                response = http.post("/generate", json=body)
                assert response.status_code == 200, response.text
                assert response.json()["version"] == version and response.json()["tokens"] == 16
                texts.append(response.json()["text"])
            assert texts[0] == texts[1], prompt
        metrics = http.get("/metrics").text
    assert f'model="{MODEL}"' in metrics
