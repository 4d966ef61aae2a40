"""Test tiers: everything under tests/integration and tests/prep (real servers, torch exports,
training) and any test marked `slow` form the slow tier; `pytest -m "not slow"` runs the rest,
the fast tier (fakes for the runtime and the decoder), in well under a minute. When the marker
expression leaves the slow tier out, its folders are not even collected: their imports (torch,
ray, transformers, sentence-transformers) cost the fast tier more than its tests."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SLOW_FOLDERS = {"integration", "prep"}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The slow folders, when the marker expression deselects slow tests (None: pytest
    decides, as for any other path)."""
    slow_folder = collection_path.name in SLOW_FOLDERS and collection_path.parent == TESTS
    if slow_folder and not _selects_slow(config.getoption("markexpr") or ""):
        return True
    return None


def _selects_slow(markexpr: str) -> bool:
    """Whether a test marked only `slow` passes the `-m` expression (pytest's own parser)."""
    if not markexpr:
        return True
    from _pytest.mark.expression import Expression  # (pytest's `-m` grammar)

    return Expression.compile(markexpr).evaluate(lambda name, **_: name == "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(TESTS).parts
        if parts and parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
