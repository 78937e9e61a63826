"""A constrained answer's shortest valid end (:meth:`snapllm.engine.constraint.Constraint.closing`), without
a model: llguidance's matcher over a byte-level vocabulary (every byte a token), as the engine's is over a
model's. Whatever point an answer is cut at, the end makes it JSON that the schema accepts."""

from __future__ import annotations

import json

import pytest

from snapllm.engine.constraint import Constraint
from snapllm.protocol.completions.constraints import chat_grammar
from snapllm.protocol.constraints.compiled_schema import compile_schema
from snapllm.protocol.families.tool_formats import HERMES
from snapllm.protocol.requests import parse_request
from tests.support.byte_tokenizer import ByteVocabulary

VOCABULARY = ByteVocabulary()
#: Schemas with answers that run long, as a small model writes them, and the shortest valid answers.
CASES = {
    "open-ended array": (
        {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "string"}}},
            "required": ["items"],
        },
        '{"items": ["alpha", "beta gamma", "delta \\"quoted\\" epsilon", "zeta"]}',
    ),
    "free string": (
        {
            "type": "object",
            "properties": {"summary": {"type": "string"}, "score": {"type": "integer"}},
            "required": ["summary", "score"],
        },
        '{"summary": "A long text, with {braces} and [brackets] and a \\\\ backslash", "score": 7}',
    ),
    "nested objects": (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "jobs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "integer"},
                            "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        },
                        "required": ["id", "steps"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["name", "jobs"],
            "additionalProperties": False,
        },
        '{"name": "build", "jobs": [{"id": 1, "steps": ["checkout", "test"]}, {"id": 22, "steps": '
        '["deploy"]}]}',
    ),
}


def _constraint(grammar: str, text: str) -> Constraint:
    constraint = Constraint(VOCABULARY.tokenizer, grammar)
    for token in VOCABULARY.ids(text):
        assert constraint.allows(token), text
        constraint.accept(token)
    return constraint


def _text(tokens: list[int]) -> str:
    return bytes(tokens).decode()


@pytest.mark.parametrize("case", list(CASES))
def test_an_answer_cut_anywhere_ends_as_json_the_schema_accepts(case):
    schema, answer = CASES[case]
    compiled = compile_schema(schema, param="response_format")
    for cut in range(1, len(answer)):
        constraint = _constraint(compiled.grammar, answer[:cut])
        end = constraint.closing(64)
        assert end is not None, answer[:cut]
        whole = answer[:cut] + _text(end)
        assert not compiled.value_violations(json.loads(whole)), whole
        # The matcher is where it was: the model's own next character is still taken.
        assert constraint.allows(VOCABULARY.ids(answer[cut])[0])


def test_a_complete_answer_needs_no_end_and_a_long_end_does_not_fit_a_short_budget():
    schema, answer = CASES["nested objects"]
    grammar = compile_schema(schema, param="response_format").grammar
    assert _constraint(grammar, answer).closing(8) == []
    cut = _constraint(grammar, '{"name": "build", "jobs": [{"id": 1, "st')
    end = cut.closing(64)
    assert end is not None and _text(end) == 'eps":[""]}]}'
    assert cut.closing(len(end) - 1) is None


def test_a_tool_call_cut_in_its_arguments_ends_as_the_call():
    vocabulary = ByteVocabulary(["<tool_call>", "</tool_call>"])
    tool = {
        "type": "function",
        "function": {
            "name": "note",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
    request = parse_request(
        {"messages": [{"role": "user", "content": "Note it."}], "tools": [tool], "tool_choice": "required"}
    )
    grammar, _ = chat_grammar(request, tool_format=HERMES, specials=vocabulary.specials)
    assert grammar is not None
    constraint = Constraint(vocabulary.tokenizer, grammar)
    cut = '<tool_call>\n{"name": "note", "arguments": {"text": "an endless note, with a \\"quote'
    for token in vocabulary.ids(cut):
        constraint.accept(token)
    end = constraint.closing(64)
    assert end is not None
    whole = cut + "".join("</tool_call>" if t == vocabulary.specials["</tool_call>"] else chr(t) for t in end)
    calls = HERMES.parse(whole, {"note"})
    assert calls is not None and json.loads(calls[0][1])["text"] == 'an endless note, with a "quote'
