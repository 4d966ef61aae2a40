"""Log formats: JSON for collectors, text lines with the time for people, `auto` choosing by
whether stderr is a terminal (a real pty here)."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
from collections.abc import Iterator

import pytest

from inferd.config.server_settings import ServerSettings
from inferd.observability.logs import JsonFormatter, TextFormatter, configure_logging, wants_json

TEXT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO    inferd\.test: model loaded model=m version=1$"
)


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _record() -> logging.LogRecord:
    record = logging.LogRecord("inferd.test", logging.INFO, __file__, 1, "model loaded", None, None)
    record.model = "m"
    record.version = 1
    return record


def test_a_text_line_has_the_time_the_level_the_logger_the_event_and_its_fields() -> None:
    assert TEXT_LINE.match(TextFormatter().format(_record()))


def test_a_json_line_is_one_object() -> None:
    entry = json.loads(JsonFormatter().format(_record()))
    assert entry["event"] == "model loaded" and entry["model"] == "m" and entry["level"] == "info"


def test_auto_is_text_on_a_terminal_and_json_elsewhere() -> None:
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert wants_json("auto", terminal) is False
            assert wants_json("json", terminal) is True
    finally:
        os.close(leader)
        os.close(follower)
    assert wants_json("auto", io.StringIO()) is True
    assert wants_json("text", io.StringIO()) is False


@pytest.mark.parametrize(
    ("log_format", "is_json"), [("auto", True), ("json", True), ("text", False)]
)
def test_configure_logging_writes_the_chosen_format(
    restore_root: None, log_format: str, is_json: bool
) -> None:
    out = io.StringIO()
    configure_logging("info", log_format, out)
    logging.getLogger("inferd.test").info("model loaded", extra={"model": "m", "version": 1})
    line = out.getvalue().strip()
    if is_json:
        assert json.loads(line)["event"] == "model loaded"
    else:
        assert TEXT_LINE.match(line), line


def test_the_setting_defaults_to_auto_and_takes_plain_as_text() -> None:
    assert ServerSettings().log_format == "auto"
    assert ServerSettings.model_validate({"log_format": "plain"}).log_format == "text"
