"""Where the running batch's KV cache lives, as the scheduler sees it: the feeds of a prefill
or a decode step, what to take from the outputs after it, and how the batch is compacted when
sequences leave. Two stores, one per decoder layout (inferd.generation.decoder):
`PaddedKV` (inferd.generation.kvcache) and `SlotKV` (inferd.generation.slots)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from inferd.runtime.protocol import Array, DeviceArray


@dataclass(frozen=True)
class Step:
    feeds: dict[str, Array]
    """The inputs on the host."""
    into: dict[str, str] = field(default_factory=dict)
    """Outputs the runtime writes into an input's array, in place (output -> input)."""
    slots: tuple[int, ...] = ()
    """A prefill's rows in the batch, one per prompt."""
    lengths: tuple[int, ...] = ()
    """A prefill's prompt lengths."""
    bound: dict[str, DeviceArray] = field(default_factory=dict)
    """The inputs in the instance's own memory (a device-resident KV cache, drawn tokens)."""
    last_aligned: bool = False
    """A prefill whose prompts all end at its last position (or whose graph gives each row's
    last real token alone: `DecoderShape.last_only`): the position the graph ranks candidates
    at (inferd.prep.ranked_logits), so they are each prompt's next-token ones."""

    @property
    def inputs(self) -> dict[str, Array | DeviceArray]:
        """Every input of the run, wherever it lies (the same array objects)."""
        return {**self.feeds, **self.bound}


class KVStore(Protocol):
    @property
    def rows(self) -> int:
        """Rows the batch runs: the live ones and finished ones not yet compacted away."""
        ...

    @property
    def held_tokens(self) -> int:
        """Token positions the cache holds for the batch, padding included."""
        ...

    def footprint(self, rows: int, longest_prompt: int) -> int:
        """`held_tokens` once `rows` rows run, with a prompt of `longest_prompt` joining."""
        ...

    def prefill(self, prompts: Sequence[Sequence[int]], slots: Sequence[int], pad_id: int) -> Step:
        """The prompts' step; their rows go to `slots` (free rows, or the next new ones)."""
        ...

    def take_prefill(self, step: Step, out: dict[str, Array]) -> None:
        """Takes the prompts' cache (from `out`, or as written in place)."""
        ...

    def after_prefill(self, step: Step, out: dict[str, Array]) -> Array:
        """`take_prefill`, then each prompt's last-token logits [rows, vocab]."""
        ...

    def fork(self, source: int, target: int, length: int) -> None:
        """After a prefill: row `target` takes a copy of row `source`'s first `length`
        positions (a prompt prefilled once for several answers to it)."""
        ...

    def decode(self, tokens: Array, positions: Array) -> Step:
        """One token a row at its own position (the row's real tokens so far)."""
        ...

    def after_decode(self, step: Step, out: dict[str, Array]) -> None: ...

    @property
    def advances(self) -> bool:
        """Whether a decode step's own feeds can become the next step's (`advance`)."""
        ...

    def drawn(self, step: Step) -> Array:
        """The tokens a decode step drew in the graph into its own `input_ids`, [rows] on the
        host (only they cross from the device)."""
        ...

    def advance(self, step: Step) -> None:
        """After a decode step whose drawn tokens were written into its own `input_ids`: takes
        the step (`after_decode`), then moves its feeds one position on, in place, so they
        are the next step's."""
        ...

    def extend(self, row: int, tokens: Sequence[int]) -> Step:
        """Several tokens of row `row` in one step, after its real ones (only a store that
        `advances`); `after_extend` takes it."""
        ...

    def after_extend(self, step: Step) -> None: ...

    def compact(self, live: list[int]) -> list[int] | None:
        """When the store chooses to: keeps only the `live` rows, returning their new order
        (old row indices); None when it leaves the batch as it is."""
        ...

    def clear(self) -> None: ...
