"""The table of kinds: every task has its row, every row's servable is a servable that serves
its verbs, and no module outside the table compares a task with a name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from inferd.config.kinds import KINDS, TaskName, Verb
from inferd.config.model import ModelConfig
from inferd.engine.kinds.servable import Servable
from inferd.engine.versions.version_loader import servable_class

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "inferd"
VERB_METHODS = {verb: "_infer" if verb == "infer" else verb for verb in get_args(Verb)}
"""The servable method each verb runs (a V2 request: `_infer`, behind `infer`'s checks)."""


def test_every_task_has_one_row() -> None:
    assert tuple(KINDS) == get_args(TaskName)
    assert all(name == kind.name for name, kind in KINDS.items())


@pytest.mark.parametrize("task", list(KINDS))
def test_a_kinds_servable_serves_its_verbs_and_refuses_the_others(task: str) -> None:
    kind = KINDS[task]
    cls = servable_class(kind)
    assert issubclass(cls, Servable)
    for verb, method in VERB_METHODS.items():
        overridden = getattr(cls, method) is not getattr(Servable, method)
        assert overridden == (verb in kind.verbs), (task, verb)


@pytest.mark.parametrize("task", list(KINDS))
def test_a_kinds_section_is_a_field_of_the_model_config(task: str) -> None:
    section = KINDS[task].section
    assert section is None or section in ModelConfig.model_fields


TASK_NAMES = "|".join(re.escape(name) for name in KINDS)
COMPARISON = re.compile(
    rf"""(\btask\b\s*(==|!=|\bin\b|\bnot in\b))|((==|!=)\s*["']({TASK_NAMES})["'])"""
    rf"""|(["']({TASK_NAMES})["']\s*(==|!=))"""
)


def test_no_module_but_the_table_compares_a_task_with_a_name() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "config" / "kinds.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if COMPARISON.search(line) and "for task in" not in line:
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
