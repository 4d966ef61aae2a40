"""What a loaded model version does: the `Servable` base, and the answers of the text tasks.

One class per model kind (inferd.config.kinds) derives from `Servable` and overrides the
requests it serves; the base refuses every other one with a 4004 that says what the model
does instead. Nothing above the engine asks which kind a model is: it calls the verb, and the
servable answers or refuses.

A servable is built ready (by the loader, once its runtimes are warm) and lives until `close`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from inferd.config.model import ModelConfig
from inferd.errors import InferdError, InvalidInputError
from inferd.generation.chat import Prompt
from inferd.generation.params import SamplingRequest
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.observer import Observer, TextsServed, notify
from inferd.runtime.dispatch import InstanceLoad
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, TensorSpec
from inferd.tasks.classification import Prediction

TEXT_INPUT = "text"
"""Text models take their texts over KServe V2 as one BYTES input of this name."""


@dataclass(frozen=True)
class ParameterSpec:
    """A request or response parameter a model reads or writes (KServe V2 `parameters`), with
    its V2 parameter type: `bool`, `int64`, `double` or `string`."""

    name: str
    type: str
    direction: str
    """`request` (the model reads it) or `response` (its answers carry it)."""


@dataclass(frozen=True)
class Embeddings:
    vectors: Array
    """[texts, dimension], float32."""
    token_counts: list[int]


@dataclass(frozen=True)
class Classified:
    predictions: list[Prediction]
    probabilities: Array
    token_counts: list[int]


@dataclass(frozen=True)
class Reranked:
    scores: Array
    """[texts], float32: each text's score against the query, in the order given."""
    token_counts: list[int]
    """Tokens of each (query, text) pair."""


class Servable:
    kind: ClassVar[str] = "model"
    """What it is, in the words of its refusals ("an embedding model", ...)."""

    def __init__(
        self,
        model: str,
        version: int,
        config: ModelConfig,
        inputs: tuple[TensorSpec, ...],
        outputs: tuple[TensorSpec, ...],
        providers: tuple[str, ...],
        observer: Observer,
        graph: tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]] | None = None,
        parameters: tuple[ParameterSpec, ...] = (),
    ) -> None:
        self.model = model
        self.version = version
        self.config = config
        self.inputs = inputs
        """What clients send over V2 (text models: a BYTES `text` input; a generator:
        `text_input`)."""
        self.outputs = outputs
        self.graph_inputs, self.graph_outputs = graph if graph is not None else (inputs, outputs)
        """The model file's own tensors, as its configuration shows them (a generator's
        `input_ids`, `past_key_values.*`, ...): its inputs and outputs unless they differ."""
        self.parameters = parameters
        """The V2 parameters its requests read and its answers carry, beside its tensors."""
        self.providers = providers
        self._observer = observer
        self._pool: InstancePool | None = None
        """The runtime instances it runs on, when it has its own (not a zero-shot model's)."""

    @property
    def queued_items(self) -> int:
        return 0

    @property
    def queued_requests(self) -> int:
        """Requests waiting to start (an item count may count one request in parts)."""
        return 0

    @property
    def kv_usage(self) -> tuple[int, int] | None:
        """A generator's KV cache: the tokens it holds and the most it may hold (None for
        the kinds that keep none)."""
        return None

    @property
    def instances(self) -> Sequence[InstanceLoad]:
        """Each runtime instance's work and learned speed (none when it runs on another's)."""
        return self._pool.loads if self._pool is not None else ()

    @property
    def holder(self) -> Servable:
        """The servable whose queue holds its requests: itself, or the one it runs on."""
        return self

    @property
    def saturated(self) -> bool:
        """Whether its next request would be refused 4290 whatever it holds (a full queue)."""
        return False

    @property
    def capacity(self) -> int | None:
        """The requests its queue holds at most (None: no bound). Counted against the
        requests read and unanswered, those running included: a bound on the safe side."""
        return None

    def queue_time_refusal(self, arriving: int) -> InferdError | None:
        """The 4290 its next request would get for waiting longer in its queue than the
        model's `max_queue_time_ms` allows, `arriving` requests to it being read and not
        answered yet; None when it would not (or its queue has no such bound)."""
        return None

    # -- requests: each kind overrides what it serves ------------------------------------

    async def infer(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None,
        deadline: float | None,
        max_rows_per_request: int,
    ) -> dict[str, Array]:
        """KServe V2: validates, runs, and returns the named outputs (all when none are)."""
        if output_names:
            known = {o.name for o in self.outputs}
            unknown = sorted(set(output_names) - known)
            if unknown:
                raise InvalidInputError(
                    f"unknown output(s) {unknown}; the model gives {sorted(known)}"
                )
        outputs = await self._infer(feeds, deadline, max_rows_per_request)
        if output_names:
            return {name: outputs[name] for name in output_names}
        return outputs

    async def _infer(
        self, feeds: Feeds, deadline: float | None, max_rows_per_request: int
    ) -> dict[str, Array]:
        raise InvalidInputError(f"model '{self.model}' is {self.kind}: it takes no V2 tensors")

    async def embed(
        self, texts: Sequence[str], deadline: float | None, dimensions: int | None = None
    ) -> Embeddings:
        raise InvalidInputError(f"model '{self.model}' is {self.kind}; it does not embed texts")

    async def classify(self, texts: Sequence[str], k: int, deadline: float | None) -> Classified:
        raise InvalidInputError(f"model '{self.model}' is {self.kind}; it does not classify texts")

    async def generate(self, prompt: Prompt, sampling: SamplingRequest, n: int = 1) -> list[Seq]:
        raise InvalidInputError(f"model '{self.model}' is {self.kind}; it does not generate text")

    async def rerank(
        self, query: str, texts: Sequence[str], raw_scores: bool, deadline: float | None
    ) -> Reranked:
        raise InvalidInputError(f"model '{self.model}' is {self.kind}; it does not rerank texts")

    # -- life ----------------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> bool:
        """Waits for what is queued and running (True when it all finished in time)."""
        return True

    async def stop(self) -> None:
        """Answers what is queued and running with 5030 at once and takes no more work; the
        runtimes stay open (a forced shutdown, or a drain past its time)."""

    async def close(self) -> None:
        """Answers what is left, stops its loop, frees its runtimes."""

    def report_texts(
        self,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None:
        """Tells the observer of a request's texts (lengths; top label and score each)."""
        notify(self._observer, TextsServed(self.model, token_counts, top_labels, top_scores))
