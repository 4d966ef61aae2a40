"""`inferd quantize --to fp16` of a decoder with an in-place KV cache (inferd.prep.inplace_decoder).

The weights, the activations and the cache become fp16; the cache stays fp16 at the graph's
edge too (`past_key_values.*` in, `present.*` out), so that the buffers the server binds in
place are the ones attention reads and writes: on a GPU, ONNX Runtime's CUDA provider runs
`GroupQueryAttention` in fp16 only, and a cache kept on the device (`cache_placement: device`,
its `auto` choice for fp16) then never crosses the bus. Every other input and output keeps its
type (`logits` float32), and the drawing that follows the logits in the graph stays float32:
sampling's softmax and cumulative sums are not fp16's.

Accuracy is the logits' largest |difference| from the source version over prompts prefilled
together, decode steps and rows compacted (inferd.prep.inplace_decoder.decoder_logits), judged
against 5% of their range (or `--max-abs-diff`), and greedy next-token agreement, judged
against `--min-agreement`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from inferd.config.model import ModelConfig
from inferd.generation.decoder import LOGITS
from inferd.prep.accuracy import Accuracy
from inferd.prep.console import Reporter
from inferd.prep.quantize_verdict import Thresholds, describe_diff, show_written, verdict
from inferd.prep.source_record import SourceError
from inferd.prep.versions import publish_version, set_metadata
from inferd.prep.worth import refuse
from inferd.prep.writer import staging, write_report
from inferd.repository.scan import MODEL_FILE
from inferd.runtime.kv_names import PAST, PRESENT

CACHE_PREFIXES = (PAST.split("{")[0], PRESENT.split("{")[0])


def fp16_inplace(model: Any) -> Any:
    """The fp16 conversion of an in-place decoder (onnx.ModelProto), as the module says."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    graph = model.graph
    edge = [v.name for v in (*graph.input, *graph.output)]
    keep = [name for name in edge if not name.startswith(CACHE_PREFIXES)]
    return convert_float_to_float16(model, keep_io_types=keep, node_block_list=drawing_nodes(graph))


def drawing_nodes(graph: Any) -> list[str]:
    """The names of the nodes that compute from the logits (the drawing in the graph), the
    graph's unnamed nodes named first (`inferd_node_<index>`: the converter keeps nodes
    float32 by name)."""
    for index, node in enumerate(graph.node):
        node.name = node.name or f"inferd_node_{index}"
    reached = {LOGITS}
    after: list[str] = []
    for node in graph.node:  # (nodes are in topological order)
        if reached.intersection(node.input):
            after.append(node.name)
            reached.update(node.output)
    return after


def decoder_accuracy(reference: Path, candidate: Path, vocab: int, context: int) -> Accuracy:
    """The logits' largest |difference| and range, and greedy agreement at every step."""
    from inferd.prep.inplace_decoder import decoder_logits

    want = decoder_logits(reference, vocab, context)
    got = decoder_logits(candidate, vocab, context)
    accuracy = Accuracy()
    for seq, steps in want.items():
        for a, b in zip(steps, got[seq], strict=True):
            a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
            diff = float(np.abs(a64 - b64).max())
            accuracy.max_abs[LOGITS] = max(accuracy.max_abs.get(LOGITS, 0.0), diff)
            spread = float(a64.max() - a64.min())
            accuracy.value_range[LOGITS] = max(accuracy.value_range.get(LOGITS, 0.0), spread)
            accuracy.agreements.append(int(a64.argmax()) == int(b64.argmax()))
    return accuracy


def run_quantize_decoder(
    folder: Path,
    source: tuple[int, Path],
    target_version: int,
    config: ModelConfig,
    thresholds: Thresholds,
    force: bool,
    reporter: Reporter,
) -> int:
    """Writes version `target_version` of the model in `folder`: the fp16 conversion of
    `source` (version, model file), when its accuracy passes (or with `force`)."""
    import onnx

    src_version, src_path = source
    original = onnx.load(str(src_path))
    vocab = _vocab(original)
    if config.generation is None:
        raise SourceError(f"{folder.name}: an in-place decoder needs its `generation` settings")
    context = config.generation.context_length
    stage = staging(folder, target_version)
    try:
        out = stage / MODEL_FILE
        with reporter.step(f"converting version {src_version} to fp16, its KV cache included"):
            converted = fp16_inplace(original)
            metadata = {p.key: p.value for p in original.metadata_props}
            metadata.update({"inferd.quantized": "fp16", "inferd.quantized_from": str(src_version)})
            set_metadata(converted, metadata)
            onnx.save(converted, str(out))
        with reporter.step("logits and greedy tokens of both, prefill and decode steps"):
            accuracy = decoder_accuracy(src_path, out, vocab, context)
        size_ratio = out.stat().st_size / src_path.stat().st_size
        problems = verdict_both(accuracy, thresholds)
        if size_ratio > 1.0:
            problems.append(f"the fp16 file is larger than fp32 ({size_ratio:.2f}x)")
        result = {
            "model": folder.name,
            "from_version": src_version,
            "version": target_version,
            "to": "fp16",
            "samples": "4 prompts prefilled together, 6 decode steps, 2 rows compacted",
            "accuracy": accuracy.to_dict(),
            "greedy_agreement": accuracy.agreement,
            "size_ratio": size_ratio,
            "problems": problems,
            "forced": bool(problems) and force,
        }
        report_file = write_report(folder, f"quantize-{target_version}-fp16.json", result)
        _show(reporter, accuracy, size_ratio, thresholds)
        if refuse(reporter, problems, force, report_file):
            return 1
        target, size = publish_version(src_path, stage, folder, target_version)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    what = f"{folder.name} version {src_version} -> version {target_version} (fp16)"
    show_written(reporter, what, target, size, report_file)
    return 0


def _show(
    reporter: Reporter, accuracy: Accuracy, size_ratio: float, thresholds: Thresholds
) -> None:
    diff = describe_diff(LOGITS, accuracy.max_abs[LOGITS], _logits_only(accuracy), thresholds)
    agreed = f"{accuracy.agreement or 0.0:.2%} of {len(accuracy.agreements)} steps"
    rows = [
        ("greedy agreement", f"{agreed}; at least {thresholds.min_agreement:.0%} wanted"),
        (f"max |diff| {LOGITS}", diff),
        ("size vs fp32", f"{size_ratio:.2f}x"),
    ]
    reporter.table("Accuracy of fp16 against fp32 (a decoder, its KV cache in fp16)", rows)


def verdict_both(accuracy: Accuracy, thresholds: Thresholds) -> list[str]:
    """A decoder is judged on its greedy agreement and on its logits' largest |difference|."""
    said = verdict(accuracy, thresholds)
    agreement = [p.replace("label agreement", "greedy next-token agreement") for p in said]
    return agreement + verdict(_logits_only(accuracy), thresholds)


def _logits_only(accuracy: Accuracy) -> Accuracy:
    """The logits' figures without the agreement (which `verdict` would judge instead)."""
    return Accuracy(max_abs=accuracy.max_abs, value_range=accuracy.value_range)


def _vocab(model: Any) -> int:
    for value in model.graph.output:
        if value.name == LOGITS:
            last = value.type.tensor_type.shape.dim[-1]
            if last.HasField("dim_value") and last.dim_value > 0:
                return int(last.dim_value)
    raise SourceError(f"the decoder's {LOGITS} output has no fixed vocabulary size")
