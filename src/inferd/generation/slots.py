"""The running batch's KV cache for an in-place decoder (inferd.prep.inplace_decoder): per
layer and kind one buffer `[rows, heads, capacity, head_dim]`, allocated once, that the runtime
binds as both the past input and the present output. A step writes only the new token's keys
and values, at each row's own length, and attends over each row's own length: nothing is
copied per step, and a short sequence does not pay for the longest one in the batch.

The live rows are kept packed at the front, so a step runs on the contiguous view `[:rows]`;
a prefill writes its prompts straight into the rows after them. When sequences leave, the
last rows move into their places (one row's real tokens copied each), and the order of the
rest is kept.

The buffers and a decode step's tokens live in a `DeviceMemory` (inferd.runtime.protocol):
the instance's own (on a GPU the cache never crosses the bus; a step's drawn tokens are read
back alone), or the host's. The step's other small inputs (positions, lengths, draws) stay on
the host, written in place, and are copied in by the runtime with each run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferd.generation.decoder import (
    DRAW_BIAS,
    LOGITS,
    POSITIONS,
    SEQLENS,
    TOKENS,
    TOTAL,
    DecoderShape,
    idle_draw_feeds,
)
from inferd.generation.kvstore import Step
from inferd.runtime.memory import HostMemory
from inferd.runtime.protocol import Array, DeviceArray, DeviceMemory


class SlotKV:
    def __init__(
        self,
        shape: DecoderShape,
        capacity: int,
        max_rows: int,
        memory: DeviceMemory | None = None,
    ) -> None:
        self._shape = shape
        self.capacity = capacity
        """Token positions a row holds: the most a sequence may reach."""
        self.max_rows = max_rows
        self.memory: DeviceMemory = memory or HostMemory()
        self._buffers: list[Array | DeviceArray] = []
        self._lengths = np.zeros(max_rows, dtype=np.int64)
        """Real tokens in each row's cache."""
        self._tokens: Array | DeviceArray | None = None
        """A decode step's input tokens (the rows' first ones), in `memory`: the same memory
        every step, so a binding of it as the graph's drawn output is kept
        (inferd.runtime.onnx_session)."""
        # a decode step's other inputs, the same memory every step too (the rows' first
        # ones), written in place: a kept binding reads them without binding them again, and
        # a run whose inputs were not bound again costs less
        self._positions = np.zeros((max_rows, 1), dtype=np.int64)
        self._seqlens = np.zeros(max_rows, dtype=np.int32)
        self._total = np.zeros((), dtype=np.int32)
        self._draws = idle_draw_feeds(max_rows, shape.top_width) if shape.draws else {}
        """The draw inputs, greedy until the scheduler writes each row's draw into them."""
        self._greedy = {name: buffer[0].copy() for name, buffer in self._draws.items()}
        if shape.bias:  # each row's bias; the scheduler writes it (zeros but where constrained)
            self._draws[DRAW_BIAS] = np.zeros((max_rows, shape.bias), np.float32)
        self._decoding: dict[int, tuple[dict[str, Array], dict[str, Array | DeviceArray]]] = {}
        """A decode step's host inputs and `memory` inputs for each row count: views made
        once, so every step of as many rows hands the runtime the very same arrays."""
        self._rows = 0

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def held_tokens(self) -> int:
        return self._rows * self.capacity

    def footprint(self, rows: int, longest_prompt: int) -> int:
        if rows > self.max_rows or longest_prompt >= self.capacity:
            return 1 << 62  # never fits
        return rows * self.capacity

    def _views(self, start: int, stop: int) -> dict[str, Array | DeviceArray]:
        if not self._buffers:  # on first use; kept until the store is cleared
            size = (self.max_rows, self._shape.heads, self.capacity, self._shape.head_dim)
            self._buffers = [
                self.memory.zeros(size, self._shape.dtype) for _ in self._shape.past_names
            ]
        names = self._shape.past_names
        return {
            n: self.memory.rows(buffer, start, stop)
            for n, buffer in zip(names, self._buffers, strict=True)
        }

    def _token_rows(self, rows: int) -> Array | DeviceArray:
        if self._tokens is None:
            self._tokens = self.memory.zeros((self.max_rows, 1), np.dtype(np.int64))
        return self.memory.rows(self._tokens, 0, rows)

    def _step(
        self,
        feeds: dict[str, Array],
        placed: dict[str, Array | DeviceArray],
        start: int,
        stop: int,
        prompt_lengths: tuple[int, ...] = (),
    ) -> Step:
        """The step on rows [start, stop): host `feeds`, and the inputs in `memory` (their
        buffer views as past, written as present)."""
        into = dict(zip(self._shape.present_names, self._shape.past_names, strict=True))
        slots = tuple(range(start, stop)) if prompt_lengths else ()
        # right-padded: every prompt ends at the last position only when all are as long,
        # unless the graph gives each row's last real token alone
        aligned = self._shape.last_only or len(set(prompt_lengths)) == 1
        feeds = dict(feeds)
        bound: dict[str, DeviceArray] = {}
        for name, array in placed.items():
            if isinstance(array, DeviceArray):
                bound[name] = array
            else:
                feeds[name] = array
        return Step(feeds, into, slots, prompt_lengths, bound, aligned)

    def prefill(self, prompts: Sequence[Sequence[int]], slots: Sequence[int], pad_id: int) -> Step:
        """Right-padded prompts, written into the rows right after the running ones."""
        start = self._rows
        if list(slots) != list(range(start, start + len(prompts))):
            raise ValueError(f"prompts join after the running rows ({start}), not at {slots}")
        if start + len(prompts) > self.max_rows:
            raise ValueError(f"{start + len(prompts)} rows exceed the cache's {self.max_rows}")
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        ids = np.full((len(prompts), width), pad_id, dtype=np.int64)
        for row, prompt in enumerate(prompts):
            ids[row, : len(prompt)] = prompt
        feeds: dict[str, Array] = {
            TOKENS: ids,
            POSITIONS: np.tile(np.arange(width, dtype=np.int64), (len(prompts), 1)),
            SEQLENS: np.array(lengths, dtype=np.int32) - 1,
            TOTAL: np.array(width, dtype=np.int32),
        }
        self._shape.idle_draw(feeds)
        views = self._views(start, start + len(prompts))
        return self._step(feeds, views, start, start + len(prompts), tuple(lengths))

    def take_prefill(self, step: Step, out: dict[str, Array]) -> None:
        rows = np.array(step.slots)
        self._lengths[rows] = step.lengths
        self._rows = max(self._rows, int(rows.max()) + 1)

    def after_prefill(self, step: Step, out: dict[str, Array]) -> Array:
        self.take_prefill(step, out)
        if self._shape.last_only:
            return out[LOGITS][:, 0, :]
        return out[LOGITS][np.arange(len(step.slots)), np.array(step.lengths) - 1, :]

    def fork(self, source: int, target: int, length: int) -> None:
        if target >= self.max_rows:
            raise ValueError(f"row {target} exceeds the cache's {self.max_rows}")
        for buffer in self._buffers:
            self.memory.copy_prefix(buffer, target, source, length)
        self._lengths[target] = length
        self._rows = max(self._rows, target + 1)

    def decode(self, tokens: Array, positions: Array) -> Step:
        """`positions` are the rows' real lengths (where each new token goes); a finished row
        that keeps running (static batching) is held at the last position."""
        rows = tokens.shape[0]
        at = np.minimum(positions.astype(np.int64), self.capacity - 1)
        made = self._decoding.get(rows)
        if made is None:
            # one buffer each: a drawing step writes its tokens into the first (advance)
            made = (
                {
                    POSITIONS: self._positions[:rows],
                    SEQLENS: self._seqlens[:rows],
                    TOTAL: self._total,
                    **{name: buffer[:rows] for name, buffer in self._draws.items()},
                },
                {TOKENS: self._token_rows(rows), **self._views(0, rows)},
            )
            self._decoding[rows] = made
        feeds, placed = made
        self.memory.write(placed[TOKENS], tokens.reshape(rows, 1))
        feeds[POSITIONS][:, 0] = at
        feeds[SEQLENS][:] = at
        self._total[...] = int(at.max()) + 1
        for name, greedy in self._greedy.items():
            feeds[name][:] = greedy
        return self._step(feeds, placed, 0, rows)

    def extend(self, row: int, tokens: Sequence[int]) -> Step:
        """Several tokens of one row at once, after its real ones (forced tokens:
        inferd.generation.forced), on that row's own views; its draw inputs are the row's."""
        start = int(self._lengths[row])
        stop = start + len(tokens)
        feeds: dict[str, Array] = {
            TOKENS: np.array([tokens], dtype=np.int64),
            POSITIONS: np.arange(start, stop, dtype=np.int64)[None],
            SEQLENS: np.array([stop - 1], dtype=np.int32),
            TOTAL: np.array(stop, dtype=np.int32),
            **{name: buffer[row : row + 1] for name, buffer in self._draws.items()},
        }
        return self._step(feeds, self._views(row, row + 1), row, row + 1, (stop,))

    def after_extend(self, step: Step) -> None:
        self._lengths[step.slots[0]] = step.lengths[0]

    def drawn(self, step: Step) -> Array:
        tokens = step.bound.get(TOKENS)
        return self.memory.read(step.feeds[TOKENS] if tokens is None else tokens)[:, 0]

    def after_decode(self, step: Step, out: dict[str, Array]) -> None:
        rows = step.feeds[SEQLENS].shape[0]
        self._lengths[:rows] = np.minimum(step.feeds[SEQLENS] + 1, self.capacity)

    @property
    def advances(self) -> bool:
        return True

    def advance(self, step: Step) -> None:
        self.after_decode(step, {})
        for name in (POSITIONS, SEQLENS, TOTAL):
            np.add(step.feeds[name], 1, out=step.feeds[name])

    def compact(self, live: list[int]) -> list[int] | None:
        """Always, at once: each hole among the first len(live) rows takes a live row from the
        end (only its real tokens are copied)."""
        keep = set(live)
        order = list(range(len(live)))
        movers = [r for r in reversed(live) if r >= len(live)]
        for hole in (r for r in range(len(live)) if r not in keep):
            source = movers.pop()
            order[hole] = source
            used = int(self._lengths[source])
            for buffer in self._buffers:
                self.memory.copy_prefix(buffer, hole, source, used)
            self._lengths[hole] = used
        self._rows = len(live)
        return order

    def clear(self) -> None:
        self._rows = 0
        self._lengths[:] = 0
