"""`inferd` entry point: subcommands and the flags derived from `ServerSettings`."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from inferd import __version__
from inferd.config.server_settings import ENV_PREFIX, ServerSettings, load_server_settings
from inferd.errors import ConfigError

CLOSED_PIPE = 141
"""The exit status when stdout's reader left early: 128 + SIGPIPE, as a shell reports a
program the signal stopped."""

FLAG_ALIASES = {"repository": ("--repo",)}
"""Shorter names of a setting's flag: the same option, shown together in `--help`."""


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per server setting, so a setting can never lack its flag."""
    for name, field in ServerSettings.model_fields.items():
        flags = ["--" + name.replace("_", "-"), *FLAG_ALIASES.get(name, ())]
        help_text = f"{field.description} [env {ENV_PREFIX}{name.upper()}; default {field.default}]"
        annotation = field.annotation
        if annotation is bool:
            parser.add_argument(
                *flags,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
            continue
        choices = None
        if typing.get_origin(annotation) is typing.Literal:
            choices = list(typing.get_args(annotation))
        parser.add_argument(*flags, dest=name, default=None, choices=choices, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferd", description="A production inference server for ONNX models."
    )
    parser.add_argument("--version", action="version", version=f"inferd {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve a model repository over HTTP")
    serve.add_argument("--config", type=Path, default=None, help="server settings file (YAML)")
    _add_settings_flags(serve)

    demo = commands.add_parser("demo", help="build the demo repository (all-MiniLM-L6-v2)")
    demo.add_argument("--out", type=Path, default=None, help="default: the demo_repository setting")
    demo.add_argument("--force", action="store_true", help="rebuild even when already built")
    demo.add_argument(
        "--generator",
        action="store_true",
        help="also train the demo text generator 'docgen' (a small GPT-2 on stdlib docstrings; "
        "needs the export extra; 2.5-3 minutes on 2 idle cores, nearly all of it training)",
    )

    repo = commands.add_parser("repo", help="model repository tools")
    repo_commands = repo.add_subparsers(dest="repo_command", metavar="REPO_COMMAND")
    check = repo_commands.add_parser("check", help="validate a repository: what would load")
    check.add_argument("path", type=Path, help="the repository folder")
    check.add_argument(
        "--no-load", action="store_true", help="check layout and configs only; skip ONNX Runtime"
    )
    from inferd.cli.bench import add_bench_commands
    from inferd.cli.prep import add_prep_commands
    from inferd.cli.ray_serve import add_ray_command
    from inferd.cli.rollout_command import add_rollout_command

    add_prep_commands(commands)
    add_ray_command(commands, _add_settings_flags)
    add_bench_commands(commands)
    add_rollout_command(commands)
    return parser


PROGRESS_EVERY = 0.05
"""Without a terminal, one progress line per this fraction of the training steps."""


@contextlib.contextmanager
def _build_phase(name: str, who: str = "docgen") -> Iterator[None]:
    """One line as a phase of a build starts, one with its time as it ends."""
    print(f"{who}: {name} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    yield
    print(f"{who}: {name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _training_progress(total: int) -> Iterator[Callable[[int, float], None]]:
    """A bar on a terminal; elsewhere (a log, CI) one plain line every few percent."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True)) as bar:
            task = bar.add_task("training docgen on stdlib docstrings", total=total)

            def advance(step: int, loss: float) -> None:
                bar.update(
                    task, completed=step + 1, description=f"training docgen (loss {loss:.2f})"
                )

            yield advance
        return
    started = time.monotonic()
    every = max(1, int(total * PROGRESS_EVERY))

    def line(step: int, loss: float) -> None:
        done = step + 1
        if done % every == 0 or done == total:
            print(
                f"training docgen: step {done}/{total} ({done / total:.0%}), loss {loss:.2f}, "
                f"{time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    yield line


def _demo_generator(repo: Path, force: bool) -> int:
    if (repo / "docgen" / "1" / "model.onnx").is_file() and not force:
        print(f"demo repository ready in {repo} (docgen already trained)")
        return 0
    try:
        from inferd.tools.generator import DEMO_STEPS, build_generator, remove
    except ImportError as exc:
        print(
            f"inferd: the demo generator needs the export extra: pip install 'inferd[export]' "
            f"({exc})",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    remove(repo, "docgen")
    with _training_progress(DEMO_STEPS) as progress:
        facts = build_generator(
            repo, "docgen", progress=progress, kv_cache="inplace", phase=_build_phase
        )
    print(
        f"demo repository ready in {repo}; docgen trained {facts['steps']} steps to loss "
        f"{facts['loss']:.2f} ({facts['parameters']:,} parameters) in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


def _chosen_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The deepest subcommand parser the arguments chose (for its usage line in an error)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _chosen_parser(action.choices[chosen], args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            code = _main(argv)
        finally:  # (also after --help's exit) here, where a reader gone early can be caught
            sys.stdout.flush()
    except BrokenPipeError:
        # the reader stopped reading (`| head`): no traceback, nothing more written to the
        # closed pipe at exit, and the status of a program a closed pipe stopped (SIGPIPE)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand that was given them, with its own usage line
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command == "serve":
            from inferd.cli.serve import serve

            flags = {name: getattr(args, name) for name in ServerSettings.model_fields}
            settings = load_server_settings(args.config, os.environ, flags)
            return serve(settings)
        if args.command == "demo":
            from inferd.tools.demo import DemoUnavailable, build_demo

            out = args.out or ServerSettings().demo_repository.expanduser()
            try:
                with _build_phase("the demo repository (all-MiniLM-L6-v2 and its heads)", "demo"):
                    built = build_demo(out, force=args.force)
            except DemoUnavailable as exc:
                print(f"inferd: {exc}", file=sys.stderr)
                return 2
            if args.generator:
                return _demo_generator(built, args.force)
            print(f"demo repository ready in {built}")
            return 0
        if args.command == "bench":
            from inferd.cli.bench import run_bench_command

            return run_bench_command(args)
        if args.command == "ray":
            from inferd.cli.ray_serve import run_ray_command

            return run_ray_command(args)
        if args.command == "rollout":
            from inferd.cli.rollout_command import run_rollout_command

            return run_rollout_command(args)
        if args.command in ("export", "optimize", "quantize"):
            from inferd.cli.prep import run_prep_command

            return run_prep_command(args)
        if args.command == "repo" and args.repo_command == "check":
            from inferd.cli.repo_check import check_repository

            return check_repository(args.path, load=not args.no_load)
    except ConfigError as exc:
        print(f"inferd: configuration error: {exc}", file=sys.stderr)
        return 2
    parser.print_help()
    return 2
