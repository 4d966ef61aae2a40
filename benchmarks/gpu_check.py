"""A GPU machine's check of what cannot run on a CPU-only machine: one command, a report, and
exit status 0 only when every check passes. Made to end within a short lease (a few minutes).

    pip install -e ".[gpu,export]" && python benchmarks/gpu_check.py [--gpus 0] [--report FILE]
    python benchmarks/gpu_check.py --dry-run     # every step on the CPU, small models (CI)

1. Providers: a session with the CUDA provider and `device_id` on each listed GPU really runs
   there (its providers, and an answer equal to numpy's).
2. An encoder (a BERT with random weights, exported by `inferd export`, and its fp16 copy as
   `inferd quantize --to fp16` converts it): raw in-process throughput at its best batch
   against inferd serving it over `/embed` at saturation, fp32 and fp16 (goal: served >= 0.9
   of raw), with where a served request's time goes (its stages, the server's event loop and
   other threads, the clients' CPU: benchmarks/lib/served_profile.py).
3. Generation (a GPT-2 with random weights, in-place KV cache, drawing in its graph, and its
   fp16 conversion by `inferd quantize --to fp16`, the cache fp16 too): tokens/s at 1 and 16
   in flight with the cache in the instance's memory (`cache_placement: device`), with the
   cache in host arrays (`host`), against the raw decode ceiling on the device (bare ONNX
   Runtime steps, the cache bound on the device, the same rows), fp32 and fp16.
4. The same encoder served in front of an emulated device (benchmarks/lib/emulated_device.py:
   a batch answered after a fixed time a row, at the H200's measured BERT-base rates and twice
   its fp16 one), on this machine's own CPUs: what the serving path delivers here when the
   device is not the limit, to set beside step 2's real device in one report.
5. Out of memory for real: a model under a small `gpu_mem_limit_mb` given batches that do not
   fit: they are answered (the batch halved and retried) or refused as out of memory (5070),
   never a server error or a crash, and the server serves on.
6. Placement and metrics: a model with one instance per listed GPU and one CPU instance under
   load (every instance runs batches, answers right), an fp16 tensor model, NVML
   `inferd_gpu_*` families per GPU and per-instance metrics on /metrics.

`--dry-run` takes every step on the CPU provider with small models and short loads (it checks
the script, not a GPU: the figures mean nothing). On a machine without the CUDA provider and
without `--dry-run` it stops at the first check and says why (exit status 2).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from common import Server, machine_description

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class Plan:
    """What the check builds and how long it loads, for a GPU or for a CPU dry run."""

    dry: bool
    gpus: tuple[int, ...]
    encoder: dict[str, int]
    generator: dict[str, int]
    text_chars: int
    load_s: float
    raw_s: float
    batches: tuple[int, ...]
    texts_per_request: int
    clients: int
    client_processes: int
    """The encoder's load runs in this many client processes (one Python process's GIL must
    not be the ceiling the check measures)."""
    new_tokens: int
    oom_limit_mb: int

    @property
    def kind(self) -> str:
        return "cpu" if self.dry else "gpu"

    def groups(self) -> list[dict[str, Any]]:
        if self.dry:
            return [{"kind": "cpu", "count": 1}]
        return [{"kind": "gpu", "gpus": [self.gpus[0]], "count": 1}]

    def providers(self, gpu: int) -> list[Any]:
        return [CPU] if self.dry else [(CUDA, {"device_id": str(gpu)}), CPU]


GPU_PLAN = dict(
    encoder={"layers": 12, "hidden": 768, "heads": 12, "vocab": 8192},
    generator={"layers": 8, "hidden": 512, "heads": 8, "context": 1024, "vocab": 4096},
    text_chars=600,
    load_s=10.0,
    raw_s=2.0,
    batches=(1, 8, 32, 64, 128),
    texts_per_request=32,
    clients=16,
    client_processes=4,
    new_tokens=128,
    oom_limit_mb=256,
)
DRY_PLAN = dict(
    encoder={"layers": 2, "hidden": 64, "heads": 4, "vocab": 1024},
    generator={"layers": 2, "hidden": 64, "heads": 2, "context": 256, "vocab": 512},
    text_chars=200,
    load_s=1.5,
    raw_s=0.3,
    batches=(1, 8),
    texts_per_request=4,
    clients=4,
    client_processes=2,
    new_tokens=16,
    oom_limit_mb=256,
)


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = 0

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        self.lines.append(f"[{'ok' if ok else 'FAIL'}] {what}" + (f": {detail}" if detail else ""))
        print(self.lines[-1], flush=True)
        self.failed += 0 if ok else 1
        return ok

    def figure(self, what: str, detail: str) -> None:
        self.lines.append(f"[figure] {what}: {detail}")
        print(self.lines[-1], flush=True)

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """A step that fails is reported with its error; the steps after it still run."""
        started = time.perf_counter()
        print(f"-- {what}", flush=True)
        try:
            yield
        except Exception as exc:
            traceback.print_exc()
            self.check(False, what, f"{type(exc).__name__}: {str(exc)[:400]}")
        print(f"-- {what}: {time.perf_counter() - started:.1f} s", flush=True)


# --- small models ---------------------------------------------------------------------------


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


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
    return _save(helper.make_graph(nodes, "affine", [x], [y], initializer=[two, one]), path)


def half(path: Path) -> Path:
    """x: FP16 [batch, 64] -> y = x * x (FP16)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 64])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"])], "half", [x], [y])
    return _save(graph, path)


