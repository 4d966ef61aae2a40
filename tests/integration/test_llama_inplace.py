"""A Llama exported with `--kv-cache inplace` (inferd.prep.inplace_llama: rotary embedding and
grouped key/value heads in ONNX Runtime's GroupQueryAttention) and served by a real inferd on
127.0.0.1: greedy text equals transformers' own greedy generation from the same weights, alone
and with prompts of other lengths in the same batch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
import yaml

from inferd.corpus import docstrings
from inferd.tools.generator import train_tokenizer
from tests.integration.server import RunningServer, start_server

PROMPTS = [
    "Return the number of items",
    "Open the file",
    "Split the string at each separator and return the parts in order",
    "A",
]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama folder with grouped key/value heads and a trained tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama-src")
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=500.0,  # not the default: the tables must come from the model
        bos_token_id=1,
        eos_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    train_tokenizer(docstrings(100_000), 512).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 256})
    )
    return folder


@pytest.fixture(scope="module")
def server(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("llama-repo")
    args = [str(folder), "--repo", str(repo), "--model", "llama", "--kv-cache", "inplace"]
    done = subprocess.run(
        [sys.executable, "-m", "inferd", "export", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    path = repo / "llama" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["generation"].update({"max_running": 4, "max_kv_tokens": 4 * 256})
    path.write_text(yaml.safe_dump(config))
    running = start_server(repo, tmp_path_factory.mktemp("llama-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def expected_text(folder: Path, prompt: str) -> str:
    """transformers' greedy continuation of the prompt, decoded."""
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(folder).eval()
    ids = tokenizer.encode(prompt).ids
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    return tokenizer.decode(out[0, len(ids) :].tolist())


def greedy(url: str, prompt: str) -> str:
    body = {"prompt": prompt, "max_length": NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    response = httpx.post(url + "/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["tokens"] == NEW_TOKENS
    return str(response.json()["text"])


def test_greedy_text_is_transformers_own_alone_and_batched(
    folder: Path, server: RunningServer
) -> None:
    expected = [expected_text(folder, p) for p in PROMPTS]
    assert len(set(expected)) == len(PROMPTS)  # (the prompts lead to different texts)
    assert [greedy(server.url, p) for p in PROMPTS] == expected
    # all at once, twice over: prompts of four lengths prefilled and decoded together,
    # rows joining and leaving (each row's rotary positions are its own)
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: greedy(server.url, p), PROMPTS * 2))
    assert together == expected * 2
