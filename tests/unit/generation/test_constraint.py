"""Constraints on an answer, from the request's fields to the token masks a draw applies: the
bounds checked before the grammar engine runs, the refusals it gives (4006, naming the
field), its cache, and masked draws that can only produce what the grammar allows (a real
byte-level BPE tokenizer, llguidance)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import jsonschema
import numpy as np
import pytest
from tokenizers import Tokenizer

from inferd.errors import ErrorCode, InternalError, InvalidGrammarError
from inferd.generation import constraint, grammar
from inferd.generation.constraint import Grammars
from inferd.generation.grammar import GrammarRequest
from inferd.generation.masks import Masks, allowed_ids
from inferd.generation.params import SamplingParams
from inferd.generation.sampling import sample_allowed, sample_batch
from inferd.tools.generator import train_tokenizer

CORPUS = ['{"name": "Ada", "age": 36, "tags": ["x", "y"]} the quick brown fox 0123456789 ' * 60]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def _nested(depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(CORPUS, 300)


class Row:
    """What the masks read of a sequence."""

    def __init__(self, c: constraint.Constraint | None) -> None:
        self.constraint = c


def compile_one(tokenizer: Tokenizer, request: GrammarRequest) -> constraint.Constraint:
    async def go() -> constraint.Constraint:
        grammars = Grammars(tokenizer, 0)
        try:
            return await grammars.constraint(request)
        finally:
            grammars.close()

    return asyncio.run(go())


def draw_answer(
    tokenizer: Tokenizer, request: GrammarRequest, seed: int, limit: int = 300
) -> tuple[str, bool]:
    """Random logits, masked: the answer the constraint alone makes, and whether it ended
    (EOS, or a grammar that takes nothing more) within `limit` tokens."""
    c = compile_one(tokenizer, request)
    rng = np.random.default_rng(seed)
    params = [SamplingParams(1, temperature=1.0)]
    vocab = tokenizer.get_vocab_size()
    ids: list[int] = []
    for _ in range(limit):
        logits = rng.standard_normal((1, vocab)).astype(np.float32) * 3
        token = sample_allowed(logits, [allowed_ids(c.mask(), vocab)], params, [rng], [set()])[0]
        if c.ends(token):
            return tokenizer.decode(ids), True
        ids.append(token)
        if c.consume(token):
            return tokenizer.decode(ids), True
    return tokenizer.decode(ids), False


def test_a_schema_with_random_logits_always_gives_valid_json(tokenizer: Tokenizer) -> None:
    request = grammar.json_schema(SCHEMA, "json_schema")
    for seed in range(20):
        text, ended = draw_answer(tokenizer, request, seed)
        assert ended, text
        jsonschema.validate(json.loads(text), SCHEMA)
        assert text.startswith('{"name":"')  # compact, in the schema's order


def test_a_regex_and_a_choice_hold_whole(tokenizer: Tokenizer) -> None:
    for seed in range(10):
        text, ended = draw_answer(tokenizer, grammar.regex(r"[0-9]{3}-[a-z]{2,4}", "regex"), seed)
        assert ended and re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", text), text
        text, ended = draw_answer(tokenizer, grammar.choice(["fox", "brown fox"], "c"), seed)
        assert ended and text in ("fox", "brown fox"), text


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(1, temperature=0.0),
        SamplingParams(1, temperature=0.7, top_k=5),
        SamplingParams(1, temperature=1.3, top_p=0.8),
        SamplingParams(1, temperature=1.0, repetition_penalty=1.5),
    ],
)
def test_a_draw_among_the_allowed_is_the_draw_on_logits_masked_to_minus_infinity(
    params: SamplingParams,
) -> None:
    vocab = 300
    for seed in range(30):
        rng = np.random.default_rng(seed)
        logits = rng.standard_normal((1, vocab)).astype(np.float32)
        allowed = np.flatnonzero(rng.random(vocab) < (0.02 if seed % 2 else 0.6))
        masked = np.full_like(logits, -np.inf)
        masked[0, allowed] = logits[0, allowed]
        seen = {int(allowed[0]), 7}
        among = sample_allowed(logits, [allowed], [params], [np.random.default_rng(seed)], [seen])
        whole = sample_batch(masked, [params], [np.random.default_rng(seed)], [seen])
        assert among == whole and among[0] in allowed


def test_a_mask_allows_nothing_past_the_logits_width(tokenizer: Tokenizer) -> None:
    c = compile_one(tokenizer, grammar.regex("[a-z ]+", "regex"))
    everything = allowed_ids(c.mask(), 10_000)
    assert everything.max() < tokenizer.get_vocab_size()
    narrow = allowed_ids(c.mask(), 50)
    assert np.array_equal(narrow, everything[everything < 50])


@pytest.mark.parametrize(
    ("build", "field", "words"),
    [
        (lambda: grammar.json_schema([1], "json_schema"), "json_schema", "JSON object"),
        (
            lambda: grammar.json_schema({"enum": ["v" * 50] * 2000}, "guided_json"),
            "guided_json",
            "the limit is 65536",
        ),
        (lambda: grammar.json_schema(_nested(300), "json_schema"), "json_schema", "deeper than"),
        (lambda: grammar.regex("", "regex"), "regex", "non-empty"),
        (lambda: grammar.regex("a" * 3000, "regex"), "regex", "the limit is 2048"),
        (lambda: grammar.choice([], "choice"), "choice", "non-empty list"),
        (lambda: grammar.choice(["a", 3], "choice"), "choice", "choice[1]"),
        (lambda: grammar.choice(["a"] * 2000, "choice"), "choice", "the limit is 1024"),
        (
            lambda: grammar.one_of(
                {"regex": grammar.regex("a", "regex"), "choice": grammar.choice(["a"], "choice")}
            ),
            None,
            "one constraint at a time",
        ),
    ],
)
def test_requests_past_the_bounds_are_refused_before_the_engine_runs(
    build: object, field: str | None, words: str
) -> None:
    with pytest.raises(InvalidGrammarError) as refused:
        build()  # type: ignore[operator]
    assert refused.value.code == ErrorCode.INVALID_GRAMMAR
    assert refused.value.param == field and words in refused.value.message


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "foo"}, "Invalid type: foo"),
        ({"type": "string", "format": "no-such-format"}, "Unknown format"),
        ({"$ref": "#/$defs/missing"}, "does not exist"),
        ({"type": "integer", "minimum": 10, "maximum": 5}, "Unsatisfiable"),
        ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}, "allows no answer"),
        (_nested(40), "nests deeper than 32 levels at #/properties/a/properties/a"),
    ],
)
def test_what_the_engine_refuses_is_a_4006_in_its_words(
    tokenizer: Tokenizer, schema: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidGrammarError) as refused:
        compile_one(tokenizer, grammar.json_schema(schema, "response_format.json_schema.schema"))
    assert refused.value.param == "response_format.json_schema.schema"
    assert words in refused.value.message and "\n" not in refused.value.message


def test_a_regex_that_does_not_parse_names_why(tokenizer: Tokenizer) -> None:
    with pytest.raises(InvalidGrammarError, match=r"^regex: .*unclosed group"):
        compile_one(tokenizer, grammar.regex("(ab", "regex"))


def test_compiled_grammars_and_refusals_are_cached_and_bounded(
    tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constraint, "CACHE_GRAMMARS", 3)

    async def go() -> None:
        grammars = Grammars(tokenizer, 0)
        compiles = counted_compiles(grammars)
        try:
            bad = grammar.json_schema({"type": "foo"}, "json_schema")
            for _ in range(3):
                with pytest.raises(InvalidGrammarError):
                    await grammars.constraint(bad)
            first = await grammars.constraint(grammar.regex("[a-z]+", "regex"))
            second = await grammars.constraint(grammar.regex("[a-z]+", "regex"))
            assert len(compiles) == 2  # the refusal once, the regex once
            assert first is not second  # each sequence its own matcher
            first.consume(tokenizer.token_to_id("a"))
            assert not np.array_equal(first.mask(), second.mask())  # (EOS now allowed)
            for i in range(4):
                await grammars.constraint(grammar.regex(f"x{i}", "regex"))
            assert len(grammars._cache) == 3  # the oldest out
        finally:
            grammars.close()

    asyncio.run(go())


def test_a_token_its_mask_forbids_is_an_internal_error_not_a_crash(tokenizer: Tokenizer) -> None:
    c = compile_one(tokenizer, grammar.choice(["fox"], "choice"))
    bits = np.unpackbits(c.mask().view(np.uint8), bitorder="little")
    forbidden = int(np.flatnonzero(bits == 0)[0])
    with pytest.raises(InternalError, match="broke its grammar"):
        c.consume(forbidden)


def test_quick_masks_are_made_at_the_draw_and_slow_ones_while_the_step_runs(
    tokenizer: Tokenizer,
) -> None:
    c = compile_one(tokenizer, grammar.regex("[a-z]+", "regex"))

    async def go() -> None:
        unknown, quick, slow = Masks(), Masks(), Masks()
        quick.learn(1e-6, 1)  # a mask's time a row, as measured
        slow.learn(1e-3, 1)
        try:
            assert unknown.start([Row(None)]) is None  # nothing constrained: nothing to do
            first = unknown.start([Row(c)])
            assert first is not None and first.future is not None  # cost unknown: a thread
            assert len(await first.result()) == 1
            at_draw = quick.start([Row(c), Row(None)])
            assert at_draw is not None and at_draw.future is None  # made when asked
            assert list(await at_draw.result()) == [id(at_draw._rows[0])]
            overlapped = slow.start([Row(c)])
            assert overlapped is not None and overlapped.future is not None
            started = time.perf_counter()
            await overlapped.result()
            assert time.perf_counter() - started < 1.0
        finally:
            for masks in (unknown, quick, slow):
                masks.close()

    asyncio.run(go())


def test_a_grammar_that_fails_while_drawn_fails_its_answer_not_stops_it(
    tokenizer: Tokenizer,
) -> None:
    """Out of fuel on a hard state, llguidance allows only the end: the answer then fails with
    a 4006 rather than ending as if it were whole."""
    import llguidance

    from inferd.generation.sequence import Sequence

    vocab = tokenizer.get_vocab_size()
    reader = llguidance.LLTokenizer(tokenizer.to_str(), n_vocab=vocab, eos_token=0)
    starved = llguidance.LLParserLimits(step_lexer_fuel=1)
    matcher = llguidance.LLMatcher(
        reader, llguidance.LLMatcher.grammar_from_regex("[a-z]+"), log_level=0, limits=starved
    )
    held = constraint.Constraint(matcher, 0, (vocab + 31) // 32)
    assert list(allowed_ids(held.mask(), vocab)) == [0] and held.broken is not None
    seq = Sequence([5, 6], SamplingParams(8), tokenizer, None, 512, held)
    seq.accept(0, time.perf_counter())
    assert seq.finished is not None and seq.finished.reason == "error"
    error = seq.events.get_nowait()
    assert isinstance(error, InvalidGrammarError) and "failed while it was drawn" in error.message


def test_a_grammar_asked_twice_at_once_compiles_once(tokenizer: Tokenizer) -> None:
    async def go() -> int:
        grammars = Grammars(tokenizer, 0)
        compiles = counted_compiles(grammars, delay_s=0.05)
        try:
            request = grammar.regex("[0-9]{2,4}", "regex")
            first, second = await asyncio.gather(
                grammars.constraint(request), grammars.constraint(request)
            )
            assert first is not second
            await grammars.constraint(request)  # (kept: no compile)
            return len(compiles)
        finally:
            grammars.close()

    assert asyncio.run(go()) == 1


def test_a_grammar_that_allows_none_of_the_models_tokens_fails_that_row_alone(
    tokenizer: Tokenizer,
) -> None:
    """A tokenizer wider than the model's logits may leave a row's grammar with no token the
    model can draw: that row fails, and the rest of the batch draws as it would."""
    from inferd.config.model import GenerationConfig
    from inferd.generation.bias import NO_TOKEN
    from inferd.generation.draw import Draw
    from inferd.generation.sequence import Sequence
    from tests import fake_decoder

    held = compile_one(tokenizer, grammar.choice(["fox"], "choice"))
    first = int(allowed_ids(held.mask(), 10_000)[0])
    narrow = first  # logits that end just before the one token the grammar allows
    params = SamplingParams(8, temperature=0.0)
    broken = Sequence([5], params, tokenizer, None, 512, held)
    free = Sequence([5], params, tokenizer, None, 512)
    draw = Draw(fake_decoder.SHAPE, GenerationConfig())
    logits = np.random.default_rng(0).standard_normal((2, narrow)).astype(np.float32)
    tokens = draw.sample(logits, [broken, free], {id(broken): held.mask()})
    draw.close()
    assert tokens[1] == int(np.argmax(logits[1]))
    assert broken.finished is not None and broken.finished.reason == "error"
    assert broken.events.get_nowait() is NO_TOKEN
    assert broken.accept(tokens[0], time.perf_counter()) is None and broken.generated == []


def counted_compiles(grammars: Grammars, delay_s: float = 0.0) -> list[GrammarRequest]:
    """The grammars `grammars` compiles from now on (each compile `delay_s` longer)."""
    compiles: list[GrammarRequest] = []
    real = grammars._compile

    def counting(request: GrammarRequest) -> constraint.Compiled:
        compiles.append(request)
        time.sleep(delay_s)
        return real(request)

    grammars._compile = counting  # type: ignore[method-assign]
    return compiles
