"""Model repositories for the engine's unit tests, served by fake runtimes (no ONNX Runtime):
the folders and configs are real (the engine scans them), the model files are placeholders,
and `runtimes` answers in their place with numpy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from inferd.config.model import RuntimeOptions
from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.observability.observer import Observer
from inferd.repository.scan import scan_repository
from inferd.runtime.protocol import Array, Feeds, TensorSpec

WORDS = ["[PAD]", "[UNK]", "good", "great", "bad", "awful", "film", "the", "is"]
HIDDEN = 4


class FakeRuntime:
    """A runtime answering `compute(feeds)` with numpy; records each call's batch rows."""

    def __init__(
        self,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        compute: Callable[[Feeds], dict[str, Array]],
    ) -> None:
        self._inputs, self._outputs = tuple(inputs), tuple(outputs)
        self._compute = compute
        self.rows: list[int] = []
        self.closed = False

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self._inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self._outputs

    @property
    def providers(self) -> tuple[str, ...]:
        return ("FakeExecutionProvider",)

    def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        self.rows.append(int(next(iter(feeds.values())).shape[0]))
        out = self._compute(feeds)
        return {k: v for k, v in out.items() if not output_names or k in output_names}

    def close(self) -> None:
        self.closed = True


def spec(name: str, datatype: str, shape: tuple[int, ...]) -> TensorSpec:
    names = tuple(
        "batch" if i == 0 else ("sequence" if d == -1 else None) for i, d in enumerate(shape)
    )
    return TensorSpec(name, datatype, shape, names)


def affine() -> FakeRuntime:
    """x FP32 [n, 4] -> y = 2x + 1."""
    return FakeRuntime(
        [spec("x", "FP32", (-1, 4))],
        [spec("y", "FP32", (-1, 4))],
        lambda f: {"y": (f["x"] * 2 + 1).astype(np.float32)},
    )


TOKEN_INPUTS = [spec("input_ids", "INT64", (-1, -1)), spec("attention_mask", "INT64", (-1, -1))]


def _states(feeds: Feeds) -> Array:
    """Token states [n, len, 4]: positive words point one way, negative ones the other."""
    ids = feeds["input_ids"]
    table = np.zeros((len(WORDS), HIDDEN), np.float32)
    table[[2, 3], 0] = 1.0  # good, great
    table[[4, 5], 1] = 1.0  # bad, awful
    table[6:, 2] = 0.2  # neutral words
    table[:, 3] = 0.05
    return table[ids]


def encoder() -> FakeRuntime:
    return FakeRuntime(
        TOKEN_INPUTS,
        [spec("last_hidden_state", "FP32", (-1, -1, HIDDEN))],
        lambda f: {"last_hidden_state": _states(f)},
    )


def classifier() -> FakeRuntime:
    """Logits [n, 2] (positive, negative): the summed sentiment directions."""

    def logits(feeds: Feeds) -> dict[str, Array]:
        summed = _states(feeds).sum(axis=1)
        return {"logits": np.stack([summed[:, 0] * 4, summed[:, 1] * 4], axis=1)}

    return FakeRuntime(TOKEN_INPUTS, [spec("logits", "FP32", (-1, 2))], logits)


def cross_encoder() -> FakeRuntime:
    """One logit a pair: the sentiment of its second segment (the text, not the query)."""

    def logits(feeds: Feeds) -> dict[str, Array]:
        states = _states(feeds) * feeds["token_type_ids"][:, :, None]
        summed = states.sum(axis=1)
        return {"logits": (summed[:, :1] - summed[:, 1:2]).astype(np.float32)}

    inputs = [*TOKEN_INPUTS, spec("token_type_ids", "INT64", (-1, -1))]
    return FakeRuntime(inputs, [spec("logits", "FP32", (-1, 1))], logits)


def write_tokenizer(folder: Path) -> None:
    vocab = {w: i for i, w in enumerate(WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(  # segment 1 for a pair's text
        single="$A", pair="$A $B:1", special_tokens=[]
    )
    tokenizer.save(str(folder / "tokenizer.json"))


def add_model(
    root: Path,
    name: str,
    config: dict[str, Any],
    versions: Sequence[int] = (1,),
    tokenizer: bool = False,
) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    for v in versions:
        (folder / str(v)).mkdir()
        (folder / str(v) / "model.onnx").write_bytes(b"placeholder: a fake runtime serves it")
    if tokenizer:
        write_tokenizer(folder)


TEXT = {"tokenizer": {"max_tokens": 16, "truncate": True}}


def demo_like(root: Path) -> Path:
    """affine (tensor), encoder (embedding), sentiment (text classifier), and zero-shot
    `mood` over the encoder."""
    add_model(root, "affine", {"max_batch_size": 8})
    add_model(root, "encoder", {"task": "embedding", "max_batch_size": 8, **TEXT}, tokenizer=True)
    add_model(
        root,
        "sentiment",
        {
            "task": "text-classification",
            "max_batch_size": 8,
            "classification": {"labels": ["positive", "negative"]},
            **TEXT,
        },
        tokenizer=True,
    )
    add_model(
        root,
        "mood",
        {
            "task": "zero-shot-classification",
            "zero_shot": {
                "base_model": "encoder",
                "temperature": 0.1,
                "labels": [
                    {"name": "happy", "description": "good great"},
                    {"name": "sad", "description": "bad awful"},
                ],
            },
        },
    )
    return root


FACTORIES: dict[str, Callable[[], FakeRuntime]] = {
    "affine": affine,
    "encoder": encoder,
    "sentiment": classifier,
    "ranker": cross_encoder,
}


def fake_loader(
    broken: Sequence[str] = (),
    made: list[FakeRuntime] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> Callable[[Path, RuntimeOptions], FakeRuntime]:
    """Opens the fake runtime named by the model folder (or its alias); `broken`
    ("model/version") fail to open."""

    def load(path: Path, options: RuntimeOptions) -> FakeRuntime:
        model, version = path.parent.parent.name, path.parent.name
        if f"{model}/{version}" in broken:
            raise RuntimeError(f"cannot read {model}/{version}/model.onnx: truncated")
        runtime = FACTORIES[(aliases or {}).get(model, model)]()
        if made is not None:
            made.append(runtime)
        return runtime

    return load


def engine_for(
    root: Path, observer: Observer | None = None, broken: Sequence[str] = (), **settings: Any
) -> Engine:
    return Engine(
        ServerSettings(**settings),
        scan_repository(root),
        fake_loader(broken),
        observer=observer,
        root=root,
    )
