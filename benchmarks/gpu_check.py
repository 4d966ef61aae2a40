"""A GPU machine's check of what cannot run on a CPU-only machine: one command, a report, and
exit status 0 only when every check passes.

    pip install -e ".[gpu]" && python benchmarks/gpu_check.py [--gpus 0,1] [--report FILE]

1. Raw ONNX Runtime: a session with the CUDA provider and `device_id` on each listed GPU really
   runs there (the session's providers, and an answer equal to numpy's).
2. inferd: a repository whose model has one GPU instance per listed GPU and one CPU instance
   (instance_groups), and an fp16 model on GPU 0; under concurrent load every GPU instance
   runs batches (V2 statistics, per instance), answers match numpy, the fp16 answers are FP16
   and right, and the version reports the CUDA provider.
3. /metrics has inferd_gpu_utilization_ratio and inferd_gpu_memory_{used,total}_bytes for
   each GPU (NVML), and per-instance metrics for each GPU instance.

inferd does not use IO binding: inputs are copied to the device by ONNX Runtime per run, so
there is nothing IO-binding-specific to check.

On a machine without a GPU it stops at the first check and says why (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper

from common import Server, machine_description

CUDA = "CUDAExecutionProvider"


def affine(path: Path) -> Path:
    """x: FP32 [batch, 256] -> y = 2x + 1."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "affine", [x], [y], initializer=[two, one])
    return _save(graph, path)


def half(path: Path) -> Path:
    """x: FP16 [batch, 64] -> y = x * x (FP16)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 64])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"])], "half", [x], [y])
    return _save(graph, path)


def tensor(x: np.ndarray, datatype: str) -> dict[str, object]:
    return {"name": "x", "datatype": datatype, "shape": list(x.shape), "data": x.ravel().tolist()}


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = 0

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        self.lines.append(f"[{'ok' if ok else 'FAIL'}] {what}" + (f": {detail}" if detail else ""))
        print(self.lines[-1], flush=True)
        self.failed += 0 if ok else 1
        return ok


def visible_gpus() -> list[int]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return list(range(pynvml.nvmlDeviceGetCount()))
    except Exception:
        return []


def check_raw(report: Report, model: Path, gpus: list[int]) -> None:
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    for gpu in gpus:
        session = ort.InferenceSession(
            str(model), providers=[(CUDA, {"device_id": str(gpu)}), "CPUExecutionProvider"]
        )
        providers = session.get_providers()
        (y,) = session.run(None, {"x": x})
        report.check(
            providers[0] == CUDA and np.allclose(y, 2 * x + 1, atol=1e-5),
            f"raw ONNX Runtime on GPU {gpu}",
            f"providers {providers}",
        )


def check_server(report: Report, root: Path, gpus: list[int]) -> None:
    affine(root / "placed" / "1" / "model.onnx")
    groups = [{"kind": "gpu", "gpus": gpus, "count": 1}, {"kind": "cpu", "count": 1}]
    (root / "placed" / "config.yaml").write_text(
        yaml.safe_dump({"max_batch_size": 32, "instance_groups": groups})
    )
    half(root / "half" / "1" / "model.onnx")
    (root / "half" / "config.yaml").write_text(
        yaml.safe_dump(
            {"max_batch_size": 8, "instance_groups": [{"kind": "gpu", "gpus": [gpus[0]]}]}
        )
    )
    server = Server(root)
    try:
        url = server.url
        for model in ("placed", "half"):
            config = httpx.get(f"{url}/v2/models/{model}/config").json()
            providers = config["optimization"]["execution_accelerators"]["providers"]
            report.check(CUDA in providers, f"{model} serves on the CUDA provider", str(providers))
        rng = np.random.default_rng(1)

        def one(_: int) -> bool:
            x = rng.standard_normal((1, 256)).astype(np.float32)
            body = {
                "inputs": [
                    {"name": "x", "datatype": "FP32", "shape": [1, 256], "data": x.ravel().tolist()}
                ]
            }
            answer = httpx.post(f"{url}/v2/models/placed/infer", json=body, timeout=30).json()
            y = np.asarray(answer["outputs"][0]["data"], dtype=np.float32)
            return bool(np.allclose(y, (2 * x + 1).ravel(), atol=1e-4))

        started = time.perf_counter()
        with ThreadPoolExecutor(32) as pool:
            right = sum(pool.map(one, range(2000)))
        seconds = time.perf_counter() - started
        report.check(
            right == 2000, "answers under load match numpy", f"{right}/2000 in {seconds:.1f} s"
        )
        stats = httpx.get(f"{url}/v2/models/placed/stats").json()["model_stats"][0]
        instances = {i["name"]: i for i in stats["instance_stats"]}
        for gpu in gpus:
            name = f"gpu{gpu}-0"
            ran = instances.get(name, {}).get("batches", 0)
            report.check(ran > 0, f"instance {name} ran batches", str(instances.get(name)))
        report.check(
            "cpu-0" in instances, "the CPU instance beside them", str(instances.get("cpu-0"))
        )

        x = rng.standard_normal((2, 64)).astype(np.float16)
        body = {
            "inputs": [
                {"name": "x", "datatype": "FP16", "shape": [2, 64], "data": x.ravel().tolist()}
            ]
        }
        answer = httpx.post(f"{url}/v2/models/half/infer", json=body, timeout=30).json()
        output = answer["outputs"][0]
        y = np.asarray(output["data"], dtype=np.float16)
        report.check(
            output["datatype"] == "FP16" and np.allclose(y, (x * x).ravel(), rtol=1e-2, atol=1e-2),
            "fp16 model on the GPU answers FP16, equal to numpy",
        )

        metrics = httpx.get(f"{url}/metrics").text
        for gpu in gpus:
            for family in (
                "inferd_gpu_utilization_ratio",
                "inferd_gpu_memory_used_bytes",
                "inferd_gpu_memory_total_bytes",
            ):
                report.check(f'{family}{{gpu="{gpu}"}}' in metrics, f"{family} for GPU {gpu}")
            labels = f'instance="gpu{gpu}-0",kind="gpu",model="placed",version="1"'
            report.check(
                f"inferd_instance_batches_total{{{labels}}}" in metrics,
                f"per-instance metrics for gpu{gpu}-0",
            )
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", help="comma-separated device ids (default: every GPU NVML sees)")
    parser.add_argument("--report", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    report = Report()
    print(machine_description(), flush=True)
    import onnxruntime as ort

    available = ort.get_available_providers()
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else visible_gpus()
    if not report.check(CUDA in available, "onnxruntime has the CUDA provider", str(available)):
        print("install onnxruntime-gpu (pip install -e '.[gpu]') on a machine with CUDA")
        return 2
    if not report.check(bool(gpus), "GPUs to check", str(gpus)):
        return 2
    with tempfile.TemporaryDirectory(prefix="inferd-gpu-check-") as folder:
        root = Path(folder)
        check_raw(report, affine(root / "raw.onnx"), gpus)
        check_server(report, root / "repo", gpus)
    summary = f"{report.failed} of {len(report.lines)} checks failed"
    print(summary)
    if args.report:
        args.report.write_text("\n".join([machine_description(), *report.lines, summary]) + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
