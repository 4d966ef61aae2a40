"""Silencing third-party chatter that the preparation commands' own output already covers:
transformers' progress bars and advice meant for its training users, and ONNX Runtime's
quantizer's pre-processing suggestion (inferd quantizes what it exported itself)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

ORT_PREPROCESS_ADVICE = "Please consider to run pre-processing before quantization"


def quiet_transformers() -> None:
    """transformers logs errors only and shows no progress bars (for this process); nothing
    to do where it is not installed (a module factory needs only torch)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # untyped upstream
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # untyped upstream


class _DropPrefix(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextmanager
def without_root_message(prefix: str) -> Iterator[None]:
    """Drops root-logger records that start with `prefix` while the block runs."""
    drop = _DropPrefix(prefix)
    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
