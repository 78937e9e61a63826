"""The complete answer validated against the whole schema: what a grammar cannot hold, and its 422."""

import json
import time

import pytest

from snapllm.errors import SchemaValidationFailedError, error_from_body
from snapllm.protocol.constraints.answer_check import PATTERN_TIMEOUT_S, answer_violations, check_answer
from snapllm.protocol.constraints.structured import check_schema

TAGS = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    "required": ["tags"],
}


@pytest.mark.parametrize(
    ("schema", "valid", "invalid", "named"),
    [
        (TAGS, '{"tags":["a","b"]}', '{"tags":["a","a"]}', "non-unique"),
        ({"type": "integer", "not": {"const": 3}}, "4", "3", "should not be valid"),
        (
            {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
            '{"a":1,"b":2}',
            '{"a":1}',
            "'b' is a required property",
        ),
        ({"type": "object", "dependentRequired": {"a": ["b"]}}, '{"b":1}', '{"a":1}', "'b' is a dependency"),
        ({"type": "string", "pattern": "^(?=.*\\d)[a-z0-9]+$"}, '"ab1"', '"abc"', "does not match"),
        ({"type": "string", "pattern": "^(a|b)\\1$"}, '"aa"', '"ab"', "does not match"),
        (
            {"type": "object", "minProperties": 2},
            '{"a":1,"b":2}',
            '{"a":1}',
            "does not have enough properties",
        ),
        ({"type": "number", "multipleOf": 0.01}, "0.07", "0.075", "not a multiple of 0.01"),
        (
            {"type": "string", "format": "date", "pattern": "^2024"},
            '"2024-01-01"',
            '"2023-01-01"',
            "does not match",
        ),
    ],
)
def test_what_the_grammar_cannot_hold_is_validated_on_the_answer(schema, valid, invalid, named):
    check_schema(schema, param="response_format")  # served, not refused
    assert answer_violations(schema, valid) == []
    violations = answer_violations(schema, invalid)
    assert violations and any(named in v for v in violations), violations


def test_a_failed_answer_is_a_422_naming_what_failed_and_what_was_validated():
    with pytest.raises(SchemaValidationFailedError) as caught:
        check_answer(TAGS, '{"tags":["a","a"]}', param="response_format")
    error = caught.value
    assert error.status_code == 422 and error.code == "schema_validation_failed"
    assert error.param == "response_format"
    assert "$['tags'] ['a', 'a'] has non-unique elements" in error.message
    assert (
        "validated on the answer, not enforced by the grammar: uniqueItems (at properties.tags)"
        in error.message
    )
    assert """{"tags":["a","a"]}""" in error.message
    # A caller of the function (the router) rebuilds the same class from the status and the code.
    body = error.to_body()
    assert isinstance(error_from_body(422, body), SchemaValidationFailedError)
    check_answer(TAGS, '{"tags":["a","b"]}', param="response_format")  # passes: nothing raised


def test_an_answer_that_is_not_json_is_a_violation():
    assert answer_violations({"type": "object"}, '{"a":')[0].startswith("the answer is not JSON")


def test_a_pattern_that_backtracks_exponentially_costs_its_time_limit_and_fails():
    schema = {"type": "string", "pattern": "^(?=a)(a|aa)+$"}
    hostile = json.dumps("a" * 60 + "!")
    started = time.perf_counter()
    violations = answer_violations(schema, hostile)
    assert time.perf_counter() - started < 20 * PATTERN_TIMEOUT_S + 0.5
    assert violations  # never passed for lack of time
    many = json.dumps(["a" * 60 + "!"] * 8)
    started = time.perf_counter()
    assert answer_violations({"type": "array", "items": schema}, many)
    assert time.perf_counter() - started < 8 * (20 * PATTERN_TIMEOUT_S) + 0.5


def test_the_older_tuple_form_of_items_is_validated_as_prefix_items():
    schema = {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}
    check_schema(schema, param="tools")
    assert answer_violations(schema, '[1,"a",null]') == []
    assert answer_violations(schema, '["a",1]')
