"""Test tiers: everything under tests/integration and tests/prep (real servers, torch exports,
training) and any test marked `slow` form the slow tier; `pytest -m "not slow"` runs the rest,
the fast tier (fakes for the runtime and the decoder), in well under a minute."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SLOW_FOLDERS = {"integration", "prep"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(TESTS).parts
        if parts and parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
