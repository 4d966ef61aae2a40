"""What a loaded model version does: the `Servable` base.

One class per model kind (inferd.config.kinds) derives from `Servable` and implements the
verbs its row of the kinds table names (`embed`, `classify`, ...: each verb's module,
inferd.verbs, says what it calls); a verb asked of a kind that does not accept it is refused
by the verb, with a 4004 that says what the model is. Every kind answers KServe V2 (`infer`):
the base refuses V2 tensors, each kind maps them to its own answer.

A servable is built ready (by the loader, once its runtimes are warm) and lives until `close`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from inferd.config.model import ModelConfig
from inferd.errors import InferdError, InvalidInputError
from inferd.observability.observer import Observer, TextsServed, notify
from inferd.runtime.dispatch import InstanceLoad
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, TensorSpec

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
    ) -> dict[str, Array]:
        """KServe V2: validates, runs, and returns the named outputs (all when none are)."""
        if output_names:
            known = {o.name for o in self.outputs}
            unknown = sorted(set(output_names) - known)
            if unknown:
                raise InvalidInputError(
                    f"unknown output(s) {unknown}; the model gives {sorted(known)}"
                )
        outputs = await self._infer(feeds, deadline)
        if output_names:
            return {name: outputs[name] for name in output_names}
        return outputs

    async def _infer(self, feeds: Feeds, deadline: float | None) -> dict[str, Array]:
        raise InvalidInputError(f"model '{self.model}' is {self.kind}: it takes no V2 tensors")

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
