"""Answers held to a form, served by a real inferd on 127.0.0.1 over a random-weight GPT-2
(exported by `inferd export`, KV cache in place): with random weights only the constraint
makes an answer valid JSON, so every answer that parses and validates is the constraint's
doing. JSON schemas, regexes and choice lists on /generate; `response_format` and vLLM's
`guided_*` fields through the stock `openai` client (its pydantic `parse` too), whole and
streamed; constrained and free sequences in one batch; bad schemas refused with 4006 while
the server stays responsive."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import openai
import orjson
import pytest
from pydantic import BaseModel, Field

from tests.generator_model import MODEL, build_generator_repo
from tests.integration.server import RunningServer, start_server

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "colour": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "colour", "tags", "active"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = build_generator_repo(tmp_path_factory.mktemp("structured-repo"), kv_cache="inplace")
    running = start_server(repo, tmp_path_factory.mktemp("structured-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture
def client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def generate(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/generate", json={"prompt": "The answer:", **body})
    assert response.status_code == 200, response.text
    return response.json()


def test_sampled_answers_to_a_schema_all_parse_and_validate_beside_free_ones(
    http: httpx.Client,
) -> None:
    """40 constrained answers with random weights (and temperature 1: the model's choice is
    noise), sent 16 at a time with free ones among them so both kinds share batches."""
    free = {"max_length": 24, "temperature": 0.9, "seed": 77, "ignore_eos": True}
    alone = generate(http, **free)["text"]

    def one(i: int) -> dict[str, Any]:
        if i % 4 == 3:
            return generate(http, **free)
        return generate(http, json_schema=SCHEMA, max_length=300, temperature=1.0, seed=i)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(53)))
    constrained = [a for i, a in enumerate(answers) if i % 4 != 3]
    assert len(constrained) == 40
    for answer in constrained:
        assert answer["finish_reason"] == "stop", answer
        jsonschema.validate(json.loads(answer["text"]), SCHEMA)
    # a free sequence's text does not depend on what shares its batch
    assert {a["text"] for i, a in enumerate(answers) if i % 4 == 3} == {alone}


def test_a_greedy_constrained_answer_is_the_same_every_time(http: httpx.Client) -> None:
    texts = {
        generate(http, json_schema=SCHEMA, temperature=0.0, max_length=300)["text"]
        for _ in range(3)
    }
    assert len(texts) == 1
    jsonschema.validate(json.loads(texts.pop()), SCHEMA)


def test_a_regex_and_a_choice_on_generate(http: httpx.Client) -> None:
    pattern = r"[a-z]{2,8}@[a-z]{2,6}\.(com|org)"
    for seed in range(8):
        answer = generate(http, regex=pattern, max_length=60, seed=seed)
        assert re.fullmatch(pattern, answer["text"]), answer
        picked = generate(http, choice=["yes", "no", "maybe not"], seed=seed)
        assert picked["text"] in ("yes", "no", "maybe not") and picked["finish_reason"] == "stop"


def test_a_constrained_stream_joins_into_the_whole_answer(http: httpx.Client) -> None:
    body = {"prompt": "x", "json_schema": SCHEMA, "max_length": 300, "seed": 5, "stream": True}
    whole = generate(http, **{**body, "stream": False})["text"]
    parts = []
    with http.stream("POST", "/generate", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                parts.append(json.loads(line[6:]))
    assert "".join(p["text"] for p in parts[:-1]) == parts[-1]["text"] == whole


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)
    colour: str = Field(pattern="^(red|green|blue)$")


def test_the_openai_clients_parse_with_a_pydantic_model(client: openai.OpenAI) -> None:
    for seed in range(5):
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Who is it?"}],
            response_format=Person,
            max_tokens=200,
            seed=seed,
        )
        person = completion.choices[0].message.parsed
        assert isinstance(person, Person), completion
        assert completion.choices[0].finish_reason == "stop"


def test_json_object_and_guided_fields_on_chat_and_completions(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Any object"}],
        response_format={"type": "json_object"},
        max_tokens=200,
        seed=3,
    )
    assert chat.choices[0].message.content is not None
    assert isinstance(json.loads(chat.choices[0].message.content), dict)
    completion = client.completions.create(
        model=MODEL,
        prompt=["one", "two"],
        max_tokens=300,
        seed=1,
        extra_body={"guided_json": SCHEMA},
    )
    for choice in completion.choices:
        jsonschema.validate(json.loads(choice.text), SCHEMA)
    picked = client.completions.create(
        model=MODEL, prompt="p", max_tokens=10, extra_body={"guided_choice": ["left", "right"]}
    )
    assert picked.choices[0].text in ("left", "right")


def test_a_streamed_chat_answer_to_a_schema(client: openai.OpenAI) -> None:
    schema = {"name": "person", "schema": SCHEMA, "strict": True}
    chunks = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Who?"}],
        response_format={"type": "json_schema", "json_schema": schema},
        max_tokens=300,
        seed=9,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"json_schema": {"type": "foo"}}, "json_schema", "Invalid type: foo"),
        ({"json_schema": {"$ref": "#/$defs/nowhere"}}, "json_schema", "does not exist"),
        ({"regex": "(unclosed"}, "regex", "unclosed group"),
        ({"choice": []}, "choice", "non-empty list"),
        ({"regex": "a", "choice": ["a"]}, None, "one constraint at a time"),
    ],
)
def test_bad_constraints_on_generate_are_4006(
    http: httpx.Client, body: dict[str, Any], param: str | None, words: str
) -> None:
    response = http.post("/generate", json={"prompt": "x", **body})
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["code"] == 4006 and words in error["error"], error


def test_bad_schemas_on_the_openai_routes_name_their_field(client: openai.OpenAI) -> None:
    cases = [
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
            "response_format.json_schema.schema",
        ),
        ({"type": "xml"}, "response_format"),
    ]
    for response_format, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "x"}],
                response_format=response_format,  # type: ignore[arg-type]
            )
        error = refused.value.body
        assert isinstance(error, dict) and error["code"] == 4006 and error["param"] == param


PROBE = """
import json, sys, time
import httpx
url, seconds = sys.argv[1], float(sys.argv[2])
took = []
with httpx.Client(base_url=url, timeout=10) as http:
    http.get("/health")
    ends = time.perf_counter() + seconds
    while time.perf_counter() < ends:
        started = time.perf_counter()
        assert http.get("/health").status_code == 200
        took.append(time.perf_counter() - started)
        time.sleep(0.02)
