"""Iteration-level (continuous) batching for a decoder.

At every step the scheduler admits waiting requests (a batched prefill of their prompts, whose
KV rows then join the running batch), runs one decode step for every running sequence (or a
block of them), draws each sequence's next token, and retires the finished and the cancelled at
once, freeing their KV rows. Its parts: the waiting line and who joins next
(inferd.generation.waiting), the running batch and its KV store (inferd.generation.batch,
inferd.generation.kvstore: one store per decoder layout, concatenated past + new, or written
in place), the steps (inferd.generation.prefill, inferd.generation.decode, and a block of
decode steps: inferd.generation.block), how the tokens are drawn (inferd.generation.draw;
inferd.generation.forced for those a grammar forces), and where a step runs
(inferd.generation.step_runner).

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
from collections.abc import Awaitable, Callable

from tokenizers import Tokenizer

from inferd.config.model import GenerationConfig
from inferd.drain import ended_within
from inferd.errors import InferdError, InternalError, UnavailableError
from inferd.generation.batch import RunningBatch
from inferd.generation.block import decode_block
from inferd.generation.constraint import Constraint
from inferd.generation.decode import decode_step
from inferd.generation.decoder import DecoderShape
from inferd.generation.draw import Draw
from inferd.generation.forced import Forced
from inferd.generation.kv_layout import kv_store
from inferd.generation.params import SamplingParams
from inferd.generation.prefill import prefill
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.sequence import twins
from inferd.generation.slots import SlotKV
from inferd.generation.step_runner import RunNow, RunStep, StepRunner
from inferd.generation.waiting import WaitingLine
from inferd.observability.observer import GenerationTokens, Observer, notify
from inferd.runtime.protocol import DeviceMemory

STOPPED = "the model stopped: unloaded, or the server is stopping"
"""What the generations a stopped model held are answered (5030)."""
log = logging.getLogger(__name__)


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
        self._steps = StepRunner(run, run_now, config)
        self._draw = Draw(shape, config)
        self._tokenizer = tokenizer
        self._config = config
        self._context = config.context_length
        self._eos = eos_id
        self._pad = pad_id
        self._model, self._version = model, version
        self._observer = observer or Observer()
        self._kv = kv_store(shape, config, memory)
        self._forced = Forced(config.jump_forward, self._draw, self._kv, self._steps)
        self._waiting = WaitingLine(config, self._kv)
        self._batch = RunningBatch(self._kv, config, self._observer, model, version)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # -- the client side ---------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._batch.running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def waiting_requests(self) -> int:
        """Requests none of whose answers has joined the running batch yet."""
        return sum(1 for seq in self._waiting if seq.twin_of is None)

    @property
    def kv_tokens(self) -> int:
        return self._kv.held_tokens

    @property
    def kv_usage(self) -> tuple[int, int]:
        """How full the KV cache is, as admission sees it: the tokens the running sequences
        reserve (each its prompt and its most new tokens), and the most they may reserve
        (`max_kv_tokens`, or a slot store's rows times their positions where that is less).
        At the limit, no sequence more joins for want of cache."""
        reserved = sum(seq.budget for seq in self._batch.running)
        limit = self._config.max_kv_tokens
        if isinstance(self._kv, SlotKV):
            limit = min(limit, self._kv.max_rows * self._kv.capacity)
        return reserved, limit

    @property
    def capacity(self) -> int:
        """The generations its waiting line holds at most (besides those running)."""
        return self._config.max_waiting

    @property
    def saturated(self) -> bool:
        """Whether one more generation would be refused now for a full waiting line."""
        return self._waiting.saturated

    def refuse_when_full(self, arriving: int = 1) -> None:
        self._waiting.refuse_when_full(arriving)

    def encode(self, prompt: str) -> list[int]:
        return list(self._tokenizer.encode(prompt).ids)

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Seq:
        """`submit_twins` of one, unconstrained."""
        return self.submit_twins(prompt_ids, [params], [None])[0]

    def submit_twins(
        self,
        prompt_ids: list[int],
        params: list[SamplingParams],
        constraints: list[Constraint | None],
    ) -> list[Seq]:
        """Queues a sequence a `params`, answers to one prompt that share its prefill, each
        held to its constraint; 4002 when the prompt cannot fit, 4290 when the line is full."""
        if self._closing:
            raise UnavailableError("the model is shutting down; not taking new generations")
        fitted = [self._waiting.fit(len(prompt_ids), p) for p in params]
        self._waiting.refuse_when_full(len(fitted))
        seqs = twins(prompt_ids, fitted, constraints, self._tokenizer, self._eos, self._context)
        self._forced.hold(seqs)
        self._waiting.extend(seqs)
        self._idle.clear()
        self._wake.set()
        return seqs

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="inferd-generate")

    async def drain(self, timeout_s: float) -> bool:
        """Stops taking new work; waits for the admitted sequences to finish."""
        self._closing = True
        self._wake.set()
        return await ended_within(self._idle, timeout_s)

    async def close(self) -> None:
        self._closing = True
        for seq in [*self._waiting, *self._batch.running]:
            seq.fail(UnavailableError(STOPPED))
        self._waiting.clear()
        self._batch.clear()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._draw.close()

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        steps, batch = self._steps, self._batch
        while True:
            self._waiting.drop_cancelled()
            if not batch.running and not self._waiting:
                batch.clear()
                batch.report("idle", 0, (), len(self._waiting))
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted = self._waiting.admit(batch.running, len(batch.rows))
            steps.held_loop = False
            if admitted:
                await self._guarded(self._prefill, admitted)
                batch.retire()
                if steps.held_loop:  # ran on the loop's thread: its other work goes first
                    await asyncio.sleep(0)
                    steps.held_loop = False
            if batch.running:
                await self._guarded(self._decode, batch.rows)
                batch.retire()
            if steps.held_loop or not (admitted or batch.running):
                # the loop's other work, and the streams, between steps; a step on a runtime
                # thread lets them run while it computes
                await asyncio.sleep(0)
                if steps.held_loop and self._waiting.room(len(self._batch.running)):
                    # one more turn: a request read in the turn above is a new task that
                    # first runs in the next (its handler, to `submit`), while this loop,
                    # queued before it, would start the next steps first; so it joins at the
                    # next step, not one step or block later (the demo decoder at 16 in
                    # flight: 0.6 more rows a step, a request's time outside the batch
                    # 21 -> 9 ms: benchmarks/ab_bench.py serve-loop)
                    await asyncio.sleep(0)

    async def _guarded(self, step: Callable[[list[Seq]], Awaitable[None]], seqs: list[Seq]) -> None:
        """A failing step fails its sequences (with a stable code), never the scheduler; a step
        cut short by `close` fails them too (a prefill's are in neither the waiting line nor
        the batch: without this, their streams would wait for ever)."""
        try:
            await step(seqs)
        except asyncio.CancelledError:
            for seq in seqs:
                seq.fail(UnavailableError(STOPPED))
            raise
        except Exception as exc:
            log.exception("generation step failed", extra={"model": self._model})
            error = (
                exc
                if isinstance(exc, InferdError)
                else InternalError(f"the generation step failed: {type(exc).__name__}")
            )
            for seq in [*seqs, *self._batch.rows]:
                seq.fail(error)
            self._batch.clear()

    async def _prefill(self, admitted: list[Seq]) -> None:
        seconds, firsts = await prefill(
            admitted, self._batch, self._steps, self._draw, self._forced, self._pad
        )
        notify(self._observer, GenerationTokens(self._model, firsts, ()))
        self._batch.report("prefill", len(admitted), (seconds,), len(self._waiting))

    async def _decode(self, rows: list[Seq]) -> None:
        """One decode step for every row, its tokens drawn by the path `Draw` picks; or a
        block of them (`_decode_block`)."""
        seconds, gaps = await self._forced.jump(rows)  # (forced tokens first, at once)
        if seconds:
            self._batch.report("decode", 1, seconds, len(self._waiting))
            notify(self._observer, GenerationTokens(self._model, (), gaps))
        live = [r for r, s in enumerate(rows) if not (s.done or s.cancelled)]
        if not live:  # (the jumps ended them all)
            return
        if self._draw.blocks(rows, live, self._kv.advances):
            await self._decode_block(rows)
            return
        took, gaps = await decode_step(
            rows, self._steps, self._kv, self._draw, self._pad, self._context
        )
        notify(self._observer, GenerationTokens(self._model, (), gaps))
        self._batch.report("decode", len(rows), (took,), len(self._waiting))

    async def _decode_block(self, rows: list[Seq]) -> None:
        """A block of steps (inferd.generation.block). A newcomer may join at the next step
        when none waits now (a head that waits was not admitted for want of room, and those
        behind it queue after it) and a row is free: the block then ends at its arrival."""
        waiting = self._waiting
        free = waiting.room(len(self._batch.running))
        seconds, gaps = await decode_block(
            rows,
            self._steps,
            self._kv,
            self._draw,
            lambda: free and bool(waiting),
            self._forced.any_due,
        )
        self._batch.report("decode", len(rows), seconds, len(self._waiting))
        notify(self._observer, GenerationTokens(self._model, (), gaps))
