"""Logging set-up: one JSON object per line for log collectors, or a text line per event for
people: `auto` (the default) picks text when stderr is a terminal, JSON otherwise, as the
tools people use do."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    """`2026-12-04 17:52:04.123 INFO  inferd.server.runner: listening on ... key=value`: the
    local time to the millisecond, the level, the logger, the event, its fields."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).astimezone()
        base = (
            f"{when:%Y-%m-%d %H:%M:%S}.{int(record.msecs):03d} {record.levelname:<7} "
            f"{record.name}: {record.getMessage()}"
        )
        extras = {
            k: v for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_")
        }
        if extras:
            base += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        if record.exc_info:
            base += "\n" + self.formatException(record.exc_info)
        return base


def wants_json(log_format: str, stream: TextIO) -> bool:
    """Whether `log_format` (auto, json, text) means JSON on `stream`."""
    if log_format == "auto":
        try:
            return not stream.isatty()
        except (AttributeError, ValueError):  # no file behind it, or closed
            return True
    return log_format == "json"


def configure_logging(level: str, log_format: str = "auto", stream: TextIO | None = None) -> None:
    """Routes inferd's and uvicorn's loggers to `stream` (stderr) in one format (`auto`: text
    on a terminal, else JSON)."""
    out = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if wants_json(log_format, out) else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
