"""Constrained decoding with llguidance: a generator's grammars compiled and cached, each
constrained sequence's matcher, and the token masks a step's draw applies.

Why llguidance: it computes a mask over the whole vocabulary from a lazy lexer and an Earley
parser, with no per-schema precompilation over the vocabulary (a schema compiles in about a
millisecond whatever its strings' lengths), takes JSON schemas (recursive ones too), regexes
and Lark grammars, bounds its own work with fuel limits (a pathological schema fails to
compile or errs, it does not hang), releases the GIL while it computes, and needs neither
torch nor a GPU; onnxruntime-genai, vLLM and llama.cpp use it too. Its price is the mask: a
mask and its token take about 11-13 us on the benchmark decoders' 4,096-token vocabulary
(`python benchmarks/generate_bench.py constrained` measures it, and what it costs served).

On a decoder exported by inferd, a constrained row's mask is the graph's `draw_bias` and the
row draws in the graph (inferd.generation.bias); elsewhere the draw applies it in Python
(inferd.generation.masks).

A grammar compiles on a compile thread, never on the event loop, within `COMPILE_TIMEOUT_S`
(4006 past it); what compiled, and what was refused, is cached under the grammar's hash, at
most `CACHE_GRAMMARS` of them and `CACHE_BYTES` of grammar text, oldest out first. A
sequence's matcher is a copy of the compiled one (copying is much cheaper than compiling).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import llguidance
import numpy as np
from tokenizers import Tokenizer

from inferd.errors import InternalError, InvalidGrammarError, InvalidInputError
from inferd.generation.grammar import GrammarRequest

COMPILE_TIMEOUT_S = 2.0
COMPILE_THREADS = 2
CACHE_GRAMMARS = 256
CACHE_BYTES = 64 * 1024 * 1024
MAX_ERROR_CHARS = 400
NARROW_WORDS = 16
"""Masks with at most this many nonzero 32-bit words are looked at for forced tokens."""

LIMITS = llguidance.LLParserLimits(verbose_errors=False)
"""llguidance's own bounds (lexer fuel, Earley items a step, grammar size), its defaults;
errors without the parser's state (they reach the client)."""

Compiled = llguidance.LLMatcher | InvalidGrammarError
"""A grammar compiled, or why it was refused."""


class Constraint:
    """One sequence's matcher: the tokens its answer may take next, and whether it is whole."""

    def __init__(self, matcher: llguidance.LLMatcher, eos: int, words: int) -> None:
        self._matcher = matcher
        self._eos = eos
        self.words = words
        """32-bit words in its token mask."""
        self.broken: InvalidGrammarError | None = None
        """Why the grammar failed while the answer was drawn (its fuel spent on a hard
        state): its mask then allows only the end, and the answer fails with this."""
        self.least = 0
        """The fewest tokens its grammar must force for them to be queued (0: never;
        inferd.generation.forced)."""
        self._queued: list[int] = []
        self._settled = True
        """Whether `_queued` is known for the grammar's state (looked for when asked)."""
        self._mask: np.ndarray[Any, Any] | None = None
        """The grammar's mask in its state, once computed."""

    @property
    def queued(self) -> list[int]:
        """The tokens its grammar forces next (a JSON object's next key with its quotes and
        colon, as llguidance tokenizes it), when at least `least`: the answer takes these,
        whether one a step (its mask then allows each alone, at no parser's cost) or
        together in one step (`take`). Looked for once a token is taken and no more are
        queued, where the grammar allows few tokens (`NARROW_WORDS`): forced tokens narrow
        the mask to their own prefixes, and the look costs more than the mask."""
        self.settle()
        return self._queued

    def settle(self) -> None:
        """Looks for the forced tokens of the grammar's state, once a state."""
        if self._settled:
            return
        self._settled = True
        matcher = self._matcher
        looked = self.least and not (matcher.is_stopped() or matcher.is_error())
        if looked and np.count_nonzero(self._full_mask()) <= NARROW_WORDS:
            forced = matcher.compute_ff_tokens()
            if len(forced) >= self.least:
                self._queued = list(forced)

    def known_queue(self) -> list[int]:
        """`queued` as far as it is known without looking (none until it is looked for)."""
        return self._queued if self._settled else []

    def ends(self, token: int) -> bool:
        """Whether `token` ends the answer (the grammar allows it only where the answer is
        whole)."""
        return token == self._eos

    def consume(self, token: int) -> bool:
        """Takes the drawn token; returns whether the answer is now whole and can take no
        more (a closed JSON object, a choice made). InternalError for a token its mask did
        not allow (a bug, never the client's)."""
        queued = self.queued
        if queued and token != queued.pop(0):
            raise InternalError("a constrained draw left the tokens its grammar forces")
        matcher = self._matcher
        if not matcher.consume_token(token):
            raise InternalError(f"a constrained draw broke its grammar: {matcher.get_error()}")
        self._moved(queued)
        return bool(matcher.is_stopped())

    def start(self, least: int) -> None:
        """Queues forced tokens from now on, `least` of them at the fewest (0: never), those
        of the answer's start too."""
        self.least = least
        self._settled = False

    def take(self, count: int | None = None) -> bool:
        """`consume` of the first `count` queued tokens (all by default), together; returns
        whether the answer is now whole."""
        queued = self.queued
        taking = queued if count is None else queued[:count]
        self._queued = queued[len(taking) :]
        matcher = self._matcher
        if not matcher.consume_tokens(taking):
            raise InternalError(f"forced tokens broke their grammar: {matcher.get_error()}")
        self._moved(self._queued)
        return bool(matcher.is_stopped())

    def mask(self) -> np.ndarray[Any, Any]:
        """The tokens allowed next (int32 words, a bit a token): the next queued token alone
        when there is one."""
        queued = self.queued
        if queued:
            row = np.zeros(self.words, dtype=np.int32)
            row.view(np.uint32)[queued[0] >> 5] = 1 << (queued[0] & 31)
            return row
        return self._full_mask()

    def _moved(self, queued: list[int]) -> None:
        """After tokens are taken: the old mask is gone, and once no token is queued the
        next are looked for (when asked)."""
        self._mask = None
        if not queued:
            self._settled = False

    def _full_mask(self) -> np.ndarray[Any, Any]:
        if self._mask is None:
            row = np.zeros(self.words, dtype=np.int32)
            self._matcher.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)
            self._computed(row)
        return self._mask  # type: ignore[return-value]

    def _computed(self, row: np.ndarray[Any, Any]) -> None:
        matcher = self._matcher
        if self.broken is None and matcher.is_error():
            self.broken = InvalidGrammarError(
                f"the answer's grammar failed while it was drawn: {_reason(matcher.get_error())}"
            )
        self._mask = row


