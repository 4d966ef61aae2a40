"""Sampling rules on hand-made logits: greedy, temperature, top-k, top-p, repetition penalty,
and seeds."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.config.model import GenerationConfig
from inferd.errors import InputTooLongError, InvalidInputError
from inferd.generation.params import SamplingParams, build_params, check_prompt
from inferd.generation.sampling import (
    apply_penalties,
    apply_repetition_penalty,
    fits_ranked,
    sample_batch,
    sample_ranked,
    top_candidates,
)

LOGITS = np.array([1.0, 3.0, 2.0, 0.5, -1.0], dtype=np.float32)


def next_token(
    logits: np.ndarray, params: SamplingParams, rng: np.random.Generator, seen: object
) -> int:
    return sample_batch(logits[None, :], [params], [rng], [seen])[0]  # type: ignore[list-item]


def draws(params: SamplingParams, n: int = 2000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([next_token(LOGITS, params, rng, ()) for _ in range(n)])


def test_greedy_takes_the_most_likely() -> None:
    assert next_token(LOGITS, SamplingParams(5, temperature=0.0), np.random.default_rng(), ()) == 1


def test_temperature_one_follows_the_softmax() -> None:
    counts = np.bincount(draws(SamplingParams(5)), minlength=5) / 2000
    expected = np.exp(LOGITS) / np.exp(LOGITS).sum()
    np.testing.assert_allclose(counts, expected, atol=0.03)


def test_top_k_and_top_p_cut_the_tail() -> None:
    assert set(draws(SamplingParams(5, top_k=2)).tolist()) == {1, 2}
    assert set(draws(SamplingParams(5, top_k=1)).tolist()) == {1}
    # softmax mass: token 1 0.63, token 2 0.23, token 0 0.09: top_p 0.8 keeps {1, 2}
    assert set(draws(SamplingParams(5, top_p=0.8)).tolist()) == {1, 2}
    assert set(draws(SamplingParams(5, top_p=0.01)).tolist()) == {1}


def test_low_temperature_sharpens() -> None:
    cold = draws(SamplingParams(5, temperature=0.2))
    assert (cold == 1).mean() > 0.99


def test_repetition_penalty_makes_seen_tokens_less_likely() -> None:
    penalized = apply_repetition_penalty(LOGITS.astype(np.float64), {1, 4}, 2.0)
    assert penalized[1] == 1.5 and penalized[4] == -2.0  # positive divided, negative multiplied
    assert penalized[0] == 1.0
    params = SamplingParams(5, temperature=0.0, repetition_penalty=4.0)
    assert next_token(LOGITS, params, np.random.default_rng(), {1}) == 2


def test_a_seed_reproduces_the_draws() -> None:
    params = SamplingParams(5, temperature=1.5, seed=42)
    assert draws(params, 50, seed=42).tolist() == draws(params, 50, seed=42).tolist()
    assert draws(params, 50, seed=42).tolist() != draws(params, 50, seed=43).tolist()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_new_tokens", 0, "max_length"),
        ("max_new_tokens", 5000, "max_length"),
        ("temperature", -0.1, "temperature"),
        ("temperature", 9.0, "temperature"),
        ("top_k", -1, "top_k"),
        ("top_p", 0.0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("repetition_penalty", 0.0, "repetition_penalty"),
        ("seed", -1, "seed"),
        ("stop", [""], "stop sequence 0"),
        ("stop", ["x"] * 9, "at most 8"),
    ],
)
def test_out_of_range_parameters_are_4004(field: str, value: object, message: str) -> None:
    values: dict[str, object] = {
        "max_new_tokens": None,
        "temperature": None,
        "top_k": None,
        "top_p": None,
        "repetition_penalty": None,
        "seed": None,
        "stop": None,
    }
    values[field] = value
    with pytest.raises(InvalidInputError, match=message):
        build_params(GenerationConfig(), **values)  # type: ignore[arg-type]


def test_defaults_come_from_the_model_config() -> None:
    params = build_params(
        GenerationConfig(max_new_tokens=7),
        max_new_tokens=None,
        temperature=None,
        top_k=None,
        top_p=None,
        repetition_penalty=None,
        seed=None,
        stop="END",
    )
    assert params == SamplingParams(7, stop=("END",))


def test_a_prompt_must_leave_room_for_a_token() -> None:
    check_prompt(9, 10)
    with pytest.raises(InputTooLongError, match="context window is 10"):
        check_prompt(10, 10)
    with pytest.raises(InvalidInputError):
        check_prompt(0, 10)


def test_a_row_samples_the_same_alone_and_in_a_batch() -> None:
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((6, 300)).astype(np.float32)
    cases = [(40, 0.9), (0, 1.0), (7, 0.5), (300, 0.95), (1, 1.0), (0, 0.3)]
    params = [
        SamplingParams(5, temperature=0.8, top_k=k, top_p=p, seed=i)
        for i, (k, p) in enumerate(cases)
    ]
    for _ in range(20):  # the generators advance alike on both sides
        alone_rngs = [np.random.default_rng(p.seed) for p in params]
        batch_rngs = [np.random.default_rng(p.seed) for p in params]
        for _step in range(5):
            together = sample_batch(logits, params, batch_rngs, [()] * 6)
            alone = [
                sample_batch(logits[r : r + 1], [params[r]], [alone_rngs[r]], [()])[0]
                for r in range(6)
            ]
            assert together == alone
        logits = rng.standard_normal((6, 300)).astype(np.float32)


def _reference_top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best first, equal scores by the lower id: a full sort, row by row."""
    ids = np.array([sorted(range(len(row)), key=lambda i: (-row[i], i))[:k] for row in scores])
    return np.take_along_axis(scores, ids, axis=1), ids


