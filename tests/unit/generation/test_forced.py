"""Jump-forward decoding on a real exported GPT-2 with its KV cache in place (slow): a
constrained answer takes the tokens its grammar forces in one step of its row, and what it
draws after them is what the model draws after those tokens computed from scratch; a seed
gives the same answer in blocks of steps or a step at a time, alone or beside others; with
`jump_forward: 0` every token is a step of its own."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from inferd.config.model import GenerationConfig
from inferd.generation import grammar
from inferd.generation.constraint import Grammars
from inferd.generation.decoder import TOKENS
from inferd.generation.params import SamplingParams
from inferd.generation.scheduler import Scheduler
from tests.generator_model import Decoder, build_generator_repo, load_decoder

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {
        "temperature_in_celsius": {"type": "integer", "minimum": -50, "maximum": 50},
        "description_of_the_weather": {"enum": ["sunny", "cloudy", "raining"]},
        "wind": {"type": "string", "maxLength": 6},
    },
    "required": ["temperature_in_celsius", "description_of_the_weather", "wind"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_generator_repo(tmp_path_factory.mktemp("inplace"), kv_cache="inplace")


@pytest.fixture
def decoder(repo: Path) -> Decoder:
    """Loaded for each test: its runtime pool's turns belong to the test's event loop."""
    return load_decoder(repo)


@dataclass
class Runs:
    widths: list[int]
    """Each decode run's tokens a row (a prefill's too)."""


Make = Callable[..., tuple[Scheduler, Runs]]


@pytest.fixture
async def make(decoder: Decoder) -> AsyncIterator[Make]:
    made: list[Scheduler] = []

    def build(**settings: Any) -> tuple[Scheduler, Runs]:
        runs = Runs([])

        async def run(
            feeds: dict[str, Any], names: Sequence[str], into: dict[str, str], repeat: Any = None
        ) -> dict[str, Any]:
            tokens = feeds.get(TOKENS)
            runs.widths.append(1 if tokens is None else int(tokens.shape[1]))
            return await decoder.run(feeds, names, into, repeat)

        config = GenerationConfig(context_length=512, max_new_tokens_limit=1000, **settings)
        parts = decoder.parts
        scheduler = Scheduler(run, parts.shape, parts.tokenizer, config, parts.eos_id, parts.pad_id)
        scheduler.start()
        made.append(scheduler)
        return scheduler, runs

    yield build
    for scheduler in made:
        await scheduler.close()


async def answer(
    scheduler: Scheduler, grammars: Grammars, params: list[SamplingParams], prompt: str = "w1"
) -> list[list[int]]:
    """Each answer's tokens, all submitted at once."""
    request = grammar.json_schema(SCHEMA, "json_schema")
    ids = scheduler.encode(prompt)
    seqs = [
        scheduler.submit_twins(ids, [p], [await grammars.constraint(request)])[0] for p in params
    ]
    for seq, p in zip(seqs, params, strict=True):
        finished = await seq.result()
        if not p.stop:  # (a stop string ends the answer where it comes)
            jsonschema.validate(json.loads(finished.text), SCHEMA)
    return [seq.generated for seq in seqs]


