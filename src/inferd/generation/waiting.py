"""The generations waiting for a row, and which of them join the running batch next. A prompt
is refused when it cannot fit (its new tokens are bounded by the context window and the KV
cache), a generation when `max_waiting` already wait. Admission is first come, first served,
under `max_running` sequences and a KV budget: the tokens every admitted sequence may come to
hold (prompt + max new tokens) stay within `max_kv_tokens`, and so does what the KV store holds
right after the join (padding included). Under `scheduling: static` a batch is formed only when
none runs, of up to `max_running` sequences."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from inferd.config.model import GenerationConfig
from inferd.errors import InputTooLongError, QueueFullError, TooManyItemsError
from inferd.generation.kvstore import KVStore
from inferd.generation.params import SamplingParams, check_prompt
from inferd.generation.sequence import Sequence as Seq


class WaitingLine:
    def __init__(self, config: GenerationConfig, kv: KVStore) -> None:
        self._config = config
        self._kv = kv
        self._static = config.scheduling == "static"
        self._seqs: deque[Seq] = deque()

    def __len__(self) -> int:
        return len(self._seqs)

    def __iter__(self) -> Iterator[Seq]:
        return iter(self._seqs)

    @property
    def saturated(self) -> bool:
        """Whether one more generation would be refused now for a full waiting line."""
        return len(self._seqs) >= self._config.max_waiting

    def refuse_when_full(self, arriving: int = 1) -> None:
        """4290 unless `arriving` more fit in the line (4005 when they never could)."""
        if arriving > self._config.max_waiting:
            raise TooManyItemsError(
                f"{arriving} answers at once; this model's waiting line holds "
                f"{self._config.max_waiting}"
            )
        if len(self._seqs) + arriving > self._config.max_waiting:
            raise QueueFullError(
                f"{len(self._seqs)} generations already wait for a slot; retry later"
            )

    def fit(self, prompt_tokens: int, params: SamplingParams) -> SamplingParams:
        """`params` for a prompt of `prompt_tokens`, its new tokens bounded by the context
        window and the KV cache (it then ends with finish_reason "length" there); 4002 when
        the prompt cannot fit."""
        config = self._config
        check_prompt(prompt_tokens, config.context_length)
        if prompt_tokens + 1 > config.max_kv_tokens:
            raise InputTooLongError(
                f"the prompt has {prompt_tokens} tokens; the KV cache holds {config.max_kv_tokens}"
            )
        room = min(
            params.max_new_tokens,
            config.context_length - prompt_tokens,
            config.max_kv_tokens - prompt_tokens,
        )
        if room < params.max_new_tokens:
            return SamplingParams(**{**params.__dict__, "max_new_tokens": room})
        return params

    def append(self, seq: Seq) -> None:
        self._seqs.append(seq)

    def extend(self, seqs: list[Seq]) -> None:
        self._seqs.extend(seqs)

    def clear(self) -> None:
        self._seqs.clear()

    def drop_cancelled(self) -> None:
        """Answers the waiting sequences whose clients left, and forgets them."""
        if any(s.cancelled for s in self._seqs):
            now = time.perf_counter()
            for seq in self._seqs:
                if seq.cancelled:
                    seq.finish("cancelled", now)
            self._seqs = deque(s for s in self._seqs if not s.cancelled)

    def room(self, running: int) -> bool:
        """Whether a generation arriving now would find a free row with none waiting ahead of
        it (the KV budget aside), `running` sequences running."""
        return not self._seqs and running < self._config.max_running

    def admit(self, running: list[Seq], rows: int) -> list[Seq]:
        """Takes the sequences that join the batch now (`running` in it, over `rows` rows)."""
        config = self._config
        if self._static and running:
            return []
        limit = config.max_running if self._static else config.prefill_chunk
        waiting = self._seqs
        chosen: list[Seq] = []
        reserved = sum(s.budget for s in running)
        longest = 0
        prefilled = 0
        while waiting:
            seq = waiting[0]
            twin = seq.twin_of is not None and seq.twin_of in chosen  # (its prefill is shared)
            full = len(running) + len(chosen) >= config.max_running
            if full or (prefilled >= limit and not twin):
                break
            width = max(longest, len(seq.prompt_ids))
            held = self._kv.footprint(max(rows, len(running) + len(chosen) + 1), width)
            if reserved + seq.budget > config.max_kv_tokens or held > config.max_kv_tokens:
                break  # first come, first served: the head waits for room
            waiting.popleft()
            chosen.append(seq)
            prefilled += not twin
            reserved += seq.budget
            longest = width
        return chosen
