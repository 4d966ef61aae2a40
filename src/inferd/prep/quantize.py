"""`inferd quantize`: a dynamic-int8 (CPU) or fp16 (GPU) variant of a version, written as a new
version only when its accuracy report against the fp32 version passes the thresholds and it is
neither larger nor (int8) measurably slower than fp32 (or with `--force`); the report is kept
either way. An in-place decoder's fp16 has its own conversion (inferd.prep.quantize_decoder).

fp16 is meant for GPUs; it is measured here on ONNX Runtime's CPU kernels, which gives its
accuracy honestly but not its speed (the speed ratio printed for fp16 is this CPU's).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from inferd.config.model import ModelConfig
from inferd.prep.accuracy import Accuracy, compare
from inferd.prep.console import Reporter
from inferd.prep.feeds import FeedPlan
from inferd.prep.ort import input_dtypes, output_specs, runner, session
from inferd.prep.quantize_verdict import Thresholds, describe_diff, show_written, verdict
from inferd.prep.quiet import ORT_PREPROCESS_ADVICE, without_root_message
from inferd.prep.samples import SampleSet, load_samples
from inferd.prep.source_record import SourceError
from inferd.prep.versions import is_inplace_decoder, publish_version, read_version, set_metadata
from inferd.prep.worth import SpeedComparison, compare_speed, refusals, refuse
from inferd.prep.writer import (
    model_folder,
    next_version,
    source_version,
    staging,
    write_report,
)
from inferd.repository.scan import MODEL_FILE, scan_model


def _int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with without_root_message(ORT_PREPROCESS_ADVICE):
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            # fused contrib ops (Attention, SkipLayerNorm) have no ONNX type inference
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )


def _fp16(source: Path, target: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save(model, str(target))


def _inplace_decoder(path: Path, samples: Path | None) -> bool:
    """Whether `path` is an in-place decoder (its fp16 version is measured on prompts and
    decode steps of its own: `samples` are refused for one)."""
    if not is_inplace_decoder(onnx.load(str(path), load_external_data=False)):
        return False
    if samples is not None:
        raise SourceError(
            "--samples does not apply to an in-place decoder: it is measured on prompts "
            "prefilled together and decode steps (inferd.prep.quantize_decoder)"
        )
    return True


def run_quantize(
    repo: Path,
    model: str,
    *,
    to: str,
    from_version: int | None,
    version: int | None,
    samples: Path | None,
    count: int,
    thresholds: Thresholds,
    force: bool,
    reporter: Reporter,
    timing_s: float | None = None,
) -> int:
    folder = model_folder(repo, model)
    src_version, src_path = source_version(folder, from_version)
    target_version = next_version(folder, version)
    entry = scan_model(folder)
    if (config := entry.config) is None:
        reporter.fail(entry.error or f"{folder}: no usable config")
        return 2
    if to == "fp16" and _inplace_decoder(src_path, samples):
        from inferd.prep.quantize_decoder import run_quantize_decoder

        source = (src_version, src_path)
        return run_quantize_decoder(
            folder, source, target_version, config, thresholds, force, reporter
        )
    original = read_version(src_path)
    stage = staging(folder, target_version)
    try:
        out = stage / MODEL_FILE
        _quantize_file(src_path, out, to, src_version, original.metadata, reporter)
        sample_set, accuracy, speed = _measured(
            config, (src_path, out), (samples, count, original.plan), reporter, timing_s
        )
        size_ratio = out.stat().st_size / src_path.stat().st_size
        # fp16 timed on CPU kernels says nothing of its speed on a GPU: only int8's is judged
        judged = speed if to == "int8" else None
        problems = verdict(accuracy, thresholds) + refusals(size_ratio, judged, "fp32")
        result = {
            "model": model,
            "from_version": src_version,
            "version": target_version,
            "to": to,
            "samples": sample_set.description,
            **_figures(accuracy, size_ratio, speed, to),
            "problems": problems,
            "forced": bool(problems) and force,
        }
        report_file = write_report(folder, f"quantize-{target_version}-{to}.json", result)
        _show(reporter, accuracy, sample_set.description, size_ratio, speed, to, thresholds)
        if refuse(reporter, problems, force, report_file):
            return 1
        target, size = publish_version(src_path, stage, folder, target_version)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    what = f"{model} version {src_version} -> version {target_version} ({to})"
    show_written(reporter, what, target, size, report_file)
    return 0


def _figures(
    accuracy: Accuracy, size_ratio: float, speed: SpeedComparison, to: str
) -> dict[str, object]:
    """What the report says of the quantized model against its source."""
    return {
        "accuracy": accuracy.to_dict(),
        "size_ratio": size_ratio,
        "speed_ratio": speed.speedup,
        "speed": speed.to_dict(),
        "latency_s": {"fp32": speed.source_s, to: speed.candidate_s},
    }


def _quantize_file(
    src_path: Path,
    out: Path,
    to: str,
    src_version: int,
    metadata: dict[str, str],
    reporter: Reporter,
) -> None:
    """`src_path` quantized to `to` at `out`, its metadata kept and the quantization's added."""
    with reporter.step(f"quantizing version {src_version} to {to}"):
        (_int8 if to == "int8" else _fp16)(src_path, out)
    quantized = onnx.load(str(out))
    marks = {"inferd.quantized": to, "inferd.quantized_from": str(src_version)}
    set_metadata(quantized, {**metadata, **marks})
    onnx.save(quantized, str(out))


