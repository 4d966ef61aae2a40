"""Log-probabilities of an answer's tokens, for requests that ask (`logprobs`): each drawn
token's, and the most likely alternatives at its step, from the model's own distribution (its
logits before temperature, penalties or a constraint's mask: what the model thought, not what
the draw allowed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class Alternative:
    token: str
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    token: str
    """The token's text on its own (a token that is part of a character: U+FFFD)."""
    logprob: float
    top: tuple[Alternative, ...]
    """The `top` most likely tokens at its step, best first."""


@dataclass(frozen=True)
class Scored:
    """A row's log-probabilities, before its token's text is known."""

    logprob: float
    top_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]


def score(logits: np.ndarray[Any, Any], token: int, top: int) -> Scored:
    """The log-probability of `token` under `logits` (one row), and the `top` best."""
    row = np.asarray(logits, dtype=np.float64)
    peak = float(row.max())
    normalizer = peak + float(np.log(np.exp(row - peak).sum()))
    if top:
        best = np.argpartition(-row, min(top, row.size - 1))[:top]
        best = best[np.lexsort((best, -row[best]))]  # best first; ties by the lower id
    else:
        best = np.zeros(0, dtype=np.int64)
    return Scored(
        float(row[token]) - normalizer,
        tuple(int(i) for i in best),
        tuple(float(row[i]) - normalizer for i in best),
    )


def named(scored: Scored, token: int, tokenizer: Tokenizer) -> TokenLogprob:
    """`scored` with its tokens' texts."""
    alternatives = tuple(
        Alternative(tokenizer.decode([i], skip_special_tokens=False), lp)
        for i, lp in zip(scored.top_ids, scored.top_logprobs, strict=True)
    )
    text = tokenizer.decode([token], skip_special_tokens=False)
    return TokenLogprob(token, text, scored.logprob, alternatives)
