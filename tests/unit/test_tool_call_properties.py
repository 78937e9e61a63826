"""Property: whatever tools a request declares (names that collide once joined, parameters with their own
$defs and $refs, required keys not listed, nested arrays and objects), every call each family's grammar lets a
model write reads back through the family's parser as a call to one of them, its arguments valid against
that function's own parameters.

Texts are drawn by the engine's own constraint (llguidance's matcher) over the packaged model's vocabulary
(:mod:`tests.support.grammar_sampler`); ``jsonschema`` is the judge of validity.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import jsonschema
import llguidance
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from llama_cpp import Llama

from snapllm.protocol.families.tool_formats import DEEPSEEK, GENERIC, HARMONY, HERMES, LLAMA3_JSON, MISTRAL
from snapllm_dev.packaged_models import smollm2_path
from tests.support.grammar_sampler import GrammarSampler

FORMATS = [GENERIC, LLAMA3_JSON, HERMES, MISTRAL, DEEPSEEK, HARMONY]


@pytest.fixture(scope="module")
def sampler() -> GrammarSampler:
    llama = Llama(model_path=str(smollm2_path()), vocab_only=True, verbose=False)
    return GrammarSampler(llama)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-50, 50), st.text(alphabet='ab é"\\', max_size=3))
# Names that collide once joined with "-" (tool "a" + def "b-c", tool "a-b" + def "c"), and names with
# characters that mean something in a grammar or a JSON pointer.
NAMES = st.text(alphabet="ab-c", min_size=1, max_size=3)
PROPERTY_NAMES = st.one_of(NAMES, st.sampled_from(["é", 'q"', "x y", "::=", "[|]", "a/b", "t~0"]))
LEAVES = st.one_of(
    st.sampled_from(
        [
            {"type": "integer"},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "string", "maxLength": 3},
            {"type": "string", "minLength": 1, "maxLength": 2},
            {"type": "string", "format": "date"},
            {"type": "string", "pattern": "^[a-c]{1,2}-\\d$"},
            {"type": ["integer", "null"]},
            {},
        ]
    ),
    st.lists(SCALARS, min_size=1, max_size=3, unique_by=json.dumps).map(lambda v: {"enum": v}),
    SCALARS.map(lambda v: {"const": v}),
)


def _pointer(name: str) -> str:
    return quote(name.replace("~", "~0").replace("/", "~1"), safe="")


@st.composite
def parameters(draw: st.DrawFn) -> dict:
    """A tool's parameters: properties (some $refs to its own $defs or to a sibling property), required keys
    (some not listed in properties), nested arrays and objects."""
    defs = draw(st.dictionaries(NAMES, LEAVES, max_size=2))
    refs = [{"$ref": f"#/$defs/{_pointer(name)}"} for name in defs]
    values = st.one_of(LEAVES, st.sampled_from(refs)) if refs else LEAVES
    values = st.recursive(
        values,
        lambda inner: st.one_of(
            st.builds(lambda i, n: {"type": "array", "items": i, "maxItems": n}, inner, st.integers(0, 2)),
            st.dictionaries(PROPERTY_NAMES, inner, max_size=2).map(
                lambda p: {"type": "object", "properties": p, "required": sorted(p)[:1]}
            ),
            st.lists(inner, min_size=1, max_size=2).map(lambda b: {"anyOf": b}),
        ),
        max_leaves=4,
    )
    properties = draw(st.dictionaries(PROPERTY_NAMES, values, max_size=3))
    plain = [name for name, sub in properties.items() if "$ref" not in sub]
    if plain and draw(st.booleans()):
        properties["same"] = {"$ref": f"#/properties/{_pointer(draw(st.sampled_from(plain)))}"}
    listed = list(properties)
    required = draw(st.lists(st.sampled_from(listed), unique=True)) if listed else []
    outside = draw(st.lists(st.sampled_from(["zz", "y-z"]), unique=True, max_size=1))
    schema: dict = {"type": "object", "properties": properties, "required": required + outside}
    if defs:
        schema["$defs"] = defs
    if not outside and draw(st.booleans()):
        schema["additionalProperties"] = False
    return schema


TOOL_SETS = st.lists(st.tuples(NAMES, parameters()), min_size=1, max_size=3, unique_by=lambda t: t[0])


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    tools=TOOL_SETS,
    parallel=st.booleans(),
    seed=st.integers(0, 2**16),
    index=st.integers(0, len(FORMATS) - 1),
)
@example(
    tools=[
        (
            "a",
            {
                "type": "object",
                "properties": {"v": {"$ref": "#/$defs/b-c"}},
                "required": ["v"],
                "$defs": {"b-c": {"const": 7}},
            },
        ),
        (
            "a-b",
            {
                "type": "object",
                "properties": {"v": {"$ref": "#/$defs/c"}},
                "required": ["v"],
                "$defs": {"c": {"type": "string"}},
            },
        ),
    ],
    parallel=False,
    seed=0,
    index=0,
)
@example(
    tools=[
        (
            "name",
            {
                "type": "object",
                "properties": {"name": {"type": "integer"}, "other": {"$ref": "#/properties/name"}},
                "required": ["name", "other", "missing"],
            },
        )
    ],
    parallel=True,
    seed=0,
    index=0,
)
def test_every_generated_tool_call_validates_against_its_own_parameters(
    tools, parallel, seed, index, sampler
):
    tool_format = FORMATS[index]
    functions = [{"name": name, "parameters": schema} for name, schema in tools]
    rules = tool_format.grammar(functions, parallel=parallel, specials={})
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: calls\n{rules}")
    assert sampler.accepts(grammar)
    by_name = dict(tools)
    for text in sampler.texts(grammar, count=3, seed=seed, max_tokens=160):
        calls = tool_format.parse(text, by_name)
        assert calls, text
        for name, arguments in calls:
            jsonschema.Draft202012Validator(by_name[name]).validate(json.loads(arguments))
