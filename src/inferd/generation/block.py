"""A decode block: steps back to back in one call to the runtime (`Repeat`: one handoff to its
thread a block, the steps as close together as bare ONNX Runtime's), each drawing in the graph
and writing its tokens into its own `input_ids`, which the next step reads (the KV store moves
the positions on, on the thread that runs the steps); then the tokens are taken, row by row,
each at the time its step ended.

A row that ends within the block (its EOS, a stop sequence) keeps computing to the block's end;
what it draws after its end is dropped. A block on a runtime thread ends early when a
generation arrives while there is a free row (it joins after the step, not after the block).
Draws use each row's own generator, one number a step, as the single-step path does (a block
that ends early gives back the numbers it did not use): a seed gives the same text either way.
A constrained row (inferd.generation.constraint) takes each drawn token into its grammar
between the steps, on the thread that runs them, and its next mask becomes the graph's bias
for the next step (`Draw.bias`); the block ends after a step that leaves a row with forced
tokens to take in a step of its own (inferd.generation.forced)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from inferd.generation.decoder import DRAW_UNIFORM, NEXT_IDS, TOKENS
from inferd.generation.draw import Draw
from inferd.generation.kvstore import KVStore
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.step_runner import StepRunner
from inferd.runtime.protocol import Repeat

Joinable = Callable[[], bool]
"""Whether a generation waits that could join at the next step (the block then ends)."""


async def decode_block(
    rows: list[Seq],
    steps: StepRunner,
    kv: KVStore,
    draw: Draw,
    joinable: Joinable,
    jumps: Callable[[list[Seq]], bool],
) -> tuple[list[float], list[float]]:
    """Runs a block over `rows`; returns each step's time and the times between tokens.
    `jumps`: whether a row takes its forced tokens in a step of its own now
    (inferd.generation.forced): the block then ends, and they are taken before the next."""
    count = steps.block_length(rows)
    tokens = np.array([s.last_token for s in rows], dtype=np.int64)
    step = kv.decode(tokens, np.array([s.cached for s in rows], dtype=np.int64))
    feeds = step.feeds
    uniforms = draw.feed(feeds, rows, set(range(len(rows))), count)
    grammars = draw.bias(feeds, rows, list(range(len(rows))))
    into = {**step.into, NEXT_IDS: TOKENS}
    drawn = np.empty((count, len(rows)), dtype=np.int64)
    ended: list[float] = []

    def between(k: int) -> bool:  # on the thread that runs the steps, after step k
        ended.append(time.perf_counter())
        drawn[k] = kv.drawn(step)
        kv.advance(step)
        going_on = k + 1 < count and not joinable()
        if grammars is not None:
            grammars.take(drawn[k])
            grammars.settle()  # (what each row's grammar forces next, known for `jumps`)
            going_on = going_on and not jumps(rows)
            if going_on:
                grammars.write(feeds)
        if going_on:
            feeds[DRAW_UNIFORM][:] = uniforms[k + 1]
        return going_on

    started = time.perf_counter()
    await steps.run(step.inputs, (), into, steps.decode_s, Repeat(count, between))
    done = len(ended)
    steps.learn_decode((ended[-1] - started) / done)  # (a block may end early)
    if done < count:
        for seq in rows:  # the numbers drawn for the steps not run, given back
            if not seq.params.greedy:
                seq.give_back(count - done)
    if grammars is not None:
        grammars.fail_broken()
    gaps: list[float] = []
    for seq, taken in zip(rows, drawn[:done].T.tolist(), strict=True):
        seq.cached += done
        if not seq.cancelled:  # (one that ends within the block takes its tokens up to it)
            gaps += seq.accept_many(taken, ended)
    return np.diff([started, *ended]).tolist(), gaps
