"""The sections of text models: the tokenizer, what each text task makes of the model's
outputs (embedding, classification, rerank, zero-shot), and the drift watched on its inputs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferd.config.section import Section


class TokenizerConfig(Section):
    file: str = Field(
        "tokenizer.json",
        description="Hugging Face tokenizer file, looked for in the version folder, then in the "
        "model folder: the one exported with the model, never a second copy.",
    )
    max_tokens: int = Field(
        512, ge=2, description="Most tokens a text may have (special tokens included)."
    )
    truncate: bool = Field(
        True, description="Cut longer texts to max_tokens; when false they are refused (4002)."
    )
    max_chars: int = Field(
        100_000,
        ge=1,
        description="Most characters a text (or a generation prompt) may have, whatever the "
        "truncation; checked before any tokenization (4002 above).",
    )
    max_request_chars: int = Field(
        1_000_000,
        ge=1,
        description="Most characters of all the texts of one request together; checked before "
        "any tokenization (4002 above).",
    )
    input_ids: str = Field("input_ids", description="The model input that takes token ids.")
    attention_mask: str | None = Field(
        "attention_mask", description="The model input that takes the attention mask, if any."
    )
    token_type_ids: str | None = Field(
        None, description="The model input that takes segment ids (all 0), if the model has one."
    )


class EmbeddingConfig(Section):
    pooling: Literal["mean", "cls", "output"] = Field(
        "mean",
        description="mean: over the attention mask; cls: the first token; output: the model's "
        "own pooled output.",
    )
    output: str | None = Field(
        None,
        description="The model output to read: token states for mean/cls, the pooled vector "
        "for output. Default: the model's first output.",
    )
    normalize: bool = Field(True, description="L2-normalize the embeddings.")
    dimensions: tuple[int, ...] = Field(
        (),
        description="Smaller sizes a client may ask for (`dimensions`), for models trained to "
        "allow truncation (Matryoshka). Empty: only the full size.",
    )


class ClassificationConfig(Section):
    labels: tuple[str, ...] = Field((), description="Label names, in the order of the logits.")
    output: str | None = Field(None, description="The logits output; default: the first.")
    activation: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="softmax: one label per text; sigmoid: independent labels."
    )


class RerankConfig(Section):
    output: str | None = Field(
        None, description="The output holding one logit per pair; default: the first."
    )
    activation: Literal["sigmoid", "none"] = Field(
        "sigmoid",
        description="sigmoid: scores between 0 and 1 (a request's `raw_scores: true` asks for "
        "the logits instead, as text-embeddings-inference's does); none: the logits always.",
    )


class ZeroShotLabel(Section):
    name: str = Field(description="The label returned to clients.")
    description: str | None = Field(
        None, description="The text embedded for this label (default: the name)."
    )


class ZeroShotConfig(Section):
    base_model: str = Field(description="The embedding model of this repository to use.")
    labels: tuple[ZeroShotLabel, ...] = Field(
        min_length=2, description="Candidate labels, embedded once when the model loads."
    )
    temperature: float = Field(
        0.05, gt=0, description="Softmax temperature over the cosine similarities."
    )


class DriftConfig(Section):
    enabled: bool = Field(True, description="Track input drift (text models).")
    reference_size: int = Field(
        1000, ge=10, description="Observations in the reference window (the first ones seen)."
    )
    window: int = Field(500, ge=10, description="Observations in the recent window.")
    threshold: float = Field(
        0.2, gt=0, description="PSI over which a warning is logged (0.1: moderate, 0.2: large)."
    )
    reference_file: str | None = Field(
        None,
        description='JSON beside config.yaml with reference samples, {"input_length": [...], '
        '"top_confidence": [...]}, instead of the first requests.',
    )
