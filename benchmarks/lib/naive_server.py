"""The common tutorial baseline: a FastAPI app where one request is one ONNX Runtime run (no
batching, no queue, the texts of a request padded together), behind the same `/embed` route as
inferd so that `inferd bench` drives both alike.

    python benchmarks/lib/naive_server.py --model M.onnx --tokenizer tokenizer.json \
        --max-tokens 256 --port 8100
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from tokenizers import Tokenizer


class EmbedRequest(BaseModel):
    texts: list[str]
    model: str | None = None


def build_app(model: str, tokenizer_file: str, max_tokens: int) -> FastAPI:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.enable_truncation(max_tokens)
    tokenizer.enable_padding()
    app = FastAPI()

    @app.post("/embed")
    def embed(body: EmbedRequest) -> dict[str, object]:  # a thread per request, as tutorials do
        encodings = tokenizer.encode_batch(body.texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(["last_hidden_state"], feeds)[0]
        pooled = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return {"embeddings": pooled.tolist()}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True)
    # no default: a comparison at another truncation than the server's compares other work
    # (at 128 tokens against inferd's 256, its long texts ran a third faster)
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--port", type=int, default=8100)
    args = parser.parse_args()
    app = build_app(args.model, args.tokenizer, args.max_tokens)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
