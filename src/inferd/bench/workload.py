"""What `inferd bench` sends: request bodies for each endpoint, from a JSONL file or from a
built-in generator of realistic texts (sentences of the standard library's docstrings, joined
to a length drawn from a chosen distribution), deterministic by seed."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from inferd.bench.endpoints import ENDPOINTS
from inferd.corpus import sentences

V2_NUMPY = {
    "FP32": np.float32,
    "FP64": np.float64,
    "FP16": np.float16,
    "INT64": np.int64,
    "INT32": np.int32,
    "INT16": np.int16,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}


class WorkloadError(ValueError):
    """A workload that cannot be built (bad length spec, bad JSONL line, unknown model)."""


@dataclass(frozen=True)
class Lengths:
    """Text lengths in words: `fixed:N`, `uniform:A-B` or `loguniform:A-B`."""

    kind: str
    low: int
    high: int

    @staticmethod
    def parse(text: str) -> Lengths:
        kind, _, spec = text.partition(":")
        try:
            if kind == "fixed":
                n = int(spec)
                return Lengths(kind, n, n)
            if kind in ("uniform", "loguniform"):
                a, b = (int(x) for x in spec.split("-"))
                if 1 <= a <= b:
                    return Lengths(kind, a, b)
        except ValueError:
            pass
        raise WorkloadError(
            f"lengths '{text}': use fixed:N, uniform:A-B or loguniform:A-B (words, A <= B)"
        )

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.low
        if self.kind == "uniform":
            return rng.randint(self.low, self.high)
        return round(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))


def generate_texts(count: int, lengths: Lengths, seed: int) -> list[str]:
    """`count` texts of real sentences, each cut to a length drawn from `lengths`."""
    rng = random.Random(seed)
    words = " ".join(sentences(2000)).split()
    texts = []
    for _ in range(count):
        n = max(1, lengths.draw(rng))
        start = rng.randrange(0, max(1, len(words) - n))
        texts.append(" ".join(words[start : start + n]))
    return texts


@dataclass
class Workload:
    path: str
    bodies: list[bytes]
    items_per_request: int
    description: str

    def cycle(self) -> Callable[[], bytes]:
        index = -1

        def next_body() -> bytes:
            nonlocal index
            index = (index + 1) % len(self.bodies)
            return self.bodies[index]

        return next_body


def text_body(
    endpoint: str, texts: list[str], model: str | None, max_new_tokens: int
) -> dict[str, Any]:
    named: dict[str, Any] = {"model": model} if model else {}
    if endpoint in ("embed", "predict"):
        return {"texts": texts, **named}
    if endpoint == "v1-embeddings":
        return {"input": texts if len(texts) > 1 else texts[0], **named}
    if endpoint == "generate":
        return {"prompt": texts[0], "max_length": max_new_tokens, "ignore_eos": True, **named}
    raise WorkloadError(f"unknown endpoint '{endpoint}'; one of {', '.join(ENDPOINTS)}")


def path_of(endpoint: str, model: str | None) -> str:
    if endpoint == "v2":
        if not model:
            raise WorkloadError("the v2 endpoint needs --model")
        return f"/v2/models/{model}/infer"
    return {
        "embed": "/embed",
        "predict": "/predict",
        "v1-embeddings": "/v1/embeddings",
        "generate": "/generate",
    }[endpoint]


def _v2_bodies(
    url: str, model: str, texts: list[str], batch: int, length: int, seed: int
) -> list[bytes]:
    """V2 bodies shaped by the model's own metadata: texts for text models, random tensors
    (variable axes: `batch` rows, `length` elsewhere) for tensor models."""
    try:
        meta = httpx.get(f"{url}/v2/models/{model}", timeout=10).json()
        inputs = meta["inputs"]
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise WorkloadError(f"cannot read the metadata of model '{model}' at {url}: {exc}") from exc
    if [i["datatype"] for i in inputs] == ["BYTES"]:
        name = inputs[0]["name"]
        return [
            orjson.dumps(
                {
                    "inputs": [
                        {
                            "name": name,
                            "datatype": "BYTES",
                            "shape": [batch],
                            "data": texts[i : i + batch],
                        }
                    ]
                }
            )
            for i in range(0, len(texts) - batch + 1, batch)
        ]
    rng = np.random.default_rng(seed)
    bodies = []
    for _ in range(16):
        tensors = []
        for spec in inputs:
            dtype = V2_NUMPY.get(spec["datatype"])
            if dtype is None:
                raise WorkloadError(
                    f"input {spec['name']}: datatype {spec['datatype']} is not generated"
                )
            shape = [
                batch if (i == 0 and d == -1) else (length if d == -1 else d)
                for i, d in enumerate(spec["shape"])
            ]
            data: np.ndarray
            if np.issubdtype(dtype, np.integer):
                data = rng.integers(0, 100, shape).astype(dtype)
            else:
                data = rng.standard_normal(shape).astype(dtype)
            tensors.append(
                {
                    "name": spec["name"],
                    "datatype": spec["datatype"],
                    "shape": shape,
                    "data": data.ravel().tolist(),
                }
            )
        bodies.append(orjson.dumps({"inputs": tensors}))
    return bodies


def build_workload(
    url: str,
    endpoint: str,
    model: str | None,
    *,
    inputs: Path | None,
    lengths: Lengths,
    count: int,
    batch: int,
    max_new_tokens: int,
    v2_length: int,
    seed: int,
) -> Workload:
    """The bodies to send, in order (the runners cycle through them)."""
    path = path_of(endpoint, model)
    texts: list[str]
    source: str
    if inputs is not None:
        texts, raw = [], []
        for number, line in enumerate(inputs.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise WorkloadError(f"{inputs}:{number}: not JSON: {exc}") from exc
            if isinstance(row, dict) and set(row) == {"text"} and isinstance(row["text"], str):
                texts.append(row["text"])
            elif isinstance(row, dict):
                raw.append(orjson.dumps(row))  # a whole body, sent as it is
            else:
                raise WorkloadError(f"{inputs}:{number}: expected an object")
        if raw and not texts:
            return Workload(path, raw, 1, f"{len(raw)} bodies from {inputs}")
        if raw:
            raise WorkloadError(f"{inputs}: mixes {{'text': ...}} lines and whole bodies")
        source = f"{len(texts)} texts from {inputs}"
    else:
        texts = generate_texts(count * batch, lengths, seed)
        source = f"{len(texts)} generated texts, {lengths.kind} {lengths.low}-{lengths.high} words"
    if not texts:
        raise WorkloadError("no inputs")
    if endpoint == "v2":
        bodies = _v2_bodies(url, model or "", texts, batch, v2_length, seed)
        return Workload(path, bodies, batch, f"V2 infer on '{model}', {batch} per request")
    groups = [texts[i : i + batch] for i in range(0, len(texts) - batch + 1, batch)] or [texts]
    bodies = [orjson.dumps(text_body(endpoint, g, model, max_new_tokens)) for g in groups]
    return Workload(path, bodies, len(groups[0]), source)
