"""The status page's first paint: the status snapshot (inferd.server.status_view) written into
the page's HTML on the server, every value escaped, in the same elements the page's script
(static/status.js) builds and then updates every two seconds. A browser shows the models,
their versions, a rollout's split, step, last decision and withdrawn versions before any
script runs (or where none may run).

The markup here and the script's must agree: the script takes over the cards it finds."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from html import escape
from string import Template
from typing import Any

SERIES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # key, title, unit, lines (as status.js's SERIES)
    ("rps", "requests / s", "", ("rps",)),
    ("latency", "p50 / p99", "ms", ("p50", "p99")),
    ("queue", "queue depth", "", ("queue",)),
    ("batch", "mean batch size", "", ("batch",)),
    ("padding", "padding efficiency", "%", ("padding",)),
    ("errors", "errors / s", "", ("errors",)),
)
COLORS = ("var(--accent)", "var(--second)")
NO_VALUE = "\N{EN DASH}"
"""A chart's value before it has one (as the script shows it)."""
KEEP = 90
"""Points per chart (as status.js's KEEP): the viewBox's width."""


def render(template: str, status: dict[str, Any]) -> str:
    """The page (`template`: static/status.html) with `status` (a `/v1/status` snapshot)
    written into it."""
    jobs = status["jobs"]
    return Template(template).substitute(
        server=_text(f"{status['server']['name']} {status['server']['version']}"),
        ready="yes" if status["ready"] else "no",
        in_flight=_text(status["in_flight"]),
        jobs=_text(f"{jobs['running']} running ({jobs['store']})"),
        time=_text(status["time"]),
        updated=time.strftime("%H:%M:%S UTC", time.gmtime(status["time"])),
        models="".join(_card(model) for model in status["models"]),
    )


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _tag(tag: str, attrs: dict[str, object] | None = None, inner: str = "") -> str:
    """An element; `inner` is markup (already escaped), attribute values are escaped here."""
    shown = "".join(
        f" {name}" if value is True else f' {name}="{_text(value)}"'
        for name, value in (attrs or {}).items()
        if value is not None and value is not False
    )
    return f"<{tag}{shown}>{inner}</{tag}>"


def _card(model: dict[str, Any]) -> str:
    versions: list[dict[str, Any]] = model["versions"]
    title = _tag("div", None, _tag("h2", None, _text(model["name"])) + _task(model))
    badges = [
        _tag(
            "span",
            {
                "class": f"badge {v['state']}",
                "data-version": v["version"],
                "title": v["reason"] or "",
            },
            _text(f"v{v['version']} {v['state']}{_resident(v)}"),
        )
        for v in versions
    ] or [_tag("span", {"class": f"badge {model['state'] or ''}"}, _text(model["state"] or ""))]
    reason = model["reason"] or "; ".join(
        f"v{v['version']}: {v['reason']}" for v in versions if v["reason"]
    )
    parts = [
        title,
        _tag("div", {"class": "versions"}, "".join(badges)),
        _split(model["rollout"]),
        _rollout(model["rollout"]),
        _tag("div", {"class": "reason"}, _text(reason)),
        _tag("div", {"class": "charts"}, "".join(_charts(model))),
        _tag("div", {"class": "note"}, _text(_cache_note(versions))),
    ]
    return _tag("section", {"class": "card", "data-model": model["name"]}, "".join(parts))


def _resident(version: dict[str, Any]) -> str:
    """What a version in memory holds, after its state (nothing while it is not)."""
    held = version.get("resident_mb")
    text = "" if held is None else f" {held:g} MB"
    for gpu, mb in (version.get("resident_device_mb") or {}).items():
        text += f", GPU {gpu} {mb:g} MB"
    return text


def _task(model: dict[str, Any]) -> str:
    return _tag("span", {"class": "task"}, _text(model["task"] or ""))


def _percent(share: object) -> int:
    """As the script's Math.round(share * 100)."""
    return math.floor((share if isinstance(share, int | float) else 0) * 100 + 0.5)


