"""The base of every section of a model's `config.yaml`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Unknown keys are errors, and a loaded value never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
