"""Which schemas the grammar can enforce, the tool-call format and the deployment's structure limits."""

import json
import re
from typing import Any
from urllib.parse import unquote

import openai
import pydantic
import pytest

from snapllm.errors import InvalidRequestError, UnsupportedParameterError
from snapllm.protocol.constraints.structured import (
    check_schema,
    embed_schema,
    generic_tool_call_text,
    parse_cut_tool_calls,
    parse_tool_calls,
    tool_arguments,
    tool_call_schema,
)
from snapllm.protocol.limits import Limits
from snapllm.protocol.requests import parse_request

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10, "title": "Name"},
        "kind": {"$ref": "#/$defs/Kind"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["name", "kind", "tags"],
    "additionalProperties": False,
    "$defs": {"Kind": {"enum": ["a", "b"]}},
}


def test_enforceable_schemas_pass():
    check_schema(PERSON, param="response_format")
    check_schema({"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}, param="p")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "idn-email"},
        {"type": "string", "x-format": "email"},
        {"type": "string", "maxLength": 10**9},
        {"type": "string", "pattern": "^a{5000}$"},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 100_000},
        {"type": "object", "x-kubernetes-list-type": "map", "self": {"vendor": "x"}, "readonly": True},
    ],
)
def test_constructs_the_old_converter_refused_are_served(schema):
    """A keyword JSON Schema does not define, a format without a grammar, a count over 4,096: served."""
    assert check_schema(schema, param="response_format").schema == schema


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "integer", "minimum": "0"}, "'0' is not of type 'number' (at minimum)"),
        ({"properties": {"n": {"type": "number", "multipleOf": -2}}}, "(at properties.n.multipleOf)"),
        ({"type": "array", "uniqueItems": "yes"}, "not valid JSON Schema: 'yes' is not of type 'boolean'"),
        ({"$ref": "#/$defs/Missing"}, "/$defs/Missing"),
    ],
)
def test_schemas_that_cannot_be_served_are_named(schema, named):
    with pytest.raises(UnsupportedParameterError, match="response_format") as caught:
        check_schema(schema, param="response_format")
    assert named in caught.value.message and caught.value.code == "unsupported_parameter"


def resolve_pointer(root: Any, ref: str) -> Any:
    """The part of ``root`` a local ``$ref`` (``#/$defs/a~1b``) names."""
    node = root
    for token in ref.removeprefix("#").split("/")[1:]:
        node = node[unquote(token).replace("~1", "/").replace("~0", "~")]
    return node


def test_tool_call_schema_names_each_function_and_keeps_their_defs():
    functions = [{"name": "a", "parameters": PERSON}, {"name": "b"}]
    schema = tool_call_schema(functions, parallel=True)
    assert schema["type"] == "array" and schema["minItems"] == 1
    assert [c["properties"]["name"] for c in schema["items"]["anyOf"]] == [{"const": "a"}, {"const": "b"}]
    arguments = [c["properties"]["arguments"] for c in schema["items"]["anyOf"]]
    assert arguments == [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]
    # Each function's parameters are one def, whose own refs now point inside it.
    assert schema["$defs"]["a"]["$defs"] == {"Kind": {"enum": ["a", "b"]}}
    assert schema["$defs"]["a"]["properties"]["kind"] == {"$ref": "#/$defs/a/$defs/Kind"}
    check_schema(schema, param="tools")
    assert tool_call_schema([{"name": "b"}], parallel=False)["properties"]["name"] == {"const": "b"}


def test_embedded_refs_resolve_against_their_own_schema_whatever_the_names():
    colliding = tool_call_schema(
        [
            {
                "name": "a",
                "parameters": {"properties": {"v": {"$ref": "#/$defs/b-c"}}, "$defs": {"b-c": {"const": 7}}},
            },
            {
                "name": "a-b",
                "parameters": {
                    "properties": {"v": {"$ref": "#/$defs/c"}},
                    "$defs": {"c": {"type": "string"}},
                },
            },
            {
                "name": "p/q~r",
                "parameters": {"properties": {"n": {"type": "integer"}, "m": {"$ref": "#/properties/n"}}},
            },
        ],
        parallel=False,
    )
    calls = {c["properties"]["name"]["const"]: c for c in colliding["anyOf"]}
    a, ab, pq = (
        resolve_pointer(colliding, calls[n]["properties"]["arguments"]["$ref"]) for n in ("a", "a-b", "p/q~r")
    )
    assert resolve_pointer(colliding, a["properties"]["v"]["$ref"]) == {"const": 7}
    assert resolve_pointer(colliding, ab["properties"]["v"]["$ref"]) == {"type": "string"}
    assert resolve_pointer(colliding, pq["properties"]["m"]["$ref"]) == {"type": "integer"}
    # A value that merely looks like a $ref is data, not a reference.
    assert embed_schema({"const": {"$ref": "#/x"}}, "#/$defs/t") == {"const": {"$ref": "#/x"}}


def test_tool_calls_parse_from_the_generated_format_only():
    names = {"a", "b"}
    assert parse_tool_calls('{"name": "a", "arguments": {"x": 1}}', names) == [("a", '{"x": 1}')]
    assert parse_tool_calls('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]', names) == [
        ("a", "{}"),
        ("b", "{}"),
    ]
    assert parse_tool_calls("Sunny today.", names) is None
    assert parse_tool_calls('{"name": "a", "argu', names) is None
    # An answer in JSON (tool_choice "auto" with a response_format) is not a call.
    assert parse_tool_calls('{"name": "Paris", "arguments": {}}', names) is None
    assert parse_tool_calls('{"name": "a", "arguments": {}, "extra": 1}', names) is None
    assert json.loads(generic_tool_call_text([("a", '{"x": 1}')])) == {"name": "a", "arguments": {"x": 1}}


