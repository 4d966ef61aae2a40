"""The encoder graphs built from weights: the pair scorer (the demo's reranker) scores a
(query, text) pair fed as a reranker's tokenizer feeds it with exactly the cosine of the two
texts' embeddings as the encoder gives them one at a time, alone or padded in a batch."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from inferd.tools.encoder_graph import build_encoder, build_pair_scorer
from inferd.tools.encoder_shape import EncoderShape, random_weights

SHAPE = EncoderShape(layers=2, hidden=32, heads=4, intermediate=64, vocab=50, max_positions=64)
CLS, SEP = 1, 2


def session(model: object) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]


def embedding(encoder: ort.InferenceSession, tokens: list[int]) -> np.ndarray:
    ids = np.array([[CLS, *tokens, SEP]], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    vector = encoder.run(["mean_pooled"], feeds)[0][0]
    return vector / np.linalg.norm(vector)


def test_a_pair_scores_the_cosine_of_its_two_texts_embeddings() -> None:
    weights = random_weights(SHAPE, seed=3)
    encoder = session(build_encoder(weights, SHAPE, last_hidden_state=False))
    scorer = session(build_pair_scorer(weights, SHAPE))
    rng = np.random.default_rng(0)
    pairs = [
        (
            [int(t) for t in rng.integers(3, SHAPE.vocab, q)],
            [int(t) for t in rng.integers(3, SHAPE.vocab, d)],
        )
        for q, d in ((3, 9), (7, 2), (1, 1), (12, 20))
    ]
    rows = [[CLS, *q, SEP, *d, SEP] for q, d in pairs]
    width = max(map(len, rows)) + 3  # padded past the longest
    ids = np.zeros((len(rows), width), np.int64)
    mask, types = np.zeros_like(ids), np.zeros_like(ids)
    for i, ((query, _), row) in enumerate(zip(pairs, rows, strict=True)):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
        types[i, len(query) + 2 : len(row)] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    batched = scorer.run(["scores"], feeds)[0]
    assert batched.shape == (len(rows), 1)
    for i, (query, text) in enumerate(pairs):
        expected = float(embedding(encoder, query) @ embedding(encoder, text))
        alone = {name: value[i : i + 1, : len(rows[i])] for name, value in feeds.items()}
        served_alone = float(scorer.run(["scores"], alone)[0][0, 0])
        assert abs(served_alone - float(batched[i, 0])) < 1e-5
        assert abs(float(batched[i, 0]) - expected) < 1e-5, (i, batched[i, 0], expected)


def test_unrelated_texts_score_lower_than_a_text_with_itself() -> None:
    weights = random_weights(SHAPE, seed=4)
    scorer = session(build_pair_scorer(weights, SHAPE))
    query = [5, 6, 7, 8]
    rows = [[CLS, *query, SEP, *query, SEP], [CLS, *query, SEP, 40, 41, 42, 43, SEP]]
    ids = np.array(rows, np.int64)
    types = np.array([[0] * 6 + [1] * 5] * 2, np.int64)
    scores = scorer.run(
        ["scores"], {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": types}
    )[0][:, 0]
    assert scores[0] > 0.999 and scores[1] < scores[0]