HUNGRY_WIDTH, HUNGRY_INNER = 256, 32768


def hungry(path: Path) -> Path:
    """x: FP32 [batch, 256] -> relu(x @ A) @ B, A [256, 32768], B [32768, 256]: 128 KiB of
    activations a row (a batch of 2,048 rows needs 256 MiB beside the 64 MiB of weights)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((HUNGRY_WIDTH, HUNGRY_INNER)).astype(np.float32) / 16
    b = rng.standard_normal((HUNGRY_INNER, HUNGRY_WIDTH)).astype(np.float32) / 181
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HUNGRY_WIDTH])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", HUNGRY_WIDTH])
    nodes = [
        helper.make_node("MatMul", ["x", "a"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "b"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(a, "a"), onnx.numpy_helper.from_array(b, "b")]
    return _save(helper.make_graph(nodes, "hungry", [x], [y], initializer=inits), path)


def write_config(folder: Path, config: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def merge_config(folder: Path, update: dict[str, Any]) -> None:
    config = yaml.safe_load((folder / "config.yaml").read_text())
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    write_config(folder, config)


def corpus(chars: int, count: int) -> list[str]:
    from inferd.corpus import docstrings

    texts = [t[:chars] for t in docstrings(count * chars * 2) if len(t) >= chars // 2]
    return (texts * (count // max(1, len(texts)) + 1))[:count]


def build_encoder(repo: Path, plan: Plan) -> tuple[Path, Path]:
    """A BERT with random weights exported by `inferd export` as `encoder`, and its fp16 copy
    (`inferd quantize --to fp16`) as `encoder-fp16`; returns their ONNX files."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel

    from inferd.prep.console import Reporter
    from inferd.prep.exporting import run_export

    shape = plan.encoder
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=shape["vocab"], special_tokens=special)
    tokenizer.train_from_iterator(corpus(400, 2000), trainer)
    from tokenizers.processors import TemplateProcessing

    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        intermediate_size=4 * shape["hidden"],
        max_position_embeddings=512,
    )
    with tempfile.TemporaryDirectory(prefix="inferd-gpu-encoder-") as tmp:
        folder = Path(tmp)
        BertModel(config).eval().save_pretrained(folder)
        tokenizer.save(str(folder / "tokenizer.json"))
        tokenizer_config = {"model_max_length": 512, "tokenizer_class": "PreTrainedTokenizerFast"}
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
        code = run_export(
            str(folder),
            repo,
            "encoder",
            None,
            opset=17,
            atol=1e-3,
            version=None,
            reporter=Reporter(),
        )
    if code != 0:
        raise RuntimeError(f"inferd export of the encoder failed (exit {code})")
    # the conversion `inferd quantize --to fp16` makes (its accuracy report and CPU timing left
    # out: minutes of a short lease)
    from onnxruntime.transformers.float16 import convert_float_to_float16

    shutil.copytree(repo / "encoder", repo / "encoder-fp16")
    fp16_file = repo / "encoder-fp16" / "1" / "model.onnx"
    converted = convert_float_to_float16(onnx.load(str(fp16_file)), keep_io_types=True)
    onnx.save(converted, str(fp16_file))
    widest = max(plan.batches)
    for name in ("encoder", "encoder-fp16"):
        # three instances on the device: one batch runs, one waits on the device, one is
        # formed or answered (in front of an emulated H200, fp32, three served more than two in
        # each of three rounds: 0.86 of its rate against 0.84, benchmarks/serving_bench.py
        # device)
        groups = [{**group, "count": 3} for group in plan.groups()]
        batching = {"max_batch_tokens": widest * 256}
        update = {"instance_groups": groups, "max_batch_size": widest, "dynamic_batching": batching}
        merge_config(repo / name, update)
    return repo / "encoder" / "1" / "model.onnx", fp16_file


