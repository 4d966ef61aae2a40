"""Ranks a decoder's next-token candidates inside its own graph: ONNX Runtime's TopK on the
logits of the last position, as two more outputs, `top_logits` (float32) and `top_ids` (int64),
[batch, width], best first, equal scores by the lower token id.

A decode step whose rows all draw within the `width` best (greedy, or top-k <= width, no
repetition penalty) asks for these instead of the logits (inferd.generation.scheduler): the cut
runs in the same call as the model, on its threads, and the vocabulary-wide logits are not
copied out. ONNX Runtime runs every node of a graph whatever outputs a call asks for, so the
ranking covers the last position only: a prefill's full logits cost no more than before.

Where the vocabulary is of a fixed size, the logits are ranked after an input is added to
them, `draw_bias` ([1 or batch, vocab], float32: zeros, or -inf for the tokens a row's
constraint forbids: inferd.generation.constraint), so that a constrained row's candidates are
its allowed tokens, and it can draw in the graph like any other.

`inferd export` adds them to the decoders it writes and checks them against the logits of the
same run (`check_ranked`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferd.generation.decoder import DRAW_BIAS, LOGITS, TOP_IDS, TOP_LOGITS

TOP_WIDTH = 64
"""Candidates ranked: top-k up to this draws from them (common settings are 20-50)."""


def add_ranked_logits(model: Any, width: int = TOP_WIDTH) -> bool:
    """Adds the two outputs to an onnx.ModelProto in place; False (nothing added) when the
    logits are not float32 [batch, sequence, vocab] or the outputs are already there."""
    from onnx import TensorProto, helper

    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    logits = outputs.get(LOGITS)
    if logits is None or TOP_LOGITS in outputs or TOP_IDS in outputs:
        return False
    tensor = logits.type.tensor_type
    if tensor.elem_type != TensorProto.FLOAT or len(tensor.shape.dim) != 3:
        return False
    batch, vocab = tensor.shape.dim[0], tensor.shape.dim[2]
    if vocab.HasField("dim_value"):
        width = min(width, vocab.dim_value)
    last = "inferd_ranked_last_logits"
    nodes = [helper.make_node("Gather", [LOGITS, "inferd_ranked_last"], [last], axis=1)]
    ranked = last
    if vocab.HasField("dim_value"):  # the bias a constraint's mask becomes
        ranked = "inferd_ranked_biased_logits"
        graph.input.append(
            helper.make_tensor_value_info(
                DRAW_BIAS, TensorProto.FLOAT, ["bias_rows", vocab.dim_value]
            )
        )
        nodes.append(helper.make_node("Add", [last, DRAW_BIAS], [ranked]))
    graph.initializer.extend(
        [
            helper.make_tensor("inferd_ranked_last", TensorProto.INT64, [], [-1]),
            helper.make_tensor("inferd_ranked_width", TensorProto.INT64, [1], [width]),
        ]
    )
    top = helper.make_node(
        "TopK",
        [ranked, "inferd_ranked_width"],
        [TOP_LOGITS, TOP_IDS],
        axis=-1,
        largest=1,
        sorted=1,
    )
    graph.node.extend([*nodes, top])
    batch_dim = batch.dim_param or batch.dim_value or "batch"
    graph.output.extend(
        [
            helper.make_tensor_value_info(TOP_LOGITS, TensorProto.FLOAT, [batch_dim, width]),
            helper.make_tensor_value_info(TOP_IDS, TensorProto.INT64, [batch_dim, width]),
        ]
    )
    return True


def ranked_width(model: Any) -> int:
    """How many candidates an onnx.ModelProto's ranked outputs hold: their fixed width; 0
    when it has none, or not of a fixed width."""
    outputs = {o.name: o for o in model.graph.output}
    if TOP_LOGITS not in outputs or TOP_IDS not in outputs:
        return 0
    dims = outputs[TOP_LOGITS].type.tensor_type.shape.dim
    return dims[1].dim_value if len(dims) == 2 and dims[1].HasField("dim_value") else 0


def add_to_file(path: Path, width: int = TOP_WIDTH) -> bool:
    import onnx

    model = onnx.load(str(path))
    if not add_ranked_logits(model, width):
        return False
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return True


def check_ranked(path: Path, vocab: int, context: int, seed: int = 0) -> int:
    """Runs the decoder's prefill of three prompts and one decode step through the KV store
    that serves it, asking for the logits and the ranked outputs together; returns the rows
    whose ranked candidates differ from the logits' own (by the serving order); 0 is right."""
    from inferd.config.model import GenerationConfig, RuntimeOptions
    from inferd.generation.decoder import DecoderShape
    from inferd.generation.kv_layout import kv_store
    from inferd.generation.sampling import top_candidates
    from inferd.runtime.onnx_session import OnnxSession

    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(1, vocab, n)] for n in (4, 9, 2)]
    config = GenerationConfig(
        context_length=context, max_running=len(prompts), max_kv_tokens=len(prompts) * context
    )
    session = OnnxSession(path, RuntimeOptions())
    try:
        shape = DecoderShape.of(session.inputs, session.outputs)
        if shape.top_width == 0:
            raise ValueError(f"{path.name} has no ranked outputs of a fixed width")
        store = kv_store(shape, config)
        wanted = [LOGITS, TOP_LOGITS, TOP_IDS, *shape.present_names]
        step = store.prefill(prompts, list(range(len(prompts))), 0)
        runs = [session.run(step.feeds, wanted, step.into)]
        store.after_prefill(step, runs[0])
        step = store.decode(
            rng.integers(1, vocab, len(prompts)), np.array([len(p) for p in prompts])
        )
        runs.append(session.run(step.feeds, wanted, step.into))
        wrong = 0
        for out in runs:
            values, ids = top_candidates(out[LOGITS][:, -1, :], shape.top_width)
            same = (ids == out[TOP_IDS]).all(axis=1) & (values == out[TOP_LOGITS]).all(axis=1)
            wrong += int((~same).sum())
        return wrong
    finally:
        session.close()
