"""Output-by-output comparison of two implementations of one model on the same inputs.

`inferd export` compares ONNX Runtime against PyTorch, `inferd optimize` the optimized graph
against the one it came from. The report says, for every output, the largest absolute
difference, in which case (batch x length) and at which index, so a failure points somewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], Sequence[np.ndarray]]


@dataclass
class OutputParity:
    name: str
    max_abs: float = 0.0
    case: str = ""
    index: tuple[int, ...] = ()
    problem: str | None = None
    """A shape or dtype mismatch, a NaN: worse than any difference."""


@dataclass
class ParityReport:
    atol: float
    cases: list[str] = field(default_factory=list)
    outputs: list[OutputParity] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.problem is None and o.max_abs <= self.atol for o in self.outputs)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    def failures(self) -> list[str]:
        lines = []
        for o in self.outputs:
            if o.problem is not None:
                lines.append(f"{o.name}: {o.problem} (case {o.case})")
            elif o.max_abs > self.atol:
                lines.append(
                    f"{o.name}: max |difference| {o.max_abs:.3g} > {self.atol:g} at index "
                    f"{list(o.index)} in case {o.case}"
                )
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "atol": self.atol,
            "ok": self.ok,
            "cases": self.cases,
            "outputs": [
                {
                    "name": o.name,
                    "max_abs": o.max_abs,
                    "case": o.case,
                    "index": list(o.index),
                    "problem": o.problem,
                }
                for o in self.outputs
            ],
        }


def case_label(feeds: Feeds) -> str:
    first = next(iter(feeds.values()))
    return "x".join(str(d) for d in first.shape) or "scalar"


def compare_outputs(
    report: ParityReport,
    case: str,
    names: Sequence[str],
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
) -> None:
    """Folds one case into `report` (keeping each output's worst difference)."""
    if not report.outputs:
        report.outputs = [OutputParity(n) for n in names]
    report.cases.append(case)
    for entry, want, got in zip(report.outputs, expected, actual, strict=True):
        want, got = np.asarray(want), np.asarray(got)
        if want.shape != got.shape:
            entry.problem = f"shape {list(got.shape)}, expected {list(want.shape)}"
            entry.case = case
            continue
        if want.size == 0:
            continue
        diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
        if np.isnan(diff).any():
            if not (np.isnan(want) == np.isnan(got)).all():
                entry.problem, entry.case = "NaN where the reference has a number", case
                continue
            diff = np.nan_to_num(diff, nan=0.0)
        where = np.unravel_index(int(np.argmax(diff)), diff.shape)
        worst = float(diff[where])
        if worst > entry.max_abs or not entry.case:
            entry.max_abs, entry.case = worst, case
            entry.index = tuple(int(i) for i in where)


def check_parity(
    reference: Runner,
    candidate: Runner,
    cases: Sequence[Feeds],
    names: Sequence[str],
    atol: float,
    advance: Callable[[], None] | None = None,
) -> ParityReport:
    report = ParityReport(atol)
    for feeds in cases:
        case = case_label(feeds)
        results = []
        for side, run in (("the reference", reference), ("the candidate", candidate)):
            try:
                results.append(run(feeds))
            except Exception as exc:  # any failure of either model is a parity failure
                if not report.outputs:
                    report.outputs = [OutputParity(n) for n in names]
                for entry in report.outputs:
                    entry.problem = f"{side} failed: {type(exc).__name__}: {exc}"
                    entry.case = case
                report.cases.append(case)
                break
        else:
            compare_outputs(report, case, names, results[0], results[1])
        if advance is not None:
            advance()
    return report