def build_decoder(repo: Path, plan: Plan) -> Path:
    """A GPT-2 with random weights, in-place KV cache, drawing in its graph (`inferd export`),
    as `gen` (cache_placement: device) and `gen-host` (host); returns its ONNX file."""
    from inferd.tools.generator import GeneratorShape, build_generator

    g = plan.generator
    shape = GeneratorShape(
        layers=g["layers"],
        heads=g["heads"],
        hidden=g["hidden"],
        context=g["context"],
        vocab=g["vocab"],
    )
    rows = 16
    build_generator(
        repo,
        "gen",
        steps=0,
        shape=shape,
        corpus_chars=300_000,
        init_std=0.02,  # (the default wide init of random weights drifts past the parity bound)
        kv_cache="inplace",
        config={
            "instance_groups": plan.groups(),
            "generation": {
                "context_length": shape.context,
                "max_new_tokens": plan.new_tokens,
                "max_new_tokens_limit": 4096,
                "max_running": rows,
                "max_kv_tokens": rows * shape.context,
                "cache_placement": "device",
            },
        },
    )
    shutil.copytree(repo / "gen", repo / "gen-host")
    merge_config(repo / "gen-host", {"generation": {"cache_placement": "host"}})
    return repo / "gen" / "1" / "model.onnx"


def build_fp16_decoder(report: Report, repo: Path) -> Path:
    """`gen` converted by `inferd quantize --to fp16` (its KV cache fp16) as `gen-fp16` (cache
    on the device) and `gen-fp16-host`; returns its ONNX file. Its accuracy is reported, not
    judged: random weights' logits are nearly flat, and their greedy ties may flip."""
    from inferd.cli.main import main as inferd

    shutil.copytree(repo / "gen", repo / "gen-fp16")
    command = ["quantize", "--repo", str(repo), "--model", "gen-fp16", "--to", "fp16", "--force"]
    report.check(inferd(command) == 0, "inferd quantize --to fp16 of the in-place decoder")
    written = json.loads((repo / ".inferd/reports/gen-fp16/quantize-2-fp16.json").read_text())
    accuracy = written["accuracy"]
    report.figure(
        "fp16 decoder against fp32",
        f"greedy agreement {written['greedy_agreement']:.2%}, logits max |diff| "
        f"{accuracy['max_abs']['logits']:.3g} (range {accuracy['value_range']['logits']:.3g})",
    )
    shutil.copytree(repo / "gen-fp16", repo / "gen-fp16-host")
    merge_config(repo / "gen-fp16-host", {"generation": {"cache_placement": "host"}})
    return repo / "gen-fp16" / "2" / "model.onnx"


# --- checks ---------------------------------------------------------------------------------


