"""`inferd rollout`: its help, what it prints for each state, its exit codes, and a reader
that stops early (`| head`)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from inferd.cli.main import build_parser
from inferd.cli.rollout_command import ACTIONS, DEFAULT_URL, describe

FACTS = {"requests": 9, "error_rate": 0.0, "p99_ms": 3.25, "queue_p99_ms": 0.5}


def inferd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd", *args], capture_output=True, text=True, timeout=60
    )


def _state(status: str, **more: object) -> dict[str, object]:
    state: dict[str, object] = {
        "model": "m",
        "status": status,
        "stable": 1,
        "candidate": 2,
        "steps": [5, 50, 100],
        "step": 1,
        "weight": 0.5,
        "reason": "",
        "window_started": 1000.0,
        "decisions": [],
        "withdrawn": [],
        "window": {
            "stable": FACTS,
            "candidate": FACTS,
            "baseline": FACTS,
            "judged_against": "baseline",
            "elapsed_s": 9.5,
        },
    }
    state.update(more)
    return state


def test_help_says_what_each_action_does_and_the_default_url() -> None:
    shown = inferd("rollout", "--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    for action in ACTIONS:
        assert f" {action} " in text
    assert "recorded as aborted" in text and "recorded as a rollback" in text
    assert f"(default: {DEFAULT_URL})" in text
    assert "exit status: 0" in text


def test_every_action_has_its_words() -> None:
    parser = build_parser()
    assert parser.parse_args(["rollout", "abort", "m"]).action == "abort"
    assert set(ACTIONS) == {"start", "status", "promote", "rollback", "abort"}
    assert all(len(words.split()) > 10 for words in ACTIONS.values())


def test_no_rollout_is_said_in_words() -> None:
    said = describe({"model": "m", "status": "none", "reason": "", "decisions": []})
    assert said == "m: no rollout (start one with: inferd rollout start m)"


def test_a_promotion_never_reads_promoted_at_0_percent() -> None:
    decisions = [
        {"at": 990.0, "decision": "start", "weight": 0.05, "reason": "version 2 loaded"},
        {"at": 1030.0, "decision": "promote", "weight": 0.0, "reason": "every step passed"},
    ]
    said = describe(_state("promoted", weight=0.0, decisions=decisions))
    assert "at 0%" not in said, said
    assert said.splitlines()[0] == "m: version 2 promoted: it serves all traffic (was 1)"
    assert "- promote (30 s into this window): every step passed" in said
    assert "this step's window" not in said  # no window figures once it ended


def test_a_holding_rollout_shows_the_window_then_the_decisions_each_of_its_moment() -> None:
    reason = "not enough traffic to judge: 0 candidate and 8 stable requests, 20 needed in each"
    decisions = [
        {"at": 995.0, "decision": "start", "weight": 0.05, "reason": "version 2 loaded"},
        {"at": 1008.0, "decision": "hold", "weight": 0.5, "reason": reason},
    ]
    said = describe(_state("holding", reason=reason, decisions=decisions))
    lines = said.splitlines()
    assert lines[0] == "m: version 2 beside 1, holding at 50% (step 2 of 3: 5%, 50%, 100%)"
    assert lines[1] == "  this step's window so far (9.5 s):"
    assert [line.split(":")[0].strip() for line in lines[2:5]] == [
        "stable",
        "baseline",
        "candidate",
    ]
    assert lines[5] == "  decisions (latest last):"
    assert lines[7] == f"    - hold at 50% (8 s into this window): {reason}"
    assert len(lines) == len(set(lines)), said  # no line twice
    assert "{" not in said  # words, not a mapping


def test_a_rollback_says_what_serves() -> None:
    said = describe(_state("rolled_back", decisions=[], withdrawn=[2, 3]))
    assert said.splitlines()[0] == (
        "m: rollout of version 2 rolled back: version 1 serves all traffic"
    )
    assert "withdrawn earlier: version 3" in said


def test_an_unreachable_server_exits_2() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = inferd("rollout", "status", "m", "--url", f"http://127.0.0.1:{port}")
    assert done.returncode == 2 and "cannot reach" in done.stderr


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    # `true` reads nothing and is gone before the command writes: the write fails
    command = f"{sys.executable} -m inferd repo check --no-load {tmp_path} | true"
    done = subprocess.run(
        ["bash", "-c", command + '; echo "status ${PIPESTATUS[0]}"'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "status 141", (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_ray_serve_help_says_repo_and_repository_are_one() -> None:
    text = inferd("ray", "serve", "--help").stdout
    assert "--repository REPOSITORY, --repo REPOSITORY" in text
    assert "--repo REPOSITORY]" not in text  # not a second option in the usage line
