"""The batch a decoder runs: its rows in order (the running sequences, and finished ones not yet
compacted away), the sequences still generating, and the KV store that holds their cache; how
newcomers take rows, and how the finished and the cancelled leave."""

from __future__ import annotations

import time
from collections.abc import Sequence

from inferd.config.model import GenerationConfig
from inferd.generation.kvstore import KVStore
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.observer import (
    GenerationFinished,
    GenerationStep,
    Observer,
    notify,
)


class RunningBatch:
    def __init__(
        self,
        kv: KVStore,
        config: GenerationConfig,
        observer: Observer,
        model: str,
        version: str = "",
    ) -> None:
        self.kv = kv
        self._static = config.scheduling == "static"
        self._max_kv_tokens = config.max_kv_tokens
        self._observer = observer
        self._model, self._version = model, version
        self.running: list[Seq] = []
        """The sequences still generating."""
        self.rows: list[Seq] = []
        """The batch's rows in order: the running, and finished ones not yet compacted away."""

    def report(self, kind: str, rows: int, seconds: Sequence[float], waiting: int) -> None:
        """A step of `kind` ("prefill", "decode"; "idle" when none runs) over `rows` rows,
        with `waiting` generations waiting for a row."""
        step = GenerationStep(
            self._model,
            self._version,
            kind,
            rows,
            seconds,
            len(self.running),
            waiting,
            self.kv.held_tokens,
            self._max_kv_tokens,
        )
        notify(self._observer, step)

    def slots(self, count: int) -> list[int]:
        """The rows `count` newcomers take: those of finished sequences first, then new rows at
        the end."""
        rows = self.rows
        free = [i for i, s in enumerate(rows) if s.done]
        return (free + list(range(len(rows), len(rows) + count)))[:count]

    def join(self, slots: list[int], seqs: list[Seq]) -> None:
        """Puts `seqs` (prefilled) in their `slots`, running."""
        rows = self.rows
        for slot, seq in zip(slots, seqs, strict=True):
            if slot < len(rows):
                rows[slot] = seq
            else:
                rows.append(seq)
        self.running = [*self.running, *seqs]

    def clear(self) -> None:
        """Forgets every row and the cache (the sequences are answered elsewhere)."""
        self.running, self.rows = [], []
        self.kv.clear()

    def retire(self) -> None:
        """Answers what finished (or was cancelled). The KV store compacts the batch when it
        chooses to (rows it keeps stay free slots for the next admissions); under static
        scheduling only when all of it is done."""
        now = time.perf_counter()
        still = []
        for seq in self.running:
            if seq.cancelled and not seq.done:
                seq.finish("cancelled", now)
            if seq.done:
                finished = seq.finished
                if finished is not None:
                    notify(
                        self._observer,
                        GenerationFinished(
                            self._model,
                            finished.reason,
                            finished.prompt_tokens,
                            finished.completion_tokens,
                        ),
                    )
            else:
                still.append(seq)
        self.running = still
        if len(still) == len(self.rows):
            return
        if not still:
            self.clear()
            return
        if self._static:
            return  # the whole batch runs until its last sequence ends
        order = self.kv.compact([i for i, s in enumerate(self.rows) if not s.done])
        if order is not None:
            self.rows = [self.rows[i] for i in order]


def shared_prefill(admitted: list[Seq]) -> tuple[list[Seq], list[int]]:
    """`admitted` in prefill order: those whose prompt is computed first, then the twins of
    one of them (which take a copy of its cache: `KVStore.fork`); and for each, the prefill
    row its next token is drawn from."""
    present = {id(s) for s in admitted}
    twins = [s for s in admitted if s.twin_of is not None and id(s.twin_of) in present]
    twin_ids = {id(s) for s in twins}
    leaders = [s for s in admitted if id(s) not in twin_ids]
    row = {id(s): i for i, s in enumerate(leaders)}
    source = list(range(len(leaders)))
    for twin in twins:
        assert twin.twin_of is not None
        source.append(row[id(twin.twin_of)])
    return [*leaders, *twins], source
