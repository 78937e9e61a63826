"""Structured output and tool calling with real clients (the official ``openai`` SDK and LangChain) against
``snapllm local serve`` with the packaged 135M model.

The model is tiny: the grammar guarantees that answers validate, not that they are sensible, so these tests
check validity (every answer parses and validates), never content. Schemas bound their strings so an answer
fits in a small ``max_tokens``. The fixed tests ask for 96 tokens, the generated forms for all that the
long-answer server allows (the shared server allows 16, too few for a JSON object).
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from ipaddress import IPv4Address, IPv6Address
from typing import Annotated, Literal
from uuid import UUID

import httpx
import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, EmailStr, Field, HttpUrl, create_model

from snapllm.protocol.constraints.compiled_schema import compile_schema
from tests.support.serve import LONG_ANSWER_TOKENS, LONG_ANSWERS_GROUP, MODEL, ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(LONG_ANSWERS_GROUP)]

MAX_TOKENS = 96
# The generated forms' answers (formats, trees) take more tokens than the fixed ones.
FORM_TOKENS = LONG_ANSWER_TOKENS


@pytest.fixture(scope="module")
def server(long_answer_server: ServeProcess) -> ServeProcess:
    return long_answer_server


class Color(StrEnum):
    red = "red"
    green = "green"
    blue = "blue"


class Place(BaseModel):
    city: str = Field(max_length=12)
    country_code: str = Field(max_length=3)


class Pet(BaseModel):
    """Nested objects, an enum and an array: what parse() must return validated."""

    name: str = Field(max_length=10)
    color: Color
    home: Place
    tricks: list[Annotated[str, Field(max_length=12)]] = Field(max_length=2)


PROMPTS = [
    f"Invent a pet {detail}. Answer in JSON."
    for detail in (
        "dog from Paris",
        "cat from Rome",
        "parrot from Lima",
        "hamster from Oslo",
        "rabbit from Cairo",
        "turtle from Tokyo",
        "goldfish from Lagos",
        "horse from Dublin",
        "snake from Quito",
        "ferret from Bern",
    )
]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": CITY}}
    for name, description in (
        ("get_weather", "The current weather in a city"),
        ("get_time", "The local time in a city"),
        ("get_population", "How many people live in a city"),
    )
]
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_parse_returns_validated_objects_for_every_prompt(client):
    for seed, prompt in enumerate(PROMPTS):
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            response_format=Pet,
            max_tokens=MAX_TOKENS,
            seed=seed,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", (prompt, choice.message.content)
        pet = choice.message.parsed
        assert isinstance(pet, Pet) and isinstance(pet.home, Place) and pet.color in Color, prompt


def test_json_object_answers_parse_as_objects(client):
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give a JSON object with a key 'ok' set to true."}],
        response_format={"type": "json_object"},
        max_tokens=MAX_TOKENS,
        seed=3,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(json.loads(choice.message.content), dict)


def test_streamed_json_schema_answer_validates(client):
    schema = Pet.model_json_schema()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPTS[0]}],
        response_format={"type": "json_schema", "json_schema": {"name": "pet", "schema": schema}},
        max_tokens=MAX_TOKENS,
        seed=1,
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), schema)


def _check_calls(calls) -> None:
    names = {tool["function"]["name"] for tool in TOOLS}
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), CITY)


def test_required_tool_choice_calls_real_tools_with_valid_arguments(client):
    for seed in range(3):
        completion = client.chat.completions.create(
            model=MODEL,
            messages=WEATHER_QUESTION,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=MAX_TOKENS,
            seed=seed,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        _check_calls(choice.message.tool_calls)


# Tool parameters that broke the old tool-call grammar: defs that collided once renamed ("a" + "b-c" and
# "a-b" + "c"), a $ref into the tool's own properties, and a required key properties does not list. The first
# two close their objects: JSON Schema lets an object hold properties it does not list, which the constraint
# allows, and SmolLM2 spends max_tokens copying the tools' schemas into such properties.
TRICKY_TOOLS = {
    "a": {
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/b-c"}},
        "required": ["v"],
        "additionalProperties": False,
        "$defs": {"b-c": {"const": 7}},
    },
    "a-b": {
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/c"}},
        "required": ["v"],
        "additionalProperties": False,
        "$defs": {"c": {"type": "string", "maxLength": 4}},
    },
    "name": {
        "type": "object",
        "properties": {"name": {"type": "integer"}, "copy": {"$ref": "#/properties/name"}},
        "required": ["name", "copy", "extra"],
        "additionalProperties": {"type": "boolean"},  # what "extra" must be
    },
}


@pytest.mark.parametrize("tool", list(TRICKY_TOOLS))
def test_tricky_tool_parameters_give_arguments_valid_for_that_tool(client, tool):
    tools = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in TRICKY_TOOLS.items()]
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Call the tool."}],
        tools=tools,
        tool_choice={"type": "function", "function": {"name": tool}},
        max_tokens=48,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    for call in choice.message.tool_calls:
        assert call.function.name == tool
        jsonschema.Draft202012Validator(TRICKY_TOOLS[tool]).validate(json.loads(call.function.arguments))


def test_named_tool_choice_calls_that_function_once(client):
    completion = client.chat.completions.create(
        model=MODEL,
        messages=WEATHER_QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=MAX_TOKENS,
        seed=2,
    )
    calls = completion.choices[0].message.tool_calls
    _check_calls(calls)
    assert [call.function.name for call in calls] == ["get_time"]


def test_streamed_tool_call_deltas_reassemble_into_the_same_calls(client):
    request = {
        "model": MODEL,
        "messages": WEATHER_QUESTION,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": MAX_TOKENS,
        "seed": 7,
        "temperature": 0,
    }
    whole = client.chat.completions.create(**request).choices[0].message.tool_calls
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in client.chat.completions.create(**request, stream=True):
        if not chunk.choices:
            continue
        finish = chunk.choices[0].finish_reason or finish
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function.name or "") if delta.function else ""
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (c.function.name, json.loads(c.function.arguments)) for c in whole
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_two_turn_tool_conversation_completes(client):
    first = client.chat.completions.create(
        model=MODEL, messages=WEATHER_QUESTION, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS
    )
    message = first.choices[0].message
    _check_calls(message.tool_calls)
    results = [
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny, 21 C"})}
        for call in message.tool_calls
    ]
    second = client.chat.completions.create(
        model=MODEL,
        messages=[*WEATHER_QUESTION, message.model_dump(exclude_none=True), *results],
        tools=TOOLS,
        tool_choice="none",
        max_tokens=24,
        seed=1,
    )
    choice = second.choices[0]
    assert choice.finish_reason in {"stop", "length"} and choice.message.content.strip()
    assert choice.message.tool_calls is None


def test_auto_tool_choice_answers_in_text_or_with_a_valid_call(client):
    completion = client.chat.completions.create(
        model=MODEL, messages=WEATHER_QUESTION, tools=TOOLS, tool_choice="auto", max_tokens=24, seed=5
    )
    choice = completion.choices[0]
    if choice.finish_reason == "tool_calls":
        _check_calls(choice.message.tool_calls)
    else:
        assert choice.message.content and choice.message.content[0] not in "{["


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": {"$ref": "#/$defs/Missing"}},
                }
            },
            "response_format",
            "/$defs/Missing",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {
                                "type": "object",
                                "required": ["x"],
                                "additionalProperties": False,
                            },
                        },
                    }
                ]
            },
            "tools.0.function.parameters",
            "required property 'x' is unsatisfiable",
        ),
    ],
)
def test_schemas_that_cannot_be_served_are_refused_by_name(client, extra, param, words):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=WEATHER_QUESTION, max_tokens=4, **extra)
    error = caught.value.body
    assert error["param"] == param and error["code"] == "unsupported_parameter" and words in error["message"]


def test_a_strict_schema_that_breaks_openais_strict_rules_is_a_400_naming_where(client):
    optional = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}}}
    optional |= {"required": ["city"], "additionalProperties": False}
    form = {"type": "json_schema", "json_schema": {"name": "place", "schema": optional, "strict": True}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=WEATHER_QUESTION, max_tokens=4, response_format=form
        )
    error = caught.value.body
    assert error["param"] == "response_format" and "missing 'country'" in error["message"]
    # The same schema without strict is served as written.
    form["json_schema"]["strict"] = False
    client.chat.completions.create(model=MODEL, messages=WEATHER_QUESTION, max_tokens=4, response_format=form)


def test_image_parts_are_refused_as_text_only(server):
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert "text only" in response.json()["error"]["message"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output_with_a_schema(server, method):
    model = ChatOpenAI(
        model=MODEL, base_url=server.base_url, api_key="local", max_tokens=MAX_TOKENS, max_retries=0, seed=4
    )
    structured = model.with_structured_output(Place, method=method)
    place = structured.invoke("Name a city and its country code.")
    assert isinstance(place, Place)


def test_langchain_json_mode_gets_a_json_object(server):
    """json_mode sends no schema (only ``json_object``): the server guarantees a JSON object, the keys are
    the model's choice, so with this tiny model LangChain's parse into the model may or may not succeed.
    What must hold: the request is served and the raw answer is a JSON object."""
    model = ChatOpenAI(
        model=MODEL, base_url=server.base_url, api_key="local", max_tokens=MAX_TOKENS, max_retries=0, seed=4
    )
    structured = model.with_structured_output(Place, method="json_mode", include_raw=True)
    result = structured.invoke("Answer in JSON with the keys city and country_code: a city in Spain.")
    assert isinstance(json.loads(result["raw"].content), dict)
    assert isinstance(result["parsed"], Place) or result["parsing_error"] is not None


# --- What a grammar cannot hold is validated on the answer, and a failed answer is an error --------------

# Three distinct items from {0, 1} cannot exist: the grammar holds the items and their count, so every
# complete answer is three bits, and the check of uniqueItems fails it, whatever the model writes.
NO_VALID_ANSWER = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0, "maximum": 1},
    "minItems": 3,
    "maxItems": 3,
    "uniqueItems": True,
}


def _no_valid_answer_body(stream: bool) -> dict:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Three bits, please."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "bits", "schema": NO_VALID_ANSWER},
        },
        "max_tokens": 16,
        "temperature": 0,
        "stream": stream,
    }


def test_an_answer_that_fails_what_was_validated_is_a_422_never_a_200(server):
    response = httpx.post(
        f"{server.base_url}/chat/completions", json=_no_valid_answer_body(False), timeout=60
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "schema_validation_failed" and error["param"] == "response_format"
    assert "non-unique elements" in error["message"]
    assert "not enforced by the grammar: uniqueItems (at the root)" in error["message"]


def test_a_streamed_answer_that_fails_ends_with_the_error_and_no_finish_reason(server):
    with httpx.stream(
        "POST", f"{server.base_url}/chat/completions", json=_no_valid_answer_body(True), timeout=60
    ) as response:
        assert response.status_code == 200  # the stream had started when the answer was complete
        events = [
            json.loads(line[len("data: ") :])
            for line in response.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    finishes = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
    assert finishes == []  # never finished as if it passed
    assert events[-1]["error"]["code"] == "schema_validation_failed", events[-1]


def test_a_set_is_served_through_parse_and_checked_for_uniqueness(client):
    class Tags(BaseModel):
        tags: set[Annotated[str, Field(max_length=6)]] = Field(max_length=3)

    try:
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Give three different tags for a blog post about Rome."}],
            response_format=Tags,
            max_tokens=MAX_TOKENS,
            seed=1,
            temperature=0,
        )
    except openai.UnprocessableEntityError as failed:  # duplicates: reported as such, never a 200
        assert failed.body["code"] == "schema_validation_failed", failed.body
        return
    text = completion.choices[0].message.content
    values = json.loads(text)["tags"]
    assert len(values) == len(set(values)), text


# --- Property: the pydantic models clients send are served, and every complete answer validates -------------


class Tree(BaseModel):
    """A recursive model: its schema is a $ref to itself inside an array."""

    value: int = Field(ge=0, le=9)
    children: list[Tree] = Field(max_length=2)


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=1, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    age: int = Field(gt=0, lt=30)


Short = Annotated[str, Field(max_length=8)]
FIXED_LEAVES = [
    Annotated[int, Field(multiple_of=5, ge=0, le=100)],
    datetime,
    date,
    time,
    timedelta,
    UUID,
    IPv4Address,
    IPv6Address,
    EmailStr,
    HttpUrl,
    Color,
    Literal["yes", "no"],
    bool,
    Short,
    Annotated[str, Field(pattern=r"^[A-Z]{2}[0-9]{2}$")],
    Annotated[set[Short], Field(max_length=3)],
    set[Color],
    Tree,
    Annotated[Cat | Dog, Field(discriminator="kind")],
]
LEAF_TYPES = st.one_of(
    st.builds(
        lambda a, w: Annotated[int, Field(ge=a, le=a + w)], st.integers(-200, 200), st.integers(0, 500)
    ),
    st.builds(
        lambda a, w: Annotated[int, Field(gt=a, lt=a + w + 2)], st.integers(-99, 99), st.integers(0, 50)
    ),
    st.builds(
        lambda a, w: Annotated[float, Field(ge=a, le=a + w)], st.integers(-50, 50), st.integers(1, 100)
    ),
    st.sampled_from(FIXED_LEAVES),
)
FIELD_TYPES = st.one_of(
    LEAF_TYPES,
    LEAF_TYPES.map(lambda t: t | None),
    LEAF_TYPES.map(lambda t: Annotated[list[t], Field(max_length=2)]),
)


@st.composite
def answer_models(draw: st.DrawFn) -> type[BaseModel]:
    """A model of one to three fields of the kinds above, its fields sometimes in a nested model."""
    types = draw(st.lists(FIELD_TYPES, min_size=1, max_size=3))
    fields = {f"field_{i}": (t, ...) for i, t in enumerate(types)}
    if draw(st.booleans()):
        return create_model("Answer", **fields)
    inner = create_model("Inner", **fields)
    return create_model("Answer", inner=(inner, ...), note=(Short, ...))


# Derandomized (the same 20 models every run, and the 5 examples); no shrinking: each example is a
# generation, and the failing model's schema is in the report.
@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)
@given(model=answer_models(), seed=st.integers(0, 1000))
# Every format, the recursive model, a set of enums and the discriminated union, whatever is drawn.
@example(
    model=create_model("Formats1", when=(datetime, ...), wait=(timedelta, ...), mail=(EmailStr, ...)), seed=0
)
@example(model=create_model("Formats2", id=(UUID, ...), ip=(IPv4Address, ...), url=(HttpUrl, ...)), seed=0)
@example(model=create_model("Formats3", day=(date, ...), at=(time, ...), ip6=(IPv6Address, ...)), seed=0)
@example(model=create_model("Trees", tree=(Tree, ...), colors=(set[Color], ...)), seed=0)
@example(model=create_model("Pets", pet=(Annotated[Cat | Dog, Field(discriminator="kind")], ...)), seed=0)
def test_every_pydantic_model_is_served_and_every_complete_answer_validates(client, model, seed):
    schema = model.model_json_schema()
    note(json.dumps(schema))
    try:
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Fill in the form with example values, in JSON."}],
            response_format=model,
            max_tokens=FORM_TOKENS,
            seed=seed,
            temperature=0,
        )
    except openai.LengthFinishReasonError:
        return  # served, and cut by max_tokens: not a complete answer
    except openai.UnprocessableEntityError as failed:
        # An answer that broke a constraint the grammar could not hold is reported, never returned.
        assert failed.body["code"] == "schema_validation_failed", failed.body
        assert compile_schema(schema, param="response_format").validated, (schema, failed.body)
        return
    choice = completion.choices[0]
    # parse() validated the answer with pydantic (parsed is set); jsonschema checks it against the schema.
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, model)
    checker = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    checker.validate(json.loads(choice.message.content))
