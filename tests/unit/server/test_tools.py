"""Tool calls on the chat route, without a model: what `tools` and `tool_choice` let an answer
be (and the refusals), the answer as OpenAI's `tool_calls`, a streamed call's deltas as
OpenAI streams them, and the chat template's view of tools and earlier calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferd.errors import ErrorCode, InferdError
from inferd.generation.chat import DEFAULT_TEMPLATE, ChatTemplate
from inferd.server.routes.tools import CallStream, Tool, answer, plan, template_message

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time"}}
HUGE = {"type": "object", "properties": {f"p{i}": {"enum": ["v" * 60]} for i in range(1200)}}


def tools(*specs: dict[str, Any]) -> list[Tool]:
    return [Tool.model_validate(s) for s in specs]


def test_the_choice_decides_what_the_answer_may_be() -> None:
    offered = tools(WEATHER, CLOCK)
    assert plan(None, None).mode == "none" and plan(None, None).grammar is None
    assert plan(offered, None).mode == "auto"  # OpenAI's default with tools
    assert plan(offered, "none").mode == "none" and plan(offered, "none").tools  # still shown
    required = plan(offered, "required")
    assert required.mode == "required" and required.grammar is not None
    named = plan(offered, {"type": "function", "function": {"name": "get_time"}})
    assert named.mode == "named" and named.name == "get_time"
    assert plan(offered, "auto").grammar is not None
    assert plan(offered, "auto").tools[0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(
    ("offered", "choice", "code", "words"),
    [
        ([], "required", ErrorCode.INVALID_INPUT, "needs tools"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, 4004, "not one of"),
        ([WEATHER], "sometimes", ErrorCode.INVALID_INPUT, "tool_choice must be"),
        ([WEATHER, WEATHER], None, ErrorCode.INVALID_INPUT, "same name"),
        (
            [{"type": "function", "function": {"name": "has space"}}],
            None,
            ErrorCode.INVALID_INPUT,
            "letters, digits",
        ),
        (
            [{"type": "function", "function": {"name": "f", "parameters": HUGE}}],
            "required",
            ErrorCode.INVALID_GRAMMAR,
            "the limit is 65536",
        ),
    ],
)
def test_refusals_name_what_is_wrong(
    offered: list[dict[str, Any]], choice: Any, code: int, words: str
) -> None:
    with pytest.raises(InferdError) as refused:
        plan(tools(*offered), choice)
    assert refused.value.code == code and words in refused.value.message


def test_a_whole_answer_becomes_a_call_or_stays_text() -> None:
    offered = tools(WEATHER, CLOCK)
    wrapped = '{"name":"get_weather","arguments":{"city":"Paris"}}'
    message, reason = answer(plan(offered, "required"), wrapped, "stop")
    assert reason == "tool_calls" and message["content"] is None
    (call,) = message["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    named = plan(offered, {"type": "function", "function": {"name": "get_time"}})
    message, reason = answer(named, "{}", "stop")
    assert message["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}
    assert answer(plan(offered, "auto"), "It is sunny.", "stop") == (
        {"role": "assistant", "content": "It is sunny."},
        "stop",
    )
    cut = answer(plan(offered, "required"), '{"name":"get_wea', "length")
    assert cut == ({"role": "assistant", "content": '{"name":"get_wea'}, "length")


def stream(kind: str, pieces: list[str], reason: str = "stop") -> tuple[list[Any], str]:
    offered = tools(WEATHER, CLOCK)
    choice: Any = (
        {"type": "function", "function": {"name": "get_time"}} if kind == "named" else kind
    )
    calls = CallStream(plan(offered, choice))
    deltas = [d for piece in pieces for d in calls.push(piece)]
    deltas += calls.finish(reason)
    return deltas, calls.finish_reason(reason)


def joined(deltas: list[dict[str, Any]]) -> tuple[str, str, str]:
    """What an OpenAI client puts together: the content, the call's name and arguments."""
    content = "".join(d.get("content", "") for d in deltas)
    name, arguments = "", ""
    for d in deltas:
        for call in d.get("tool_calls", ()):
            name += call["function"].get("name", "")
            arguments += call["function"].get("arguments", "")
    return content, name, arguments


def test_a_streamed_call_sends_its_name_once_then_its_arguments() -> None:
    text = '{"name":"get_weather","arguments":{"city":"Paris"}}'
    deltas, reason = stream("required", [text[i : i + 3] for i in range(0, len(text), 3)])
    assert reason == "tool_calls"
    assert joined(deltas) == ("", "get_weather", '{"city":"Paris"}')
    first = deltas[0]["tool_calls"][0]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert sum("id" in d["tool_calls"][0] for d in deltas) == 1
    assert json.loads(joined(deltas)[2]) == {"city": "Paris"}


def test_a_streamed_named_call_and_streamed_text() -> None:
    deltas, reason = stream("named", ['{"zo', 'ne":"', 'UTC"}'])
    assert reason == "tool_calls" and joined(deltas) == ("", "get_time", '{"zone":"UTC"}')
    deltas, reason = stream("auto", ["It ", "is ", "sunny."])
    assert reason == "stop" and joined(deltas) == ("It is sunny.", "", "")
    deltas, reason = stream("auto", ['{"name":"get_time",', '"arguments":{}}'])
    assert reason == "tool_calls" and joined(deltas) == ("", "get_time", "{}")
    deltas, reason = stream("required", ['{"name":"get_ti'], "length")
    assert reason == "length" and joined(deltas) == ('{"name":"get_ti', "", "")


def test_the_template_sees_the_tools_and_earlier_calls_and_their_results() -> None:
    template = ChatTemplate(DEFAULT_TEMPLATE)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    messages = [
        template_message("user", "Add", None),
        template_message("assistant", "", [call]),
        {**template_message("tool", "2", None), "tool_call_id": "c1"},
    ]
    prompt = template.render(messages, [WEATHER])
    lines = prompt.split("\n")
    assert json.loads(lines[0].removeprefix("tools: ")) == [WEATHER]
    assert lines[1] == "user: Add"
    called = json.loads(lines[2].removeprefix("assistant: "))
    assert called[0]["function"]["arguments"] == {"a": 1}  # an object, as templates expect
    assert lines[3:] == ["tool: 2", "assistant:"]
    assert template.render(messages[:1]) == "user: Add\nassistant:"  # no tools: as before