def check_raw(report: Report, model: Path, plan: Plan) -> None:
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    for gpu in plan.gpus:
        session = ort.InferenceSession(str(model), providers=plan.providers(gpu))
        providers = session.get_providers()
        (y,) = session.run(None, {"x": x})
        wanted = CPU if plan.dry else CUDA
        report.check(
            providers[0] == wanted and np.allclose(y, 2 * x + 1, atol=1e-5),
            f"raw ONNX Runtime on {'the CPU (dry run)' if plan.dry else f'GPU {gpu}'}",
            f"providers {providers}",
        )


def raw_encoder(model: Path, texts: list[str], plan: Plan) -> tuple[int, float]:
    """The best (batch, texts a second) of bare `session.run` on tokenized batches."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model.parent / "tokenizer.json"))
    tokenizer.enable_truncation(512)
    tokenizer.enable_padding()
    session = ort.InferenceSession(str(model), providers=plan.providers(plan.gpus[0]))
    names = [i.name for i in session.get_inputs()]
    best = (0, 0.0)
    for batch in plan.batches:
        encoded = tokenizer.encode_batch(texts[:batch])
        ids = np.array([e.ids for e in encoded], np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.array([e.attention_mask for e in encoded], np.int64),
            "token_type_ids": np.zeros_like(ids),
        }
        feeds = {k: v for k, v in feeds.items() if k in names}
        for _ in range(3):
            session.run(None, feeds)
        runs, started = 0, time.perf_counter()
        while time.perf_counter() - started < plan.raw_s:
            session.run(None, feeds)
            runs += 1
        rate = runs * batch / (time.perf_counter() - started)
        if rate > best[1]:
            best = (batch, rate)
    return best


def closed_loop(
    clients: int, seconds: float, one: Callable[[httpx.Client, int], int]
) -> tuple[float, list[int]]:
    """`clients` threads, each calling `one(client, i)` back to back for `seconds`; returns
    the units (what `one` returns) a second, and the HTTP statuses seen."""
    units = [0] * clients
    statuses: list[int] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(index: int) -> None:
        with httpx.Client(timeout=60) as http:
            i = 0
            while time.perf_counter() < stop_at:
                try:
                    units[index] += one(http, index * 100_000 + i)
                except httpx.HTTPStatusError as exc:
                    with lock:
                        statuses.append(exc.response.status_code)
                i += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return sum(units) / (time.perf_counter() - started), statuses


def check_encoder(report: Report, repo: Path, plan: Plan) -> None:
    from served_profile import embed_load, snapshot, where_the_time_goes

    fp32, fp16 = build_encoder(repo, plan)
    texts = corpus(plan.text_chars, 512)
    raws = {
        "encoder": raw_encoder(fp32, texts, plan),
        "encoder-fp16": raw_encoder(fp16, texts, plan),
    }
    server = Server(repo, "--log-level", "warning")
    try:
        per = plan.texts_per_request
        for name, (batch, raw) in raws.items():
            load = functools.partial(
                embed_load, server.url, name, texts, per, processes=plan.client_processes
            )
            load(plan.clients, plan.load_s / 4)  # warm: batch sizes, arenas
            best, profile = 0.0, ""
            for clients in (plan.clients, 2 * plan.clients):
                before = snapshot(server.url, server.process.pid, name)
                served = load(clients, plan.load_s)
                after = snapshot(server.url, server.process.pid, name)
                report.check(
                    not served.statuses,
                    f"{name}: every /embed answered 200 ({clients} clients)",
                    str(served.statuses[:5]),
                )
                if served.vectors_per_s > best:
                    best = served.vectors_per_s
                    profile = f"{clients} clients, " + where_the_time_goes(before, after, served)
            ratio = best / raw
            report.figure(
                f"{name} texts/s",
                f"raw {raw:.0f} (batch {batch}), served {best:.0f} "
                f"({per} texts a request), ratio {ratio:.2f}",
            )
            report.figure(f"{name} served, where the time goes", profile)
            report.check(plan.dry or ratio >= 0.9, f"{name}: served >= 0.9 of raw", f"{ratio:.2f}")
    finally:
        server.stop()


def raw_decode(model: Path, rows: int, steps: int, plan: Plan) -> float:
    """Tokens a second of bare ONNX Runtime decode steps: the cache and the drawn tokens bound
    on the device once (the output written into the input), greedy draws in the graph, the
    positions moved on in place on the host between steps."""
    import onnxruntime as ort

    from inferd.generation.decoder import idle_draw_feeds

    options = ort.SessionOptions()
    options.log_severity_level = 2  # warnings: ONNX Runtime says when nodes fall back to the CPU
    session = ort.InferenceSession(str(model), options, providers=plan.providers(plan.gpus[0]))
    device, gpu = ("cpu", 0) if plan.dry else ("cuda", plan.gpus[0])
    inputs = {i.name: i for i in session.get_inputs()}
    past = sorted(n for n in inputs if n.startswith("past_key_values."))
    _, heads, _, dim = inputs[past[0]].shape
    dtype = np.float16 if inputs[past[0]].type == "tensor(float16)" else np.float32
    capacity = plan.generator["context"]
    binding = session.io_binding()
    keep = []
    for name in past:
        value = ort.OrtValue.ortvalue_from_shape_and_type(
            [rows, heads, capacity, dim], dtype, device, gpu
        )
        keep.append(value)
        binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output(name.replace("past_key_values", "present"), value)
    tokens = ort.OrtValue.ortvalue_from_numpy(np.ones((rows, 1), np.int64), device, gpu)
    binding.bind_ortvalue_input("input_ids", tokens)
    binding.bind_ortvalue_output("next_ids", tokens)
    start = 16
    positions = np.full((rows, 1), start, np.int64)
    seqlens = np.full(rows, start, np.int32)
    total = np.array(start + 1, np.int32)
    small = {"position_ids": positions, "seqlens_k": seqlens, "total_sequence_length": total}
    small.update({k: v for k, v in idle_draw_feeds(rows, 0).items() if k in inputs})
    if "draw_bias" in inputs:  # (no row constrained)
        small["draw_bias"] = np.zeros((1, inputs["draw_bias"].shape[1]), np.float32)
    if "draw_top_k" in small:
        small["draw_top_k"][:] = 1
    for name, array in small.items():
        binding.bind_cpu_input(name, array)

    def step() -> None:
        session.run_with_iobinding(binding)
        for array in (positions, seqlens, total):
            np.add(array, 1, out=array)

    for _ in range(5):
        step()
    steps = min(steps, capacity - start - 6)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return rows * steps / (time.perf_counter() - started)


def check_generation(report: Report, repo: Path, plan: Plan) -> None:
    models = {"gen": build_decoder(repo, plan)}
    models["gen-fp16"] = build_fp16_decoder(report, repo)
    steps = 600 if not plan.dry else 40
    ceilings = {
        (name, rows): raw_decode(model, rows, steps, plan)
        for name, model in models.items()
        for rows in (1, 16)
    }
    server = Server(repo, "--log-level", "warning")
    try:
        for placement in ("gen", "gen-host", "gen-fp16", "gen-fp16-host"):
            for flight in (1, 16):

                def one(http: httpx.Client, i: int, model: str = placement) -> int:
                    body = {
                        "model": model,
                        "prompt": "Return the number of items in",
                        "max_length": plan.new_tokens,
                        "ignore_eos": True,
                        "temperature": 0.8,
                        "seed": i,
                    }
                    response = http.post(f"{server.url}/generate", json=body)
                    response.raise_for_status()
                    return int(response.json()["tokens"])

                closed_loop(flight, plan.load_s / 4, one)
                rate, statuses = closed_loop(flight, plan.load_s, one)
                ceiling = ceilings[placement.removesuffix("-host"), flight]
                report.check(
                    not statuses, f"{placement} at {flight}: every /generate 200", str(statuses[:5])
                )
                report.figure(
                    f"{placement} tokens/s at {flight} in flight",
                    f"served {rate:.0f}, raw decode ceiling {ceiling:.0f}, "
                    f"ratio {rate / ceiling:.2f}",
                )
        metrics = httpx.get(f"{server.url}/metrics").text
        report.check("inferd_generation" in metrics, "generation metrics on /metrics")
    finally:
        server.stop()


def check_emulated(report: Report, repo: Path, plan: Plan) -> None:
    """Step 2's fp32 encoder (built there when step 2 did not run) served over `/embed` in front
    of each emulated device, on every core of this machine: served / the device's rate."""
    from device_bench import measure
    from emulated_device import CALIBRATIONS

    if not (repo / "encoder").exists():
        build_encoder(repo, plan)
    texts = corpus(plan.text_chars, 512)
    devices = ["h200-fp32"] if plan.dry else list(CALIBRATIONS)
    for device in devices:
        result = measure(
            repo,
            device,
            texts,
            [plan.clients, 2 * plan.clients],
            plan.load_s,
            plan.client_processes,
            model="encoder",
            per=plan.texts_per_request,
            pinned=False,
        )
        rate = result.device_rate or 0.0
        report.figure(
            f"emulated {device} texts/s",
            f"device {rate:.0f}, served {result.served:.0f} ({result.clients} clients), ratio "
            f"{result.served / rate:.2f}, server CPU {result.cpu_us_per_text:.0f} us a text; "
            f"{result.profile}",
        )
        report.check(
            not result.failed, f"emulated {device}: every /embed answered 200", str(result.failed)
        )


