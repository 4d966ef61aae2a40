"""Iteration-level (continuous) batching for a decoder.

At every step the scheduler admits waiting requests (a batched prefill of their prompts, whose
KV rows then join the running batch), runs one decode step for every running sequence, samples
each sequence's next token, and retires the finished and the cancelled at once, freeing their
KV rows. Admission is first come, first served, under `max_running` sequences and a KV budget:
the tokens every admitted sequence may come to hold (prompt + max new tokens) stay within
`max_kv_tokens`, and so does what the KV store holds right after the join (padding
included). The cache itself lives in a KV store (inferd.generation.kvstore), one per decoder
layout: concatenated past + new, or written in place.

Each row has its own positions and its own length (an attention mask, or `seqlens_k`), so a
sequence's output never depends on what else shares the batch. `scheduling: static` is the
conventional baseline the benchmark compares against: a batch is formed from the waiting
requests, closed to newcomers, and runs until its longest sequence ends; a finished sequence
is answered at once, but its row keeps being computed (and discarded) until the batch ends, as
with a padded `generate()` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from inferd.config.model import GenerationConfig
from inferd.errors import (
    InferdError,
    InputTooLongError,
    InternalError,
    QueueFullError,
    UnavailableError,
)
from inferd.generation.decoder import (
    DRAW_UNIFORM,
    LOGITS,
    NEXT_IDS,
    TOKENS,
    TOP_IDS,
    TOP_LOGITS,
    DecoderShape,
)
from inferd.generation.kvstore import kv_store
from inferd.generation.params import SamplingParams, check_prompt
from inferd.generation.sampling import draw_inputs, fits_ranked, sample_batch, sample_ranked
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.observer import Observer, notify
from inferd.runtime.protocol import Array, Bound, DeviceMemory, Repeat

log = logging.getLogger(__name__)

GREEDY = SamplingParams(1, temperature=0.0)
"""What a row that draws nothing (finished, cancelled) is given for the graph's draw."""


class RunStep(Protocol):
    """Runs a step (or a `Repeat` of it) on a runtime thread (inferd.runtime.pool)."""

    def __call__(
        self,
        feeds: Bound,
        output_names: Sequence[str],
        into: dict[str, str],
        repeat: Repeat | None = None,
    ) -> Awaitable[dict[str, Array]]: ...


class RunNow(Protocol):
    """Runs a step (or a `Repeat` of it) on the calling thread when the runtime is free now;
    None, having run nothing, when it is not."""

    def __call__(
        self,
        feeds: Bound,
        output_names: Sequence[str],
        into: dict[str, str],
        repeat: Repeat | None = None,
    ) -> dict[str, Array] | None: ...


