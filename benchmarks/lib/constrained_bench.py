"""What holding answers to a JSON schema costs a served generator, whether every answer
holds, and what `n` answers in one request cost against n requests: tokens per second of
constrained requests against free ones of exactly the same lengths (each free request asks,
with `ignore_eos`, for as many tokens as its constrained twin's answer took), at 1 and 16 in
flight, the two kinds alternating round by round on one server; and each constrained answer
parsed and validated against its schema (`jsonschema`). The decoders have random weights:
only the constraint makes an answer valid JSON.

Every field of the schemas is bounded (a string's length, an integer's range, an array's
items), so every answer can end within the token limit: with random weights, an unbounded
one (a number's digits) runs on until the limit cuts it, which proves nothing of the
constraint. The generator benchmark's two GPT-2 shapes (4 layers, hidden 128, vocabulary
4096; 6 layers, hidden 512), KV cache in place, temperature 0.8 and top-k 50 for both kinds;
also each schema's mask time a token, in process, replaying the answers; and 4 answers to a
180-token prompt in one request (`n: 4`, the prompt prefilled once) against 4 requests sent
at once with the same seeds, alternating, their texts compared.

    python benchmarks/generate_bench.py constrained          # its section of RESULTS.md
    python benchmarks/generate_bench.py constrained --quick  # one round, printed only
    python benchmarks/generate_bench.py constrained --jump-forward 0  # every token drawn
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import numpy as np
import orjson
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from generate_bench import CASES, MODEL, build_repo, set_generation
from inferd.corpus import sentences
from inferd.generation.constraint import Grammars
from inferd.generation.grammar import json_schema

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "email": {"type": "string", "pattern": "^[a-z]{2,10}@[a-z]{2,8}\\.(com|org)$"},
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "email", "active"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 999999},
            "status": {"enum": ["open", "paid", "shipped", "cancelled"]},
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "maxLength": 8},
                        "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                        "cents": {"type": "integer", "minimum": 0, "maximum": 1000000},
                    },
                    "required": ["sku", "quantity", "cents"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["id", "status", "items"],
        "additionalProperties": False,
    },
}
FLIGHTS = {1: 40, 16: 240}
"""Requests in flight -> requests a round."""
MAX_NEW = 256


@dataclass
class Answers:
    tokens: list[int]
    texts: list[str]
    reasons: list[str]
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / self.seconds


async def closed_loop(url: str, bodies: list[dict[str, Any]], flight: int) -> Answers:
    """`bodies` sent by `flight` clients, each its next as soon as its last is answered."""
    out = Answers([0] * len(bodies), [""] * len(bodies), [""] * len(bodies), 0.0)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(bodies)):
        queue.put_nowait(i)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            response = await http.post("/generate", content=orjson.dumps(bodies[i]))
            response.raise_for_status()
            done = orjson.loads(response.content)
            out.tokens[i] = int(done["usage"]["completion_tokens"])
            out.texts[i], out.reasons[i] = done["text"], done["finish_reason"]

    limits = httpx.Limits(max_connections=flight)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(flight)))
        out.seconds = time.perf_counter() - started
    return out


def constrained_bodies(count: int, seed: int) -> list[dict[str, Any]]:
    names = list(SCHEMAS)
    return [
        {
            "prompt": f"Record {seed}-{i}:",
            "json_schema": SCHEMAS[names[i % len(names)]],
            "max_length": MAX_NEW,
            "temperature": 0.8,
            "top_k": 50,
            "seed": seed * 1000 + i,
        }
        for i in range(count)
    ]


def free_twins(bodies: list[dict[str, Any]], tokens: list[int]) -> list[dict[str, Any]]:
    """The same requests without the schema, each asking for its twin's answer's length."""
    return [
        {**{k: v for k, v in b.items() if k != "json_schema"}, "max_length": n, "ignore_eos": True}
        for b, n in zip(bodies, tokens, strict=True)
    ]


def valid(body: dict[str, Any], text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), body["json_schema"])
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def mask_us(tokenizer: Tokenizer, texts: list[str], schema: dict[str, Any]) -> float:
    """The mean time of one mask (and taking its token), replaying `texts` (answers to
    `schema`, re-tokenized) through a fresh matcher each, in process."""

    async def go() -> float:
        grammars = Grammars(tokenizer, 0)
        spent, count = 0.0, 0
        try:
            for text in texts:
                held = await grammars.constraint(json_schema(schema, "json_schema"))
                for token in tokenizer.encode(text).ids:
                    started = time.perf_counter()
                    held.mask()
                    whole = held.consume(token)
                    spent += time.perf_counter() - started
                    count += 1
                    if whole:
                        break
        finally:
            grammars.close()
        return spent / max(count, 1) * 1e6

    return asyncio.run(go())


async def choices_cost(url: str, sets: int) -> tuple[float, float, int]:
    """The median time of one request for 4 answers (`n`: the prompt prefilled once) and of
    4 requests at once for the same answers (seeds s..s+3), alternating; and how many sets
    gave different texts (none should)."""
    prompt = " ".join(sentences(40))[:800]  # about 180 tokens (the demo shape holds 256)
    body = {"prompt": prompt, "max_tokens": 32, "temperature": 0.8, "ignore_eos": True}
    one, four, differ = [], [], 0
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        for s in range(sets):
            started = time.perf_counter()
            together = await http.post("/v1/completions", json={**body, "n": 4, "seed": s})
            together.raise_for_status()
            one.append(time.perf_counter() - started)
            started = time.perf_counter()
            apart = await asyncio.gather(
                *(http.post("/v1/completions", json={**body, "seed": s + i}) for i in range(4))
            )
            four.append(time.perf_counter() - started)
            texts = [c["text"] for c in together.json()["choices"]]
            differ += texts != [a.json()["choices"][0]["text"] for a in apart]
    return float(np.median(one)) * 1000, float(np.median(four)) * 1000, differ


@dataclass
class CaseResult:
    ratios: dict[int, list[float]]
    rates: dict[int, list[tuple[float, float]]]
    checked: int
    passed: int
    stopped: int
    mask_us: dict[str, float]
    choices: tuple[float, float, int] = (0.0, 0.0, 0)


def run_case(shape: Any, rounds: int, jump_forward: int | None) -> CaseResult:
    result = CaseResult({f: [] for f in FLIGHTS}, {f: [] for f in FLIGHTS}, 0, 0, 0, {})
    with tempfile.TemporaryDirectory(prefix="inferd-constrained-") as tmp:
        root = build_repo(Path(tmp), shape, "inplace")
        if jump_forward is not None:
            set_generation(root, "jump_forward", jump_forward)
        server = Server(root)
        kept: dict[str, list[str]] = {name: [] for name in SCHEMAS}
        try:
            asyncio.run(closed_loop(server.url, constrained_bodies(8, 99), 8))  # warm-up
            for r in range(rounds):
                for flight, count in FLIGHTS.items():
                    bodies = constrained_bodies(count, r * 10 + flight)
                    held = asyncio.run(closed_loop(server.url, bodies, flight))
                    free = asyncio.run(
                        closed_loop(server.url, free_twins(bodies, held.tokens), flight)
                    )
                    assert free.tokens == held.tokens, "free twins of other lengths"
                    result.ratios[flight].append(held.tokens_per_s / free.tokens_per_s)
                    result.rates[flight].append((held.tokens_per_s, free.tokens_per_s))
                    for body, text, reason in zip(bodies, held.texts, held.reasons, strict=True):
                        result.checked += 1
                        result.passed += valid(body, text)
                        result.stopped += reason == "stop"
                        for name, schema in SCHEMAS.items():
                            if body["json_schema"] is schema:
                                kept[name].append(text)
                    print(shape, flight, result.ratios[flight][-1], flush=True)
            result.choices = asyncio.run(choices_cost(server.url, 6 * rounds))
        finally:
            server.stop()
        tokenizer = Tokenizer.from_file(str(root / MODEL / "1" / "tokenizer.json"))
        for name, schema in SCHEMAS.items():
            result.mask_us[name] = mask_us(tokenizer, kept[name][:40], schema)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, printed only")
    parser.add_argument(
        "--jump-forward",
        type=int,
        help="the decoders' generation.jump_forward (0: every token drawn); printed only",
    )
    args = parser.parse_args()
    rounds = 1 if args.quick else 5
    flag = "" if args.jump_forward is None else f" --jump-forward {args.jump_forward}"
    lines = [
        "### Constrained generation: answers held to a JSON schema against free ones",
        "",
        f"Machine: {machine_description()}",
        "",
        f"Command: `python benchmarks/generate_bench.py constrained{flag}` (GPT-2 architecture, "
        "random weights, KV cache in place; two schemas, a person and an order with 1-3 "
        f"items, at most {MAX_NEW} new tokens; temperature 0.8, top-k 50; each free request "
        "asks for its constrained twin's length with `ignore_eos`; "
        + ", ".join(f"{n} requests at {f} in flight" for f, n in FLIGHTS.items())
        + f" a round, {rounds} round(s), the kinds alternating; tokens/s by the server's "
        "count over the client's time; the ratio is the median round's).",
        "",
        "| model | in flight | constrained tokens/s | free tokens/s | constrained / free |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for case in CASES:
        result = run_case(case.shape, rounds, args.jump_forward)
        for flight in FLIGHTS:
            ratio = float(np.median(result.ratios[flight]))
            rates = result.rates[flight][
                int(np.argsort(result.ratios[flight])[len(result.ratios[flight]) // 2])
            ]
            lines.append(
                f"| {case.name} | {flight} | {rates[0]:.0f} | {rates[1]:.0f} | **{ratio:.2f}** |"
            )
        masks = ", ".join(f"{name} {us:.0f}" for name, us in result.mask_us.items())
        one, four, differ = result.choices
        notes.append(
            f"- {case.name}: 4 answers to a 180-token prompt (32 tokens each) in one request "
            f"(`n: 4`) took **{one:.0f} ms**, as 4 requests at once **{four:.0f} ms** "
            f"(medians; {differ} sets with other texts)."
        )
        notes.append(
            f"- {case.name}: **{result.passed} of {result.checked}** constrained answers parse "
            f"and validate ({result.stopped} ended by the grammar, "
            f"{result.checked - result.stopped} at the length limit); a mask and its token "
            f"in process, us: {masks}."
        )
    printed_only = args.quick or args.jump_forward is not None
    publish("generate-constrained", "\n".join([*lines, "", *notes]), printed_only)
