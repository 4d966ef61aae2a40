"""What inferd reads from a KServe V2 inference request besides its tensors, the same over HTTP
and gRPC: the `timeout` parameter, and for a text generator its prompt (the `text_input`
tensor) and its sampling settings (the request's parameters)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from inferd.engine import TEXT_INPUT
from inferd.errors import EmptyInputError, InvalidInputError
from inferd.front.jsonbody import validate_fields
from inferd.generation.params import SamplingRequest
from inferd.runtime.protocol import Array


def timeout_parameter_s(parameters: Mapping[str, Any]) -> float | None:
    """The V2 `timeout` parameter (microseconds) in seconds; None when the request has none."""
    param = parameters.get("timeout")
    if param is None:
        return None
    if isinstance(param, bool) or not isinstance(param, int) or param <= 0:
        raise InvalidInputError("parameter 'timeout' must be a positive integer of microseconds")
    return param / 1_000_000.0


class GenerationParameters(BaseModel):
    """A generation's settings, from the request's parameters (others are ignored: clients
    send their own, such as `binary_data_output`)."""

    model_config = ConfigDict(extra="ignore")

    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False


def sampling_of(parameters: dict[str, Any]) -> SamplingRequest:
    """A generation's sampling, from the request's parameters (4004 naming a wrong one)."""
    settings = validate_fields(GenerationParameters, parameters)
    return SamplingRequest.of(settings, settings.max_tokens, length_field="max_tokens")


def prompt_of(feeds: Mapping[str, Array]) -> str:
    """The prompt of a text generator's request: its one `text_input` element."""
    if TEXT_INPUT not in feeds:
        raise InvalidInputError(f"a text generator takes a BYTES input '{TEXT_INPUT}'")
    values = feeds[TEXT_INPUT].reshape(-1)
    if values.size != 1:
        raise InvalidInputError(
            f"input '{TEXT_INPUT}' must hold one prompt; it holds {values.size}"
        )
    prompt = str(values[0])
    if not prompt:
        raise EmptyInputError(f"input '{TEXT_INPUT}' is empty")
    return prompt
