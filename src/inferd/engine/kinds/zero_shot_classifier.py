"""The zero-shot classifier: no runtime of its own; it scores texts by the cosine of their
embeddings (from its base model's servable) with its labels' embedded descriptions."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

from inferd.config.model import ModelConfig
from inferd.engine.kinds.servable import Servable
from inferd.engine.kinds.text_models import (
    TEXT_INPUTS,
    LabelsOverV2,
    label_outputs,
    report_classified,
)
from inferd.errors import InvalidInputError
from inferd.observability.observer import Observer
from inferd.observability.trace import current_trace
from inferd.tasks.classification import top_k
from inferd.tasks.zero_shot import ZeroShotTask
from inferd.verbs.classify import Classified
from inferd.verbs.embed import Embedder


class ZeroShotServable(LabelsOverV2):
    kind = "a zero-shot classifier"

    def __init__(
        self,
        model: str,
        config: ModelConfig,
        task: ZeroShotTask,
        base: Servable,
        observer: Observer,
    ) -> None:
        super().__init__(
            model, 1, config, TEXT_INPUTS, label_outputs(len(task.labels)), base.providers, observer
        )
        self._task = task
        self._base = base
        self._embedder = cast(Embedder, base)  # (`build` checked its kind embeds)

    @classmethod
    async def build(
        cls, model: str, config: ModelConfig, base: Servable, observer: Observer
    ) -> ZeroShotServable:
        """Embeds the label descriptions with `base` (an embedding servable, ready)."""
        if config.zero_shot is None:
            raise ValueError(f"model '{model}' is not a zero-shot model")
        if "embed" not in base.config.kind.verbs:
            raise InvalidInputError(
                f"base model '{config.zero_shot.base_model}' is not an embedding model"
            )
        task = ZeroShotTask(config.zero_shot)
        embedded = await cast(Embedder, base).embed(task.descriptions, deadline=None)
        task.set_label_vectors(embedded.vectors)
        return cls(model, config, task, base, observer)

    @property
    def holder(self) -> Servable:
        return self._base.holder

    async def classify(self, texts: Sequence[str], k: int, deadline: float | None) -> Classified:
        embedded = await self._embedder.embed(texts, deadline)
        started = time.perf_counter()
        probabilities = self._task.probabilities(embedded.vectors)
        predictions = top_k(probabilities, self._task.labels, k)
        result = Classified(predictions, probabilities, embedded.token_counts)
        current_trace().mark("respond", started)
        report_classified(self, result)
        return result
