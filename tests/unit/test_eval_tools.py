"""``snapllm eval tools`` without a model: BFCL's cases as OpenAI tools, each answer's outcome (BFCL's checker
and the kind of failure), and the table (the evaluation itself runs against servers, not in the tests)."""

from __future__ import annotations

import json

import pytest

from snapllm_dev.eval import bfcl
from snapllm_dev.eval.arguments import TOOL_CATEGORIES
from snapllm_dev.eval.bfcl import (
    ERROR,
    MALFORMED,
    NO_CALL,
    PASSED,
    WRONG_CALL,
    Case,
    Reply,
    load_cases,
    openai_tools,
    reply_of,
    score,
    spread,
)
from snapllm_dev.eval.tools import Scored, failures, render, summary

#: BFCL's function document (its own types: dict, float) with a dot in its name, and the possible answers.
FUNCTION = {
    "name": "geometry.area_circle",
    "description": "The area of a circle.",
    "parameters": {
        "type": "dict",
        "properties": {
            "radius": {"type": "float", "description": "The radius."},
            "units": {"type": "string", "description": "The units.", "default": "cm"},
        },
        "required": ["radius"],
    },
}
OTHER = {
    "name": "geometry.perimeter",
    "description": "The perimeter of a shape.",
    "parameters": {"type": "dict", "properties": {"side": {"type": "integer", "description": "A side."}}},
}
AREA = {"geometry.area_circle": {"radius": [5.0], "units": ["cm", ""]}}


def case(category: str, answers: list | None, functions: tuple = (FUNCTION, OTHER)) -> Case:
    return Case(
        id=f"{category}_0",
        category=category,
        messages=[{"role": "user", "content": "The area of a circle of radius 5 cm?"}],
        tools=openai_tools(list(functions)),
        functions=list(functions),
        answers=answers,
    )


def calls(*pairs: tuple[str, object]) -> Reply:
    return Reply(
        calls=tuple((name, a if isinstance(a, str) else json.dumps(a)) for name, a in pairs),
        finish_reason="tool_calls",
    )


def test_the_categories_offered_are_bfcls():
    assert tuple(bfcl.CATEGORIES) == TOOL_CATEGORIES


def test_tools_are_converted_as_bfcls_openai_handler_sends_them():
    (tool, _) = openai_tools([FUNCTION, OTHER])
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == "geometry_area_circle"  # OpenAI allows no dot in a name
    parameters = function["parameters"]
    assert parameters["type"] == "object" and parameters["required"] == ["radius"]
    radius = parameters["properties"]["radius"]
    assert radius["type"] == "number" and radius["format"] == "float"
    assert radius["description"].endswith("This is a float type value.")
    assert FUNCTION["name"] == "geometry.area_circle"  # BFCL's document itself is left as it was
    assert FUNCTION["parameters"]["type"] == "dict"


def test_cases_come_from_the_package_spread_evenly_and_the_same_each_run():
    assert spread(3, 10) == [0, 3, 6] and spread(5, 4) == [0, 1, 2, 3]
    first = load_cases("multiple", 4)
    assert [c.id for c in first] == ["multiple_0", "multiple_50", "multiple_100", "multiple_150"]
    assert [c.id for c in load_cases("multiple", 4)] == [c.id for c in first]
    sent = first[0]
    assert sent.messages[0]["role"] == "user" and len(sent.tools) == len(sent.functions) > 1
    # What is sent carries BFCL's hint; what the checker reads does not.
    assert sent.tools[0]["function"]["description"].endswith(
        "Note that the provided function is in Python 3 syntax."
    )
    assert "Python 3 syntax" not in sent.functions[0]["description"]
    assert sent.answers and load_cases("irrelevance", 1)[0].answers is None


def test_the_right_call_passes():
    # An integer where BFCL's document says float is accepted, as BFCL's checker does for Python.
    assert score(case("simple", [AREA]), calls(("geometry_area_circle", {"radius": 5}))).kind == PASSED


