"""Corners of the OpenAI surface, with the official ``openai`` client against ``snapllm local serve`` and the
packaged model: retrieving a model, request ids, tool turns that must pair up, and tool calls cut short,
which come back as calls (OpenAI's truncated-call shape), never as text."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from langchain_openai import ChatOpenAI

from snapllm.errors import ConfigurationError
from snapllm_dev.packaged_models import gemma3_270m_path, served_name
from tests.support.paths import TEMPLATE
from tests.support.serve import MODEL, SERVE_ENV, SERVER_GROUP, ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SERVER_GROUP)]

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {"name": "get_weather", "description": "The current weather in a city", "parameters": CITY}
TIME = {"name": "get_time", "description": "The local time in a city", "parameters": CITY}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


# --- GET /v1/models/{model} -----


def test_a_model_is_retrieved_by_its_id(client):
    model = client.models.retrieve(MODEL)
    assert (model.id, model.object, model.owned_by) == (MODEL, "model", "snapllm")
    assert model == next(m for m in client.models.list().data if m.id == MODEL)


def test_an_unknown_model_is_a_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("gpt-4o")
    assert raised.value.code == "model_not_found" and raised.value.param == "model"
    assert raised.value.request_id


# --- x-request-id -----


def test_every_answer_has_a_request_id_the_sdk_reads(client):
    completion = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2, seed=1)
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, temperature=0)
    models = client.models.list()
    ids = [completion._request_id, response._request_id, models._request_id]  # type: ignore[attr-defined]
    assert all(ids) and len(set(ids)) == 3, ids
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=QUESTION, max_tokens=2, stream=True
    ) as streamed:
        assert streamed.headers["x-request-id"]
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2, n=2)
    assert raised.value.request_id


# --- Tool turns pair up -----


def test_a_tool_message_without_its_call_is_a_400_naming_the_message(client):
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=[*QUESTION, answer], max_tokens=4)
    assert raised.value.param == "messages.1"
    calling = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=[*QUESTION, calling, answer], max_tokens=4)
    assert raised.value.param == "messages.2" and "'call_1'" in raised.value.message
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input=[*QUESTION, output], max_output_tokens=4)
    assert raised.value.param == "input.1"


# --- A tool call cut short -----


def chat_tools(*functions: dict) -> list[dict]:
    return [{"type": "function", "function": f} for f in functions]


def test_a_required_call_cut_by_max_tokens_is_a_truncated_call_not_text(client):
    completion = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=chat_tools(WEATHER),
        tool_choice="required",
        max_tokens=6,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    # What was generated of the arguments, as OpenAI returns a truncated call's (here: nothing yet).
    assert call.function.arguments == ""
    longer = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=chat_tools(WEATHER),
        tool_choice="required",
        max_tokens=16,
        temperature=0,
    )
    [call] = longer.choices[0].message.tool_calls
    assert longer.choices[0].finish_reason == "length" and longer.choices[0].message.content is None
    assert call.function.name == "get_weather" and call.function.arguments.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.function.arguments)


def test_a_streamed_call_cut_short_arrives_as_tool_call_deltas(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=chat_tools(WEATHER),
        tool_choice="required",
        max_tokens=16,
        temperature=0,
        stream=True,
    )
    chunks = list(stream)
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].function.name == "get_weather"
    assert "".join(d.function.arguments or "" for d in deltas).startswith("{")
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_call_cut_before_its_name_is_decided_is_a_clear_error(client):
    # With two functions beginning "get_", six tokens end inside the name: there is no call to return. A
    # stream has sent its status already: the error is its event, which the SDK raises as an APIError.
    for stream in (False, True):
        with pytest.raises(openai.APIError) as raised:
            answer = client.chat.completions.create(
                model=MODEL,
                messages=QUESTION,
                tools=chat_tools(WEATHER, TIME),
                tool_choice="required",
                max_tokens=6,
                temperature=0,
                stream=stream,
            )
            if stream:
                list(answer)
        if not stream:
            assert isinstance(raised.value, openai.BadRequestError)
            assert raised.value.code == "tool_call_cut_short" and raised.value.param == "max_tokens"
        assert "raise max_tokens" in raised.value.message


def test_a_responses_call_cut_short_is_an_incomplete_function_call_item(client):
    response = client.responses.create(
        model=MODEL,
        input=QUESTION[0]["content"],
        tools=[{"type": "function", **WEATHER}],
        tool_choice="required",
        max_output_tokens=16,
        temperature=0,
    )
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    [item] = response.output
    assert item.type == "function_call" and item.status == "incomplete"
    assert item.name == "get_weather" and item.arguments.startswith("{")
    events = list(
        client.responses.create(
            model=MODEL,
            input=QUESTION[0]["content"],
            tools=[{"type": "function", **WEATHER}],
            tool_choice="required",
            max_output_tokens=16,
            temperature=0,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert "response.output_text.delta" not in kinds and kinds[-1] == "response.incomplete"
    [done] = [e.item for e in events if e.type == "response.output_item.done"]
    assert done.type == "function_call" and done.status == "incomplete" and done.name == "get_weather"


# --- Every packaged model chats -----


@pytest.fixture(scope="module")
def gemma() -> Iterator[tuple[ServeProcess, str]]:
    try:
        path = gemma3_270m_path()
    except ConfigurationError as exc:
        pytest.skip(str(exc))
    with ServeProcess.start(template=TEMPLATE, env=SERVE_ENV, args=["--model", str(path)]) as server:
        yield server, served_name(path)


def test_a_model_given_by_file_is_served_and_listed_under_its_own_name(gemma):
    server, name = gemma
    client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=120)
    assert name.startswith("gemma-3-270m") and [m.id for m in client.models.list().data] == [name]
    assert client.models.retrieve(name).id == name
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(MODEL)


def test_gemma_chats_with_its_familys_turns(gemma):
    # Its GGUF has no chat template: the engine formats the chat in Gemma's turns, so chat and Responses
    # requests are served (they were refused with a 400 before), streamed too.
    server, name = gemma
    client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=120)
    messages = [{"role": "system", "content": "Be brief."}, *QUESTION]
    completion = client.chat.completions.create(model=name, messages=messages, max_tokens=8, temperature=0)
    choice = completion.choices[0]
    assert completion.model == name and choice.message.content and choice.finish_reason in {"stop", "length"}
    # The prompt is the turn format (<bos>, a user turn holding the system text, the model's turn opened).
    assert completion.usage.prompt_tokens > 10
    response = client.responses.create(model=name, input="Say hello.", max_output_tokens=8, temperature=0)
    assert response.output_text
    stream = client.chat.completions.create(
        model=name, messages=messages, max_tokens=4, temperature=0, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    called = client.chat.completions.create(
        model=name,
        messages=QUESTION,
        tools=chat_tools(WEATHER),
        tool_choice="required",
        max_tokens=16,
        temperature=0,
    )
    assert called.choices[0].message.tool_calls[0].function.name == "get_weather"


@pytest.mark.parametrize("responses_api", [False, True], ids=["chat", "responses"])
def test_langchain_sees_a_cut_call_as_an_invalid_call_not_as_the_answer(server, responses_api):
    # LangChain turns a call whose arguments are not complete JSON into an invalid tool call: an agent
    # then has no text answer to show (it showed the broken call as its final answer when it was text).
    model = ChatOpenAI(
        model=MODEL,
        base_url=server.base_url,
        api_key="local",
        max_tokens=16,
        temperature=0,
        max_retries=0,
        use_responses_api=responses_api,
    )
    message = model.bind_tools([{"type": "function", "function": WEATHER}], tool_choice="required").invoke(
        QUESTION[0]["content"]
    )
    assert not message.text and not message.tool_calls
    [invalid] = message.invalid_tool_calls
    assert invalid["name"] == "get_weather" and invalid["args"].startswith("{")
