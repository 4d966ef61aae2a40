"""The table of kinds: every task has its row, every row's verbs are verbs the server knows,
its servable implements what each of them calls, and no module outside the table compares a
task with a name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args, get_type_hints

import pytest

from inferd.config.kinds import KINDS, TaskName
from inferd.config.model import ModelConfig
from inferd.engine.kinds.servable import Servable
from inferd.engine.versions.version_loader import servable_class
from inferd.verbs.catalog import all_verbs

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "inferd"
VERBS = {verb.name: verb for verb in all_verbs()}


def methods_called(verb: str) -> set[str]:
    """What a servable must implement to answer `verb`: the methods of the protocol its run
    takes the servable as (V2: `_infer`, behind `infer`'s checks; generation: `generate`)."""
    if verb == "generate":
        return {"generate"}
    taken = get_type_hints(VERBS[verb].run)["servable"]
    if taken is Servable:
        return {"_infer"}
    return {name for name in vars(taken) if not name.startswith("_")}


def test_every_task_has_one_row() -> None:
    assert tuple(KINDS) == get_args(TaskName)
    assert all(name == kind.name for name, kind in KINDS.items())


@pytest.mark.parametrize("task", list(KINDS))
def test_a_kinds_servable_implements_what_its_verbs_call(task: str) -> None:
    kind = KINDS[task]
    cls = servable_class(kind)
    assert issubclass(cls, Servable)
    assert kind.verbs <= {*VERBS, "generate"}, (task, kind.verbs)
    for verb in kind.verbs:
        for method in methods_called(verb):
            assert getattr(cls, method, None) is not getattr(Servable, method, None), (task, verb)


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


def test_a_kind_with_a_verb_of_its_own_is_one_module_and_one_row() -> None:
    """The token tagger brings the `tag` verb: nothing in the package names it but its module
    and its row (the engine, the routes, the schema and V2 find it through the row)."""
    module = PACKAGE / "engine" / "kinds" / "tagger.py"
    naming = re.compile(r"tagger|Tagg|kinds\.tagger|[\"']tag[\"']|/tag\b|token-classification")
    found = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path != module and naming.search(path.read_text())
    )
    assert found == ["config/kinds.py"]
    assert KINDS["token-classification"].own_verb == "inferd.engine.kinds.tagger:TAG"
    assert "tag" in VERBS