@pytest.mark.parametrize(
    ("reply", "kind", "detail"),
    [
        (calls(("geometry_perimeter", {"side": 5})), WRONG_CALL, "wrong_func_name"),
        (calls(("geometry_area_circle", {"radius": 6})), WRONG_CALL, "value_error"),
        (
            calls(("geometry_area_circle", {"radius": 5, "required": ["radius"]})),
            WRONG_CALL,
            "unexpected_param",
        ),
        (calls(("geometry_area_circle", '{"radius": 5')), MALFORMED, "not JSON"),
        (calls(("geometry_area_circle", "[5]")), MALFORMED, "not a JSON object"),
        (Reply(content="The area is 78.5 cm².", finish_reason="stop"), NO_CALL, "finish_reason stop"),
        (Reply(error="HTTP 504: timed out"), ERROR, "HTTP 504"),
    ],
    ids=[
        "other-function",
        "wrong-value",
        "schema-key-in-arguments",
        "cut-arguments",
        "array",
        "text",
        "error",
    ],
)
def test_each_failure_has_one_kind(reply, kind, detail):
    outcome = score(case("simple", [AREA]), reply)
    assert outcome.kind == kind and detail in outcome.detail


def test_a_call_left_in_the_text_is_flagged():
    text = '```json\n{"name": "geometry_area_circle", "arguments": {"radius": 5}}\n```'
    outcome = score(case("simple", [AREA]), Reply(content=text, finish_reason="stop"))
    assert outcome.kind == NO_CALL and outcome.call_in_text
    assert not score(case("simple", [AREA]), Reply(content="It is 78.5.")).call_in_text


def test_parallel_cases_need_every_call_in_any_order():
    small = {"geometry.area_circle": {"radius": [2.0], "units": ["cm", ""]}}
    parallel = case("parallel", [AREA, small], functions=(FUNCTION,))
    both = calls(("geometry_area_circle", {"radius": 2}), ("geometry_area_circle", {"radius": 5}))
    assert score(parallel, both).kind == PASSED
    one = score(parallel, calls(("geometry_area_circle", {"radius": 5})))
    assert one.kind == WRONG_CALL and "wrong_count" in one.detail


def test_irrelevance_passes_without_a_call_and_fails_with_one():
    irrelevant = case("irrelevance", None)
    assert score(irrelevant, Reply(content="No function fits.", finish_reason="stop")).kind == PASSED
    # BFCL counts a call it cannot decode as no call.
    assert score(irrelevant, calls(("geometry_area_circle", "{"))).kind == PASSED
    made = score(irrelevant, calls(("geometry_area_circle", {"radius": 1})))
    assert made.kind == WRONG_CALL and "irrelevance" in made.detail


def test_an_answer_is_read_from_the_completion():
    answer = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
                        {"type": "function", "function": {"name": "g", "arguments": {"b": 2}}},
                    ],
                },
            }
        ]
    }
    assert reply_of(answer) == Reply(calls=(("f", '{"a": 1}'), ("g", '{"b": 2}')), finish_reason="tool_calls")
    assert reply_of({"choices": [{"message": {"content": "hi"}}]}).calls == ()


def test_the_table_counts_each_outcome_per_category_and_endpoint():
    simple = case("simple", [AREA])
    text = Reply(content='{"name": "geometry_area_circle"}')
    scored = [
        Scored(
            simple,
            "a",
            calls(("geometry_area_circle", {"radius": 5})),
            score(simple, calls(("geometry_area_circle", {"radius": 5}))),
            1.0,
        ),
        Scored(simple, "a", text, score(simple, text), 1.0),
        Scored(simple, "b", Reply(error="HTTP 500: boom"), score(simple, Reply(error="HTTP 500: boom")), 1.0),
    ]
    totals = summary(scored)
    assert totals["simple"]["a"][PASSED] == 1 and totals["simple"]["a"][NO_CALL] == 1
    assert totals["simple"]["a"]["call in text"] == 1 and totals["simple"]["b"][ERROR] == 1
    lines = render(totals).splitlines()
    assert lines[0].split() == [
        "category",
        "endpoint",
        "passed",
        "no",
        "call",
        "malformed",
        "wrong",
        "call",
        "errors",
    ]
    assert lines[2].split() == ["simple", "a", "1/2", "1", "(1", "in", "text)", "0", "0", "0"]
    assert lines[3].split() == ["simple", "b", "0/1", "0", "0", "0", "1"]
    shown = failures(scored, per_kind=1)
    assert "a, no call: simple_0" in shown and "b, errors: simple_0: HTTP 500: boom" in shown
