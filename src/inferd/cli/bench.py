"""`inferd bench run|tune|compare`: flags and dispatch (the work is in inferd.bench)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the bench extra is imported when a bench command runs)
    from rich.console import Console

    from inferd.bench.commands import WorkloadSpec
    from inferd.bench.sweep import SweepSettings

from inferd.bench.endpoints import ENDPOINTS
from inferd.bench.knee import GAIN, P99_RISE

WIDE_OUTPUT = 200
"""Columns of the table when the output is no terminal (rich would cut it at 80)."""


class ShowsDefaults(argparse.HelpFormatter):
    """Help that names each option's default, unless it has none or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default is None
            or default is False
            or default == argparse.SUPPRESS
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)".strip()


def _levels(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels '{text}': comma-separated numbers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("levels must be positive")
    return values


def _load_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", choices=ENDPOINTS, default="embed", help="the route to load")
    parser.add_argument("--model", default=None, help="the model to load (default: the server's)")
    parser.add_argument(
        "--input",
        dest="inputs",
        type=Path,
        default=None,
        help='JSONL: {"text": ...} lines, or whole request bodies',
    )
    parser.add_argument(
        "--lengths",
        default="loguniform:8-100",
        help="generated texts, in words: fixed:N, uniform:A-B, loguniform:A-B",
    )
    parser.add_argument("--batch", type=int, default=1, help="texts per request")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="for --endpoint generate")
    parser.add_argument(
        "--v2-length",
        type=int,
        default=16,
        help="size of variable non-batch axes of generated V2 tensors",
    )
    parser.add_argument(
        "--mode",
        choices=["closed", "open"],
        default="closed",
        help="closed: fixed concurrency; open: Poisson arrivals at fixed rates",
    )
    parser.add_argument(
        "--levels",
        type=_levels,
        default=None,
        help="concurrencies (closed, default 1,2,4,...,64) or arrival rates "
        "per second (open, required)",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a step at most")
    parser.add_argument("--requests", type=int, default=2000, help="requests a step at most")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up")
    parser.add_argument("--seed", type=int, default=0, help="for generated texts and arrivals")
    parser.add_argument(
        "--p99-rise",
        type=float,
        default=P99_RISE,
        help="knee: p99 rising by more than this fraction ...",
    )
    parser.add_argument(
        "--gain",
        type=float,
        default=GAIN,
        help="... while throughput rises by less than this fraction",
    )
    parser.add_argument("--stop-at-knee", action="store_true", help="end the sweep at the knee")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a request at most")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("inferd-bench"),
        help="folder for report.html, report.json and the plots",
    )


def _budget_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--p99-budget-ms",
        type=float,
        default=None,
        help="recommend the step with most throughput whose p99 is within this (at or "
        "before the knee); none: the knee's step, whatever its p99",
    )


def add_bench_commands(commands: Any) -> None:
    bench = commands.add_parser("bench", help="load-test a server: find the knee, tune, compare")
    sub = bench.add_subparsers(dest="bench_command", metavar="BENCH_COMMAND")
    shows_defaults = {"formatter_class": ShowsDefaults}
    run = sub.add_parser(
        "run", help="sweep load against a URL or a repository it serves", **shows_defaults
    )
    run.add_argument("target", help="http://host:port of a running server, or a repository")
    _load_flags(run)
    _budget_flag(run)
    tune = sub.add_parser(
        "tune",
        help="find the batching settings with most throughput in a p99 budget",
        **shows_defaults,
    )
    tune.add_argument("repo", type=Path, help="the model repository")
    tune.add_argument("--budget-ms", type=float, required=True, help="p99 latency budget")
    tune.add_argument(
        "--grid",
        action="append",
        default=[],
        help="SETTING=[V1,V2,...] (dotted for sections; repeatable); default: "
        "max_batch_size=[1,8,32] and dynamic_batching.max_queue_delay_ms=[1,5]",
    )
    tune.add_argument("--write", action="store_true", help="store the recommendation in config")
    _load_flags(tune)
    compare = sub.add_parser(
        "compare", help="the same sweep against two targets, with ratios", **shows_defaults
    )
    compare.add_argument("a", help="URL or repository")
    compare.add_argument("b", help="URL or repository (the same one with --b-set works)")
    compare.add_argument("--a-set", action="append", default=[], help="KEY=VALUE for A's model")
    compare.add_argument("--b-set", action="append", default=[], help="KEY=VALUE for B's model")
    _load_flags(compare)
    _budget_flag(compare)


def run_bench_command(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console

        from inferd.bench.commands import compare, run
        from inferd.bench.variants import parse_setting
        from inferd.bench.workload import WorkloadError
    except ImportError as exc:
        print(
            f"inferd bench needs the bench extra: pip install 'inferd[bench]' ({exc})",
            file=sys.stderr,
        )
        return 2
    console = Console()
    if not console.is_terminal:  # a pipe or a file (whatever COLUMNS says): never cut the table
        console = Console(width=WIDE_OUTPUT)
    try:
        settings, spec = _sweep_settings(args), _workload_spec(args)
        if args.bench_command == "run":
            return run(args.target, spec, settings, args.out, console)
        if args.bench_command == "compare":
            overrides = (
                dict(parse_setting(s) for s in args.a_set),
                dict(parse_setting(s) for s in args.b_set),
            )
            return compare(
                (args.a, args.b), overrides, args.model, spec, settings, args.out, console
            )
        if args.bench_command == "tune":
            return _tune(args, spec, settings, console)
    except (ValueError, WorkloadError, ConnectionError, FileNotFoundError) as exc:
        console.print(f"[bold red]✗[/bold red] {exc}", soft_wrap=True)
        return 2
    print("inferd bench: choose run, tune or compare", file=sys.stderr)
    return 2


def _sweep_settings(args: argparse.Namespace) -> SweepSettings:
    from inferd.bench.sweep import CLOSED_LEVELS, SweepSettings

    if args.mode == "open" and args.levels is None:
        raise ValueError("--mode open needs --levels (arrival rates per second)")
    return SweepSettings(
        mode=args.mode,
        levels=args.levels or tuple(float(x) for x in CLOSED_LEVELS),
        duration_s=args.duration,
        max_requests=args.requests,
        warmup_s=args.warmup,
        seed=args.seed,
        stop_at_knee=args.stop_at_knee,
        p99_rise=args.p99_rise,
        gain=args.gain,
        timeout_s=args.timeout,
        p99_budget_ms=getattr(args, "p99_budget_ms", None),
    )


def _workload_spec(args: argparse.Namespace) -> WorkloadSpec:
    from inferd.bench.commands import WorkloadSpec
    from inferd.bench.workload import Lengths

    return WorkloadSpec(
        args.endpoint,
        args.model,
        args.inputs,
        Lengths.parse(args.lengths),
        args.batch,
        args.max_new_tokens,
        args.v2_length,
        args.seed,
    )


def _tune(
    args: argparse.Namespace, spec: WorkloadSpec, settings: SweepSettings, console: Console
) -> int:
    from inferd.bench.commands import run_tune
    from inferd.bench.tune import DEFAULT_GRID
    from inferd.bench.variants import parse_setting

    if not args.model:
        raise ValueError("tune needs --model")
    grid: dict[str, list[Any]] = {}
    for item in args.grid:
        key, value = parse_setting(item)
        grid[key] = value if isinstance(value, list) else [value]
    return run_tune(
        args.repo,
        args.model,
        grid or DEFAULT_GRID,
        args.budget_ms,
        spec,
        settings,
        args.write,
        args.out,
        console,
    )
