"""The demo text generator, built offline by our own script: a byte-level BPE tokenizer and a
small GPT-2-architecture model trained for a short while on the docstrings of Python's standard
library (present on every machine), then exported with `inferd export` (parity-checked) into a
repository. Its output reads like docstring prose; it knows nothing else.

Needs the `export` extra (torch, transformers); `steps=0` leaves the weights random (for tests
that need a real decoder, not a good one).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from inferd.corpus import docstrings

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"
DEMO_STEPS = 900
"""Training steps of the demo generator: about 0.18 s each on 2 idle cores (see the README for
the whole build's measured time)."""


@dataclass(frozen=True)
class GeneratorShape:
    layers: int = 4
    heads: int = 4
    hidden: int = 128
    context: int = 256
    vocab: int = 4096
    train_window: int = 64
    train_batch: int = 24


CHAT_ROLE_TOKENS = ("<|system|>", "<|developer|>", "<|user|>", "<|assistant|>")
"""The demo chat template's role markers (one per role the chat route accepts): special tokens
of the demo generator's tokenizer, as a real chat model's are, so that a message writing them
stays text (inferd.generation.chat_tokens) and cannot forge a turn."""


def train_tokenizer(texts: list[str], vocab: int, specials: Sequence[str] = (EOS,)) -> Tokenizer:
    """A byte-level BPE tokenizer of `vocab` tokens, `specials` among them (their ids first)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(specials),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


Progress = Callable[[int, float], None]
"""(step, loss) after each training step."""
Phase = Callable[[str], AbstractContextManager[object]]
"""A context around each phase of the build, named in words (the caller may print it and its
time)."""


@contextlib.contextmanager
def _unreported(name: str) -> Iterator[None]:
    yield


def _train(
    model: Any,
    ids: list[int],
    shape: GeneratorShape,
    steps: int,
    seed: int,
    progress: Progress | None,
) -> float:
    import torch

    torch.manual_seed(seed)
    data = torch.tensor(ids, dtype=torch.long)
    window, batch = min(shape.train_window, shape.context), shape.train_batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = max(1, steps // 20)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    model.train()
    loss_value = float("nan")
    started = time.monotonic()
    for step in range(steps):
        starts = torch.randint(0, len(data) - window - 1, (batch,))
        x = torch.stack([data[s : s + window] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = loss.item()
        if progress is not None:
            progress(step, loss_value)
        if step % 200 == 0 or step == steps - 1:
            log.info(
                "training the demo generator",
                extra={
                    "step": step,
                    "loss": round(loss_value, 3),
                    "elapsed_s": round(time.monotonic() - started, 1),
                },
            )
    model.eval()
    return loss_value


CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""The demo generator's chat template (Hugging Face's Jinja form): a role tag line, then the
message, per message; the answer starts after an assistant tag."""


def build_generator(
    repo: Path,
    name: str = "docgen",
    *,
    steps: int = DEMO_STEPS,
    shape: GeneratorShape | None = None,
    seed: int = 0,
    corpus_chars: int = 2_000_000,
    config: dict[str, Any] | None = None,
    progress: Progress | None = None,
    init_std: float | None = None,
    kv_cache: str = "concat",
    phase: Phase = _unreported,
) -> dict[str, Any]:
    """Trains (or with steps=0 only initializes) the model and exports it as `repo/name/1`;
    returns facts for the caller (final loss, parameters). `phase` is entered around each
    phase but the training (whose steps go to `progress`)."""
    with phase("loading PyTorch and transformers"):
        import torch
        from transformers import GPT2LMHeadModel

        from inferd.prep.quiet import quiet_transformers

    quiet_transformers()
    shape = shape or GeneratorShape()
    with phase("reading the docstrings of Python's standard library"):
        texts = docstrings(corpus_chars)
    with phase(f"training a {shape.vocab:,}-token BPE tokenizer on them"):
        tokenizer = train_tokenizer(texts, shape.vocab, (EOS, *CHAT_ROLE_TOKENS))
    eos = tokenizer.token_to_id(EOS)
    if eos is None:
        raise RuntimeError(f"the tokenizer lost its {EOS} token")
    torch.manual_seed(seed)
    # untrained and small: a wide init gives peaked logits, a clear argmax for tests
    model_config = _gpt2_config(
        shape, tokenizer.get_vocab_size(), eos, init_std or (0.02 if steps else 0.2)
    )
    model = GPT2LMHeadModel(model_config)
    loss = None
    if steps:
        ids: list[int] = []
        with phase("tokenizing the training text"):
            for encoding in tokenizer.encode_batch(texts):
                ids.extend(encoding.ids)
                ids.append(eos)
        loss = _train(model, ids, shape, steps, seed, progress)
    with phase("exporting to ONNX, checking parity with PyTorch"):
        _export(model, tokenizer, repo, name, kv_cache)
    _configure(repo / name / "config.yaml", shape, config)
    facts = {
        "loss": loss,
        "steps": steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "corpus_chars": sum(map(len, texts)),
        "random_weights": steps == 0,
    }
    (repo / name / "TRAINING.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def remove(repo: Path, name: str) -> None:
    shutil.rmtree(repo / name, ignore_errors=True)


def _gpt2_config(shape: GeneratorShape, vocab: int, eos: int, init_std: float) -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        n_layer=shape.layers,
        n_head=shape.heads,
        n_embd=shape.hidden,
        n_positions=shape.context,
        vocab_size=vocab,
        bos_token_id=eos,
        eos_token_id=eos,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        initializer_range=init_std,
    )


def _export(model: Any, tokenizer: Tokenizer, repo: Path, name: str, kv_cache: str) -> None:
    """The model and its tokenizer (with the chat template) exported as a new version of
    `repo/name`, its config written afresh."""
    from inferd.prep.console import Reporter
    from inferd.prep.exporting import run_export

    with tempfile.TemporaryDirectory(prefix="inferd-generator-") as tmp:
        folder = Path(tmp)
        model.save_pretrained(folder)
        tokenizer.save(str(folder / "tokenizer.json"))
        chat = {"chat_template": CHAT_TEMPLATE, "eos_token": EOS}  # (copied beside the model)
        (folder / "tokenizer_config.json").write_text(json.dumps(chat, indent=2) + "\n")
        if (repo / name / "config.yaml").exists():
            (repo / name / "config.yaml").unlink()
        code = run_export(
            str(folder),
            repo,
            name,
            None,
            opset=17,
            atol=1e-4,
            version=None,
            reporter=Reporter(),
            kv_cache=kv_cache,
        )
    if code != 0:
        raise RuntimeError(f"exporting the demo generator failed (exit {code})")


def _configure(config_file: Path, shape: GeneratorShape, config: dict[str, Any] | None) -> None:
    """The exported config with the demo's generation limits, and `config` over it."""
    written = yaml.safe_load(config_file.read_text())
    written["generation"].update(
        {"max_new_tokens": 64, "max_running": 16, "max_kv_tokens": 16 * shape.context}
    )
    written["tokenizer"] = {"max_tokens": shape.context}
    written.update(config or {})
    config_file.write_text(yaml.safe_dump(written, sort_keys=False))
