"""`inferd export` on small torch modules and a tiny GPT-2 folder: parity, layout, errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import yaml

from inferd.cli.main import main
from inferd.generation.decoder import DRAW_BIAS, DRAW_INPUTS, idle_bias, idle_draw_feeds
from inferd.generation.sampling import top_candidates
from tests import prep_modules


def export(repo: Path, model: str, source: str, *args: str) -> int:
    return main(["export", source, "--repo", str(repo), "--model", model, *args])


def report(repo: Path, model: str, name: str) -> dict:
    return json.loads((repo / ".inferd" / "reports" / model / name).read_text())


def test_mlp_exports_with_a_dynamic_batch_and_matches_torch(tmp_path: Path) -> None:
    assert export(tmp_path, "mlp", "tests.prep_modules:mlp", "--input", "x:batch,16:float32") == 0
    onnx_file = tmp_path / "mlp" / "1" / "model.onnx"
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]
    assert session.get_inputs()[0].shape == ["batch", 16]
    module = prep_modules.mlp().eval()  # same seed, same weights; dropout off in eval
    x = np.random.default_rng(3).standard_normal((5, 16)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, atol=1e-5)
    assert yaml.safe_load((tmp_path / "mlp" / "config.yaml").read_text())["task"] == "tensor"
    parity = report(tmp_path, "mlp", "export-1.json")["parity"]
    assert parity["ok"] and len(parity["cases"]) == 4
    assert {c.split("x")[0] for c in parity["cases"]} == {"1", "2", "3", "4"}  # batch sizes vary


def test_tiny_transformer_keeps_a_dynamic_sequence_axis(tmp_path: Path) -> None:
    code = export(
        tmp_path,
        "tiny",
        "tests.prep_modules:tiny_transformer",
        "--input",
        "input_ids:batch,sequence:int64:0,50",
        "--input",
        "attention_mask:batch,sequence:int64:1,2",
        "--output",
        "hidden",
    )
    assert code == 0
    session = ort.InferenceSession(str(tmp_path / "tiny" / "1" / "model.onnx"))
    assert session.get_outputs()[0].name == "hidden"
    assert session.get_outputs()[0].shape == ["batch", "sequence", 32]
    cases = report(tmp_path, "tiny", "export-1.json")["parity"]["cases"]
    assert len({c.split("x")[1] for c in cases}) == 4  # four different lengths were compared
    for length in (3, 40):  # lengths the trace never saw
        ids = np.ones((2, length), dtype=np.int64)
        out = session.run(None, {"input_ids": ids, "attention_mask": ids})[0]
        assert out.shape == (2, length, 32)


def test_a_module_stuck_in_training_mode_fails_the_parity_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = export(
        tmp_path, "stuck", "tests.prep_modules:stuck_in_training", "--input", "x:batch,8:float32"
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "still in training mode" in err and "parity check failed" in err
    assert not (tmp_path / "stuck").exists()  # nothing written, not even the model folder
    failed = report(tmp_path, "stuck", "export-1.json")
    assert not failed["parity"]["ok"] and failed["training_modules"]
    assert failed["parity"]["outputs"][0]["max_abs"] > 1e-2


def test_a_looser_bound_is_a_flag(tmp_path: Path) -> None:
    code = export(
        tmp_path,
        "mlp",
        "tests.prep_modules:mlp",
        "--input",
        "x:batch,16:float32",
        "--atol",
        "1e-12",
    )
    assert code in (0, 1)  # float32 rounding may or may not exceed 1e-12; the bound is used
    assert report(tmp_path, "mlp", "export-1.json")["parity"]["atol"] == 1e-12


@pytest.mark.parametrize(
    ("source", "args", "message"),
    [
        ("tests.prep_modules:mlp", [], "needs an input spec"),
        ("tests.prep_modules:spectrum", ["--input", "x:batch,8:float32"], "aten::fft_rfft"),
        ("tests.prep_modules:not_a_module", ["--input", "x:batch,8:float32"], "not a nn.Module"),
        ("tests.prep_modules:missing", ["--input", "x:batch,8:float32"], "cannot import"),
        ("tests.prep_modules:mlp", ["--input", "x:batch,16"], "NAME:DIMS:DTYPE"),
        ("tests.prep_modules:mlp", ["--input", "x:batch,16:complex"], "dtype 'complex'"),
        ("tests.prep_modules:mlp", ["--input", "x:batch,16:float32", "--opset", "12"], "below 13"),
        ("/", [], "not a model folder"),
        (
            "tests.prep_modules:mlp",
            ["--input", "x:batch,16:float32", "--kv-cache", "inplace"],
            "GPT-2 and Llama decoders only",
        ),
        ("no/such/thing", [], "neither an existing model folder"),
    ],
)
def test_clear_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    source: str,
    args: list[str],
    message: str,
) -> None:
    assert export(tmp_path, "m", source, *args) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "m").exists()


def test_a_version_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = ["--input", "x:batch,16:float32"]
    assert export(tmp_path, "mlp", "tests.prep_modules:mlp", *spec) == 0
    assert export(tmp_path, "mlp", "tests.prep_modules:mlp", *spec) == 0  # next free: 2
    assert sorted(p.name for p in (tmp_path / "mlp").iterdir()) == ["1", "2", "config.yaml"]
    before = (tmp_path / "mlp" / "1" / "model.onnx").stat().st_mtime_ns
    assert export(tmp_path, "mlp", "tests.prep_modules:mlp", *spec, "--version", "1") == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "mlp" / "1" / "model.onnx").stat().st_mtime_ns == before


def test_spec_file_and_folder_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("inputs:\n  - {name: x, shape: [batch, 16], dtype: float32}\noutputs: [y]\n")
    assert export(tmp_path / "repo", "mlp", "tests.prep_modules:mlp", "--spec", str(spec)) == 0
    session = ort.InferenceSession(str(tmp_path / "repo" / "mlp" / "1" / "model.onnx"))
    assert session.get_outputs()[0].name == "y"
    spec.write_text("inputs: []\n")
    assert export(tmp_path / "repo", "m2", "tests.prep_modules:mlp", "--spec", str(spec)) == 2
    assert "non-empty list" in capsys.readouterr().err
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text('{"model_type": "bert"}')
    assert export(tmp_path / "repo", "m3", str(tmp_path / "weights")) == 2
    assert "no weights" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        vocab_size=100,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def test_gpt2_folder_exports_with_its_kv_cache(tmp_path: Path, tiny_gpt2: Path) -> None:
    assert export(tmp_path, "gpt", str(tiny_gpt2)) == 0
    session = ort.InferenceSession(str(tmp_path / "gpt" / "1" / "model.onnx"))
    names = [i.name for i in session.get_inputs()]
    assert names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert names[3:7] == [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
    # the bias of the ranking (inferd.prep.ranked_logits), the draw of the next token in the
    # graph (inferd.prep.graph_draw)
    assert names[7:] == [DRAW_BIAS, *DRAW_INPUTS]
    names = names[:7]
    presents = [f"present.{i}.{k}" for i in range(2) for k in ("key", "value")]
    # the last position's best candidates, ranked in the graph (inferd.prep.ranked_logits)
    outputs = [o.name for o in session.get_outputs()]
    assert outputs == ["logits", *presents, "top_logits", "top_ids", "next_ids"]
    assert session.get_outputs()[0].shape == ["batch", 1, 100]  # declared: one position
    written = report(tmp_path, "gpt", "export-1.json")
    assert written["ranked_rows_wrong"] == 0 and written["graph_draws_differing"] == 0
    idle = {**idle_draw_feeds(1, 64), DRAW_BIAS: idle_bias(100)}
    config = yaml.safe_load((tmp_path / "gpt" / "config.yaml").read_text())
    assert config["task"] == "text-generation"
    assert config["generation"] == {"context_length": 64, "eos_token_id": 0}
    # a prefill then one decode step through the cache equals one pass over the whole text
    ids = np.array([[5, 6, 7, 8]], dtype=np.int64)
    empty = {n: np.zeros((1, 2, 0, 16), dtype=np.float32) for n in names[3:]}
    full = session.run(
        None,
        {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(4)[None],
            **empty,
            **idle,
        },
    )
    first = session.run(
        None,
        {
            "input_ids": ids[:, :3],
            "attention_mask": np.ones((1, 3), np.int64),
            "position_ids": np.arange(3)[None],
            **empty,
            **idle,
        },
    )
    past = dict(zip(names[3:], first[1:5], strict=True))
    step = session.run(
        None,
        {
            "input_ids": ids[:, 3:],
            "attention_mask": np.ones((1, 4), np.int64),
            "position_ids": np.array([[3]]),
            **past,
            **idle,
        },
    )
    np.testing.assert_allclose(step[0][0, -1], full[0][0, -1], atol=1e-5)
    # the last position's logits alone (the next token's), a prefill's as a step's
    assert full[0].shape == first[0].shape == step[0].shape == (1, 1, 100)
    values, ids = top_candidates(step[0][:, -1], 64)
    np.testing.assert_array_equal(step[6], ids)
    np.testing.assert_array_equal(step[5], values)


def test_gpt2_exports_with_an_in_place_kv_cache_checked_against_the_plain_export(
    tmp_path: Path, tiny_gpt2: Path
) -> None:
    assert export(tmp_path, "gpt", str(tiny_gpt2), "--kv-cache", "inplace") == 0
    result = report(tmp_path, "gpt", "export-1.json")
    assert result["parity"]["ok"] and result["inplace_kv_max_abs_diff"] < 1e-4
    path = tmp_path / "gpt" / "1" / "model.onnx"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert names[:4] == ["input_ids", "position_ids", "seqlens_k", "total_sequence_length"]
    assert names[4:8] == [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
    assert names[8:] == [DRAW_BIAS, *DRAW_INPUTS]
    names = names[:8]
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert "GroupQueryAttention" in ops and "Concat" not in ops
    # one pass over a whole text equals a prefill then a decode step into the same buffer
    buffers = [np.zeros((1, 2, 64, 16), np.float32) for _ in names[4:]]
    ids = np.array([[5, 6, 7, 8]], dtype=np.int64)

    def run(tokens: np.ndarray, start: int, fresh: bool) -> np.ndarray:
        binding = session.io_binding()
        length = start + tokens.shape[1]
        binding.bind_cpu_input("input_ids", tokens)
        binding.bind_cpu_input("position_ids", np.arange(start, length)[None])
        binding.bind_cpu_input("seqlens_k", np.array([length - 1], np.int32))
        binding.bind_cpu_input("total_sequence_length", np.array(length, np.int32))
        for name, value in {**idle_draw_feeds(1, 64), DRAW_BIAS: idle_bias(100)}.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("logits")
        for i, name in enumerate(names[4:]):
            value = ort.OrtValue.ortvalue_from_numpy(
                np.zeros_like(buffers[i]) if fresh else buffers[i]
            )
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_key_values", "present"), value)
        session.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()

    full = run(ids, 0, fresh=True)
    assert full.shape == (1, 1, 100)  # the last token's logits alone (a prefill's next token)
    run(ids[:, :3], 0, fresh=False)
    step = run(ids[:, 3:], 3, fresh=False)
    np.testing.assert_allclose(step[0, -1], full[0, -1], atol=1e-5)
    # the later steps read the plain export's inputs: they say so instead of failing inside
    assert main(["quantize", "--repo", str(tmp_path), "--model", "gpt"]) == 2


def test_gpt2_optimize_keeps_parity_and_reports_node_counts(
    tmp_path: Path, tiny_gpt2: Path
) -> None:
    assert export(tmp_path, "gpt", str(tiny_gpt2)) == 0
    # --force: on a model this small the fused graph's speed is within the machine's noise
    # (0.92x to 1.1x a pass), and whether it is worth writing is not what this test checks
    assert main(["optimize", "--repo", str(tmp_path), "--model", "gpt", "--force"]) == 0
    result = report(tmp_path, "gpt", "optimize-2.json")
    assert result["parity"]["ok"]
    assert result["nodes_after"] < result["nodes_before"]
    assert result["speedup"] > 0


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=64,  # head_dim 16: ONNX Runtime's rotary attention takes multiples of 16
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention: the cache has 2 heads
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_a_llama_the_in_place_graph_cannot_reproduce_is_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Head size 8: ONNX Runtime's rotary attention takes multiples of 16. The export says so
    and writes nothing (the plain export of the same folder works: the test above)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "narrow")
    assert export(tmp_path, "llama", str(tmp_path / "narrow"), "--kv-cache", "inplace") == 2
    assert "takes multiples of 16" in capsys.readouterr().err.replace("\n", " ")
    assert not list((tmp_path / "llama").glob("*/model.onnx"))


@pytest.mark.parametrize("layout", ["concat", "inplace"])
def test_a_llama_folder_exports_and_batched_steps_give_its_own_logits(
    tmp_path: Path, tiny_llama: Path, layout: str
) -> None:
    """Prompts of different lengths prefilled together and decoded through the KV store that
    serves the export give, position for position, the logits the PyTorch model gives each
    sequence alone: with the cache concatenated (prompts left-padded) and in place (right-
    padded; the rotary embedding and the grouped key/value heads are ONNX Runtime's
    GroupQueryAttention's)."""
    from transformers import LlamaForCausalLM

    from inferd.config.model import GenerationConfig, RuntimeOptions
    from inferd.generation.decoder import LOGITS, DecoderShape
    from inferd.generation.kv_layout import kv_store
    from inferd.runtime.onnx_session import OnnxSession

    assert export(tmp_path, "llama", str(tiny_llama), "--kv-cache", layout) == 0
    result = report(tmp_path, "llama", "export-1.json")
    assert result["parity"]["ok"] and result["ranked_rows_wrong"] == 0
    assert result["graph_draws_differing"] == 0
    session = OnnxSession(tmp_path / "llama" / "1" / "model.onnx", RuntimeOptions())
    shape = DecoderShape.of(session.inputs, session.outputs)
    assert (shape.layers, shape.heads, shape.head_dim, shape.top_width) == (2, 2, 16, 64)
    assert shape.inplace == (layout == "inplace") and shape.last_only
    if layout == "inplace":
        assert result["inplace_kv_max_abs_diff"] < 1e-4
    store = kv_store(shape, GenerationConfig(context_length=64, max_kv_tokens=128))
    prompts = [[5, 6, 7], [11, 12, 13, 14, 15, 16]]
    fed = [[21, 22, 23], [31, 32, 33]]
    step = store.prefill(prompts, [0, 1], 0)
    out = session.run(step.feeds, shape.output_names, step.into)
    seen = [[row] for row in store.after_prefill(step, out)]
    for n in range(3):
        tokens = np.array([fed[0][n], fed[1][n]], dtype=np.int64)
        positions = np.array([len(prompts[0]) + n, len(prompts[1]) + n], dtype=np.int64)
        step = store.decode(tokens, positions)
        out = session.run(step.feeds, shape.output_names, step.into)
        store.after_decode(step, out)
        for r in range(2):
            seen[r].append(out[LOGITS][r, -1])
    model = LlamaForCausalLM.from_pretrained(tiny_llama).eval()
    for r in range(2):
        ids = torch.tensor([prompts[r] + fed[r]])
        with torch.no_grad():
            logits = model(ids).logits[0].numpy()
        expected = logits[len(prompts[r]) - 1 : len(prompts[r]) + 3]
        np.testing.assert_allclose(np.stack(seen[r]), expected, atol=1e-4)


def test_the_generator_build_says_each_phase_and_each_training_step(tmp_path: Path) -> None:
    from inferd.tools.generator import GeneratorShape, build_generator

    phases: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        phases.append(("start", name))
        yield
        phases.append(("end", name))

    steps: list[int] = []
    shape = GeneratorShape(layers=1, heads=2, hidden=32, context=64, vocab=300, train_batch=2)
    facts = build_generator(
        tmp_path,
        "gen",
        steps=3,
        shape=shape,
        corpus_chars=30_000,
        progress=lambda step, loss: steps.append(step),
        phase=phase,
    )
    names = [name for what, name in phases if what == "start"]
    assert [name for what, name in phases if what == "end"] == names  # each one closed
    assert names[0] == "loading PyTorch and transformers"
    assert names[1] == "reading the docstrings of Python's standard library"
    assert names[2].startswith("training a 300-token BPE tokenizer")
    assert names[3] == "tokenizing the training text"
    assert names[4].startswith("exporting to ONNX")
    assert steps == [0, 1, 2] and facts["steps"] == 3
    assert (tmp_path / "gen" / "1" / "model.onnx").is_file()