async def test_forced_tokens_take_one_step_and_what_follows_is_drawn_as_from_scratch(
    make: Make, decoder: Decoder
) -> None:
    grammars = Grammars(decoder.parts.tokenizer, decoder.parts.eos_id)
    try:
        scheduler, runs = make(block_steps=1)
        [tokens] = await answer(scheduler, grammars, [SamplingParams(200, temperature=0.0)])
        prompt = scheduler.encode("w1")
        assert runs.widths[0] > len(prompt)  # (the opening brace and first key, prefilled)
        steps = len(runs.widths) - 1  # (after the prefill)
        assert any(width > 2 for width in runs.widths[1:])  # (a key's tokens at once)
        assert steps < len(tokens) * 0.7, (steps, len(tokens))
        # each drawn (not forced) token is what a fresh prefill of everything before it
        # draws, greedily, under the grammar at that point
        request = grammar.json_schema(SCHEMA, "json_schema")
        replay = await grammars.constraint(request)
        replay.start(2)
        reference, _ = make(jump_forward=0, block_steps=1)
        at, drawn = 0, 0
        while at < len(tokens):
            if replay.queued:  # forced: taken as the grammar tokenizes them
                forced = replay.queued
                assert tokens[at : at + len(forced)] == forced
                replay.take()
                at += len(forced)
                continue
            held = await grammars.constraint(request)
            for token in tokens[:at]:
                held.consume(token)
            seq = reference.submit_twins(
                prompt + tokens[:at], [SamplingParams(1, temperature=0.0)], [held]
            )[0]
            await seq.result()
            assert seq.generated == [tokens[at]], at
            drawn += 1
            replay.consume(tokens[at])
            at += 1
        assert drawn >= 3
    finally:
        grammars.close()


async def test_a_seed_gives_one_answer_in_blocks_or_steps_alone_or_beside_others(
    make: Make, decoder: Decoder
) -> None:
    grammars = Grammars(decoder.parts.tokenizer, decoder.parts.eos_id)
    params = [SamplingParams(200, temperature=0.9, top_k=20, seed=s) for s in range(4)]
    # drawn in Python from the whole vocabulary's logits (no top-k; a penalty)
    params.append(SamplingParams(200, temperature=0.9, top_p=0.9, seed=4))
    params.append(SamplingParams(200, temperature=0.9, repetition_penalty=1.3, seed=5))
    params.append(SamplingParams(200, temperature=0.9, top_k=20, seed=6, stop=('",',)))
    try:
        alone = []
        for p in params:  # (one row: its forced tokens are taken in a step of its own)
            scheduler, runs = make(block_steps=1)
            alone += await answer(scheduler, grammars, [p])
            assert any(width > 2 for width in runs.widths[1:])
        # six rows: one a step, with the batch, until they are few
        blocks, _ = make(block_steps=4)
        assert await answer(blocks, grammars, params) == alone
        # free answers beside them change nothing
        free = blocks.submit(blocks.encode("w3 w4"), SamplingParams(50, ignore_eos=True))
        assert await answer(blocks, grammars, params[::-1]) == alone[::-1]
        await free.result()
    finally:
        grammars.close()


async def test_with_jump_forward_off_every_token_is_a_step(make: Make, decoder: Decoder) -> None:
    grammars = Grammars(decoder.parts.tokenizer, decoder.parts.eos_id)
    try:
        scheduler, runs = make(jump_forward=0, block_steps=1)
        [tokens] = await answer(scheduler, grammars, [SamplingParams(200, temperature=0.0)])
        assert runs.widths[1:] == [1] * (len(runs.widths) - 1)
        assert len(runs.widths) - 1 >= len(tokens) - 1
    finally:
        grammars.close()


async def test_an_answer_made_whole_by_forced_tokens_at_its_length_limit_stops(
    make: Make, decoder: Decoder
) -> None:
    """Forced tokens that end a choice exactly at `max_length` make a whole answer: "stop",
    whether they were taken in a step of the row's own (alone) or one a step (beside
    others), never "length"."""
    grammars = Grammars(decoder.parts.tokenizer, decoder.parts.eos_id)
    request = grammar.choice(["sunny weather today", "sunny weather tomorrow"], "choice")
    try:
        ends = []
        for beside in (0, 2):
            scheduler, _ = make(block_steps=0)
            ids = scheduler.encode("w1")
            params = [
                SamplingParams(12, temperature=0.9, top_k=20, seed=1 + s) for s in range(1 + beside)
            ]
            seqs = [
                scheduler.submit_twins(ids, [p], [await grammars.constraint(request)])[0]
                for p in params
            ]
            done = await seqs[0].result()
            ends.append((done.reason, done.text))
            for seq in seqs[1:]:
                await seq.result()
        assert ends == [("stop", "sunny weather today")] * 2, ends
    finally:
        grammars.close()