def test_limits_bound_tools_and_schema_size_before_invoking():
    limits = Limits(max_tokens=16, max_tools=2, max_schema_chars=200)
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(3)]
    with pytest.raises(InvalidRequestError, match="at most 2") as caught:
        limits.check(parse_request({"messages": [{"role": "user", "content": "x"}], "tools": tools}))
    assert caught.value.param == "tools"
    big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20)}}
    form = {"type": "json_schema", "json_schema": {"name": "n", "schema": big}}
    with pytest.raises(InvalidRequestError, match="characters") as caught:
        limits.check(parse_request({"messages": [{"role": "user", "content": "x"}], "response_format": form}))
    assert caught.value.param == "response_format"


# --- Tool calls cut short -----


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('[{"name": "get_w', [("get_weather", "")]),
        ('[{"name": "get', [(None, "")]),
        ("[", [(None, "")]),
        ('{"name": "get_weather", "arguments": {"city": "Pa', [("get_weather", '{"city": "Pa')]),
        (
            '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_t',
            [("get_weather", '{"city": "Paris"}'), ("get_time", "")],
        ),
        ('[{"name": "get_time", "arguments": {}}', [("get_time", "{}")]),
        ("", None),
        ("The weather", None),
        ('{"answer": 4', None),
        ('{"name": "nope", "arguments": {', None),
    ],
)
def test_a_cut_tool_call_answer_reads_as_far_as_it_goes(text, calls):
    assert parse_cut_tool_calls(text, ("get_weather", "get_time")) == calls


def test_one_function_decides_a_name_that_was_not_begun():
    assert parse_cut_tool_calls("[", ("wave",)) == [("wave", "")]


class Address(pydantic.BaseModel):
    street: str
    unit: str | None = None


class Person(pydantic.BaseModel):
    name: str
    homes: list[Address]
    nickname: str | None = None


def test_strict_mode_takes_the_schemas_openais_parse_sends():
    # The official SDK's parse() and pydantic_function_tool() send a model's schema made strict.
    tool = openai.pydantic_function_tool(Person)
    assert tool["function"]["strict"] is True
    check_schema(tool["function"]["parameters"], param="response_format", strict=True)
    check_schema(PERSON, param="response_format", strict=True)


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            },
            "'required' must list every key in properties (at the root); missing 'b'",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            "'additionalProperties' must be false (at the root)",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"x": {"type": "string"}},
                            "additionalProperties": False,
                        },
                    }
                },
                "required": ["a"],
                "additionalProperties": False,
            },
            "missing 'x'",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/A"}},
                "required": ["a"],
                "additionalProperties": False,
                "$defs": {"A": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {}}]}},
            },
            "'additionalProperties' must be false (at $defs.A.anyOf[1])",
        ),
        ({"type": "array", "items": {"type": "string"}}, "the root must be an object"),
        ({"anyOf": [{"type": "object"}, {"type": "null"}]}, "the root must be an object"),
    ],
    ids=["optional-property", "open-object", "in-items", "in-a-definition", "array-root", "anyOf-root"],
)
def test_strict_mode_refuses_what_openai_refuses_naming_where(schema, words):
    # Served without strict (the grammar follows the schema as written); with strict: true, a 400 as
    # OpenAI gives, never a quietly different schema.
    check_schema(schema, param="response_format")
    with pytest.raises(InvalidRequestError, match=re.escape(words)) as caught:
        check_schema(schema, param="response_format", strict=True)
    assert caught.value.param == "response_format" and "strict mode" in str(caught.value)


def test_strict_mode_applies_where_the_request_asks_for_it():
    open_object = {"type": "object", "properties": {"a": {"type": "string"}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": open_object, "strict": True}}
    form = {"type": "json_schema", "json_schema": {"name": "n", "schema": open_object, "strict": True}}
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for extra, param in (
        ({"tools": [tool]}, "tools.0.function.parameters"),
        ({"response_format": form}, "response_format"),
    ):
        with pytest.raises(InvalidRequestError) as caught:
            parse_request({**base, **extra})
        assert caught.value.param == param
    lenient = {**tool, "function": {**tool["function"], "strict": False}}
    parse_request({**base, "tools": [lenient]})


def test_tool_arguments_are_generated_with_the_listed_keys_and_checked_as_written():
    said = {"type": "object", "properties": {"a": {"type": "string"}}}
    parameters = {
        "type": "object",
        "properties": {
            "plain": said,
            "open": {**said, "additionalProperties": True},
            "patterned": {**said, "patternProperties": {"^x-": {}}},
            "combined": {"allOf": [said, {"properties": {"b": {}}}]},
            "items": {"type": "array", "items": said},
        },
        "$defs": {"kept": said},
    }
    compiled = tool_arguments(parameters)
    generated = compiled.enforced
    properties = generated["properties"]
    assert generated["additionalProperties"] is False
    assert properties["plain"]["additionalProperties"] is False
    assert properties["items"]["items"]["additionalProperties"] is False
    assert generated["$defs"]["kept"]["additionalProperties"] is False
    assert properties["open"]["additionalProperties"] is True
    assert "additionalProperties" not in properties["patterned"]
    # Each branch of an allOf names some of the keys: closing one would refuse the other's.
    assert all("additionalProperties" not in branch for branch in properties["combined"]["allOf"])
    # The answer is checked against the schema as written: a key the grammar never writes still validates.
    assert compiled.schema == parameters and not compiled.value_violations({"extra": 1, "plain": {"z": 2}})
    # One compile for the request's validation, its grammar and its answer check.
    assert check_schema(parameters, param="tools.0.function.parameters", listed_keys_only=True) is compiled
