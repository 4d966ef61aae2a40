"""An answer's log-probabilities (inferd.generation.logprobs) in each route's shape: OpenAI's
chat (`content`: token, logprob, bytes, top_logprobs), OpenAI's completions (`tokens`,
`token_logprobs`, `top_logprobs`, `text_offset`), and /generate's own (a list of tokens). A
stream sends each chunk the tokens drawn since the last (`Unsent`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferd.generation.logprobs import TokenLogprob


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": list(e.token.encode()),
                "top_logprobs": [
                    {"token": a.token, "logprob": a.logprob, "bytes": list(a.token.encode())}
                    for a in e.top
                ],
            }
            for e in entries
        ],
        "refusal": None,
    }


def completion_logprobs(entries: Sequence[TokenLogprob], offset: int = 0) -> dict[str, Any]:
    """`offset`: where the first token starts in the answer's text."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{a.token: a.logprob for a in e.top} for e in entries],
        "text_offset": offsets,
    }


def plain_logprobs(entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": e.token,
            "logprob": e.logprob,
            "top_logprobs": [{"token": a.token, "logprob": a.logprob} for a in e.top],
        }
        for e in entries
    ]


@dataclass
class Unsent:
    """The log-probabilities a stream has not sent yet."""

    entries: list[TokenLogprob]
    sent: int = 0
    offset: int = 0
    """Characters of the tokens sent (completions' `text_offset`)."""

    def take(self) -> list[TokenLogprob]:
        new = self.entries[self.sent :]
        self.sent += len(new)
        return new

    def completion(self) -> dict[str, Any]:
        new = self.take()
        shaped = completion_logprobs(new, self.offset)
        self.offset += sum(len(e.token) for e in new)
        return shaped
