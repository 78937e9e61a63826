"""A tool call written without its family's tags (snapllm.protocol.families.bare_calls): which answers are the
call."""

from __future__ import annotations

import json

import pytest

from snapllm.protocol.families.bare_calls import bare_call, bare_calls, bare_calls_allowed, may_be_bare_call

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = (("get_weather", CITY), ("get_time", CITY), ("ping", None))


@pytest.mark.parametrize(
    ("answer", "call"),
    [
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', ("get_weather", {"city": "Paris"})),
        ('\n  {"name":"get_time","arguments":{"city":"Tokyo"}}\n', ("get_time", {"city": "Tokyo"})),
        (
            '{\n  "arguments": {"city": "Rome"},\n  "name": "get_weather"\n}',
            ("get_weather", {"city": "Rome"}),
        ),
        ('{"name": "ping", "arguments": {}}', ("ping", {})),
        # Qwen2.5-Coder-0.5B-Instruct's answer to "What is the weather in Paris?" under auto.
        (
            '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```',
            ("get_weather", {"city": "Paris"}),
        ),
        ('```\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n```\n', ("get_time", {"city": "Oslo"})),
        # Cut (by max_tokens or the deadline) after the call, before its fence closed.
        (
            '```json\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n',
            ("get_weather", {"city": "Lima"}),
        ),
    ],
)
def test_one_bare_json_call_to_a_provided_tool_is_the_call(answer, call):
    name, arguments = bare_call(answer, TOOLS)
    assert (name, json.loads(arguments)) == call


@pytest.mark.parametrize(
    "answer",
    [
        'Sure: {"name": "get_weather", "arguments": {"city": "Paris"}}',  # text before
        '{"name": "get_weather", "arguments": {"city": "Paris"}} Done.',  # text after
        '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',  # a list of calls
        '{"name": "get_weather", "arguments": {"city": "Paris"}}{"name": "get_time", "arguments": {}}',
        '{"name": "get_news", "arguments": {"city": "Paris"}}',  # not a provided tool
        '{"name": "get_weather", "arguments": {"town": "Paris"}}',  # arguments invalid
        '{"name": "get_weather", "arguments": {"city": "Llanfairpwllgwyngyll"}}',  # too long for maxLength
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',  # another arguments key
        '{"name": "get_weather", "arguments": {"city": "Paris"}, "id": 1}',  # another key
        '{"name": "get_weather", "arguments": {"city": "Paris"}',  # cut short
        '{"city": "Paris"}',
        "The weather in Paris is sunny.",
        'Call it:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',  # text first
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\nThat calls it.',  # after
        '```python\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',  # another language
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n```\n{}\n```',  # two
    ],
)
def test_anything_else_stays_text(answer):
    assert bare_call(answer, TOOLS) is None


def test_several_bare_calls_in_one_block_are_the_calls_where_parallel_calls_are_allowed():
    # Qwen2.5-Coder-1.5B-Instruct's answer to a BFCL parallel_multiple case: the calls it means, one after
    # another in one block.
    answer = (
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '{"name": "get_time", "arguments": {"city": "Rome"}}\n```'
    )
    calls = bare_calls(answer, TOOLS, parallel=True)
    assert [(name, json.loads(arguments)) for name, arguments in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"city": "Rome"}),
    ]
    assert bare_calls(answer, TOOLS, parallel=False) is None  # parallel_tool_calls: false
    assert bare_call(answer, TOOLS) is None
    # One of them not a call: all of it is text.
    broken = answer.replace('"get_time"', '"get_news"')
    assert bare_calls(broken, TOOLS, parallel=True) is None
    assert bare_calls('{"name": "ping", "arguments": {}} and more', TOOLS, parallel=True) is None


def test_only_auto_without_a_response_format_in_a_format_with_an_opener_reads_bare_calls():
    assert bare_calls_allowed(tool_calls="auto", answer_schema=None, opener="<tool_call>")
    # A json_object or json_schema answer is the answer the request asked for, whatever its shape.
    assert not bare_calls_allowed(tool_calls="auto", answer_schema={"type": "object"}, opener="<tool_call>")
    # Forced calls come from the call branch; no tools, no calls; the generic format's calls are bare JSON.
    assert not bare_calls_allowed(tool_calls="all", answer_schema=None, opener="<tool_call>")
    assert not bare_calls_allowed(tool_calls=None, answer_schema=None, opener="<tool_call>")
    assert not bare_calls_allowed(tool_calls="auto", answer_schema=None, opener="")


def test_a_streamed_answer_is_held_while_it_may_be_a_bare_call():
    assert may_be_bare_call("") and may_be_bare_call("\n ") and may_be_bare_call(' {"name": "get_')
    assert may_be_bare_call("``") and may_be_bare_call("```js") and may_be_bare_call('```json\n{"na')
    assert not may_be_bare_call("The weather") and not may_be_bare_call('Sure: {"name"')
    assert not may_be_bare_call("```python\n") and not may_be_bare_call("```json\nimport")
