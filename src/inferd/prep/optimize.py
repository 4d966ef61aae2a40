"""`inferd optimize`: ONNX Runtime's offline graph optimization, plus its transformer fusions
(attention, layer norm, GELU) for the transformer models inferd exported; node counts before and
after, the speed-up measured here, and parity re-checked against the version it started from."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import onnxruntime as ort

from inferd.prep.console import Reporter, megabytes
from inferd.prep.feeds import TIMING_CASES
from inferd.prep.ort import output_names, runner, session
from inferd.prep.parity import check_parity
from inferd.prep.versions import op_counts, publish_version, read_version, set_metadata
from inferd.prep.worth import compare_speed, refusals, refuse
from inferd.prep.writer import (
    model_folder,
    next_version,
    source_version,
    staging,
    write_report,
)
from inferd.repository.scan import MODEL_FILE

FUSABLE = {"bert": "bert", "gpt2": "gpt2"}


def _fuse(source: Path, target: Path, arch: str, heads: int, hidden: int) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(
        str(source),
        model_type=FUSABLE[arch],
        num_heads=heads,
        hidden_size=hidden,
        opt_level=1,
        use_gpu=False,
    )
    optimized.save_model_to_file(str(target))


def _ort_offline(source: Path, target: Path) -> None:
    options = ort.SessionOptions()
    # "extended", not "all": the "all" level bakes in this machine's memory layouts
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def run_optimize(
    repo: Path,
    model: str,
    *,
    from_version: int | None,
    version: int | None,
    atol: float,
    reporter: Reporter,
    force: bool = False,
    timing_s: float | None = None,
) -> int:
    folder = model_folder(repo, model)
    src_version, src_path = source_version(folder, from_version)
    target_version = next_version(folder, version)
    original = read_version(src_path)
    arch = original.metadata.get("inferd.architecture", "")
    stage = staging(folder, target_version)
    try:
        out = stage / MODEL_FILE
        if arch in FUSABLE:
            step = f"transformer fusions ({arch}) and basic graph optimization"
            with reporter.step(step):
                _fuse(
                    src_path,
                    out,
                    arch,
                    int(original.metadata.get("inferd.num_heads", 0)),
                    int(original.metadata.get("inferd.hidden_size", 0)),
                )
        else:
            step = "ONNX Runtime offline graph optimization (extended)"
            with reporter.step(step):
                _ort_offline(src_path, out)
        optimized = onnx.load(str(out))
        set_metadata(optimized, {**original.metadata, "inferd.optimized_from": str(src_version)})
        onnx.save(optimized, str(out))
        before, after = original.node_counts, op_counts(optimized)

        reference, candidate = session(src_path), session(out)
        names = output_names(reference)
        cases = original.plan.cases(original.plan.parity_cases)
        with reporter.bar("parity: optimized vs original", len(cases)) as advance:
            parity = check_parity(
                runner(reference, names), runner(candidate, names), cases, names, atol, advance
            )
        timing = original.plan.cases(TIMING_CASES, seed=7)
        with reporter.step("timing both on this machine"):
            speed = compare_speed(
                runner(reference, names), runner(candidate, names), timing, budget_s=timing_s
            )
        size_ratio = out.stat().st_size / src_path.stat().st_size
        problems = refusals(size_ratio, speed)
        changed = sorted(op for op in set(before) | set(after) if before[op] != after[op])
        result = {
            "model": model,
            "from_version": src_version,
            "version": target_version,
            "step": step,
            "nodes_before": sum(before.values()),
            "nodes_after": sum(after.values()),
            "op_changes": {op: [before[op], after[op]] for op in changed},
            "latency_s": {"original": speed.source_s, "optimized": speed.candidate_s},
            "speedup": speed.speedup,
            "speed": speed.to_dict(),
            "size_ratio": size_ratio,
            "parity": parity.to_dict(),
            "problems": problems,
            "forced": bool(problems) and force,
        }
        report_file = write_report(folder, f"optimize-{target_version}.json", result)
        reporter.grid(
            "Nodes by operator (changed only)",
            ["operator", "before", "after"],
            [[op, str(before[op]), str(after[op])] for op in changed],
        )
        if not parity.ok:
            for line in parity.failures():
                reporter.fail(line)
            reporter.fail(f"parity check failed; nothing written (report: {report_file})")
            return 1
        if refuse(reporter, problems, force, report_file):
            return 1
        target, size = publish_version(src_path, stage, folder, target_version)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    reporter.table(
        f"Optimized {model} version {src_version} -> version {target_version}",
        [
            ("written", str(target)),
            ("step", step),
            ("nodes", f"{sum(before.values())} -> {sum(after.values())}"),
            ("file size", f"{megabytes(size)} ({size_ratio:.2f}x the original)"),
            ("speed-up here", speed.describe()),
            ("parity", f"max |diff| {parity.max_abs:.2e} ≤ {atol:g}"),
            ("report", str(report_file)),
        ],
    )
    return 0
