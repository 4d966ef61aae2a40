"""Jump-forward decoding: a constrained answer takes the tokens its grammar forces (a JSON
object's next key with its quotes and colon, where the model has no choice) without drawing
each from the model.

Once a token is taken after which the grammar forces at least `jump_forward` tokens, those
tokens are queued in the answer's constraint (inferd.generation.constraint): what the answer
says next is fixed from then on. An answer's forced opening is prefilled with its prompt
(`lead`). Later ones are taken in one of two ways, which give the same text: in one step of
that row alone, which computes their keys and values together with its last token's and
draws the token after them under its mask (`KVStore.extend`: k + 1 tokens for little more
than the time of one step of one row; ONNX Runtime's attention takes several new tokens over
a cache for one row at a time only); or one a step with the rest of the batch, each allowed
alone by the row's mask (no parser's work for it). The first is taken where it costs less
than the row's share of the k batch steps it saves (a small batch, or many tokens), as the
steps' own times say; a block of steps ends for it (inferd.generation.block). Each token
takes one number of the row's generator either way (a jump skips those of the tokens it
takes), so a seed gives the same answer whatever else runs.

Only where the KV cache is in place (a store that `advances`: each row's cache is its own)
and the answer asks for no log-probabilities (a forced token has none).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from inferd.errors import InferdError
from inferd.generation.decoder import DRAW_BIAS
from inferd.generation.draw import Draw
from inferd.generation.kvstore import KVStore
from inferd.generation.masks import taken
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.step_runner import StepRunner

RETIME = 64
"""Jumps declined for their expected cost before one is taken anyway, to time them again."""


class Forced:
    def __init__(self, least: int, draw: Draw, kv: KVStore, steps: StepRunner) -> None:
        self._least = least if kv.advances else 0
        """The fewest forced tokens queued (0: none)."""
        self._draw = draw
        self._kv = kv
        self._steps = steps
        self._jump_s: float | None = None
        """The last jumps' run time (a moving average; None before the first)."""
        self._declined = 0

    def hold(self, seqs: list[Seq]) -> None:
        """New sequences' constraints queue their forced tokens (not for log-probabilities),
        those of the answer's start too."""
        for seq in seqs:
            if seq.constraint is not None and seq.params.logprobs is None:
                seq.constraint.start(self._least)

    def lead(self, seqs: list[Seq], source: list[int]) -> list[Lead]:
        """The queued tokens each sequence of a prefill takes after its prompt, in the
        prefill (a JSON answer's opening brace and first key): its grammar takes them now,
        the sequence once the prefill ran (`Lead.accept`); `source`: the row each draws from
        (twins share their prompt's: they take the same tokens, or none)."""
        tokens = []
        for seq in seqs:
            queued = [] if seq.constraint is None else seq.constraint.queued
            tokens.append(queued[: max(0, seq.params.max_new_tokens - 1)])
        differ = {s for i, s in enumerate(source) if tokens[i] != tokens[s]}
        leads = []
        for i, seq in enumerate(seqs):
            taking = [] if source[i] in differ or seq.done else tokens[i]
            whole = _taken(seq, taking)
            if whole is None:
                taking, whole = [], False
            leads.append(Lead(taking, whole))
        return leads

    def any_due(self, rows: list[Seq]) -> bool:
        """Whether a row of `rows` takes its queued tokens in a step of its own now."""
        return self._least > 0 and any(self._due(seq, len(rows)) for seq in rows)

    async def jump(self, rows: list[Seq]) -> tuple[list[float], list[float]]:
        """Every due row's queued tokens, and the token drawn after them; returns each step's
        time and the times between tokens."""
        seconds: list[float] = []
        gaps: list[float] = []
        if self._least > 0:
            for row, seq in enumerate(rows):
                while self._due(seq, len(rows), deciding=True):
                    gaps += await self._extend(row, seq, seconds)
        return seconds, gaps

    def _due(self, seq: Seq, rows: int, deciding: bool = False) -> bool:
        """A row whose queued tokens cost less in a step of its own than in its share of as
        many of the batch's steps (tried on a small batch before the first jump is timed, and
        again after `RETIME` declined jumps, so that one slow jump does not decide for ever:
        `deciding`, where `jump` decides, not where a block asks). Only a queue already
        known: looking for one here would compute the row's mask on this thread, before the
        step, instead of on the mask thread beside it."""
        constraint = seq.constraint
        if constraint is None or seq.done or seq.cancelled:
            return False
        queued = constraint.known_queue()
        if not queued:
            return False
        step_s = self._steps.decode_s
        if self._jump_s is None or step_s is None:
            return rows <= 2
        if len(queued) * step_s / rows >= self._jump_s:
            return True
        if deciding:
            self._declined += 1
            if self._declined >= RETIME:
                self._declined = 0
                return True
        return False

    async def _extend(self, row: int, seq: Seq, seconds: list[float]) -> list[float]:
        constraint = seq.constraint
        assert constraint is not None
        forced = constraint.queued
        started = now = time.perf_counter()
        whole = _taken(seq, forced)
        if whole is None:  # (its grammar failed: that row alone fails)
            return []
        gaps = seq.accept_many(forced, [now] * len(forced), whole)  # (the grammar took them)
        if seq.done:  # (whole, or at its length: no token more, no step)
            return gaps
        step = self._kv.extend(row, seq.generated[seq.cached - len(seq.prompt_ids) :])
        draw, feeds = self._draw, step.feeds
        ranked = draw.ranked([seq], biased=True)
        in_graph = ranked and draw.in_graph
        if in_graph:
            draw.feed(feeds, [seq], {0}, 1)
        if ranked:
            draw.bias(feeds, [seq], [0])
        masks = None if ranked else draw.masks([seq])
        ran = time.perf_counter()
        try:
            out = await self._steps.run(
                step.inputs, draw.names(ranked, in_graph), step.into, self._steps.decode_s
            )
        finally:
            if DRAW_BIAS in feeds:  # (the row's bias, zeros again for the batch's next steps)
                feeds[DRAW_BIAS][...] = 0.0
        now = time.perf_counter()
        seconds.append(now - ran)
        self._kv.after_extend(step)
        seq.cached = step.lengths[0]
        token = draw.decoded(out, [0], [seq], ranked, in_graph, await taken(masks))[0]
        since = seq.accept(token, now)
        spent = time.perf_counter() - started  # (its Python too, not only the run)
        self._jump_s = spent if self._jump_s is None else 0.8 * self._jump_s + 0.2 * spent
        return gaps if since is None else [*gaps, since]


@dataclass(frozen=True)
class Lead:
    """A sequence's forced opening, prefilled with its prompt."""

    tokens: list[int]
    whole: bool
    """Whether the answer is whole with them."""

    def accept(self, seq: Seq, now: float) -> None:
        """The sequence takes them, once the prefill ran (its grammar took them before)."""
        seq.accept_many(self.tokens, [now] * len(self.tokens), self.whole)


def _taken(seq: Seq, tokens: list[int]) -> bool | None:
    """`seq`'s grammar takes its first queued `tokens`, and its generator skips the numbers
    their draws, one a step, would have taken; whether the answer is then whole. None when
    the grammar failed: that sequence fails, not the step."""
    if not tokens:
        return False
    assert seq.constraint is not None
    try:
        whole = seq.constraint.take(len(tokens))
    except InferdError as error:
        seq.fail(error)
        return None
    if not seq.params.greedy:
        seq.give_back(-len(tokens))
    return whole
