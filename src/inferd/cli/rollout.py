"""`inferd rollout start|status|promote|rollback|abort MODEL`: a rollout through a running
server's admin API (`/v2/repository/models/{model}/rollout`, admin key)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

ACTIONS = ("start", "status", "promote", "rollback", "abort")


def add_rollout_command(commands: Any) -> None:
    rollout = commands.add_parser(
        "rollout", help="release a new version step by step on a running server"
    )
    rollout.add_argument("action", choices=ACTIONS)
    rollout.add_argument("model")
    rollout.add_argument("--to", type=int, default=None, help="start: the candidate version")
    rollout.add_argument("--url", default="http://127.0.0.1:8000", help="the server")
    rollout.add_argument(
        "--admin-key",
        default=None,
        help="an admin key (default: the INFERD_ADMIN_KEY environment variable)",
    )


def run_rollout_command(args: Any) -> int:
    key = args.admin_key or os.environ.get("INFERD_ADMIN_KEY", "")
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
        print(f"inferd: {exc.code}: {_error_of(exc.read())}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"inferd: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 2
    print(describe(state))
    return 0


def _error_of(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:500].decode("utf-8", "replace")


def describe(state: dict[str, Any]) -> str:
    """The state in a few lines: versions, status and share, the window, the last decisions
    (a failed one: why)."""
    if state["status"] == "failed":
        return f"{state['model']}: rollout failed\n  {state['reason']}"
    lines = [
        f"{state['model']}: version {state['candidate']} beside {state['stable']}, "
        f"{state['status']} at {state['weight']:.0%} (step {state['step'] + 1} of "
        f"{len(state['steps'])}: {', '.join(f'{s:g}%' for s in state['steps'])})",
        f"  {state['reason']}",
    ]
    window = state.get("window")
    if window:
        judged = window.get("judged_against", "stable")
        sides = (
            ("stable", "baseline", "candidate") if judged == "baseline" else ("stable", "candidate")
        )
        for side in sides:
            facts = window[side]
            lines.append(
                f"  {side}: {facts['requests']} requests, {facts['error_rate']:.1%} errors, "
                f"p99 {facts['p99_ms']} ms, queue p99 {facts['queue_p99_ms']} ms "
                f"({window['elapsed_s']} s into the window)"
            )
    for decision in state["decisions"][-5:]:
        lines.append(
            f"  - {decision['decision']} at {decision['weight']:.0%}: {decision['reason']}"
        )
    return "\n".join(lines)
