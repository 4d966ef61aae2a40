"""The kinds of model inferd serves: one `Kind` record per `task` of config.yaml, in one table.

Everything that differs from one kind to another is a field here: the route family a request
naming no model reaches it by, what loading it needs, the servable that answers for it, the
verbs it serves, what it shows over KServe V2 and its section of config.yaml. The rest of
inferd asks the record (`ModelConfig.kind`) and never compares a task name.

The table sits beside the configuration because every part reads it (the repository scan, the
engine, the offline tools) and the configuration imports nothing of inferd; the engine's
servable is therefore named by its place (`module:Class`), which the loader imports.

A new kind is a servable module under `engine/kinds/` and a row here (and, when it has settings
of its own, its section in `config/text.py` or a module of its own, a field of `ModelConfig`
in `config/model.py`). A verb of its own (its request and answer types, its HTTP forms) goes
in the same module, named by the row's `own_verb`: the engine serves it and the data plane
routes it from there (inferd.engine.kinds.tagger is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

TaskName = Literal[
    "tensor",
    "embedding",
    "text-classification",
    "zero-shot-classification",
    "text-generation",
    "rerank",
    "token-classification",
]
"""The `task` of config.yaml: one per row of `KINDS` (a test holds them equal)."""

Loads = Literal["file", "base"]
"""file: version folders each holding a model.onnx; base: no file of its own, built over the
model its section names once that one serves (zero-shot)."""

Tensor = tuple[str, str]
"""A V2 tensor as the metadata shows it: name and datatype."""


@dataclass(frozen=True)
class Kind:
    name: TaskName
    description: str
    """One line for the configuration reference."""
    purpose: str | None
    """The task route family (`/embed`, `/predict`, `/generate`, `/rerank`) whose requests
    naming no model it can answer; None: it is always named (`/v2/models/{model}/...`)."""
    loads: Loads
    tokenizer: bool
    """Loading builds the text pipeline (the tokenizer beside the model, checked against the
    model's inputs); requests carry texts, one batch item per text (or per pair)."""
    decoder: bool
    """Loading builds a decoder's parts; it runs on its own scheduler, not the dynamic batcher
    (no batch axis of its own, no solo instance, a generation warm-up)."""
    servable: str
    """`module:Class` of the servable: `Class.build(BuildContext)` for a kind that loads a
    file, `await Class.build(model, config, base, observer)` for one built over a base."""
    verbs: frozenset[str]
    """The verbs it accepts (inferd.verbs: `infer`, `embed`, `classify`, `rerank`, its own,
    and `generate`, which a decoder answers with a stream); any other is refused."""
    v2_inputs: tuple[Tensor, ...] | None
    """What its V2 metadata shows as inputs; None: the model file's own tensors."""
    v2_outputs: tuple[Tensor, ...] | None
    section: str | None
    """Its section of config.yaml (a field of `ModelConfig`), if it has one."""
    drift: bool
    """Its inputs are texts whose lengths (and top scores) the drift monitor watches."""
    own_verb: str | None = None
    """`module:NAME` of a verb this kind brings of its own (inferd.verbs.verb.Verb): its
    request, answer, refusal and HTTP forms; the servable module usually holds it."""

    @property
    def batched(self) -> bool:
        """It runs on the dynamic batcher (every kind but a decoder)."""
        return not self.decoder

    @property
    def needs_versions(self) -> bool:
        return self.loads == "file"


TEXT_IN: tuple[Tensor, ...] = (("text", "BYTES"),)
LABELS_OUT: tuple[Tensor, ...] = (("label", "BYTES"), ("score", "FP32"), ("probabilities", "FP32"))

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            name="tensor",
            description="raw V2 tensors",
            purpose=None,
            loads="file",
            tokenizer=False,
            decoder=False,
            servable="inferd.engine.kinds.tensor:TensorServable",
            verbs=frozenset({"infer"}),
            v2_inputs=None,
            v2_outputs=None,
            section=None,
            drift=False,
        ),
        Kind(
            name="embedding",
            description="texts in, through the tokenizer, vectors out (/embed, /v1/embeddings)",
            purpose="embed",
            loads="file",
            tokenizer=True,
            decoder=False,
            servable="inferd.engine.kinds.text_models:EmbeddingServable",
            verbs=frozenset({"infer", "embed"}),
            v2_inputs=TEXT_IN,
            v2_outputs=(("embedding", "FP32"),),
            section="embedding",
            drift=True,
        ),
        Kind(
            name="text-classification",
            description="texts in, through the tokenizer, labels out (/predict)",
            purpose="predict",
            loads="file",
            tokenizer=True,
            decoder=False,
            servable="inferd.engine.kinds.text_models:ClassifierServable",
            verbs=frozenset({"infer", "classify"}),
            v2_inputs=TEXT_IN,
            v2_outputs=LABELS_OUT,
            section="classification",
            drift=True,
        ),
        Kind(
            name="zero-shot-classification",
            description="labels scored over an embedding model (/predict)",
            purpose="predict",
            loads="base",
            tokenizer=False,
            decoder=False,
            servable="inferd.engine.kinds.zero_shot_classifier:ZeroShotServable",
            verbs=frozenset({"infer", "classify"}),
            v2_inputs=TEXT_IN,
            v2_outputs=LABELS_OUT,
            section="zero_shot",
            drift=True,
        ),
        Kind(
            name="text-generation",
            description="a decoder with a KV cache behind /generate and /v1/completions",
            purpose="generate",
            loads="file",
            tokenizer=False,
            decoder=True,
            servable="inferd.engine.kinds.text_generation:GeneratorServable",
            verbs=frozenset({"infer", "generate"}),
            v2_inputs=(("text_input", "BYTES"),),
            v2_outputs=(("text_output", "BYTES"),),
            section="generation",
            drift=True,
        ),
        Kind(
            name="rerank",
            description="a cross-encoder scoring (query, text) pairs, through the tokenizer "
            "(/rerank)",
            purpose="rerank",
            loads="file",
            tokenizer=True,
            decoder=False,
            servable="inferd.engine.kinds.cross_encoder:RerankServable",
            verbs=frozenset({"infer", "rerank"}),
            v2_inputs=(("query", "BYTES"), ("texts", "BYTES")),
            v2_outputs=(("scores", "FP32"),),
            section="rerank",
            drift=True,
        ),
        Kind(
            name="token-classification",
            description="texts in, through the tokenizer, a label for each token and the "
            "entities they form out (/tag); labels from `classification`",
            purpose="tag",
            loads="file",
            tokenizer=True,
            decoder=False,
            servable="inferd.engine.kinds.tagger:TaggerServable",
            verbs=frozenset({"infer", "tag"}),
            v2_inputs=TEXT_IN,
            v2_outputs=(("entities", "BYTES"),),
            section="classification",
            drift=True,
            own_verb="inferd.engine.kinds.tagger:TAG",
        ),
    )
}
"""Task -> its kind."""

assert tuple(KINDS) == get_args(TaskName), "TaskName and KINDS must name the same tasks"