def check_oom(report: Report, root: Path, plan: Plan) -> None:
    """Batches over a small arena: the concurrent requests are answered (their batch halved
    until it fits), a request too big alone is refused cleanly, the server serves on."""
    hungry(root / "hungry" / "1" / "model.onnx")
    runtime = {} if plan.dry else {"gpu_mem_limit_mb": plan.oom_limit_mb}
    write_config(
        root / "hungry",
        {"max_batch_size": 4096, "instance_groups": plan.groups(), "runtime": runtime},
    )
    server = Server(root, "--log-level", "warning")
    rng = np.random.default_rng(2)
    try:

        def post(rows: int) -> httpx.Response:
            x = rng.standard_normal((rows, HUNGRY_WIDTH)).astype(np.float32)
            tensor = {"name": "x", "datatype": "FP32", "shape": [rows, HUNGRY_WIDTH]}
            body = {"inputs": [{**tensor, "data": x.ravel().tolist()}]}
            return httpx.post(f"{server.url}/v2/models/hungry/infer", json=body, timeout=120)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(post, [512] * 8))
        codes = [a.status_code for a in answers]
        report.check(
            all(c in (200, 503, 507) for c in codes) and 200 in codes,
            "8 requests of 512 rows over the arena: answered, the batch halved",
            str(codes),
        )
        alone = post(4096)
        body = alone.json()
        report.check(
            alone.status_code in (200, 503, 507),
            "a request of 4,096 rows over the arena: answered (its rows in halves) or refused "
            "as out of memory, never a server error",
            f"{alone.status_code} {json.dumps(body)[:200] if alone.status_code != 200 else ''}",
        )
        after = post(16)
        health = httpx.get(f"{server.url}/health", timeout=5)
        report.check(
            after.status_code == 200
            and health.status_code == 200
            and server.process.poll() is None,
            "the server serves on after out of memory",
            f"infer {after.status_code}, /health {health.status_code}",
        )
    finally:
        server.stop()


