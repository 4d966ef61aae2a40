"""A request's generation parameters, checked against the model's limits (4004 when out of
range, 4002 when the prompt does not fit the context window)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from inferd.config.model import GenerationConfig
from inferd.errors import InputTooLongError, InvalidInputError
from inferd.generation.grammar import GrammarRequest
from inferd.generation.logprobs import MAX_TOP_LOGPROBS

MAX_STOP_SEQUENCES = 8
MAX_STOP_CHARS = 200


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    """0 means greedy (always the most likely token)."""
    top_k: int = 0
    """0 means no top-k cut."""
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    """OpenAI's: subtracted from the logit of every token the answer already holds."""
    frequency_penalty: float = 0.0
    """OpenAI's: subtracted once for each time the answer already holds the token."""
    logprobs: int | None = None
    """When set, each token's log-probability and that many alternatives are kept."""

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalized(self) -> bool:
        """Whether a penalty changes the model's scores before the draw."""
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )


def build_params(
    config: GenerationConfig,
    *,
    max_new_tokens: int | None,
    temperature: float | None,
    top_k: int | None,
    top_p: float | None,
    repetition_penalty: float | None,
    seed: int | None,
    stop: str | list[str] | None,
    ignore_eos: bool = False,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    logprobs: int | None = None,
    length_field: str = "max_length",
) -> SamplingParams:
    """Defaults filled in, every value range-checked (InvalidInputError names the field;
    `length_field`: the name the request gave the most new tokens)."""
    new = config.max_new_tokens if max_new_tokens is None else max_new_tokens
    if not 1 <= new <= config.max_new_tokens_limit:
        raise InvalidInputError(
            f"{length_field} must be between 1 and {config.max_new_tokens_limit}; got {new}",
            param=length_field,
        )
    t = 1.0 if temperature is None else temperature
    if not 0.0 <= t <= 5.0:
        raise InvalidInputError(
            f"temperature must be between 0 and 5; got {t}", param="temperature"
        )
    k = 0 if top_k is None else top_k
    if k < 0:
        raise InvalidInputError(f"top_k must be 0 (off) or positive; got {k}", param="top_k")
    p = 1.0 if top_p is None else top_p
    if not 0.0 < p <= 1.0:
        raise InvalidInputError(f"top_p must be in (0, 1]; got {p}", param="top_p")
    r = 1.0 if repetition_penalty is None else repetition_penalty
    if not 0.0 < r <= 10.0:
        raise InvalidInputError(
            f"repetition_penalty must be in (0, 10]; got {r}", param="repetition_penalty"
        )
    if seed is not None and not 0 <= seed < 2**63:
        raise InvalidInputError(f"seed must be between 0 and 2**63 - 1; got {seed}", param="seed")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOP_SEQUENCES:
        raise InvalidInputError(
            f"at most {MAX_STOP_SEQUENCES} stop sequences; got {len(stops)}", param="stop"
        )
    for i, s in enumerate(stops):
        if not s or len(s) > MAX_STOP_CHARS:
            raise InvalidInputError(
                f"stop sequence {i} must have 1 to {MAX_STOP_CHARS} characters", param="stop"
            )
    presence = _penalty(presence_penalty, "presence_penalty")
    frequency = _penalty(frequency_penalty, "frequency_penalty")
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise InvalidInputError(
            f"logprobs asks for 0 to {MAX_TOP_LOGPROBS} alternatives; got {logprobs}",
            param="logprobs",
        )
    return SamplingParams(new, t, k, p, r, seed, stops, ignore_eos, presence, frequency, logprobs)


def _penalty(value: float | None, name: str) -> float:
    """An OpenAI penalty: between -2 and 2 (0 when unset)."""
    if value is None:
        return 0.0
    if not -2.0 <= value <= 2.0:
        raise InvalidInputError(f"{name} must be between -2 and 2; got {value}", param=name)
    return float(value)


def check_prompt(prompt_tokens: int, context_length: int) -> None:
    if prompt_tokens == 0:
        raise InvalidInputError("the prompt encodes to no tokens")
    if prompt_tokens >= context_length:
        raise InputTooLongError(
            f"the prompt has {prompt_tokens} tokens; the context window is {context_length} "
            "and at least one new token must fit"
        )


class SamplingFields(Protocol):
    """A request's sampling fields, whatever its protocol (an HTTP body, gRPC parameters)."""

    temperature: float | None
    top_k: int | None
    top_p: float | None
    repetition_penalty: float | None
    seed: int | None
    stop: str | list[str] | None
    ignore_eos: bool
    presence_penalty: float | None
    frequency_penalty: float | None


@dataclass(frozen=True)
class SamplingRequest:
    """What a request asked for, before the model is known; `resolve` checks it against the
    model's generation limits and fills in its defaults."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: int | None = None
    """Alternatives a token to report with its log-probability (None: none reported)."""
    length_field: str = "max_length"
    """What the request calls its most new tokens (`max_tokens` on OpenAI's routes)."""
    grammar: GrammarRequest | None = None
    """What the answer must match (compiled for the model: inferd.generation.constraint)."""

    @classmethod
    def of(
        cls,
        fields: SamplingFields,
        max_new_tokens: int | None,
        grammar: GrammarRequest | None = None,
        logprobs: int | None = None,
        length_field: str = "max_length",
    ) -> SamplingRequest:
        """What a request's fields ask; the engine checks them against the model's
        generation limits once the model is known."""
        return cls(
            max_new_tokens=max_new_tokens,
            temperature=fields.temperature,
            top_k=fields.top_k,
            top_p=fields.top_p,
            repetition_penalty=fields.repetition_penalty,
            seed=fields.seed,
            stop=fields.stop,
            ignore_eos=fields.ignore_eos,
            presence_penalty=fields.presence_penalty,
            frequency_penalty=fields.frequency_penalty,
            logprobs=logprobs,
            length_field=length_field,
            grammar=grammar,
        )

    def resolve(self, config: GenerationConfig) -> SamplingParams:
        return build_params(
            config,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            repetition_penalty=self.repetition_penalty,
            seed=self.seed,
            stop=self.stop,
            ignore_eos=self.ignore_eos,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logprobs=self.logprobs,
            length_field=self.length_field,
        )
