"""Agreement of two versions' answers: top labels, embedding cosine, rankings, tensor
differences."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.config.model import ModelConfig
from inferd.engine.requests import agreement
from inferd.tasks.classification import top_k
from inferd.verbs import classify, embed, rerank
from inferd.verbs.classify import Classified
from inferd.verbs.embed import Embeddings
from inferd.verbs.rerank import Reranked

LABELS = ["positive", "negative"]
CONFIG = ModelConfig()


def classified(rows: list[list[float]]) -> Classified:
    probabilities = np.array(rows, np.float32)
    return Classified(top_k(probabilities, LABELS, 1), probabilities, [1] * len(rows))


def test_label_agreement_is_the_share_of_texts_with_the_same_top_label() -> None:
    stable = classified([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    candidate = classified([[0.8, 0.2], [0.1, 0.9], [0.4, 0.6], [0.45, 0.55]])
    assert classify.agreement(CONFIG, stable, candidate) == pytest.approx(0.75)


def test_embedding_agreement_is_the_mean_cosine() -> None:
    a = Embeddings(np.array([[1, 0], [0, 1]], np.float32), [1, 1])
    b = Embeddings(np.array([[1, 0], [1, 1]], np.float32), [1, 1])
    assert embed.agreement(CONFIG, a, b) == pytest.approx((1 + 2**-0.5) / 2)
    other_size = Embeddings(np.ones((2, 3), np.float32), [1, 1])
    assert embed.agreement(CONFIG, a, other_size) == 0.0


def test_tensors_agree_within_the_tolerance_only() -> None:
    a = {"y": np.array([1.0, 2.0], np.float32)}
    assert agreement.tensors(a, {"y": np.array([1.0, 2.0005], np.float32)}, 1e-3) == 1.0
    assert agreement.tensors(a, {"y": np.array([1.0, 2.1], np.float32)}, 1e-3) == 0.0
    assert agreement.max_abs_diff(a, {"y": np.ones(3, np.float32)}) == float("inf")
    assert agreement.max_abs_diff(a, {"z": a["y"]}) == float("inf")


def reranked(scores: list[float]) -> Reranked:
    return Reranked(np.array(scores, np.float32), [3] * len(scores))


def test_ranking_agreement_is_the_share_of_places_ordered_alike() -> None:
    stable = reranked([0.9, 0.1, 0.5, 0.3])  # order 0, 2, 3, 1
    assert rerank.agreement(CONFIG, stable, reranked([0.8, 0.2, 0.6, 0.4])) == 1.0  # other scores
    assert rerank.agreement(CONFIG, stable, reranked([0.9, 0.1, 0.3, 0.5])) == 0.5  # 0, 3, 2, 1
    assert rerank.agreement(CONFIG, stable, reranked([0.9, 0.1])) == 0.0
    assert rerank.agreement(CONFIG, reranked([]), reranked([])) == 1.0