def check_placement(report: Report, root: Path, plan: Plan) -> None:
    affine(root / "placed" / "1" / "model.onnx")
    gpu_groups = [] if plan.dry else [{"kind": "gpu", "gpus": list(plan.gpus), "count": 1}]
    groups = [*gpu_groups, {"kind": "cpu", "count": 1}]
    # every answer checked against numpy: 32 clients queue, none is shed by the queue-time
    # bound (a shared machine's load could push a dry run's queue past it)
    unbounded = {"max_queue_time_ms": None}
    config = {"max_batch_size": 32, "instance_groups": groups, "dynamic_batching": unbounded}
    write_config(root / "placed", config)
    half(root / "half" / "1" / "model.onnx")
    write_config(root / "half", {"max_batch_size": 8, "instance_groups": plan.groups()})
    server = Server(root, "--log-level", "warning")
    try:
        url = server.url
        for model in ("placed", "half"):
            config = httpx.get(f"{url}/v2/models/{model}/config").json()
            providers = config["optimization"]["execution_accelerators"]["providers"]
            wanted = CPU if plan.dry else CUDA
            report.check(wanted in providers, f"{model} serves on {wanted}", str(providers))
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

        count = 400 if plan.dry else 2000
        started = time.perf_counter()
        with ThreadPoolExecutor(32) as pool:
            right = sum(pool.map(one, range(count)))
        seconds = time.perf_counter() - started
        report.check(
            right == count, "answers under load match numpy", f"{right}/{count} in {seconds:.1f} s"
        )
        stats = httpx.get(f"{url}/v2/models/placed/stats").json()["model_stats"][0]
        instances = {i["name"]: i for i in stats["instance_stats"]}
        for gpu in () if plan.dry else plan.gpus:
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
            "an fp16 model answers FP16, equal to numpy",
        )
        metrics = httpx.get(f"{url}/metrics").text
        for gpu in () if plan.dry else plan.gpus:
            for family in (
                "inferd_gpu_utilization_ratio",
                "inferd_gpu_memory_used_bytes",
                "inferd_gpu_memory_total_bytes",
            ):
                report.check(f'{family}{{gpu="{gpu}"}}' in metrics, f"{family} for GPU {gpu}")
        kinds = [("cpu-0", "cpu")] + ([] if plan.dry else [(f"gpu{g}-0", "gpu") for g in plan.gpus])
        for name, kind in kinds:
            labels = f'instance="{name}",kind="{kind}",model="placed",version="1"'
            report.check(
                f"inferd_instance_batches_total{{{labels}}}" in metrics,
                f"per-instance metrics for {name}",
            )
    finally:
        server.stop()


