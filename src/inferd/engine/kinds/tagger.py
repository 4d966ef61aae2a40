"""The token tagger (`task: token-classification`: named entities, parts of speech): texts in,
through the tokenizer, a label for each token out, and the entities its tokens form.

This module is the whole kind: its servable and its own verb, `tag` (request, answer, refusal,
its HTTP form at `/tag`); its row in the kinds table names both, and the engine and the data
plane serve it from there. Its labels are the `classification` section's (`labels`, `output`:
the logits, [batch, tokens, labels]). Over KServe V2, HTTP and gRPC, it takes the BYTES `text`
input and answers `entities`: each text's entities, as JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from inferd.config.model import ModelConfig
from inferd.engine.kinds.build import BuildContext
from inferd.engine.kinds.text_models import TextServable, texts_of
from inferd.observability.trace import current_trace
from inferd.runtime.protocol import Array, Feeds, TensorSpec
from inferd.tasks.classification import ClassificationTask
from inferd.verbs.verb import Form, Served, Verb, VerbBody

OUTSIDE = "O"
"""The label of a token in no entity (IOB)."""


@dataclass(frozen=True, slots=True)
class TokenTag:
    start: int
    end: int
    """Where the token lies in its text, in characters."""
    label: str
    score: float


@dataclass(frozen=True)
class Tagged:
    tags: list[list[TokenTag]]
    """Each text's tokens, in order (the tokenizer's special tokens left out)."""
    token_counts: list[int]


class TagRequest(VerbBody):
    texts: list[str] = Field(description="The texts to tag.")
    return_tokens: bool = Field(False, description="Each token's label and score too.")


@dataclass
class _Run:
    """An entity being read: its type, its span so far, its tokens' scores."""

    label: str
    start: int
    end: int
    scores: list[float]


def entities(text: str, tags: Sequence[TokenTag]) -> list[dict[str, object]]:
    """The entities of one text: runs of tokens of one type (`B-` begins one, `I-` or no
    prefix goes on; `O` is outside), each with its text, span and mean score; Hugging Face's
    "simple" aggregation."""
    runs: list[_Run] = []
    reading = False
    for tag in tags:
        begins, kind = _split(tag.label)
        if kind == OUTSIDE:
            reading = False
        elif reading and runs[-1].label == kind and not begins:
            runs[-1].end = tag.end
            runs[-1].scores.append(tag.score)
        else:
            runs.append(_Run(kind, tag.start, tag.end, [tag.score]))
            reading = True
    return [
        {"label": r.label, "text": text[r.start : r.end], "start": r.start, "end": r.end}
        | {"score": float(np.mean(r.scores))}
        for r in runs
    ]


def _split(label: str) -> tuple[bool, str]:
    """Whether the label begins an entity, and its type."""
    if label[:2] in ("B-", "I-"):
        return label[0] == "B", label[2:]
    return False, label


class TaggerServable(TextServable):
    kind = "a token tagger"

    def __init__(self, ctx: BuildContext) -> None:
        self._task = ClassificationTask(ctx.config.classification, ctx.loaded.outputs)
        outputs = (TensorSpec("entities", "BYTES", (-1,), ("batch",)),)
        super().__init__(ctx, self._task.output, outputs)

    @classmethod
    def build(cls, ctx: BuildContext) -> TaggerServable:
        return cls(ctx)

    async def tag(self, texts: Sequence[str], deadline: float | None) -> Tagged:
        encoded, outputs = await self._run_texts(texts, deadline, spans=True)
        started = time.perf_counter()
        labels = self._task.labels
        tags = []
        for out, spans in zip(outputs, encoded.spans or (), strict=True):
            probabilities = self._task.probabilities(out.reshape(len(spans), len(labels)))
            best = probabilities.argmax(axis=-1)
            tags.append(
                [
                    TokenTag(span[0], span[1], labels[b], float(probabilities[i, b]))
                    for i, (span, b) in enumerate(zip(spans, best, strict=True))
                    if span is not None
                ]
            )
        trace = current_trace()
        trace.mark("respond", started)
        trace.output_length = sum(len(t) for t in tags)
        self.report_texts(encoded.token_counts)
        return Tagged(tags, encoded.token_counts)

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        texts = texts_of(self.model, feeds)
        tagged = await self.tag(texts, deadline)
        found = [json.dumps(entities(t, tags)) for t, tags in zip(texts, tagged.tags, strict=True)]
        return {"entities": np.array(found, dtype=object)}


def agreement(config: ModelConfig, stable: Tagged, candidate: Tagged) -> float:
    """The share of tokens both versions give the same label."""
    same = [
        a.label == b.label
        for x, y in zip(stable.tags, candidate.tags, strict=True)
        for a, b in zip(x, y, strict=False)
    ]
    return float(np.mean(same)) if same else 1.0


def _answer(body: TagRequest, request: TagRequest, result: Tagged, served: Served) -> object:
    answer: dict[str, object] = {
        "entities": [entities(t, tags) for t, tags in zip(body.texts, result.tags, strict=True)]
    }
    if body.return_tokens:
        answer["tokens"] = [
            [
                {"text": text[t.start : t.end], "start": t.start, "end": t.end}
                | {"label": t.label, "score": t.score}
                for t in tags
            ]
            for text, tags in zip(body.texts, result.tags, strict=True)
        ]
    return answer | {
        "model": served.model,
        "version": served.version,
        "usage": {"tokens": sum(result.token_counts)},
        "latency_ms": served.latency_ms,
    }


async def _run(servable: TaggerServable, request: TagRequest, deadline: float | None) -> Tagged:
    return await servable.tag(request.texts, deadline)


TAG: Verb[TagRequest, Tagged] = Verb(
    name="tag",
    purpose="tag",
    does="tag tokens",
    run=_run,
    arguments=lambda request: (list(request.texts),),
    agree=agreement,
    forms=(Form("/tag", "Tag each token of texts", TagRequest, "tasks", lambda b: b, _answer),),
)
