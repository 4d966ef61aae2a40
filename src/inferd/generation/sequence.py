"""One generation request as it runs: its tokens, its text so far, and the events its client
reads (text deltas, then the end: a `Finished` or an error)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from tokenizers import Tokenizer

from inferd.errors import InferdError
from inferd.generation.constraint import Constraint
from inferd.generation.incremental_text import IncrementalText
from inferd.generation.logprobs import Scored, TokenLogprob, named
from inferd.generation.params import SamplingParams
from inferd.observability.trace import Answer, current_trace


@dataclass(frozen=True)
class Finished:
    text: str
    reason: str  # "stop" (EOS or a stop sequence), "length", "cancelled"
    prompt_tokens: int
    completion_tokens: int
    first_token_s: float | None
    total_s: float


class _Pending:
    """An event: tokens appended for the reader to decode (at most one waits in the queue)."""


PENDING = _Pending()
Event = str | _Pending | Finished | BaseException


class Sequence:
    def __init__(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        tokenizer: Tokenizer,
        eos_id: int | None,
        context_length: int,
        constraint: Constraint | None = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.constraint = constraint
        """What its answer must match (inferd.generation.constraint), when anything."""
        self.twin_of: Sequence | None = None
        """Another answer to the same prompt (of one request's `n`): when they join in one
        prefill, the prompt is computed once and this one takes a copy of its cache."""
        self.generated: list[int] = []
        self.cached = 0
        """Real tokens of this sequence in the KV cache."""
        self.seen = set(prompt_ids)
        """Token ids the repetition penalty applies to."""
        self.logprobs: list[TokenLogprob] = []
        """Each answer token's log-probability, when its request asked (`params.logprobs`)."""
        self._offered: Scored | None = None
        """The next token's, as the draw scored it (kept once the token is taken)."""
        self._tokenizer = tokenizer
        self.counts: Counter[int] = Counter()
        """How often each token came in the answer (the presence and frequency penalties)."""
        self._bits = np.random.PCG64(params.seed)
        self.rng = np.random.Generator(self._bits)  # (what default_rng(seed) makes)
        self._text = IncrementalText(tokenizer, params.stop)
        self._eos = None if params.ignore_eos else eos_id
        self._context = context_length
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.created = time.perf_counter()
        self._trace = current_trace()
        """Its request's trace: given its `prefill` and `decode` stages when it ends."""
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.cancelled = False
        self.finished: Finished | None = None
        self.error: BaseException | None = None
        """What it failed with, when it did."""
        self._whole = False
        """Set when the client waits for the whole answer: no text events are queued, and
        without stop sequences the text is decoded once, at the end."""
        self._pending = False
        """Whether a PENDING event waits in the queue for the reader."""

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def last_token(self) -> int:
        return self.generated[-1]

    @property
    def budget(self) -> int:
        """KV tokens this sequence may come to hold: prompt plus every new token it may get."""
        return len(self.prompt_ids) + self.params.max_new_tokens

    def offer(self, scored: Scored) -> None:
        """The next token's log-probabilities, from the draw (kept when `accept` takes it)."""
        self._offered = scored

    def give_back(self, draws: int) -> None:
        """Moves `rng` back by `draws` numbers drawn and not used (one 64-bit draw each: its
        `random()`), so that the next ones are those they were; a negative count skips the
        numbers of tokens taken without a draw (a constrained answer's forced tokens)."""
        self._bits.advance(-draws)

    def cancel(self) -> None:
        """From the client side (disconnect): the scheduler retires it at the next step."""
        self.cancelled = True

    def accept(
        self, token: int, now: float, consumed: bool = False, whole: bool = False
    ) -> float | None:
        """Takes the next token (sampled by the scheduler); returns the time since the previous
        token (None for the first), for the inter-token metric. `consumed`: its grammar took
        it already (in a block, between the steps: inferd.generation.bias); `whole`: and the
        answer is whole with it."""
        if self.finished is not None:  # (failed while its token was drawn: nothing to take)
            return None
        since = None if self.last_token_at is None else now - self.last_token_at
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now
        offered, self._offered = self._offered, None
        if self._ends(token):
            self._end(now)
            return since
        if offered is not None:
            self.logprobs.append(named(offered, token, self._tokenizer))
        self.generated.append(token)
        self.seen.add(token)
        self.counts[token] += 1
        if self.constraint is not None and not consumed:
            try:
                whole = self.constraint.consume(token)
            except InferdError as error:
                self.fail(error)
                return since
        if self.params.stop:  # the text decides where it ends: decoded here, token by token
            delta = self._text.push(token)
            if delta and not self._whole:
                self.events.put_nowait(delta)
        else:
            # decoded by the reader (`stream`), not on the step loop: at the end for a whole
            # answer, at each wake-up for a stream (the tokens since the last one together)
            self._text.append(token)
            if not self._whole and not self._pending:
                self._pending = True
                self.events.put_nowait(PENDING)
        if self._text.stopped or whole:
            self.finish("stop", now)
        else:
            total = len(self.prompt_ids) + len(self.generated)
            if len(self.generated) >= self.params.max_new_tokens or total >= self._context:
                self.finish("length", now)
        return since

    def accept_many(
        self, tokens: list[int], times: list[float], whole: bool = False
    ) -> list[float]:
        """`accept` for tokens drawn one after another (a decode block's, each at the time its
        step ended), up to the sequence's end (what comes after it is dropped); returns the
        times between tokens (the first since the previous token, when there was one). Without
        stop sequences the tokens are taken together, not one at a time. A constrained
        sequence's grammar took them already (between a block's steps, or as forced tokens);
        `whole`: the answer is whole with the last of them (it stops there, whatever room is
        left)."""
        if not tokens or self.done:
            return []
        if self.params.stop:  # the text decides where it ends, token by token
            gaps = []
            last = len(tokens) - 1
            for i, (token, now) in enumerate(zip(tokens, times, strict=True)):
                if self.done:
                    break
                # (its grammar took it)
                since = self.accept(token, now, consumed=True, whole=whole and i == last)
                if since is not None:
                    gaps.append(since)
            return gaps
        room = min(
            self.params.max_new_tokens - len(self.generated),
            self._context - len(self.prompt_ids) - len(self.generated),
        )
        end = next((i for i, t in enumerate(tokens) if self._ends(t)), len(tokens))
        taken = tokens[: min(end, room)]
        stopped = end < min(len(tokens), room)  # an EOS before the length limit
        times = times[: len(taken) + stopped]  # (the EOS's own time too)
        before = self.last_token_at
        gaps = [b - a for a, b in pairwise(times)]
        if before is not None:
            gaps.insert(0, times[0] - before)
        if self.first_token_at is None:
            self.first_token_at = times[0]
        self.last_token_at = times[-1]
        self.generated.extend(taken)
        self.seen.update(taken)
        self.counts.update(taken)
        self._text.extend(taken)
        if taken and not self._whole and not self._pending:
            self._pending = True
            self.events.put_nowait(PENDING)
        if stopped:
            self._end(times[-1])
        elif whole and len(taken) == len(tokens):
            self.finish("stop", times[-1])
        elif len(taken) == room:
            self.finish("length", times[-1])
        return gaps

    def _ends(self, token: int) -> bool:
        """Whether `token` ends the answer: the model's EOS, or the grammar's end."""
        return token == self._eos or (self.constraint is not None and self.constraint.ends(token))

    def _end(self, now: float) -> None:
        """The answer's end at an end token: stopped, or failed when its grammar broke."""
        broken = None if self.constraint is None else self.constraint.broken
        if broken is not None:
            self.fail(broken)
        else:
            self.finish("stop", now)

    def finish(self, reason: str, now: float) -> None:
        if self.finished is not None:
            return
        if reason != "cancelled":
            rest = self._text.flush()
            if rest and not self._whole:
                self.events.put_nowait(rest)
        first = None if self.first_token_at is None else self.first_token_at - self.created
        self._trace.answered(
            Answer(
                len(self.prompt_ids),
                len(self.generated),
                self.created,
                self.first_token_at,
                now,
                shares_prompt=self.twin_of is not None,
            )
        )
        self.finished = Finished(
            self._text.text,
            reason,
            len(self.prompt_ids),
            len(self.generated),
            first,
            now - self.created,
        )
        self.events.put_nowait(self.finished)

    def fail(self, error: BaseException) -> None:
        if self.finished is None:
            self.error = error
            self.finished = Finished(
                self._text.text, "error", len(self.prompt_ids), len(self.generated), None, 0.0
            )
            self.events.put_nowait(error)

    def stream(self, joined: bool = True) -> AsyncIterator[str | Finished]:
        """Text groups (every delta ready when the client reads, joined; `joined=False`: each
        token's delta on its own), then the Finished. Raises the error when the sequence
        failed."""
        return _read(self, joined)

    async def result(self) -> Finished:
        self._whole = True  # one wake-up at the end, not one per token
        async for event in self.stream():
            if isinstance(event, Finished):
                return event
        raise RuntimeError("a sequence ended without finishing")  # unreachable by construction


async def _read(seq: Sequence, joined: bool) -> AsyncIterator[str | Finished]:
    """`Sequence.stream`: its events as its client reads them."""
    while True:
        event: Event | None = await seq.events.get()
        parts: list[str] = []
        while isinstance(event, (str, _Pending)):
            parts.extend(_texts(seq, event, joined))
            if seq.events.empty():
                event = None
                break
            event = seq.events.get_nowait()
        if joined and parts:
            yield "".join(parts)
        elif not joined:
            for part in parts:
                yield part
        if event is None:
            continue
        if isinstance(event, BaseException):
            raise event
        yield event
        return


def _texts(seq: Sequence, event: str | _Pending, joined: bool) -> list[str]:
    """An event's text: itself, or the tokens appended since the last read, decoded now
    (together, or each token's on its own)."""
    if isinstance(event, str):
        return [event]
    seq._pending = False
    if joined:
        delta = seq._text.advance()
        return [delta] if delta else []
    return seq._text.advance_each()


def twins(
    prompt_ids: list[int],
    params: list[SamplingParams],
    constraints: list[Constraint | None],
    tokenizer: Tokenizer,
    eos_id: int | None,
    context_length: int,
) -> list[Sequence]:
    """One sequence a `params`, all of one prompt: the first the others' twin (whose prefill
    they share when they join with it)."""
    seqs: list[Sequence] = []
    for p, constraint in zip(params, constraints, strict=True):
        seq = Sequence(prompt_ids, p, tokenizer, eos_id, context_length, constraint)
        seq.twin_of = seqs[0] if seqs else None
        seqs.append(seq)
    return seqs
