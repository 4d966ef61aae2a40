"""The tensor names of a decoder's KV cache: what `inferd export` writes and generation drives."""

from __future__ import annotations

PAST = "past_key_values.{layer}.{kind}"
PRESENT = "present.{layer}.{kind}"


def cache_names(layers: int, template: str) -> list[str]:
    return [template.format(layer=i, kind=k) for i in range(layers) for k in ("key", "value")]
