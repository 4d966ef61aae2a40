"""`inferd optimize`: ONNX Runtime's offline graph optimization, plus its transformer fusions
(attention, layer norm, GELU) for the transformer models inferd exported; node counts before and
after, the speed-up measured here, and parity re-checked against the version it started from."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import onnx
import onnxruntime as ort

from inferd.prep.console import Reporter, megabytes
from inferd.prep.feeds import TIMING_CASES, FeedPlan
from inferd.prep.ort import output_names, runner, session
from inferd.prep.parity import ParityReport, check_parity
from inferd.prep.versions import (
    VersionModel,
    op_counts,
    publish_version,
    read_version,
    set_metadata,
)
from inferd.prep.worth import SpeedComparison, compare_speed, refusals, refuse, refuse_parity
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
    stage = staging(folder, target_version)
    try:
        out = stage / MODEL_FILE
        step = _optimize_file(src_path, out, original, src_version, reporter)
        before, after = original.node_counts, op_counts(onnx.load(str(out)))
        parity, speed = _compared(src_path, out, original.plan, atol, reporter, timing_s)
        size_ratio = out.stat().st_size / src_path.stat().st_size
        problems = refusals(size_ratio, speed)
        result = {
            "model": model,
            "from_version": src_version,
            "version": target_version,
            "step": step,
            **_node_changes(before, after, reporter),
            "latency_s": {"original": speed.source_s, "optimized": speed.candidate_s},
            "speedup": speed.speedup,
            "speed": speed.to_dict(),
            "size_ratio": size_ratio,
            "parity": parity.to_dict(),
            "problems": problems,
            "forced": bool(problems) and force,
        }
        report_file = write_report(folder, f"optimize-{target_version}.json", result)
        if refuse_parity(reporter, parity, report_file) or refuse(
            reporter, problems, force, report_file
        ):
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


def _node_changes(
    before: Counter[str], after: Counter[str], reporter: Reporter
) -> dict[str, object]:
    """The nodes before and after, and by operator where they changed (shown too)."""
    changed = sorted(op for op in set(before) | set(after) if before[op] != after[op])
    reporter.grid(
        "Nodes by operator (changed only)",
        ["operator", "before", "after"],
        [[op, str(before[op]), str(after[op])] for op in changed],
    )
    return {
        "nodes_before": sum(before.values()),
        "nodes_after": sum(after.values()),
        "op_changes": {op: [before[op], after[op]] for op in changed},
    }


def _optimize_file(
    src_path: Path, out: Path, original: VersionModel, src_version: int, reporter: Reporter
) -> str:
    """`src_path` optimized at `out` (transformer fusions where its architecture has them,
    else ONNX Runtime's offline optimization), its metadata kept; returns the step taken."""
    arch = original.metadata.get("inferd.architecture", "")
    if arch in FUSABLE:
        step = f"transformer fusions ({arch}) and basic graph optimization"
        heads = int(original.metadata.get("inferd.num_heads", 0))
        hidden = int(original.metadata.get("inferd.hidden_size", 0))
        with reporter.step(step):
            _fuse(src_path, out, arch, heads, hidden)
    else:
        step = "ONNX Runtime offline graph optimization (extended)"
        with reporter.step(step):
            _ort_offline(src_path, out)
    optimized = onnx.load(str(out))
    set_metadata(optimized, {**original.metadata, "inferd.optimized_from": str(src_version)})
    onnx.save(optimized, str(out))
    return step


def _compared(
    src_path: Path,
    out: Path,
    plan: FeedPlan,
    atol: float,
    reporter: Reporter,
    timing_s: float | None,
) -> tuple[ParityReport, SpeedComparison]:
    """The optimized model's outputs against the original's, and the speed of both here."""
    reference, candidate = session(src_path), session(out)
    names = output_names(reference)
    cases = plan.cases(plan.parity_cases)
    with reporter.bar("parity: optimized vs original", len(cases)) as advance:
        parity = check_parity(
            runner(reference, names), runner(candidate, names), cases, names, atol, advance
        )
    timing = plan.cases(TIMING_CASES, seed=7)
    with reporter.step("timing both on this machine"):
        speed = compare_speed(
            runner(reference, names), runner(candidate, names), timing, budget_s=timing_s
        )
    return parity, speed
