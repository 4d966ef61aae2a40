"""What the generation scheduler reports, step by step (metrics implement it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class GenerationObserver(Protocol):
    def on_generation_step(
        self, model: str, version: str, kind: str, rows: int, seconds: float, running: int,
        waiting: int, kv_tokens: int, kv_limit: int,
    ) -> None: ...  # fmt: skip

    def on_generation_tokens(
        self, model: str, first_token_s: Sequence[float], inter_token_s: Sequence[float]
    ) -> None: ...

    def on_generation_finished(
        self, model: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> None: ...


class NoGenerationObserver:
    def on_generation_step(
        self, model: str, version: str, kind: str, rows: int, seconds: float, running: int,
        waiting: int, kv_tokens: int, kv_limit: int,
    ) -> None:  # fmt: skip
        return None

    def on_generation_tokens(
        self, model: str, first_token_s: Sequence[float], inter_token_s: Sequence[float]
    ) -> None:
        return None

    def on_generation_finished(
        self, model: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        return None