class Grammars:
    """A generator's grammar compiler and cache."""

    def __init__(self, tokenizer: Tokenizer, eos_id: int | None) -> None:
        self._tokenizer = tokenizer
        self._eos_id = eos_id
        self._ll: llguidance.LLTokenizer | None = None
        self._ll_lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[Compiled, int]] = OrderedDict()
        """Compiled grammars (or their refusals) and their grammar's size, by its hash."""
        self._cached_bytes = 0
        self._compiling: dict[str, Future[Compiled]] = {}
        """Compiles running, by their grammar's hash."""
        self._cache_lock = threading.Lock()
        """The cache is written on compile threads and read on the event loop."""
        self._pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="inferd-grammar")

    async def constraint(self, request: GrammarRequest) -> Constraint:
        """A fresh matcher for `request` (4006 when it does not compile, or not in time)."""
        key = request.key
        with self._cache_lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        tokenizer = self._ll
        if tokenizer is None:
            tokenizer = await asyncio.wrap_future(self._pool.submit(self._llt))
        if cached is None:
            compiling = self._compiling.get(key)
            if compiling is None:  # (one compile a grammar, whoever else asks meanwhile)
                compiling = self._pool.submit(self._compile, request)
                self._compiling[key] = compiling
                size = len(request.source)
                compiling.add_done_callback(lambda done: self._compiled(key, done, size))
            try:
                compiled = await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(compiling)), COMPILE_TIMEOUT_S
                )
            except TimeoutError:  # (a late result is still cached: `_compiled`)
                raise InvalidGrammarError(
                    f"{request.field} did not compile within {COMPILE_TIMEOUT_S:g} s",
                    param=request.field,
                ) from None
        else:
            compiled = cached[0]
        if isinstance(compiled, InvalidGrammarError):
            raise InvalidGrammarError(compiled.message, param=compiled.param)
        return Constraint(compiled.deep_copy(), tokenizer.eos_token, _words(tokenizer))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compiled(self, key: str, done: Future[Compiled], size: int) -> None:
        """A compile's end, on its thread: kept in the cache (under the lock), also when the
        request that asked for it stopped waiting."""
        with self._cache_lock:
            self._compiling.pop(key, None)
            if not done.cancelled() and done.exception() is None:
                self._keep(key, done.result(), size)

    def _llt(self) -> llguidance.LLTokenizer:
        """The model's tokenizer as llguidance reads it (made once, on a compile thread: a
        large vocabulary takes a second); 4004 for one it cannot read (no decoder)."""
        with self._ll_lock:
            if self._ll is None:
                vocab = self._tokenizer.get_vocab_size(with_added_tokens=True)
                try:
                    self._ll = llguidance.LLTokenizer(
                        self._tokenizer.to_str(), n_vocab=vocab, eos_token=self._eos_id
                    )
                except ValueError as exc:
                    raise InvalidInputError(
                        f"this model cannot hold answers to a form: its tokenizer {exc}"
                    ) from None
            return self._ll

    def _compile(self, request: GrammarRequest) -> Compiled:
        """On a compile thread: the matcher at the grammar's start, or the refusal. Its first
        mask is computed too, so that a grammar that allows nothing (a `$ref` loop) is
        refused now, not at the first token."""
        tokenizer = self._llt()
        try:
            grammar = request.grammar()
        except InvalidGrammarError as refused:
            return refused
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=LIMITS)
        if matcher.is_error():
            return InvalidGrammarError(
                f"{request.field}: {_reason(matcher.get_error())}", param=request.field
            )
        mask = np.zeros(_words(tokenizer), dtype=np.int32)
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if matcher.is_error() or not mask.any():  # (a `$ref` that refers only to itself)
            return InvalidGrammarError(
                f"{request.field} allows no answer at all: nothing satisfies it",
                param=request.field,
            )
        return matcher

    def _keep(self, key: str, compiled: Compiled, size: int) -> None:
        if key in self._cache:  # (compiled twice at once)
            return
        self._cache[key] = (compiled, size)
        self._cached_bytes += size
        while len(self._cache) > CACHE_GRAMMARS or self._cached_bytes > CACHE_BYTES:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached_bytes -= dropped


def _reason(error: str) -> str:
    """llguidance's error, on one line, without its drawings of the source (the lines that
    point with `^`, the grammar's own lines)."""
    lines = [line.strip() for line in error.splitlines()]
    kept = [line for line in lines if line and not re.match(r"^(\^+|\d+ \|)", line)]
    return " ".join(kept)[:MAX_ERROR_CHARS]


def _words(tokenizer: llguidance.LLTokenizer) -> int:
    return (tokenizer.vocab_size + 31) // 32