print(json.dumps(took))
"""
"""Times /health every 20 ms for a while; prints the times."""


def test_fifty_bad_schemas_at_once_leave_health_quick(server: RunningServer) -> None:
    """Each a different schema (no cache helps): deep `$ref` chains that go nowhere, huge
    enums, recursive definitions; compiled off the event loop, so /health answers on time."""

    def bad(i: int) -> dict[str, Any]:
        kind = i % 3
        if kind == 0:  # a large enum, then a type that does not exist
            return {"anyOf": [{"enum": [f"v-{i}-{j}" for j in range(2500)]}, {"type": "nope"}]}
        if kind == 1:
            defs = {f"d{j}": {"$ref": f"#/$defs/d{j + 1}"} for j in range(200)}
            return {"$ref": "#/$defs/d0", "$defs": {**defs, "d200": {"$ref": "#/$defs/d0"}}}
        return {"type": "string", "pattern": f"(a|aa|{i})+(b|bb)*" * 20 + "{1000}"}

    bodies = [orjson.dumps({"prompt": "x", "json_schema": bad(i)}) for i in range(50)]
    headers = {"content-type": "application/json"}
    # /health probed from a process of its own: this one's 50 senders do not slow the probe
    prober = subprocess.Popen(
        [sys.executable, "-c", PROBE, server.url, "3.0"], stdout=subprocess.PIPE, text=True
    )
    time.sleep(1.0)  # (its first probes: before the schemas)
    limits = httpx.Limits(max_connections=64)
    with (
        httpx.Client(base_url=server.url, timeout=60, limits=limits) as senders,
        ThreadPoolExecutor(50) as pool,
    ):
        answers = list(
            pool.map(lambda b: senders.post("/generate", content=b, headers=headers), bodies)
        )
    out, _ = prober.communicate(timeout=30)
    health = orjson.loads(out)
    assert len(health) > 20 and max(health) < 0.1, health
    for i, answer in enumerate(answers):
        if i % 3 < 2:  # (the regexes may compile: then they are answered)
            assert answer.status_code == 400 and answer.json()["code"] == 4006, answer.text
        else:
            assert answer.status_code in (200, 400), answer.text


WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER_PARAMETERS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"enum": ["UTC", "CET"]}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_required_and_named_tool_calls_always_parse_and_validate(client: openai.OpenAI) -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    named = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(6):
        for choice in ("required", named):
            completion = client.chat.completions.create(
                model=MODEL,
                messages=ASK,  # type: ignore[arg-type]
                tools=TOOLS,
                tool_choice=choice,  # type: ignore[arg-type]
                max_tokens=120,
                seed=seed,
            )
            (only,) = completion.choices
            assert only.finish_reason == "tool_calls" and only.message.content is None
            (call,) = only.message.tool_calls or []
            assert call.id.startswith("call_") and call.type == "function"
            name = call.function.name  # type: ignore[union-attr]
            assert name in schemas and (choice == "required" or name == "get_weather")
            jsonschema.validate(json.loads(call.function.arguments), schemas[name])  # type: ignore[union-attr]


def test_a_streamed_call_is_the_whole_answers_call(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": 120,
        "seed": 11,
    }
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    assert whole is not None
    name, arguments, ids, reasons = "", "", set(), []
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        if not chunk.choices:
            continue
        reasons.append(chunk.choices[0].finish_reason)
        for call in chunk.choices[0].delta.tool_calls or []:
            assert call.index == 0
            ids.add(call.id) if call.id else None
            name += (call.function.name or "") if call.function else ""
            arguments += (call.function.arguments or "") if call.function else ""
    assert len(ids) == 1 and reasons[-1] == "tool_calls"
    assert name == whole[0].function.name  # type: ignore[union-attr]
    assert arguments == whole[0].function.arguments  # type: ignore[union-attr]


def test_auto_answers_text_or_a_valid_call_and_results_go_back_through_the_template(
    client: openai.OpenAI,
) -> None:
    for seed in range(6):
        choice = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=TOOLS,
            max_tokens=60,
            seed=seed,  # type: ignore[arg-type]
        ).choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            json.loads(choice.message.tool_calls[0].function.arguments)  # type: ignore[union-attr]
        else:
            assert choice.message.content and not choice.message.content.startswith("{")
    arguments = '{"city":"Paris","unit":"celsius"}'
    follow_up: list[Any] = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees and sunny"},
    ]
    answered = client.chat.completions.create(
        model=MODEL, messages=follow_up, tools=TOOLS, tool_choice="none", max_tokens=8
    )
    first = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)  # type: ignore[arg-type]
    assert answered.choices[0].message.content is not None
    assert answered.usage is not None and first.usage is not None
    assert answered.usage.prompt_tokens > first.usage.prompt_tokens + 5  # the result, read


def test_tool_refusals_are_clear(client: openai.OpenAI) -> None:
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"tool_choice": "required"}, 4004, "needs tools"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            4004,
            "not one of the tools",
        ),
        (
            {"tools": TOOLS, "response_format": {"type": "json_object"}},
            4006,
            "one constraint at a time",
        ),
        ({"tools": TOOLS, "tool_choice": "required", "stop": ["}"]}, 4004, "stop cannot"),
    ]
    for extra, code, words in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=MODEL, messages=ASK, **extra)  # type: ignore[arg-type]
        error = refused.value.body
        assert isinstance(error, dict) and error["code"] == code and words in error["message"]
