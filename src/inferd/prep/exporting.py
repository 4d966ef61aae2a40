"""`inferd export`: a PyTorch model -> a checked repository version."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from inferd.prep.console import Reporter, megabytes
from inferd.prep.ort import runner, session
from inferd.prep.parity import ParityReport, check_parity
from inferd.prep.quiet import quiet_transformers
from inferd.prep.source_record import Source, SourceError
from inferd.prep.sources import TOKENIZER_FILES, load_source
from inferd.prep.spec import ModuleSpec
from inferd.prep.torch_export import export, to_eval, torch_runner
from inferd.prep.writer import (
    copy_beside,
    model_folder,
    next_version,
    publish,
    staging,
    write_config_if_missing,
    write_report,
)
from inferd.repository.scan import MODEL_FILE


def parity_rows(report: ParityReport) -> list[list[str]]:
    return [
        [
            o.name,
            f"{o.max_abs:.2e}",
            o.case,
            "✓"
            if o.problem is None and o.max_abs <= report.atol
            else f"✗ {o.problem or 'over the bound'}",
        ]
        for o in report.outputs
    ]


def run_export(
    ref: str,
    repo: Path,
    model: str,
    spec: ModuleSpec | None,
    *,
    opset: int,
    atol: float,
    version: int | None,
    reporter: Reporter,
    kv_cache: str = "concat",
) -> int:
    folder = model_folder(repo, model)
    target_version = next_version(folder, version)
    quiet_transformers()
    with reporter.step(f"loading {ref}"):
        source = load_source(ref, spec)
        lingering = to_eval(source.module)
    if kv_cache == "inplace" and source.inplace is None:
        raise SourceError(f"--kv-cache inplace applies to GPT-2 and Llama decoders only, not {ref}")
    for name in lingering:
        reporter.note(f"{name} is still in training mode after eval(): expect a parity failure")
    stage = staging(folder, target_version)
    try:
        onnx_path = stage / MODEL_FILE
        trace = source.make_feeds(
            2, 3 if source.kind == "decoder" else 13, np.random.default_rng(1)
        )
        with reporter.step(f"exporting to ONNX (opset {opset})"):
            export(source, onnx_path, opset, trace)
        cases = source.plan.cases(source.plan.parity_cases)
        with reporter.bar("parity: ONNX Runtime vs PyTorch", len(cases)) as advance:
            report = check_parity(
                torch_runner(source),
                runner(session(onnx_path)),
                cases,
                source.output_names,
                atol,
                advance,
            )
        reporter.grid(
            f"Parity (bound {atol:g})",
            ["output", "max |diff|", "worst case", ""],
            parity_rows(report),
        )
        result = {
            "source": ref,
            "model": model,
            "version": target_version,
            "opset": opset,
            "parity": report.to_dict(),
            "training_modules": lingering,
        }
        report_file = write_report(folder, f"export-{target_version}.json", result)
        if not report.ok:
            for line in report.failures():
                reporter.fail(line)
            reporter.fail(f"parity check failed; nothing written (report: {report_file})")
            return 1
        if kv_cache == "inplace":
            inplace_diff = _to_inplace(source, onnx_path, reporter)
            result["inplace_kv_max_abs_diff"] = inplace_diff
            write_report(folder, f"export-{target_version}.json", result)
            if inplace_diff <= atol:
                reporter.ok(
                    f"in-place KV cache: logits match the export (max |diff| "
                    f"{inplace_diff:.2e} ≤ {atol:g})"
                )
            else:
                reporter.fail(
                    f"the in-place KV cache graph differs from the export by "
                    f"{inplace_diff:.2e} > {atol:g}; nothing written"
                )
                return 1
        if source.kind == "decoder":
            wrong = _add_ranked(source, onnx_path, reporter)
            result["ranked_rows_wrong"] = wrong
            write_report(folder, f"export-{target_version}.json", result)
            if wrong:
                reporter.fail(
                    f"the ranked candidates differ from the logits in {wrong} rows; nothing written"
                )
                return 1
            differ = _add_draw(onnx_path, reporter)
            result["graph_draws_differing"] = differ
            write_report(folder, f"export-{target_version}.json", result)
            if differ:
                reporter.fail(
                    f"the graph's draw differs from inferd's sampling in {differ} of "
                    f"{DRAW_CHECK_ROWS} rows; nothing written"
                )
                return 1
        tokenizer = (
            copy_beside([source.tokenizer_dir / f for f in TOKENIZER_FILES], stage)
            if source.tokenizer_dir is not None
            else []
        )
        size = onnx_path.stat().st_size
        target = publish(stage, folder, target_version)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    wrote_config = write_config_if_missing(folder, source.config)
    params = sum(int(p.numel()) for p in source.module.parameters())
    reporter.table(
        f"Exported {model} version {target_version}",
        [
            ("source", source.description),
            ("written", str(target)),
            ("parameters", f"{params:,}"),
            ("file size", megabytes(size)),
            ("opset", str(opset)),
            (
                "parity",
                f"max |diff| {report.max_abs:.2e} ≤ {atol:g} over {len(report.cases)} "
                f"cases ({', '.join(report.cases)})",
            ),
            ("tokenizer", ", ".join(tokenizer) or "none"),
            ("config.yaml", "written" if wrote_config else "kept (already there)"),
            ("report", str(report_file)),
        ],
    )
    return 0


def _add_ranked(source: Source, onnx_path: Path, reporter: Reporter) -> int:
    """Adds the ranked candidates of the last position (inferd.prep.ranked_logits) and checks
    them against the logits of the same run; returns the rows that differ (0 is right)."""
    from inferd.prep.ranked_logits import TOP_WIDTH, add_to_file, check_ranked

    with reporter.step(f"ranking the next token's {TOP_WIDTH} best candidates in the graph"):
        if not add_to_file(onnx_path):
            return 0  # (logits not float32 [batch, sequence, vocab]: served without them)
        return check_ranked(onnx_path, source.plan.vocab, source.plan.max_length)


DRAW_CHECK_ROWS = 4096


def _add_draw(onnx_path: Path, reporter: Reporter) -> int:
    """Adds the draw of the next token to the graph (inferd.prep.graph_draw), after the ranked
    candidates, and checks it against inferd's own sampling; returns the rows that differ."""
    from inferd.prep.graph_draw import add_to_file, check_draw

    with reporter.step("drawing the next token in the graph (temperature, top-k, top-p)"):
        if not add_to_file(onnx_path):
            return 0  # (no ranked candidates of a fixed width: served without it)
        return check_draw(onnx_path, DRAW_CHECK_ROWS)


def _to_inplace(source: Source, onnx_path: Path, reporter: Reporter) -> float:
    """Replaces the exported (concatenating) decoder with its in-place KV cache graph, checked
    against it through the KV stores that serve each; returns the largest |diff| of logits."""
    import onnx

    from inferd.prep.inplace_decoder import compare_with_concat

    assert source.inplace is not None
    inplace_path = onnx_path.with_name("inplace.onnx")
    with reporter.step("in-place KV cache: building the graph and checking it"):
        model = source.inplace()
        for key, value in source.all_metadata.items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        onnx.save(model, inplace_path)
        diff = compare_with_concat(
            onnx_path, inplace_path, source.plan.vocab, source.plan.max_length
        )
    inplace_path.replace(onnx_path)
    return diff
