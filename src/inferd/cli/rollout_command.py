"""`inferd rollout start|status|promote|rollback|abort MODEL`: a rollout through a running
server's admin API (`/v2/repository/models/{model}/rollout`, admin key).

Exit status: 0 when the server did what was asked (or, for `status`, said where the model
stands, a model with no rollout included); 1 when it refused (its reason on stderr); 2 when it
could not be reached."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"

ACTIONS = {
    "start": "load the candidate (--to, else the newest version folder) beside the serving "
    "version and give it the first step's share; each step is then judged and the rollout "
    "advances, is promoted, or is rolled back by itself",
    "status": "where the rollout stands: versions, step and share, the current window's "
    "figures, the last decisions and why they were taken (changes nothing)",
    "promote": "end it now in the candidate's favour: the candidate serves all traffic and "
    "the stable version is retired, whatever the judge would say",
    "rollback": "end it now against the candidate: the stable version takes all traffic "
    "back and the candidate is withdrawn, recorded as a rollback (as when the judge fails it)",
    "abort": "the same as rollback (the stable version serves, the candidate is withdrawn), "
    "recorded as aborted: the rollout was stopped for a reason other than the candidate's "
    "quality (a wrong version, a maintenance window), so no verdict is implied",
}


def add_rollout_command(commands: Any) -> None:
    actions = "\n".join(f"  {name:<9} {_wrap(text)}" for name, text in ACTIONS.items())
    rollout = commands.add_parser(
        "rollout",
        help="release a new version step by step on a running server",
        description="Release a new version of MODEL step by step on a running inferd: each "
        "step's share of traffic is judged against the serving version on failures and "
        "latency over the model's analysis window (rollout: in its config.yaml).",
        epilog=f"actions:\n{actions}\n\nexit status: 0 done (for status: also when the model "
        "has no rollout); 1 the server refused (the reason is printed); 2 the server could "
        "not be reached.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rollout.add_argument("action", choices=list(ACTIONS), help="what to do (see below)")
    rollout.add_argument("model", help="the model's name in the repository")
    rollout.add_argument(
        "--to", type=int, default=None, help="start: the candidate version (default: the newest)"
    )
    rollout.add_argument(
        "--url", default=DEFAULT_URL, help=f"the server's HTTP address (default: {DEFAULT_URL})"
    )
    rollout.add_argument(
        "--admin-key",
        default=None,
        help="an admin key (default: the INFERD_ADMIN_KEY environment variable)",
    )


def _wrap(text: str, width: int = 68, indent: int = 12) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return ("\n" + " " * indent).join(lines)


def run_rollout_command(args: Any) -> int:
    key, source = _admin_key(args.admin_key)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    path = f"{args.url.rstrip('/')}/v2/repository/models/{args.model}/rollout"
    data = None
    if args.action != "status":
        body: dict[str, Any] = {"action": args.action}
        if args.to is not None:
            body["to"] = args.to
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:  # the core install's client
            state = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        hint = _key_hint(exc.code, key, source)
        print(f"inferd: {exc.code}: {_error_of(exc.read())}{hint}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"inferd: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 2
    print(describe(state))
    return 0


def _admin_key(given: str | None) -> tuple[str, str]:
    """The admin key, and where it was read from."""
    if given:
        return given, "--admin-key"
    from_env = os.environ.get("INFERD_ADMIN_KEY", "")
    return from_env, ("the INFERD_ADMIN_KEY environment variable" if from_env else "")


def _key_hint(status: int, key: str, source: str) -> str:
    """What to do about a refused key: which key was sent, and where it was read from."""
    if status == 401 and not key:
        return " (no admin key was sent: pass --admin-key or set INFERD_ADMIN_KEY)"
    if status == 401:
        shown = f"ending in {key[-4:]}" if len(key) > 8 else f"of {len(key)} characters"
        return (
            f" (the key from {source}, {shown}, is not one of the server's admin keys:"
            " those of its --admin-keys-file)"
        )
    if status == 403:
        return " (the server has no admin keys: start it with --admin-keys-file)"
    return ""


def _error_of(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:500].decode("utf-8", "replace")


def _percent(share: float) -> str:
    return f"{share:.0%}"


def describe(state: dict[str, Any]) -> str:
    """The state in a few lines: what serves, the step and share, the current window, the
    last decisions (each with when it was taken in its window, and why)."""
    model, status = state["model"], state["status"]
    if status == "failed":
        return f"{model}: rollout failed\n  {state['reason']}"
    if status == "none":
        return f"{model}: no rollout (start one with: inferd rollout start {model})"
    stable, candidate = state["stable"], state["candidate"]
    steps = state["steps"]
    plan = ", ".join(f"{s:g}%" for s in steps)
    if status == "promoted":
        lines = [f"{model}: version {candidate} promoted: it serves all traffic (was {stable})"]
    elif status in ("rolled_back", "aborted"):
        ended = "rolled back" if status == "rolled_back" else "aborted"
        lines = [
            f"{model}: rollout of version {candidate} {ended}: version {stable} serves all traffic"
        ]
    else:
        lines = [
            f"{model}: version {candidate} beside {stable}, {status} at "
            f"{_percent(state['weight'])} (step {state['step'] + 1} of {len(steps)}: {plan})"
        ]
    window = state.get("window")
    if window and status in ("running", "holding"):
        judged = window.get("judged_against", "stable")
        sides = ["stable", "baseline", "candidate"] if judged == "baseline" else ["stable"]
        if judged != "baseline":
            sides.append("candidate")
        lines.append(f"  this step's window so far ({window['elapsed_s']:g} s):")
        for side in sides:
            facts = window[side]
            lines.append(
                f"    {side}: {facts['requests']:g} requests, {facts['error_rate']:.1%} errors, "
                f"p99 {facts['p99_ms']:g} ms, queue p99 {facts['queue_p99_ms']:g} ms"
            )
    decisions = state["decisions"][-5:]
    if decisions:
        lines.append("  decisions (latest last):")
    for decision in decisions:
        lines.append(f"    - {_decision(decision, state.get('window_started'))}")
    last = decisions[-1]["reason"] if decisions else None
    if state.get("reason") and state["reason"] != last:
        lines.append(f"  now: {state['reason']}")
    withdrawn = [v for v in state.get("withdrawn", []) if v != candidate]
    if withdrawn:
        lines.append(f"  withdrawn earlier: {', '.join(f'version {v}' for v in withdrawn)}")
    return "\n".join(lines)


def _decision(decision: dict[str, Any], window_started: float | None) -> str:
    """One decision: what, at which share (while the candidate had one), when in this step's
    window (its figures are those of its moment, the window's above are now), why."""
    what = decision["decision"]
    when = ""
    if window_started and decision["at"] >= window_started and what != "start":
        when = f" ({decision['at'] - window_started:.0f} s into this window)"
    if what in ("promote", "rollback", "abort"):
        return f"{what}{when}: {decision['reason']}"
    return f"{what} at {_percent(decision['weight'])}{when}: {decision['reason']}"
