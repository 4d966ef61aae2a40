"""Incremental detokenization (deltas, multi-byte characters, stop sequences) with a real
byte-level BPE tokenizer, the padded KV batch (join, advance, keep) and the in-place slots."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tokenizers import Tokenizer

from inferd.corpus import docstrings
from inferd.generation.decoder import DecoderShape
from inferd.generation.incremental_text import IncrementalText
from inferd.generation.kvcache import KVBatch
from inferd.generation.params import SamplingParams
from inferd.generation.sequence import Finished, Sequence
from inferd.generation.slots import SlotKV
from inferd.tools.generator import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(docstrings(100_000), 400)


def feed(tokenizer: Tokenizer, text: str, stop: tuple[str, ...] = ()) -> tuple[list[str], str]:
    inc = IncrementalText(tokenizer, stop)
    deltas = []
    for token in tokenizer.encode(text).ids:
        deltas.append(inc.push(token))
        if inc.stopped:
            break
    deltas.append(inc.flush())
    return deltas, inc.text


def test_deltas_add_up_to_the_text(tokenizer: Tokenizer) -> None:
    text = "Return the number of items in the container."
    deltas, whole = feed(tokenizer, text)
    assert "".join(deltas) == whole == text


def test_a_multibyte_character_is_never_split(tokenizer: Tokenizer) -> None:
    text = "naïve café 😀 東京 done"
    deltas, _ = feed(tokenizer, text)
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)
    assert len(tokenizer.encode("😀").ids) > 1  # the emoji really spans several tokens


def test_tokens_appended_undecoded_come_out_whole_at_the_end(tokenizer: Tokenizer) -> None:
    text = "naïve café 😀 東京: pushed, then appended and decoded at the end"
    ids = tokenizer.encode(text).ids
    inc = IncrementalText(tokenizer, ())
    pushed = "".join(inc.push(t) for t in ids[:5])
    for token in ids[5:]:
        inc.append(token)
    assert pushed + inc.flush() == inc.text == text


def test_tokens_appended_together_decode_together_or_each_on_its_own(
    tokenizer: Tokenizer,
) -> None:
    text = "naïve café 😀 東京: read in groups by a stream's reader"
    ids = tokenizer.encode(text).ids
    together, each = IncrementalText(tokenizer, ()), IncrementalText(tokenizer, ())
    joined: list[str] = []
    single: list[str] = []
    for start in range(0, len(ids), 4):  # the reader wakes every 4 tokens
        for token in ids[start : start + 4]:
            together.append(token)
            each.append(token)
        joined.append(together.advance())
        single += each.advance_each()
    joined.append(together.flush())
    single.append(each.flush())
    assert "".join(joined) == "".join(single) == together.text == text
    assert not any("\ufffd" in d for d in joined + single)
    # each token's text on its own, as pushing them one by one gives
    assert [d for d in single if d] == [d for d in feed(tokenizer, text)[0] if d]


def test_a_streamed_sequence_is_decoded_by_its_reader_not_the_step(
    tokenizer: Tokenizer,
) -> None:
    calls = 0

    class Counting:
        def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
            nonlocal calls
            calls += 1
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    text = "Return the number of items in the container."
    ids = tokenizer.encode(text).ids

    async def scenario() -> tuple[str, int]:
        seq = Sequence([1], SamplingParams(100), Counting(), None, 512)  # type: ignore[arg-type]
        for token in ids:
            seq.accept(token, 0.0)  # what a step does: no decoding
        assert calls == 0
        stream = seq.stream()
        first = await anext(stream)  # the reader decodes the tokens so far, together
        assert isinstance(first, str)
        read_calls = calls
        seq.finish("stop", 0.0)
        rest = [event async for event in stream]
        assert isinstance(rest[-1], Finished) and rest[-1].text == text
        return first + "".join(e for e in rest if isinstance(e, str)), read_calls

    streamed, read_calls = asyncio.run(scenario())
    assert streamed == text
    assert read_calls == 2  # one decode of the window before, one after: for all the tokens


def test_tokens_taken_together_are_taken_as_one_at_a_time(tokenizer: Tokenizer) -> None:
    """`accept_many` (a decode block's tokens, a row's together) leaves a sequence as `accept`
    token by token does: the same tokens kept (up to an EOS, the length limit or the
    context), the same end, text, token times, gaps between tokens and events, with or without
    stop sequences, whole answers or streamed."""
    rng = np.random.default_rng(0)
    eos = 7
    for case in range(300):
        prompt = [int(t) for t in rng.integers(8, 300, int(rng.integers(1, 6)))]
        stop = ("the", "s ") if case % 3 == 0 else ()
        params = SamplingParams(
            int(rng.integers(1, 14)), stop=stop, ignore_eos=bool(case % 5 == 0), seed=case
        )
        context = len(prompt) + int(rng.integers(1, 16))
        tokens = [eos if rng.random() < 0.06 else int(t) for t in rng.integers(8, 300, 20)]
        times = np.cumsum(rng.uniform(0.001, 0.01, 20)).tolist()

        one, many = (Sequence(list(prompt), params, tokenizer, eos, context) for _ in "ab")
        many.created = one.created
        for seq in (one, many):
            seq._whole = case % 2 == 0
            seq.accept(tokens[0], times[0])  # the prefill's token
        gaps_one, gaps_many = [], []
        for k in range(1, 20):
            if one.done:
                break
            since = one.accept(tokens[k], times[k])
            if since is not None:
                gaps_one.append(since)
        at = 1
        while at < 20 and not many.done:  # blocks of 1-5 tokens
            width = int(rng.integers(1, 6))
            gaps_many += many.accept_many(tokens[at : at + width], times[at : at + width])
            at += width
        assert many.generated == one.generated, case
        assert many.finished == one.finished, case
        assert (many.first_token_at, many.last_token_at) == (one.first_token_at, one.last_token_at)
        assert gaps_many == pytest.approx(gaps_one), case
        events = [[q.get_nowait() for _ in range(q.qsize())] for q in (one.events, many.events)]
        assert events[1] == events[0], case
    assert many.accept_many([], []) == []


def test_a_stop_sequence_ends_the_text_before_it(tokenizer: Tokenizer) -> None:
    deltas, whole = feed(tokenizer, "Open the file. Then close it.", stop=("Then",))
    assert whole == "Open the file. "
    assert "".join(deltas) == whole
    assert not any("Th" in d for d in deltas)  # the start of the stop was held back


def test_a_partial_stop_that_does_not_complete_is_released(tokenizer: Tokenizer) -> None:
    deltas, whole = feed(tokenizer, "The Thing is here", stop=("Then",))
    assert "".join(deltas) == whole == "The Thing is here"


def cache(rows: int, length: int, value: float) -> list[np.ndarray]:
    return [np.full((rows, 2, length, 4), value, dtype=np.float32) for _ in range(2)]


def test_rows_are_slots_placed_left_padded_and_compacted_on_demand() -> None:
    batch = KVBatch()
    batch.place([0], cache(1, 3, 1.0), np.ones((1, 3), dtype=np.int64))
    batch.place([1, 2], cache(2, 5, 2.0), np.ones((2, 5), dtype=np.int64))
    assert (batch.rows, batch.length, batch.padded_tokens) == (3, 5, 15)
    assert batch.mask[0].tolist() == [0, 0, 1, 1, 1]
    assert batch.cache[0][0, 0, :2].sum() == 0 and batch.cache[0][0, 0, 2:].min() == 1.0
    batch.advance(cache(3, 6, 3.0), np.concatenate([batch.mask, np.ones((3, 1), np.int64)], 1))
    assert batch.length == 6 and batch.mask[:, -1].tolist() == [1, 1, 1]
    # row 1 finished: a new sequence takes its slot, nothing else moves
    before = batch.cache[0]
    batch.place([1], cache(1, 2, 4.0), np.ones((1, 2), dtype=np.int64))
    assert batch.cache[0] is before and batch.rows == 3
    assert batch.mask[1].tolist() == [0, 0, 0, 0, 1, 1]
    assert batch.cache[0][1, 0, 4:].min() == 4.0
    assert batch.unused_columns([1]) == 4 and batch.unused_columns([0, 1]) == 2
    batch.keep([1])  # compaction: one row left, its unused leading columns cut
    assert (batch.rows, batch.length) == (1, 2)
    assert batch.mask.tolist() == [[1, 1]] and batch.cache[0].min() == 4.0
    batch.keep([])
    assert batch.rows == 0 and batch.padded_tokens == 0


def test_in_place_slots_run_packed_and_move_only_the_last_rows_into_holes() -> None:
    shape = DecoderShape(
        layers=1,
        heads=2,
        head_dim=4,
        dtype=np.dtype(np.float32),
        past_names=("past.key", "past.value"),
        present_names=("present.key", "present.value"),
        inplace=True,
    )
    store = SlotKV(shape, capacity=16, max_rows=4)
    step = store.prefill([[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]], range(4), pad_id=0)
    assert step.into == {"present.key": "past.key", "present.value": "past.value"}
    assert step.feeds["seqlens_k"].tolist() == [2, 0, 1, 3]
    assert step.feeds["input_ids"].tolist()[1] == [4, 0, 0, 0]  # right-padded
    buffer = step.feeds["past.key"]
    assert buffer.shape == (4, 2, 16, 4)
    for row in range(4):  # what the model would write: each row's tokens, marked by its row
        buffer[row, :, : step.lengths[row]] = row + 1
    logits = store.after_prefill(step, {"logits": np.arange(4 * 4 * 3).reshape(4, 4, 3)})
    assert logits[:, 0].tolist() == [6, 12, 27, 45]  # each prompt's own last position
    assert (store.rows, store.held_tokens, store.footprint(4, 5)) == (4, 64, 64)
    assert store.footprint(5, 5) > 1 << 40 and store.footprint(1, 16) > 1 << 40  # never fits
    decode = store.decode(np.array([1, 1, 1, 1]), np.array([3, 1, 2, 15]))
    assert decode.feeds["seqlens_k"].tolist() == [3, 1, 2, 15]
    assert int(decode.feeds["total_sequence_length"]) == 16
    assert decode.feeds["past.key"].base is not None  # a view of the buffer, not a copy
    store.after_decode(decode, {})
    # rows 0 and 2 leave: the last live row (3) moves into hole 0; row 1 stays where it is
    assert store.compact([1, 3]) == [3, 1]
    assert store.rows == 2
    assert buffer[0, :, :4].min() == buffer[0, :, :4].max() == 4  # row 3's real tokens
    assert buffer[1, :, :1].min() == 2
    with pytest.raises(ValueError, match="join after the running rows"):
        store.prefill([[1]], [0], pad_id=0)
    assert store.prefill([[1]], [2], pad_id=0).feeds["past.key"].shape[0] == 1