def test_top_candidates_break_ties_by_the_lower_id_also_at_the_cut() -> None:
    rng = np.random.default_rng(3)
    # few distinct values: most cuts fall among equal scores
    scores = rng.integers(0, 6, size=(8, 40)).astype(np.float32)
    for k in (1, 5, 13, 39, 40):
        values, ids = top_candidates(scores, k)
        expected_values, expected_ids = _reference_top(scores, k)
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_array_equal(values, expected_values)


def test_ranked_candidates_give_the_tokens_the_full_logits_give() -> None:
    """What a decoder's own TopK outputs lead to equals the draw on its logits, seed for seed."""
    rng = np.random.default_rng(11)
    width = 16
    params = [
        SamplingParams(5, temperature=0.8, top_k=10, seed=1),
        SamplingParams(5, temperature=0.0),
        SamplingParams(5, temperature=1.3, top_k=16, top_p=0.7, seed=2),
        SamplingParams(5, temperature=0.5, top_k=1, seed=3),
        SamplingParams(5, temperature=1.0, top_k=4, seed=4),
    ]
    assert all(fits_ranked(p, width) for p in params)
    full_rngs = [np.random.default_rng(p.seed) for p in params]
    ranked_rngs = [np.random.default_rng(p.seed) for p in params]
    for _ in range(200):
        logits = rng.standard_normal((5, 300)).astype(np.float32)
        logits[:, :20] = np.round(logits[:, :20])  # ties among the best
        values, ids = top_candidates(logits, width)
        full = sample_batch(logits, params, full_rngs, [()] * 5)
        assert sample_ranked(values, ids, params, ranked_rngs) == full
    # only some rows drawn
    values, ids = top_candidates(logits, width)
    mixed = [SamplingParams(5, temperature=0.0), params[0]]
    ranked = sample_ranked(values[:2], ids[:2], mixed, [np.random.default_rng(9)] * 2)
    assert ranked == sample_batch(logits[:2], mixed, [np.random.default_rng(9)] * 2, [(), ()])


def test_what_the_ranked_candidates_cannot_serve() -> None:
    assert not fits_ranked(SamplingParams(5, temperature=0.8), 64)  # no cut: the vocabulary
    assert not fits_ranked(SamplingParams(5, temperature=0.8, top_k=65), 64)
    assert not fits_ranked(SamplingParams(5, temperature=0.0, repetition_penalty=1.2), 64)
    assert fits_ranked(SamplingParams(5, temperature=0.8, top_k=64, top_p=0.9), 64)


def test_nan_scores_still_give_a_token() -> None:
    logits = np.full((2, 50), np.nan, dtype=np.float32)
    logits[1, 7] = 3.0
    params = [SamplingParams(5, temperature=0.8, top_k=5, seed=1)] * 2
    tokens = sample_batch(logits, params, [np.random.default_rng(1)] * 2, [(), ()])
    assert all(0 <= t < 50 for t in tokens)


def test_presence_and_frequency_penalties_are_openais_on_the_answers_tokens() -> None:
    params = SamplingParams(1, temperature=0.0, presence_penalty=0.5, frequency_penalty=0.75)
    counts = {1: 2, 3: 1}  # token 1 came twice in the answer, token 3 once
    out = apply_penalties(LOGITS, params, {0, 1, 3}, counts)
    assert out[1] == pytest.approx(3.0 - 0.5 - 2 * 0.75)
    assert out[3] == pytest.approx(0.5 - 0.5 - 0.75)
    assert out[0] == LOGITS[0] and out[2] == LOGITS[2]  # seen in the prompt only: untouched
    assert LOGITS[1] == 3.0  # the model's scores stay as they came
    # token 1 (best) loses to token 2 once penalized
    rng = np.random.default_rng(0)
    assert sample_batch(LOGITS[None, :], [params], [rng], [set()], [counts]) == [2]
    assert params.penalized and not fits_ranked(params, 64)
    assert apply_penalties(LOGITS, SamplingParams(1), {1}, counts) is LOGITS  # none: no copy


@pytest.mark.parametrize("name", ["presence_penalty", "frequency_penalty"])
def test_penalties_out_of_range_are_refused_by_name(name: str) -> None:
    with pytest.raises(InvalidInputError, match=name) as refused:
        build_params(
            GenerationConfig(),
            max_new_tokens=None,
            temperature=None,
            top_k=None,
            top_p=None,
            repetition_penalty=None,
            seed=None,
            stop=None,
            **{name: 2.5},  # type: ignore[arg-type]
        )
    assert refused.value.param == name
