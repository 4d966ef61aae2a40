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

from inferd.generation.constraint import taken
from inferd.generation.decoder import DRAW_BIAS
from inferd.generation.draw import Draw
from inferd.generation.kvstore import KVStore
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.step_runner import StepRunner


class Forced:
    def __init__(self, least: int, draw: Draw, kv: KVStore, steps: StepRunner) -> None:
        self._least = least if kv.advances else 0
        """The fewest forced tokens queued (0: none)."""
        self._draw = draw
        self._kv = kv
        self._steps = steps
        self._jump_s: float | None = None
        """The last jumps' run time (a moving average; None before the first)."""

    def hold(self, seqs: list[Seq]) -> None:
        """New sequences' constraints queue their forced tokens (not for log-probabilities),
        those of the answer's start too."""
        for seq in seqs:
            if seq.constraint is not None and seq.params.logprobs is None:
                seq.constraint.start(self._least)

    def lead(self, seqs: list[Seq], source: list[int]) -> list[list[int]]:
        """The queued tokens each sequence of a prefill takes after its prompt, in the
        prefill (a JSON answer's opening brace and first key), taken now; `source`: the row
        each draws from (twins share their prompt's: they take the same tokens, or none)."""
        leads = []
        for seq in seqs:
            queued = [] if seq.constraint is None else seq.constraint.queued
            leads.append(queued[: max(0, seq.params.max_new_tokens - 1)])
        differ = {s for i, s in enumerate(source) if leads[i] != leads[s]}
        now = time.perf_counter()
        for i, seq in enumerate(seqs):
            if source[i] in differ or not leads[i]:
                leads[i] = []
                continue
            assert seq.constraint is not None
            whole = seq.constraint.take(len(leads[i]))
            self._skip(seq, len(leads[i]))
            seq.accept_many(leads[i], [now] * len(leads[i]))  # (the grammar took them)
            if whole:
                seq.finish("stop", now)
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
                while self._due(seq, len(rows)):
                    gaps += await self._extend(row, seq, seconds)
        return seconds, gaps

    def _due(self, seq: Seq, rows: int) -> bool:
        """A row whose queued tokens cost less in a step of its own than in its share of as
        many of the batch's steps (tried on a small batch before the first jump is timed)."""
        constraint = seq.constraint
        if constraint is None or not constraint.queued or seq.done or seq.cancelled:
            return False
        step_s = self._steps.decode_s
        if self._jump_s is None or step_s is None:
            return rows <= 2
        return len(constraint.queued) * step_s / rows >= self._jump_s

    async def _extend(self, row: int, seq: Seq, seconds: list[float]) -> list[float]:
        constraint = seq.constraint
        assert constraint is not None
        forced = constraint.queued
        started = now = time.perf_counter()
        whole = constraint.take()
        gaps = seq.accept_many(forced, [now] * len(forced))  # (the grammar took them)
        if whole:
            seq.finish("stop", now)
        if seq.done:  # (whole, or at its length: no token more, no step)
            return gaps
        self._skip(seq, len(forced))
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
        out = await self._steps.run(
            step.inputs, draw.names(ranked, in_graph), step.into, self._steps.decode_s
        )
        now = time.perf_counter()
        seconds.append(now - ran)
        if DRAW_BIAS in feeds:  # (the row's bias, zeros again for the batch's next steps)
            feeds[DRAW_BIAS][...] = 0.0
        self._kv.after_extend(step)
        seq.cached = step.lengths[0]
        token = draw.decoded(out, [0], [seq], ranked, in_graph, await taken(masks))[0]
        since = seq.accept(token, now)
        spent = time.perf_counter() - started  # (its Python too, not only the run)
        self._jump_s = spent if self._jump_s is None else 0.8 * self._jump_s + 0.2 * spent
        return gaps if since is None else [*gaps, since]

    @staticmethod
    def _skip(seq: Seq, tokens: int) -> None:
        """Skips the numbers of `tokens` taken without a draw: the numbers their draws, one
        a step, would have taken."""
        if not seq.params.greedy:
            seq.give_back(-tokens)
