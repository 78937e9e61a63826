"""Request validation: every kind of bad input becomes a named error with the offending field."""

import pytest

from snapllm.engine.types import Timings
from snapllm.errors import InvalidRequestError, UnsupportedParameterError
from snapllm.protocol.completions.objects import render_response
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    Generation,
    parse_request,
)

CHAT = {"messages": [{"role": "user", "content": "Hi"}]}


def tool(name: str, parameters: dict | None = None) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters or {"type": "object"}}}


TOOL = tool("get_weather")


def named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def test_chat_and_completion_forms():
    chat = parse_request({**CHAT, "max_tokens": 8, "stop": "\n", "seed": 3})
    assert isinstance(chat, ChatCompletionRequest)
    assert chat.stop == ["\n"]
    assert chat.requested_max_tokens == 8
    completion = parse_request({"prompt": ["Once"], "max_completion_tokens": 5})
    assert isinstance(completion, CompletionRequest)
    assert completion.text == "Once"
    assert completion.requested_max_tokens == 5


def test_commonly_sent_client_fields_are_accepted():
    request = parse_request(
        {
            **CHAT,
            "model": "m",
            "n": 1,
            "stream": False,
            "user": "u-1",
            "store": False,
            "metadata": {"team": "a"},
            "logit_bias": {},
            "tool_choice": "none",
            "response_format": {"type": "text"},
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                *CHAT["messages"],
            ],
        }
    )
    assert request.messages[0].text() == "Be brief."


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ([], InvalidRequestError, None),
        ({}, InvalidRequestError, "messages"),
        ({**CHAT, "prompt": "x"}, InvalidRequestError, "prompt"),
        ({"messages": []}, InvalidRequestError, "messages"),
        ({"messages": "hello"}, InvalidRequestError, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, InvalidRequestError, "messages.0.role"),
        ({"messages": [{"role": "user"}]}, InvalidRequestError, "messages.0"),
        ({**CHAT, "temperature": 7}, InvalidRequestError, "temperature"),
        ({**CHAT, "temperature": "hot"}, InvalidRequestError, "temperature"),
        ({**CHAT, "top_p": 0}, InvalidRequestError, "top_p"),
        ({**CHAT, "max_tokens": 0}, InvalidRequestError, "max_tokens"),
        ({**CHAT, "max_tokens": 4, "max_completion_tokens": 5}, InvalidRequestError, "max_tokens"),
        ({**CHAT, "seed": -1}, InvalidRequestError, "seed"),
        ({**CHAT, "seed": 2**40}, InvalidRequestError, "seed"),
        ({**CHAT, "stop": ["a", "b", "c", "d", "e"]}, InvalidRequestError, "stop"),
        ({**CHAT, "stop": [""]}, InvalidRequestError, "stop"),
        ({**CHAT, "n": 2}, UnsupportedParameterError, "n"),
        ({**CHAT, "logprobs": True, "top_logprobs": 21}, InvalidRequestError, "top_logprobs"),
        ({**CHAT, "top_logprobs": 2}, InvalidRequestError, "top_logprobs"),
        ({"prompt": "x", "logprobs": 6}, InvalidRequestError, "logprobs"),
        ({**CHAT, "logit_bias": {"50256": -101}}, InvalidRequestError, "logit_bias"),
        ({**CHAT, "logit_bias": {"-1": 1}}, InvalidRequestError, "logit_bias"),
        ({**CHAT, "logit_bias": {str(t): 1 for t in range(301)}}, InvalidRequestError, "logit_bias"),
        ({**CHAT, "top_k": -2}, InvalidRequestError, "top_k"),
        ({**CHAT, "top_k": 2**31}, InvalidRequestError, "top_k"),
        ({**CHAT, "min_p": 1.5}, InvalidRequestError, "min_p"),
        ({**CHAT, "typical_p": "0.5"}, InvalidRequestError, "typical_p"),
        ({**CHAT, "repeat_penalty": 0}, InvalidRequestError, "repeat_penalty"),
        ({**CHAT, "repetition_penalty": 2.5}, InvalidRequestError, "repetition_penalty"),
        (
            {**CHAT, "repeat_penalty": 1.1, "repetition_penalty": 1.2},
            InvalidRequestError,
            "repetition_penalty",
        ),
        ({**CHAT, "repeat_last_n": -2}, InvalidRequestError, "repeat_last_n"),
        ({**CHAT, "tools": [{"type": "function"}]}, InvalidRequestError, "tools.0.function"),
        ({**CHAT, "tools": [TOOL, TOOL]}, InvalidRequestError, "tools"),
        ({**CHAT, "tool_choice": "required"}, InvalidRequestError, "tool_choice"),
        ({**CHAT, "tools": [TOOL], "tool_choice": named("other")}, InvalidRequestError, "tool_choice"),
        ({**CHAT, "tools": [TOOL], "tool_choice": "sometimes"}, InvalidRequestError, "tool_choice"),
        (
            {
                **CHAT,
                "tools": [tool("f", {"type": "object", "properties": {"a": {"$ref": "#/$defs/nothing"}}})],
            },
            UnsupportedParameterError,
            "tools.0.function.parameters",
        ),
        ({**CHAT, "response_format": {"type": "xml"}}, InvalidRequestError, "response_format"),
        (
            {**CHAT, "response_format": schema_format({"$ref": "#/$defs/nothing"})},
            UnsupportedParameterError,
            "response_format",
        ),
        (
            {**CHAT, "response_format": schema_format({"$ref": "https://x.test/s.json"})},
            UnsupportedParameterError,
            "response_format",
        ),
        (
            {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "a b"}}},
            InvalidRequestError,
            "response_format.json_schema.name",
        ),
        ({"messages": [{"role": "tool", "content": "42"}]}, InvalidRequestError, "messages.0"),
        ({"messages": [{"role": "user", "content": None}]}, InvalidRequestError, "messages.0"),
        ({"prompt": "x", "echo": True}, UnsupportedParameterError, "echo"),
        ({"prompt": "x", "suffix": "y"}, UnsupportedParameterError, "suffix"),
        ({"prompt": ["a", "b"]}, InvalidRequestError, "prompt"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            UnsupportedParameterError,
            "messages",
        ),
    ],
)
def test_bad_requests_name_the_field(body, error, param):
    with pytest.raises(error) as caught:
        parse_request(body)
    assert caught.value.param == param
    response = caught.value.to_response()
    assert 400 <= response["statusCode"] < 500
    assert set(response["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in response["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "caf\ud800"}, "prompt"),
        ({"messages": [{"role": "user", "content": "\udfff"}]}, "messages.0.content"),
        ({"prompt": "ok", "stop": ["\ud83d"]}, "stop.0"),
        # Every field, not only the prompt: these once passed and broke logging further on.
        ({"messages": [{"role": "user", "content": "hi", "name": "\ud800"}]}, "messages.0.name"),
        ({"prompt": "ok", "user": "\ud800"}, "user"),
        ({"prompt": "ok", "model": "\ud800"}, "model"),
        ({"prompt": "ok", "metadata": {"\ud800": "x"}}, "metadata"),
    ],
)
def test_unpaired_surrogates_are_refused(body, param):
    with pytest.raises(InvalidRequestError, match="unpaired surrogate") as caught:
        parse_request(body)
    assert caught.value.param == param
    assert parse_request({"prompt": "emoji \U0001f600 is fine"}).text.endswith("fine")


