"""The tokenizer side of a text model: built off the event loop when the model loads (it reads
the tokenizer file beside the model and checks that the model takes what it produces), then
used on the loop to turn each request's texts into one batch item per text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from inferd.config.model import ModelConfig
from inferd.runtime.protocol import TensorSpec
from inferd.tasks.text_feeds import TextEncoder, find_tokenizer


class TextPipeline:
    def __init__(
        self, config: ModelConfig, inputs: Sequence[TensorSpec], version_folder: Path
    ) -> None:
        tokenizer = config.tokenizer
        path = find_tokenizer(tokenizer, version_folder, version_folder.parent)
        self.encoder = TextEncoder(path, tokenizer, config.max_texts_per_request)
        input_names = {s.name for s in inputs}
        wanted = [tokenizer.input_ids, tokenizer.attention_mask, tokenizer.token_type_ids]
        missing = [n for n in wanted if n is not None and n not in input_names]
        if missing:
            raise ValueError(f"tokenizer inputs {missing} are not inputs of the model")
        extra = input_names - {n for n in wanted if n is not None}
        if extra:
            raise ValueError(
                f"the model also takes {sorted(extra)}; name them in the tokenizer section"
            )

    def pad_values(self) -> dict[str, float]:
        return self.encoder.pad_values()
