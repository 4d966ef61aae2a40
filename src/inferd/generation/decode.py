"""A decode step: one token for every row of the running batch, drawn by the path `Draw` picks
(in Python from the logits or the ranked candidates, or in the graph); a block of steps is
inferd.generation.block."""

from __future__ import annotations

import time

import numpy as np

from inferd.generation.draw import Draw
from inferd.generation.kvstore import KVStore
from inferd.generation.masks import taken
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.step_runner import StepRunner


async def decode_step(
    rows: list[Seq], steps: StepRunner, kv: KVStore, draw: Draw, pad_id: int, context: int
) -> tuple[float, list[float]]:
    """Runs one step over `rows` (`context`: the model's window); returns its time and the
    times between tokens."""
    live = [r for r, s in enumerate(rows) if not (s.done or s.cancelled)]
    tokens = np.array([s.last_token if s.generated else pad_id for s in rows], dtype=np.int64)
    # a finished row left in the batch may run past the window: its output is unused, but its
    # position must stay a valid index
    positions = np.array([min(s.cached, context - 1) for s in rows], dtype=np.int64)
    ranked = draw.ranked([rows[r] for r in live], biased=True)
    in_graph = ranked and draw.in_graph
    step = kv.decode(tokens, positions)
    if in_graph:
        draw.feed(step.feeds, rows, set(live), 1)
    if ranked:  # a constrained row's mask, now, into the graph's ranking
        draw.bias(step.feeds, rows, live)
    masks = None if ranked else draw.masks([rows[r] for r in live])
    started = time.perf_counter()
    out = await steps.run(step.inputs, draw.names(ranked, in_graph), step.into, steps.decode_s)
    now = time.perf_counter()
    steps.learn_decode(now - started)
    kv.after_decode(step, out)
    for seq in rows:
        seq.cached += 1
    live = [r for r in live if not rows[r].cancelled]  # (a client may have left meanwhile)
    masked = await taken(masks)
    gaps = []
    if live:
        seqs = [rows[r] for r in live]
        drawn = draw.decoded(out, live, seqs, ranked, in_graph, masked)
        for seq, token in zip(seqs, drawn, strict=True):
            since = seq.accept(token, now)
            if since is not None:
                gaps.append(since)
    return now - started, gaps