def _split(rollout: dict[str, Any] | None) -> str:
    if rollout is not None and isinstance(rollout.get("weight"), int | float):
        canary = _percent(rollout["weight"])
        baseline = _percent(rollout.get("baseline_weight"))
        stable = 100 - canary - baseline
        arms = [
            _tag(
                "div",
                {"class": "stable", "style": f"width:{stable}%"},
                _text(f"v{rollout['stable']} {stable}%"),
            ),
        ]
        if baseline > 0:
            arms.append(
                _tag(
                    "div",
                    {
                        "class": "baseline",
                        "style": f"width:{baseline}%",
                        "title": "baseline: a second instance of the stable version",
                    },
                    _text(f"v{rollout['stable']} baseline {baseline}%"),
                )
            )
        arms.append(
            _tag(
                "div",
                {"class": "canary", "style": f"width:{canary}%"},
                _text(f"v{rollout['candidate']} {canary}%"),
            )
        )
        attrs = {"class": "split", "data-rollout": rollout.get("status") or "running"}
        return _tag("div", attrs, "".join(arms))
    if rollout is not None and rollout.get("status") == "failed":
        status, reason = rollout.get("status") or "failed", rollout.get("reason") or ""
        box = _tag(
            "div",
            {"class": "failed", "title": reason},
            _text(f"rollout {status}: {reason or 'no reason given'}"),
        )
        return _tag("div", {"class": "split failed", "data-rollout": status}, box)
    return _tag("div", {"class": "split", "hidden": True})


def _rollout(rollout: dict[str, Any] | None) -> str:
    """A rollout's step (or how it ended), its last decision with the reason, and the
    versions withdrawn from traffic (rolled back or aborted)."""
    if rollout is None or rollout.get("status") == "failed":
        return _tag("div", {"class": "rollout", "hidden": True})
    status = str(rollout.get("status") or "")
    if isinstance(rollout.get("weight"), int | float):
        step = f"step {rollout['step']} of {len(rollout['steps'])}"
        if status == "holding":
            step += " (holding)"
    else:
        step = f"rollout of v{rollout['candidate']} {status.replace('_', ' ')}"
    spans = [_tag("span", {"class": "step"}, _text(step))]
    decision = rollout.get("decision")
    if decision:
        shown = f"last decision: {decision['decision']}: {decision['reason']}"
        spans.append(_tag("span", {"class": "decision"}, _text(shown)))
    withdrawn: Sequence[int] = rollout.get("withdrawn") or ()
    if withdrawn:
        listed = ", ".join(f"v{v}" for v in withdrawn)
        spans.append(_tag("span", {"class": "withdrawn"}, _text(f"withdrawn: {listed}")))
    return _tag("div", {"class": "rollout", "data-status": status}, "".join(spans))


def _fmt(value: float) -> str:
    """As the script's fmt."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _charts(model: dict[str, Any]) -> list[str]:
    live = model["live"] or {"requests_per_s": 0, "errors_per_s": 0, "p50_ms": None, "p99_ms": None}
    now: dict[str, float | None] = {
        "rps": live["requests_per_s"],
        "errors": live["errors_per_s"],
        "p50": live["p50_ms"],
        "p99": live["p99_ms"],
        "queue": sum(v["queue_depth"] for v in model["versions"]),
        "batch": None,  # (between two snapshots: the script's, from its second)
        "padding": None,
    }
    charts = []
    for key, name, unit, lines in SERIES:
        lasts = [now[line] for line in lines]
        shown = " / ".join(NO_VALUE if v is None else _fmt(v) for v in lasts)
        if unit and any(v is not None for v in lasts):
            shown = f"{shown} {unit}"
        head = _tag(
            "div",
            None,
            _tag("span", {"class": "name"}, _text(name))
            + _tag("span", {"class": "value"}, _text(shown)),
        )
        last = lasts[0]
        polylines = "".join(
            _tag("polyline", {"data-line": line, "stroke": COLORS[i], "points": ""})
            for i, line in enumerate(lines)
        )
        plot = _tag(
            "svg",
            {
                "viewBox": f"0 0 {KEEP - 1} 100",
                "preserveAspectRatio": "none",
                "data-series": key,
                "data-last": _fmt_last(last),
            },
            polylines,
        )
        charts.append(_tag("div", {"class": "chart"}, head + plot))
    return charts


def _fmt_last(value: float | None) -> str:
    if value is None:
        return "0"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _cache_note(versions: list[dict[str, Any]]) -> str:
    hits = sum(v["cache_hits"] for v in versions)
    lookups = hits + sum(v["cache_misses"] for v in versions)
    if not lookups:
        return ""
    return f"response cache: {hits / lookups * 100:.1f}% of {lookups} lookups hit"
