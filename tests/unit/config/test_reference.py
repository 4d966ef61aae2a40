from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from inferd.config.model import ModelConfig, TensorOverride
from inferd.config.reference import render_reference
from inferd.config.server_settings import ServerSettings

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_configuration_reference_is_in_step_with_the_code() -> None:
    assert DOC.read_text() == render_reference(), (
        "regenerate: python -m inferd.config.reference > docs/configuration.md"
    )


def test_every_setting_has_a_description() -> None:
    models: list[type[BaseModel]] = [ServerSettings, ModelConfig, TensorOverride]
    while models:
        model = models.pop()
        for name, field in model.model_fields.items():
            nested = field.annotation
            if isinstance(nested, type) and issubclass(nested, BaseModel):
                models.append(nested)  # a section: its own keys carry the descriptions
                continue
            assert field.description, f"{model.__name__}.{name} has no description"