def _measured(
    config: ModelConfig,
    paths: tuple[Path, Path],
    sampling: tuple[Path | None, int, FeedPlan],
    reporter: Reporter,
    timing_s: float | None,
) -> tuple[SampleSet, Accuracy, SpeedComparison]:
    """The samples (`sampling`: a samples file or none, how many, the inputs' plan), the
    quantized model's accuracy on them against the source's (`paths`: the source, the
    quantized) and the speed of both on this machine."""
    reference, candidate = session(paths[0]), session(paths[1])
    samples, count, plan = sampling
    sample_set = load_samples(
        samples, count, config, paths[0].parent, plan, input_dtypes(reference)
    )
    specs = output_specs(reference)
    names = [s.name for s in specs]
    run_ref, run_new = runner(reference, names), runner(candidate, names)
    want, got = [], []
    with reporter.bar(
        f"accuracy on {sample_set.count} samples", len(sample_set.batches)
    ) as advance:
        for feeds in sample_set.batches:
            want.append(run_ref(feeds))
            got.append(run_new(feeds))
            advance()
    accuracy = compare(config, specs, sample_set.batches, want, got)
    timing = sample_set.batches[: min(4, len(sample_set.batches))]
    with reporter.step("timing both on this machine"):
        speed = compare_speed(run_ref, run_new, timing, budget_s=timing_s)
    return sample_set, accuracy, speed


def _show(
    reporter: Reporter,
    accuracy: Accuracy,
    samples: str,
    size_ratio: float,
    speed: SpeedComparison,
    to: str,
    thresholds: Thresholds,
) -> None:
    rows = [("samples", samples)]
    if accuracy.cosine_mean is not None:
        fits = "within" if accuracy.cosine_mean >= thresholds.min_cosine else "UNDER"
        rows.append(
            (
                "cosine (embeddings)",
                f"mean {accuracy.cosine_mean:.5f}, min {accuracy.cosine_min:.5f}; {fits} the "
                f"bound: mean at least {thresholds.min_cosine:g} (--min-cosine)",
            )
        )
    if accuracy.agreement is not None:
        fits = "within" if accuracy.agreement >= thresholds.min_agreement else "UNDER"
        rows.append(
            (
                "label agreement",
                f"{accuracy.agreement:.2%}; {fits} the bound: at least "
                f"{thresholds.min_agreement:.0%} (--min-agreement)",
            )
        )
    rows += [
        (f"max |diff| {name}", describe_diff(name, diff, accuracy, thresholds))
        for name, diff in accuracy.max_abs.items()
    ]
    rows.append(("size vs fp32", f"{size_ratio:.2f}x"))
    note = " (CPU kernels; fp16 is for GPUs)" if to == "fp16" else ""
    rows.append(("speed vs fp32 here", f"{speed.describe()}{note}"))
    reporter.table(f"Accuracy of {to} against fp32", rows)
