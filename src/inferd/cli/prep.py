"""`inferd export`, `inferd optimize`, `inferd quantize`: flags and dispatch.

The work lives in `inferd.prep` (the `export` extra); this module only parses and reports the
errors people make (a missing spec, a folder that is not a model, a version that exists).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the export extra is imported when a preparation command runs)
    from inferd.prep.console import Reporter

DEFAULT_ATOL = 1e-4


def add_prep_commands(commands: Any) -> None:
    _export_parser(commands)
    _optimize_parser(commands)
    _quantize_parser(commands)


def _export_parser(commands: Any) -> None:
    export = commands.add_parser(
        "export", help="export a PyTorch model (HF folder or module:factory) to a repository"
    )
    export.add_argument("source", help="a Hugging Face model folder, or package.module:factory")
    _target(export)
    export.add_argument(
        "--input",
        dest="inputs",
        action="append",
        default=[],
        help="for a module: NAME:DIMS:DTYPE[:LOW,HIGH], e.g. x:batch,16:float32 (repeatable)",
    )
    export.add_argument(
        "--output", dest="outputs", action="append", default=[], help="output names, in order"
    )
    export.add_argument("--spec", type=Path, default=None, help="input spec file (YAML)")
    export.add_argument("--opset", type=int, default=17, help="ONNX opset (13 or above)")
    export.add_argument(
        "--atol", type=float, default=DEFAULT_ATOL, help="parity bound (max |diff|)"
    )
    export.add_argument(
        "--kv-cache",
        choices=["concat", "inplace"],
        default="concat",
        help="decoders: 'inplace' writes the KV cache into a fixed buffer per step (ONNX "
        "Runtime GroupQueryAttention; CPU provider; faster generation); 'concat' (default) "
        "copies past + new each step, and runs on any provider",
    )


def _optimize_parser(commands: Any) -> None:
    optimize = commands.add_parser(
        "optimize", help="offline graph optimization and transformer fusions, as a new version"
    )
    _target(optimize)
    optimize.add_argument("--from-version", type=int, default=None, help="default: the highest")
    optimize.add_argument("--atol", type=float, default=DEFAULT_ATOL, help="parity bound")
    optimize.add_argument(
        "--force",
        action="store_true",
        help="write the version even when it is larger or measurably slower than its source",
    )
    _timing(optimize)


def _quantize_parser(commands: Any) -> None:
    quantize = commands.add_parser(
        "quantize", help="int8 (CPU) or fp16 (GPU) variant as a new version, with a report"
    )
    _target(quantize)
    quantize.add_argument("--to", choices=["int8", "fp16"], default="int8")
    quantize.add_argument("--from-version", type=int, default=None, help="default: the highest")
    quantize.add_argument(
        "--samples",
        type=Path,
        default=None,
        help="a text file (one text a line) for text models, or JSONL of input tensors; "
        "default: generated",
    )
    quantize.add_argument("--count", type=int, default=200, help="samples to generate")
    quantize.add_argument(
        "--min-cosine", type=float, default=0.99, help="embeddings: least mean cosine similarity"
    )
    quantize.add_argument(
        "--min-agreement", type=float, default=0.98, help="classifiers: least label agreement"
    )
    quantize.add_argument(
        "--max-abs-diff",
        type=float,
        default=None,
        help="other models: largest max |diff| allowed (default: 5%% of the output range)",
    )
    quantize.add_argument(
        "--force",
        action="store_true",
        help="write the version even when the loss is too high, or it is larger or measurably "
        "slower than fp32",
    )
    _timing(quantize)


def _timing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timing-s",
        type=float,
        default=None,
        help="the most seconds the speed comparison with the source may take once each has "
        "run 15 rounds (default: 30; it stops sooner once the ratio is known within 2%%)",
    )


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, required=True, help="the model repository")
    parser.add_argument("--model", required=True, help="the model's name in the repository")
    parser.add_argument("--version", type=int, default=None, help="default: the next free one")


def run_prep_command(args: argparse.Namespace) -> int:
    try:
        from inferd.prep.console import Reporter
    except ImportError as exc:
        print(
            f"inferd {args.command} needs the export extra: pip install 'inferd[export]' ({exc})",
            file=sys.stderr,
        )
        return 2
    from inferd.prep.command_errors import PREP_ERRORS

    reporter = Reporter()
    run = {"export": _run_export, "optimize": _run_optimize}.get(args.command, _run_quantize)
    try:
        return run(args, reporter)
    except PREP_ERRORS as exc:
        reporter.fail(str(exc))
        return 2


def _run_export(args: argparse.Namespace, reporter: Reporter) -> int:
    from inferd.prep.exporting import run_export
    from inferd.prep.spec import ModuleSpec, load_spec_file, parse_input

    spec = None
    if args.spec is not None:
        spec = load_spec_file(args.spec)
    elif args.inputs:
        spec = ModuleSpec(tuple(parse_input(t) for t in args.inputs), tuple(args.outputs))
    return run_export(
        args.source,
        args.repo,
        args.model,
        spec,
        opset=args.opset,
        atol=args.atol,
        version=args.version,
        reporter=reporter,
        kv_cache=args.kv_cache,
    )


def _run_optimize(args: argparse.Namespace, reporter: Reporter) -> int:
    from inferd.prep.optimize import run_optimize

    return run_optimize(
        args.repo,
        args.model,
        from_version=args.from_version,
        version=args.version,
        atol=args.atol,
        reporter=reporter,
        force=args.force,
        timing_s=args.timing_s,
    )


def _run_quantize(args: argparse.Namespace, reporter: Reporter) -> int:
    from inferd.prep.quantize import run_quantize
    from inferd.prep.quantize_verdict import Thresholds

    return run_quantize(
        args.repo,
        args.model,
        to=args.to,
        from_version=args.from_version,
        version=args.version,
        samples=args.samples,
        count=args.count,
        thresholds=Thresholds(args.min_cosine, args.min_agreement, args.max_abs_diff),
        force=args.force,
        reporter=reporter,
        timing_s=args.timing_s,
    )
