"""What a quantized version's accuracy report says: the thresholds it is judged by, why it
fails them (`verdict`), each output's difference in words, and the table a written version
ends with; shared by `inferd quantize` (inferd.prep.quantize) and an in-place decoder's fp16
(inferd.prep.quantize_decoder)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferd.prep.accuracy import Accuracy
from inferd.prep.console import Reporter, megabytes


@dataclass(frozen=True)
class Thresholds:
    min_cosine: float = 0.99
    min_agreement: float = 0.98
    max_abs_diff: float | None = None
    """None: 5% of each output's value range on the sample set."""


def verdict(accuracy: Accuracy, thresholds: Thresholds) -> list[str]:
    """Why the loss is too high (empty when it is acceptable)."""
    problems = []
    if accuracy.cosine_mean is not None and accuracy.cosine_mean < thresholds.min_cosine:
        problems.append(
            f"mean cosine {accuracy.cosine_mean:.4f} < {thresholds.min_cosine} (--min-cosine)"
        )
    if accuracy.agreement is not None and accuracy.agreement < thresholds.min_agreement:
        problems.append(
            f"label agreement {accuracy.agreement:.2%} < {thresholds.min_agreement:.0%} "
            "(--min-agreement)"
        )
    if accuracy.cosine_mean is None and accuracy.agreement is None:
        for name, diff in accuracy.max_abs.items():
            bound = _diff_bound(name, accuracy, thresholds)
            if diff > bound:
                problems.append(f"{name}: max |diff| {diff:.3g} > {bound:.3g} (--max-abs-diff)")
    return problems


def _diff_bound(name: str, accuracy: Accuracy, thresholds: Thresholds) -> float:
    if thresholds.max_abs_diff is not None:
        return thresholds.max_abs_diff
    return 0.05 * accuracy.value_range.get(name, 0.0)


def describe_diff(name: str, diff: float, accuracy: Accuracy, thresholds: Thresholds) -> str:
    """A max |diff| with what it is measured against: its output's value range, and the bound
    it is judged by, or why it is not judged (a served embedding is judged on its cosine, a
    classifier on its labels: their raw outputs may move more than that without harm)."""
    span = accuracy.value_range.get(name, 0.0)
    said = f"{diff:.3g}"
    if span > 0:
        said += f" ({diff / span:.1%} of the output's range {span:.3g})"
    if accuracy.cosine_mean is not None:
        return said + "; not judged: the embeddings are judged by their cosine (above)"
    if accuracy.agreement is not None:
        return said + "; not judged: the classifier is judged by its label agreement (above)"
    bound = _diff_bound(name, accuracy, thresholds)
    source = "--max-abs-diff" if thresholds.max_abs_diff is not None else "5% of the range"
    fits = "within" if diff <= bound else "OVER"
    return said + f"; {fits} the bound {bound:.3g} ({source})"


def show_written(reporter: Reporter, what: str, target: Path, size: int, report: Path) -> None:
    """The table a written quantized version ends with."""
    reporter.table(
        f"Quantized {what}",
        [("written", str(target)), ("file size", megabytes(size)), ("report", str(report))],
    )
