"""The Responses API (``/v1/responses``) with the official ``openai`` client against ``snapllm local serve``,
and the same requests as a direct invoke of a restored inference environment and as API Gateway events to
the router, with the packaged 135M model.

The model is tiny: the grammar guarantees that structured answers and tool calls validate, not that they
are sensible, so these tests check shapes and validity, never content. ``temperature: 0`` makes answers
reproducible (this API has no seed). The requests ask for 96 tokens, enough for a JSON object; the server,
the direct invoke and the router allow the long-answer server's limit.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.responses import Response
from pydantic import BaseModel, Field

from snapllm.router.app import RouterApp
from snapllm.router.events import http_api_event
from snapllm.router.settings import RouterSettings
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.inference import LocalInferenceClient
from tests.support.serve import LONG_ANSWER_TOKENS, LONG_ANSWERS_GROUP, MODEL, ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(LONG_ANSWERS_GROUP)]

MAX_TOKENS = 96
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": name, "description": description, "parameters": CITY}
    for name, description in (
        ("get_weather", "The current weather in a city"),
        ("get_time", "The local time in a city"),
    )
]
QUESTION = "What is the weather in Paris?"
TEXT_REQUEST = {
    "model": MODEL,
    "instructions": "You are brief.",
    "input": "Say hello.",
    "max_output_tokens": MAX_TOKENS,
    "temperature": 0,
}


class Place(BaseModel):
    city: str = Field(max_length=12)
    country_code: str = Field(max_length=3)


@pytest.fixture(scope="module")
def server(long_answer_server: ServeProcess) -> ServeProcess:
    return long_answer_server


@pytest.fixture(scope="module")
def inference_overrides() -> dict[str, str]:
    """The direct invoke under the same limit as the server, so the two give the same shapes."""
    return {"SNAPLLM_MAX_TOKENS": str(LONG_ANSWER_TOKENS)}


# --- Whole responses --------------------------------------------------------------------------------------


def test_a_text_response(client):
    response = client.responses.create(**TEXT_REQUEST)
    assert response.object == "response" and response.id.startswith("resp_") and response.model == MODEL
    assert response.status == "completed", response.output
    assert response.output_text.strip()
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    usage = response.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens and usage.output_tokens > 0
    assert response.instructions == "You are brief." and response.store is False


def test_a_json_schema_response_parses_and_validates(client):
    schema = {**CITY, "properties": {**CITY["properties"], "country": {"type": "string", "maxLength": 3}}}
    schema["required"] = ["city", "country"]  # strict mode: every property required
    response = client.responses.create(
        model=MODEL,
        input="Name a city and its country code, in JSON.",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    assert response.status == "completed", response.output_text
    jsonschema.validate(json.loads(response.output_text), schema)
    assert response.text.format.type == "json_schema"
    parsed = client.responses.parse(
        model=MODEL,
        input="Name a city and its country code.",
        text_format=Place,
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    assert isinstance(parsed.output_parsed, Place)


def test_required_tools_give_a_function_call_and_the_conversation_continues(client):
    question = [{"role": "user", "content": QUESTION}]
    response = client.responses.create(
        model=MODEL,
        input=question,
        tools=TOOLS,
        tool_choice="required",
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and len(calls) == len(response.output), response.output
    for call in calls:
        assert call.name in {tool["name"] for tool in TOOLS} and call.call_id.startswith("call_")
        jsonschema.validate(json.loads(call.arguments), CITY)
    outputs = [
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C."} for call in calls
    ]
    follow_up = client.responses.create(
        model=MODEL,
        input=[*question, *response.output, *outputs],
        tools=TOOLS,
        tool_choice="none",
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    assert follow_up.output[0].type == "message" and follow_up.output_text.strip()


def test_a_named_function_is_called_once(client):
    response = client.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_time"},
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    assert [(item.type, item.name) for item in response.output] == [("function_call", "get_time")]


# --- Streams ------------------------------------------------------------------------------------------------


def _check_sequence(events: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(kinds[4:-4]) >= 2


def test_a_streamed_text_response_equals_its_deltas_and_the_whole_answer(client):
    with client.responses.stream(**TEXT_REQUEST) as stream:
        events = list(stream)
        final = stream.get_final_response()
    _check_sequence(events)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas and deltas.strip()
    assert final.id == events[0].response.id and final.usage.output_tokens > 0
    assert deltas == client.responses.create(**TEXT_REQUEST).output_text


def test_a_streamed_json_schema_response_parses(client):
    with client.responses.stream(
        model=MODEL,
        input="Name a city and its country code.",
        text_format=Place,
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    _check_sequence(events)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas
    assert isinstance(final.output_parsed, Place)


def test_a_streamed_function_call_is_sent_whole(client):
    with client.responses.stream(
        model=MODEL,
        input=QUESTION,
        tools=TOOLS,
        tool_choice="required",
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [e.arguments for e in done] == [item.arguments for item in final.output]
    for item in final.output:
        jsonschema.validate(json.loads(item.arguments), CITY)


# --- Refusals ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param", "reason"),
    [
        ({"store": True}, "store", "stateless"),
        ({"previous_response_id": "resp_0123456789"}, "previous_response_id", "stateless"),
        ({"tools": [{"type": "web_search"}]}, "tools", "no such tool here"),
        (
            {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
            "tools",
            "no such tool here",
        ),
        ({"background": True}, "background", "stateless"),
        ({"conversation": "conv_1"}, "conversation", "stateless"),
    ],
)
def test_what_needs_server_state_is_refused_by_name(client, fields, param, reason):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=8, **fields)
    error = caught.value.body
    assert caught.value.status_code == 400 and error["param"] == param and reason in error["message"]
    assert error["code"] == "unsupported_parameter"


# --- The same request as a direct invoke and as an API Gateway event ----------------------------------------


def _router(environment: Any) -> RouterApp:
    settings = RouterSettings.from_env(
        {
            "SNAPLLM_ROUTES": json.dumps({MODEL: "local:InferenceFunction"}),
            "SNAPLLM_MAX_TOKENS": str(LONG_ANSWER_TOKENS),
        }
    )
    return RouterApp(settings, {MODEL: LocalInferenceClient(environment)})


def _via_router(router: RouterApp, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    event = http_api_event(
        "POST", "/v1/responses", body=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=30, memory_mb=256))
    return result["statusCode"], json.loads(result["body"])


def _shape(answer: dict[str, Any]) -> list[tuple[str, ...]]:
    return [(item["type"], item.get("role") or item.get("name")) for item in answer["output"]]


def test_the_direct_invoke_and_the_router_give_the_same_shapes(environment, client):
    router = _router(environment)
    tool_request = {**TEXT_REQUEST, "input": QUESTION, "tools": TOOLS, "tool_choice": "required"}
    for body in (TEXT_REQUEST, tool_request):
        direct = environment.invoke(body).response
        status, routed = _via_router(router, body)
        served = client.responses.create(**body).model_dump(mode="json")
        assert status == 200, routed
        for answer in (direct, routed):
            Response.model_validate(answer)
            assert answer["object"] == "response" and answer["status"] == "completed"
            assert set(answer) == set(direct)
        assert _shape(direct) == _shape(routed) == _shape(served)
        # At temperature 0 the two ways into the one environment give the same text, not only the same shape.
        assert Response.model_validate(direct).output_text == Response.model_validate(routed).output_text
    assert Response.model_validate(direct).output[0].type == "function_call"


def test_the_router_refuses_a_stream_and_the_direct_invoke_names_fields(environment):
    status, error = _via_router(_router(environment), {**TEXT_REQUEST, "stream": True})
    assert status == 400 and error["error"]["param"] == "stream"
    answer = environment.invoke({**TEXT_REQUEST, "max_output_tokens": LONG_ANSWER_TOKENS + 1}).response
    assert answer["statusCode"] == 400 and answer["error"]["param"] == "max_output_tokens"
    answer = environment.invoke({**TEXT_REQUEST, "store": True}).response
    assert answer["statusCode"] == 400 and answer["error"]["param"] == "store"
