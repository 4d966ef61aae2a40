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

from inferd.prep.accuracy import Accuracy, compare
from inferd.prep.console import Reporter
from inferd.prep.ort import input_dtypes, output_specs, runner, session
from inferd.prep.quantize_verdict import Thresholds, describe_diff, show_written, verdict
from inferd.prep.quiet import ORT_PREPROCESS_ADVICE, without_root_message
from inferd.prep.samples import load_samples
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


def _inplace_decoder(path: Path) -> bool:
    return is_inplace_decoder(onnx.load(str(path), load_external_data=False))


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
    if entry.config is None:
        reporter.fail(entry.error or f"{folder}: no usable config")
        return 2
    config = entry.config
    if to == "fp16" and _inplace_decoder(src_path):
        from inferd.prep.quantize_decoder import run_quantize_decoder

        if samples is not None:
            raise SourceError(
                "--samples does not apply to an in-place decoder: it is measured on prompts "
                "prefilled together and decode steps (inferd.prep.quantize_decoder)"
            )
        source = (src_version, src_path)
        return run_quantize_decoder(
            folder, source, target_version, config, thresholds, force, reporter
        )
    original = read_version(src_path)
    stage = staging(folder, target_version)
    try:
        out = stage / MODEL_FILE
        with reporter.step(f"quantizing version {src_version} to {to}"):
            (_int8 if to == "int8" else _fp16)(src_path, out)
        quantized = onnx.load(str(out))
        set_metadata(
            quantized,
            {
                **original.metadata,
                "inferd.quantized": to,
                "inferd.quantized_from": str(src_version),
            },
        )
        onnx.save(quantized, str(out))

        reference, candidate = session(src_path), session(out)
        specs = output_specs(reference)
        names = [s.name for s in specs]
        sample_set = load_samples(
            samples, count, config, src_path.parent, original.plan, input_dtypes(reference)
        )
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
        size_ratio = out.stat().st_size / src_path.stat().st_size
        # fp16 timed on CPU kernels says nothing of its speed on a GPU: only int8's is judged
        problems = verdict(accuracy, thresholds) + refusals(
            size_ratio, speed if to == "int8" else None, "fp32"
        )
        result = {
            "model": model,
            "from_version": src_version,
            "version": target_version,
            "to": to,
            "samples": sample_set.description,
            "accuracy": accuracy.to_dict(),
            "size_ratio": size_ratio,
            "speed_ratio": speed.speedup,
            "speed": speed.to_dict(),
            "latency_s": {"fp32": speed.source_s, to: speed.candidate_s},
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
    show_written(
        reporter,
        f"{model} version {src_version} -> version {target_version} ({to})",
        target,
        size,
        report_file,
    )
    return 0


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