class Scheduler:
    def __init__(
        self,
        run: RunStep,
        shape: DecoderShape,
        tokenizer: Tokenizer,
        config: GenerationConfig,
        eos_id: int | None,
        pad_id: int,
        *,
        model: str = "",
        version: str = "",
        observer: Observer | None = None,
        run_now: RunNow | None = None,
        memory: DeviceMemory | None = None,
    ) -> None:
        """`memory`: where an in-place KV cache lives (the runtime instance's own, or the
        host's when None)."""
        self._run = run
        self._run_now = run_now
        self._held_loop = False
        """Whether the last step ran on the event loop's thread (the loop gets a turn)."""
        self._decode_s: float | None = None
        """The last decode steps' run time (a moving average; None before the first, which
        runs on a runtime thread): under `inline_step_ms`, a step runs on the event loop's
        thread (`run_now`)."""
        self._prefill_token_s: float | None = None
        """The last prefills' run time per token they computed (rows x their longest prompt;
        a moving average, None before the first): a prefill expected under `inline_step_ms`
        runs on the event loop's thread too."""
        self._shape = shape
        self._tokenizer = tokenizer
        self._config = config
        self._eos = eos_id
        self._pad = pad_id
        self._model, self._version = model, version
        self._observer = observer or Observer()
        self._waiting: deque[Seq] = deque()
        self._running: list[Seq] = []
        """The sequences still generating."""
        self._rows: list[Seq] = []
        """The batch's rows in order: the running, and finished ones not yet compacted away."""
        self._kv = kv_store(shape, config, memory)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # -- the client side ---------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_tokens(self) -> int:
        return self._kv.held_tokens

    @property
    def capacity(self) -> int:
        """The generations its waiting line holds at most (besides those running: how many
        run depends on the KV cache)."""
        return self._config.max_waiting

    @property
    def saturated(self) -> bool:
        """Whether one more generation would be refused now for a full waiting line."""
        return len(self._waiting) >= self._config.max_waiting

    def refuse_when_full(self) -> None:
        if self.saturated:
            raise QueueFullError(
                f"{len(self._waiting)} generations already wait for a slot; retry later"
            )

    def encode(self, prompt: str) -> list[int]:
        return list(self._tokenizer.encode(prompt).ids)

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Seq:
        """Queues a sequence (4002 when it cannot fit, 4290 when the queue is full)."""
        if self._closing:
            raise UnavailableError("the model is shutting down; not taking new generations")
        config = self._config
        check_prompt(len(prompt_ids), config.context_length)
        if len(prompt_ids) + 1 > config.max_kv_tokens:
            raise InputTooLongError(
                f"the prompt has {len(prompt_ids)} tokens; the KV cache holds "
                f"{config.max_kv_tokens}"
            )
        room = min(
            params.max_new_tokens,
            config.context_length - len(prompt_ids),
            config.max_kv_tokens - len(prompt_ids),
        )
        if room < params.max_new_tokens:  # ends with finish_reason "length" at the window
            params = SamplingParams(**{**params.__dict__, "max_new_tokens": room})
        self.refuse_when_full()
        seq = Seq(prompt_ids, params, self._tokenizer, self._eos, config.context_length)
        self._waiting.append(seq)
        self._idle.clear()
        self._wake.set()
        return seq

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="inferd-generate")

    async def drain(self, timeout_s: float) -> bool:
        """Stops taking new work; waits for the admitted sequences to finish."""
        self._closing = True
        self._wake.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self._closing = True
        for seq in [*self._waiting, *self._running]:
            seq.fail(UnavailableError("the model stopped: unloaded, or the server is stopping"))
        self._waiting.clear()
        self._running, self._rows = [], []
        self._kv.clear()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self._drop_cancelled_waiting()
            if not self._running and not self._waiting:
                self._rows = []
                self._kv.clear()
                self._report("idle", 0, ())
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted = self._choose()
            self._held_loop = False
            if admitted:
                await self._guarded(self._prefill, admitted)
                self._retire()
                if self._held_loop:  # ran on the loop's thread: its other work goes first
                    await asyncio.sleep(0)
                    self._held_loop = False
            if self._running:
                await self._guarded(self._decode, self._rows)
                self._retire()
            if self._held_loop or not (admitted or self._running):
                # the loop's other work, and the streams, between steps; a step on a runtime
                # thread lets them run while it computes
                await asyncio.sleep(0)
                if self._held_loop and self._room():
                    # one more turn: a request read in the turn above is a new task that
                    # first runs in the next (its handler, to `submit`), while this loop,
                    # queued before it, would start the next steps first; so it joins at the
                    # next step, not one step or block later (the demo decoder at 16 in
                    # flight: 0.6 more rows a step, a request's time outside the batch
                    # 21 -> 9 ms: benchmarks/ab_bench.py serve-loop)
                    await asyncio.sleep(0)

    def _room(self) -> bool:
        """Whether a generation arriving now would find a free row with none waiting ahead of
        it (the KV budget aside)."""
        return not self._waiting and len(self._running) < self._config.max_running

    def _choose(self) -> list[Seq]:
        config = self._config
        static = config.scheduling == "static"
        if static and self._running:
            return []
        limit = config.max_running if static else config.prefill_chunk
        chosen: list[Seq] = []
        reserved = sum(s.budget for s in self._running)
        longest = 0
        while self._waiting and len(chosen) < limit:
            if len(self._running) + len(chosen) >= config.max_running:
                break
            seq = self._waiting[0]
            width = max(longest, len(seq.prompt_ids))
            rows = max(len(self._rows), len(self._running) + len(chosen) + 1)
            held = self._kv.footprint(rows, width)
            if reserved + seq.budget > config.max_kv_tokens or held > config.max_kv_tokens:
                break  # first come, first served: the head waits for room
            self._waiting.popleft()
            chosen.append(seq)
            reserved += seq.budget
            longest = width
        return chosen

    async def _guarded(self, step: Callable[[list[Seq]], Awaitable[None]], seqs: list[Seq]) -> None:
        """A failing step fails its sequences (with a stable code), never the scheduler."""
        try:
            await step(seqs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("generation step failed", extra={"model": self._model})
            error = (
                exc
                if isinstance(exc, InferdError)
                else InternalError(f"the generation step failed: {type(exc).__name__}")
            )
            for seq in [*seqs, *self._rows]:
                seq.fail(error)
            self._rows, self._running = [], []
            self._kv.clear()

    async def _prefill(self, seqs: list[Seq]) -> None:
        # new sequences take the rows of finished ones first, then new rows at the end
        free = [i for i, s in enumerate(self._rows) if s.done]
        slots = (free + list(range(len(self._rows), len(self._rows) + len(seqs))))[: len(seqs)]
        step = self._kv.prefill([s.prompt_ids for s in seqs], slots, self._pad)
        ranked = step.last_aligned and self._ranked(seqs)
        names = self._shape.ranked_names if ranked else self._shape.output_names
        computed = int(step.feeds[TOKENS].size)  # rows x the longest prompt
        per_token = self._prefill_token_s
        expected = None if per_token is None else per_token * computed
        started = time.perf_counter()
        out = await self._step(step.inputs, names, step.into, expected)
        now = time.perf_counter()
        self._prefill_token_s = _moving(per_token, (now - started) / computed)
        if ranked:
            self._kv.take_prefill(step, out)
            tokens = self._sample_ranked(out, slice(None), seqs)
        else:
            tokens = self._sample(self._kv.after_prefill(step, out), seqs)
        for slot, seq in zip(slots, seqs, strict=True):
            if slot < len(self._rows):
                self._rows[slot] = seq
            else:
                self._rows.append(seq)
        self._running = [*self._running, *seqs]
        firsts = []
        for seq, token in zip(seqs, tokens, strict=True):
            seq.cached = len(seq.prompt_ids)
            seq.accept(token, now)
            firsts.append(now - seq.created)
        notify(self._observer.on_generation_tokens, self._model, firsts, ())
        self._report("prefill", len(seqs), (now - started,))

    async def _decode(self, rows: list[Seq]) -> None:
        live = [r for r, s in enumerate(rows) if not (s.done or s.cancelled)]
        if self._blocks(rows, live):
            await self._decode_block(rows)
            return
        tokens = np.array(
            [s.last_token if s.generated else self._pad for s in rows], dtype=np.int64
        )
        # a finished row left in the batch may run past the window: its output is unused, but
        # its position must stay a valid index
        last = self._config.context_length - 1
        positions = np.array([min(s.cached, last) for s in rows], dtype=np.int64)
        ranked = self._ranked([rows[r] for r in live])
        in_graph = ranked and self._draws_in_graph()
        if in_graph:
            names = [NEXT_IDS, *self._shape.present_names]
        else:
            names = self._shape.ranked_names if ranked else self._shape.output_names
        step = self._kv.decode(tokens, positions)
        if in_graph:
            self._set_draw(step.feeds, rows, set(live), 1)
        started = time.perf_counter()
        out = await self._step(step.inputs, names, step.into, self._decode_s)
        now = time.perf_counter()
        self._learn_step(now - started)
        self._kv.after_decode(step, out)
        for seq in rows:
            seq.cached += 1
        live = [r for r in live if not rows[r].cancelled]  # (a client may have left meanwhile)
        gaps = []
        if live:
            seqs = [rows[r] for r in live]
            if in_graph:
                chosen = out[NEXT_IDS][live, 0].tolist()
            elif ranked:
                chosen = self._sample_ranked(out, live, seqs)
            else:
                chosen = self._sample(out[LOGITS][live, -1, :], seqs)
            for seq, token in zip(seqs, chosen, strict=True):
                since = seq.accept(token, now)
                if since is not None:
                    gaps.append(since)
        notify(self._observer.on_generation_tokens, self._model, (), gaps)
        self._report("decode", len(rows), (now - started,))

    async def _step(
        self,
        feeds: Bound,
        names: Sequence[str],
        into: dict[str, str],
        expected_s: float | None,
        repeat: Repeat | None = None,
    ) -> dict[str, Array]:
        """A prefill, or a decode step (or a block of them, `repeat`): on the event loop's
        thread when it is expected to take (`expected_s`, a step's for a block) under
        `inline_step_ms` and the runtime is free (the loop then gets a turn after the
        scheduler's work), else on a runtime thread. The caller times it."""
        out = None
        quick = expected_s is not None and expected_s * 1000 < self._config.inline_step_ms
        if quick and self._run_now is not None:
            out = self._run_now(feeds, names, into, repeat=repeat)
        inline = out is not None
        if out is None:
            out = await self._run(feeds, names, into, repeat=repeat)
        self._held_loop = self._held_loop or inline
        return out

    def _learn_step(self, seconds: float) -> None:
        """A decode step's time, into the moving average that `_step` chooses by."""
        self._decode_s = _moving(self._decode_s, seconds)

    def _blocks(self, rows: list[Seq], live: list[int]) -> bool:
        """Whether the next steps draw in the graph, each step's tokens fed straight to the
        next (`_decode_block`): a drawing in-place decoder, every row live and drawing within
        the graph's candidates."""
        return (
            self._draws_in_graph()
            and self._kv.advances
            and len(live) == len(rows)
            and self._ranked(rows)
        )

    def _draws_in_graph(self) -> bool:
        """Whether ranked draws are the graph's (inferd.prep.graph_draw), not Python's."""
        return self._config.block_steps > 0 and self._shape.draws

    def _block_length(self, rows: list[Seq]) -> int:
        """Steps in the next block: at most `block_steps`; none past a sequence's last token
        (so no row outgrows its window); and, when steps run on the loop's thread, only as
        many as fit in `inline_step_ms` (a request waiting for a row waits for the block)."""
        config = self._config
        steps = min(config.block_steps, *(s.params.max_new_tokens - len(s.generated) for s in rows))
        if self._decode_s is not None and self._decode_s * 1000 < config.inline_step_ms:
            steps = min(steps, int(config.inline_step_ms / 1000 / self._decode_s))
        return max(1, steps)

    async def _decode_block(self, rows: list[Seq]) -> None:
        """Steps back to back in one call to the runtime (`Repeat`: one handoff to its thread
        a block, the steps as close together as bare ONNX Runtime's), each drawing in the
        graph and writing its tokens into its own `input_ids`, which the next step reads (the
        KV store moves the positions on, on the thread that runs the steps); then the tokens are
        taken, row by row, each at the time its step ended. A row that ends within the block
        (its EOS, a stop sequence) keeps computing to the block's end; what it draws after
        its end is dropped. A block on a runtime thread ends early when a generation arrives
        while there is a free row (it joins after the step, not after the block). Draws use
        each row's own generator, one number a step, as the single-step path does (a block
        that ends early gives back the numbers it did not use): a seed gives the same text
        either way."""
        steps = self._block_length(rows)
        tokens = np.array([s.last_token for s in rows], dtype=np.int64)
        step = self._kv.decode(tokens, np.array([s.cached for s in rows], dtype=np.int64))
        feeds = step.feeds
        uniforms = self._set_draw(feeds, rows, set(range(len(rows))), steps)
        into = {**step.into, NEXT_IDS: TOKENS}
        drawn = np.empty((steps, len(rows)), dtype=np.int64)
        ended: list[float] = []
        # a newcomer may join at the next step: none waits now (a head that waits was not
        # admitted for want of room, and those behind it queue after it), and a row is free
        joinable = self._room()

        def between(k: int) -> bool:  # on the thread that runs the steps, after step k
            ended.append(time.perf_counter())
            drawn[k] = self._kv.drawn(step)
            self._kv.advance(step)
            if k + 1 == steps or (joinable and self._waiting):
                return False
            feeds[DRAW_UNIFORM][:] = uniforms[k + 1]
            return True

        started = time.perf_counter()
        await self._step(step.inputs, (), into, self._decode_s, Repeat(steps, between))
        done = len(ended)
        self._learn_step((ended[-1] - started) / done)  # (a block may end early)
        if done < steps:
            for seq in rows:  # the numbers drawn for the steps not run, given back
                if not seq.params.greedy:
                    seq.give_back(steps - done)
        self._report("decode", len(rows), np.diff([started, *ended]).tolist())
        gaps: list[float] = []
        for seq, tokens in zip(rows, drawn[:done].T.tolist(), strict=True):
            seq.cached += done
            if not seq.cancelled:  # (one that ends within the block takes its tokens up to it)
                gaps += seq.accept_many(tokens, ended)
        notify(self._observer.on_generation_tokens, self._model, (), gaps)

    def _retire(self) -> None:
        """Answers what finished (or was cancelled). The KV store compacts the batch when it
        chooses to (rows it keeps stay free slots for the next admissions); under static
        scheduling only when all of it is done."""
        now = time.perf_counter()
        still = []
        for seq in self._running:
            if seq.cancelled and not seq.done:
                seq.finish("cancelled", now)
            if seq.done:
                finished = seq.finished
                if finished is not None:
                    notify(
                        self._observer.on_generation_finished,
                        self._model,
                        finished.reason,
                        finished.prompt_tokens,
                        finished.completion_tokens,
                    )
            else:
                still.append(seq)
        self._running = still
        if len(still) == len(self._rows):
            return
        if not still:
            self._rows = []
            self._kv.clear()
            return
        if self._config.scheduling == "static":
            return  # the whole batch runs until its last sequence ends
        order = self._kv.compact([i for i, s in enumerate(self._rows) if not s.done])
        if order is not None:
            self._rows = [self._rows[i] for i in order]

    def _drop_cancelled_waiting(self) -> None:
        if any(s.cancelled for s in self._waiting):
            now = time.perf_counter()
            for seq in self._waiting:
                if seq.cancelled:
                    seq.finish("cancelled", now)
            self._waiting = deque(s for s in self._waiting if not s.cancelled)

    def _set_draw(
        self, feeds: dict[str, Array], rows: list[Seq], live: set[int], steps: int
    ) -> Array:
        """Puts the graph's draw inputs for `rows` in `feeds` (rows not `live`: greedy, drawing
        nothing); returns the uniform numbers of `steps` steps [steps, rows], the first step's
        fed: one a step from each live drawing row's own generator, as Python's draw takes."""
        uniforms = np.zeros((steps, len(rows)))
        params = []
        for r, seq in enumerate(rows):
            if r in live and not seq.params.greedy:
                uniforms[:, r] = seq.rng.random(steps)
            params.append(seq.params if r in live else GREEDY)
        # in place: every store's decode step holds the draw inputs (greedy), and the in-place
        # store's are its own buffers, which a kept binding reads
        for name, values in draw_inputs(params, uniforms[0], self._shape.top_width).items():
            feeds[name][...] = values
        return uniforms

    def _ranked(self, seqs: list[Seq]) -> bool:
        """Whether the next tokens of `seqs` can all be drawn from the graph's ranked
        candidates (a decoder exported by inferd), not the whole vocabulary's logits."""
        width = self._shape.top_width
        return width > 0 and all(fits_ranked(s.params, width) for s in seqs)

    def _sample_ranked(
        self, out: dict[str, Array], rows: list[int] | slice, seqs: list[Seq]
    ) -> list[int]:
        return sample_ranked(
            out[TOP_LOGITS][rows],
            out[TOP_IDS][rows],
            [s.params for s in seqs],
            [s.rng for s in seqs],
        )

    def _sample(self, logits: Array, seqs: list[Seq]) -> list[int]:
        return sample_batch(
            logits,
            [s.params for s in seqs],
            [s.rng for s in seqs],
            [s.seen for s in seqs],
        )

    def _report(self, kind: str, rows: int, seconds: Sequence[float]) -> None:
        notify(
            self._observer.on_generation_step,
            self._model,
            self._version,
            kind,
            rows,
            seconds,
            len(self._running),
            len(self._waiting),
            self._kv.held_tokens,
            self._config.max_kv_tokens,
        )


def _moving(average: float | None, value: float) -> float:
    """A run time's moving average (the value itself when there is none yet)."""
    return value if average is None else 0.8 * average + 0.2 * value