def test_an_unknown_field_is_ignored_and_named():
    assert parse_request({**CHAT, "max_token": 5}).ignored_fields == ("max_token",)


def test_render_chat_and_completion_responses():
    generation = Generation(
        text="Hello!",
        finish_reason="stop",
        prompt_tokens=10,
        completion_tokens=3,
        timings=Timings(5.0, 5.0, 20.0, 25.0, 100.0),
        seed=9,
    )
    chat = render_response(parse_request(CHAT), generation, model="m")
    assert chat["object"] == "chat.completion"
    assert chat["id"].startswith("chatcmpl-")
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "Hello!"}
    assert chat["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert chat["timings"]["tokens_per_second"] == 100.0
    assert chat["seed"] == 9
    text = render_response(parse_request({"prompt": "x"}), generation, model="m")
    assert text["object"] == "text_completion"
    assert text["choices"][0]["text"] == "Hello!"
    assert "deadline_reached" not in text


# --- Tool turns pair up, as OpenAI requires -----------------------------------------------------------


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def calling(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}


def answer(call_id: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": "sunny"}


USER = {"role": "user", "content": "Weather?"}


@pytest.mark.parametrize(
    ("messages", "param", "words"),
    [
        ([USER, answer("call_1")], "messages.1", "must come after the call it answers"),
        ([answer("call_1")], "messages.0", "must come after the call it answers"),
        ([USER, calling("call_1"), answer("call_2")], "messages.2", "which is not a call of messages.1"),
        # An answer after another turn no longer answers the call before that turn.
        ([USER, calling("call_1"), answer("call_1"), USER, answer("call_1")], "messages.4", "come after"),
        ([USER, calling("call_1", "call_2"), answer("call_1"), USER], "messages.1", "no answer to 'call_2'"),
        ([USER, calling("call_1")], "messages.1", "after it; no answer to 'call_1'"),
        ([USER, calling("call_1"), calling("call_2"), answer("call_2")], "messages.1", "before messages.2"),
    ],
)
def test_tool_messages_must_answer_the_calls_before_them(messages, param, words):
    with pytest.raises(InvalidRequestError) as raised:
        parse_request({"messages": messages})
    assert raised.value.param == param and raised.value.status_code == 400
    assert raised.value.message.startswith(f"{param}: ") and words in raised.value.message


def test_answered_calls_in_any_order_are_a_conversation():
    messages = [USER, calling("call_1", "call_2"), answer("call_2"), answer("call_1"), USER]
    assert len(parse_request({"messages": messages}).messages) == 5


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ([CHAT], "an array"),
        ('{"messages": []}', "a string"),
        (5, "a number"),
        (None, "null"),
        (True, "a boolean"),
    ],
)
def test_a_body_that_is_not_an_object_is_named_in_json_terms(body, kind):
    with pytest.raises(InvalidRequestError, match=f"must be a JSON object, got {kind}$"):
        parse_request(body)