def visible_gpus() -> list[int]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return list(range(pynvml.nvmlDeviceGetCount()))
    except Exception:
        return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", help="comma-separated device ids (default: every GPU NVML sees)")
    parser.add_argument("--dry-run", action="store_true", help="every step on the CPU, small")
    parser.add_argument(
        "--only", help="comma-separated steps: raw,encoder,emulated,generation,oom,placement"
    )
    parser.add_argument("--report", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    report = Report()
    print(machine_description(), flush=True)
    import onnxruntime as ort

    available = ort.get_available_providers()
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else visible_gpus()
    if args.dry_run:
        gpus = [0]
    else:
        if not report.check(CUDA in available, "onnxruntime has the CUDA provider", str(available)):
            print("install onnxruntime-gpu (pip install -e '.[gpu]') on a machine with CUDA")
            return 2
        if not report.check(bool(gpus), "GPUs to check", str(gpus)):
            return 2
    plan = Plan(dry=args.dry_run, gpus=tuple(gpus), **(DRY_PLAN if args.dry_run else GPU_PLAN))
    steps = (
        args.only.split(",")
        if args.only
        else ["raw", "encoder", "emulated", "generation", "oom", "placement"]
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="inferd-gpu-check-") as folder:
        root = Path(folder)
        if "raw" in steps:
            with report.step("raw ONNX Runtime per device"):
                check_raw(report, affine(root / "raw.onnx"), plan)
        if "encoder" in steps:
            with report.step("encoder: raw against served, fp32 and fp16"):
                check_encoder(report, root / "encoders", plan)
        if "emulated" in steps:
            with report.step("encoder: served in front of an emulated device, on these CPUs"):
                check_emulated(report, root / "encoders", plan)
        if "generation" in steps:
            with report.step("generation: device-resident cache, host cache, raw ceiling"):
                check_generation(report, root / "generators", plan)
        if "oom" in steps:
            with report.step("out of memory, for real"):
                check_oom(report, root / "oom", plan)
        if "placement" in steps:
            with report.step("placement, fp16, NVML and per-instance metrics"):
                check_placement(report, root / "placed", plan)
    took = time.perf_counter() - started
    summary = f"{report.failed} of {len(report.lines)} checks failed in {took:.0f} s"
    print(summary)
    if args.report:
        args.report.write_text("\n".join([machine_description(), *report.lines, summary]) + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
