"""A prefill: the prompts of the sequences that join the running batch, computed once each
(twins take a copy of their prompt's cache), with the tokens their grammars force first
(inferd.generation.forced), and each sequence's first token drawn."""

from __future__ import annotations

import time

from inferd.generation.batch import RunningBatch, shared_prefill
from inferd.generation.decoder import TOKENS
from inferd.generation.draw import Draw
from inferd.generation.forced import Forced
from inferd.generation.kvstore import KVStore
from inferd.generation.masks import taken
from inferd.generation.sequence import Sequence as Seq
from inferd.generation.step_runner import StepRunner


async def prefill(
    admitted: list[Seq],
    batch: RunningBatch,
    steps: StepRunner,
    draw: Draw,
    forced: Forced,
    pad_id: int,
) -> tuple[float, list[float]]:
    """Runs the prefill of `admitted`, which then run in `batch`; returns its time and each
    sequence's time to its first token."""
    kv: KVStore = batch.kv
    seqs, source = shared_prefill(admitted)
    slots = batch.slots(len(seqs))
    leads = forced.lead(seqs, source)
    prompts = [s.prompt_ids + lead.tokens for s, lead in zip(seqs, leads, strict=True)]
    prompts = prompts[: max(source) + 1]  # (the twins after them take a copy)
    step = kv.prefill(prompts, slots[: len(prompts)], pad_id)
    ranked = step.last_aligned and draw.ranked(seqs)
    computed = int(step.feeds[TOKENS].size)  # rows x the longest prompt
    masks = draw.masks(seqs)  # (made while the step runs, when they take long)
    started = time.perf_counter()
    out = await steps.run(step.inputs, draw.names(ranked), step.into, steps.prefill_s(computed))
    now = time.perf_counter()
    steps.learn_prefill(now - started, computed)
    if ranked:
        kv.take_prefill(step, out)
        tokens = draw.sample_ranked(out, source, seqs)
    else:
        logits = kv.after_prefill(step, out)
        rows = logits if len(source) == len(logits) else logits[source]
        tokens = draw.sample(rows, seqs, await taken(masks))
    for i in range(len(prompts), len(seqs)):
        kv.fork(slots[source[i]], slots[i], len(prompts[source[i]]))
    batch.join(slots, seqs)
    firsts = []
    for seq, token, lead in zip(seqs, tokens, leads, strict=True):
        seq.cached = len(seq.prompt_ids) + len(lead.tokens)
        lead.accept(seq, now)
        seq.accept(token, now)
        firsts.append(now - seq.created)
    return now - started, firsts
