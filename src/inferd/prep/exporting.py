"""`inferd export`: a PyTorch model -> a checked repository version."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from inferd.prep.console import Reporter, megabytes
from inferd.prep.ort import runner, session
from inferd.prep.parity import ParityReport, check_parity
from inferd.prep.quiet import quiet_transformers
from inferd.prep.source_record import Source, SourceError
from inferd.prep.sources import TOKENIZER_FILES, load_source
from inferd.prep.spec import ModuleSpec
from inferd.prep.torch_export import export, to_eval, torch_runner
from inferd.prep.worth import refuse_parity
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
    source, lingering = _loaded(ref, spec, kv_cache, reporter)
    stage = staging(folder, target_version)
    try:
        onnx_path = stage / MODEL_FILE
        report = _export_checked(source, onnx_path, opset, atol, reporter)
        result = {
            "source": ref,
            "model": model,
            "version": target_version,
            "opset": opset,
            "parity": report.to_dict(),
            "training_modules": lingering,
        }
        report_file = write_report(folder, f"export-{target_version}.json", result)
        if refuse_parity(reporter, report, report_file):
            return 1
        for check in _graph_checks(source, kv_cache, atol):
            failure = check(onnx_path, result, reporter)
            write_report(folder, f"export-{target_version}.json", result)
            if failure is not None:
                reporter.fail(f"{failure}; nothing written")
                return 1
        target, size, tokenizer = _published(source, stage, folder, target_version)
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
            ("parity", _parity_line(report, atol)),
            ("tokenizer", ", ".join(tokenizer) or "none"),
            ("config.yaml", "written" if wrote_config else "kept (already there)"),
            ("report", str(report_file)),
        ],
    )
    return 0


def _loaded(
    ref: str, spec: ModuleSpec | None, kv_cache: str, reporter: Reporter
) -> tuple[Source, list[str]]:
    """The source to export, in eval mode, and the names of its modules still training."""
    quiet_transformers()
    with reporter.step(f"loading {ref}"):
        source = load_source(ref, spec)
        lingering = to_eval(source.module)
    if kv_cache == "inplace" and source.inplace is None:
        raise SourceError(f"--kv-cache inplace applies to GPT-2 and Llama decoders only, not {ref}")
    for name in lingering:
        reporter.note(f"{name} is still in training mode after eval(): expect a parity failure")
    return source, lingering


def _published(
    source: Source, stage: Path, folder: Path, version: int
) -> tuple[Path, int, list[str]]:
    """The staged version with its tokenizer files, published: where, its model's size, and
    the tokenizer files copied."""
    tokenizer = (
        copy_beside([source.tokenizer_dir / f for f in TOKENIZER_FILES], stage)
        if source.tokenizer_dir is not None
        else []
    )
    size = (stage / MODEL_FILE).stat().st_size
    return publish(stage, folder, version), size, tokenizer


def _export_checked(
    source: Source, onnx_path: Path, opset: int, atol: float, reporter: Reporter
) -> ParityReport:
    """Exports `source` to `onnx_path` and compares ONNX Runtime's outputs with PyTorch's."""
    trace = source.make_feeds(2, 3 if source.kind == "decoder" else 13, np.random.default_rng(1))
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
        f"Parity (bound {atol:g})", ["output", "max |diff|", "worst case", ""], parity_rows(report)
    )
    return report


def _parity_line(report: ParityReport, atol: float) -> str:
    return (
        f"max |diff| {report.max_abs:.2e} ≤ {atol:g} over {len(report.cases)} cases "
        f"({', '.join(report.cases)})"
    )


GraphCheck = Callable[[Path, dict[str, Any], Reporter], str | None]
"""A change made to the exported graph and its check: records its figure in the report's
`result`; returns why the export fails, or None."""


def _graph_checks(source: Source, kv_cache: str, atol: float) -> list[GraphCheck]:
    """What is added to the exported graph and checked, in order: the in-place KV cache (when
    asked), a decoder's ranked candidates and its draw."""
    checks: list[GraphCheck] = []
    if kv_cache == "inplace":

        def inplace(onnx_path: Path, result: dict[str, Any], reporter: Reporter) -> str | None:
            diff = result["inplace_kv_max_abs_diff"] = _to_inplace(source, onnx_path, reporter)
            if diff > atol:
                return (
                    f"the in-place KV cache graph differs from the export by {diff:.2e} > {atol:g}"
                )
            reporter.ok(
                f"in-place KV cache: logits match the export (max |diff| {diff:.2e} ≤ {atol:g})"
            )
            return None

        checks.append(inplace)
    if source.kind == "decoder":

        def ranked(onnx_path: Path, result: dict[str, Any], reporter: Reporter) -> str | None:
            wrong = result["ranked_rows_wrong"] = _add_ranked(source, onnx_path, reporter)
            return (
                f"the ranked candidates differ from the logits in {wrong} rows" if wrong else None
            )

        def draw(onnx_path: Path, result: dict[str, Any], reporter: Reporter) -> str | None:
            differ = result["graph_draws_differing"] = _add_draw(onnx_path, reporter)
            if not differ:
                return None
            return (
                f"the graph's draw differs from inferd's sampling in {differ} of "
                f"{DRAW_CHECK_ROWS} rows"
            )

        checks += [ranked, draw]
    return checks


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
