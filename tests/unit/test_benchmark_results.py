"""benchmarks/RESULTS.md against the benchmarks themselves: short, one section per entry point
(its command, its machine, its table), every command one that runs, every written block one a
script writes, and the GPU figures those of the reports the check wrote."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = (BENCHMARKS / "RESULTS.md").read_text()
COMMAND = re.compile(r"(?:python|bash) benchmarks/([\w./-]+)(?:[ \n]+([a-z][\w-]*))?")


def entry_points() -> set[str]:
    return {p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")}


def parts(entry: str) -> set[str]:
    """The parts an entry point runs: the keys of its PARTS (none for a shell script)."""
    path = BENCHMARKS / entry
    if path.suffix != ".py":
        return set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PARTS" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def sections() -> dict[str, str]:
    """RESULTS.md's second-level sections by title."""
    chunks = re.split(r"^## ", RESULTS, flags=re.M)[1:]
    return {chunk.split("\n", 1)[0]: chunk for chunk in chunks}


def test_results_stay_short() -> None:
    assert RESULTS.count("\n") < 595


def test_at_most_ten_entry_points_each_in_the_readme() -> None:
    entries = entry_points()
    assert 0 < len(entries) <= 10
    readme = (BENCHMARKS / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.]+)` \|", readme, flags=re.M))
    assert listed == entries


def test_each_command_runs_an_entry_point_or_one_of_its_parts() -> None:
    commands = COMMAND.findall(RESULTS)
    assert commands
    for script, part in commands:
        assert script in entry_points(), script
        if part:
            assert part in parts(script), f"{script} {part}: not one of {sorted(parts(script))}"


@pytest.mark.parametrize("title", sorted(sections()))
def test_each_section_has_its_command_machine_and_table(title: str) -> None:
    text = sections()[title]
    assert COMMAND.search(text), title
    assert "Machine:" in text, title
    assert re.search(r"^\|.*\|$", text, flags=re.M), title


def test_each_entry_point_has_its_section() -> None:
    named = {script for text in sections().values() for script, _ in COMMAND.findall(text)}
    assert named == entry_points()


def test_written_blocks_are_those_the_scripts_write() -> None:
    starts = re.findall(r"^<!-- (\S+):start -->$", RESULTS, flags=re.M)
    ends = re.findall(r"^<!-- (\S+):end -->$", RESULTS, flags=re.M)
    assert starts == ends
    assert len(set(starts)) == len(starts)
    sources = "\n".join(p.read_text() for p in BENCHMARKS.rglob("*.py"))
    published = set(re.findall(r'(?:publish|update_results_section)\(\s*"([\w-]+)"', sources))
    assert set(starts) == published


def test_gpu_figures_are_those_of_the_reports() -> None:
    (gpu,) = [text for title, text in sections().items() if title.startswith("GPU")]
    reports = "\n".join(p.read_text() for p in (BENCHMARKS / "results" / "gpu").glob("*.txt"))
    figures = [line for line in reports.splitlines() if line.startswith("[figure]")]
    words = {w.rstrip(",") for line in figures for w in re.findall(r"[\d.]+,?", line)}
    lines = gpu.splitlines()
    rows = [
        line
        for i, line in enumerate(lines)
        if line.startswith("| ") and not lines[i + 1].startswith("| ---") and "---" not in line
    ]
    numbers = [n.replace(",", "") for row in rows for n in re.findall(r"\b\d[\d,]*(?:\.\d+)?", row)]
    assert numbers
    assert [n for n in numbers if n not in words] == []
