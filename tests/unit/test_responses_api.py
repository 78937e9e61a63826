"""The Responses API contract: requests validated in their own terms and translated into chat requests,
answers and stream events in the shapes the installed ``openai`` package parses."""

from __future__ import annotations

import json

import pytest
from openai._models import construct_type
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from snapllm.engine.types import Timings, TokenLogprob
from snapllm.errors import ContextLengthExceededError, InvalidRequestError, UnsupportedParameterError
from snapllm.protocol.completions.objects import render_response
from snapllm.protocol.completions.sse import ResponseEventEncoder, encoder_for
from snapllm.protocol.limits import Limits
from snapllm.protocol.metrics import request_features
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    Generation,
    ToolCall,
)
from snapllm.protocol.responses.responses_api import (
    ResponsesRequest,
    inference_request,
    parse_invoke,
    parse_responses_request,
    responses_fields,
)

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,  # sent with strict: true, which OpenAI's rules ask for
}
EVENTS = TypeAdapter(ResponseStreamEvent)


def generation(text: str = "Red.", **fields) -> Generation:
    values = {
        "text": text,
        "finish_reason": "stop",
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "timings": Timings(1.0, 1.0, 2.0, 3.0, 100.0),
        "seed": 5,
        "cached_tokens": 4,
        **fields,
    }
    return Generation(**values)


# --- Translation into a chat request ------------------------------------------------------------------------


def test_a_string_input_with_instructions_is_a_system_and_a_user_message():
    request = parse_invoke(
        {
            "input": "Hi",
            "instructions": "Be brief.",
            "max_output_tokens": 16,
            "temperature": 0.0,
            "top_p": 0.5,
        }
    )
    assert isinstance(request, ResponsesRequest)
    chat = inference_request(request)
    assert isinstance(chat, ChatCompletionRequest)
    assert [(m.role, m.text()) for m in chat.messages] == [("system", "Be brief."), ("user", "Hi")]
    assert (chat.requested_max_tokens, chat.temperature, chat.top_p) == (16, 0.0, 0.5)
    # snapllm's seed, as on chat completions (not an OpenAI field of this API).
    assert parse_responses_request({"input": "Hi", "seed": 7}).chat.seed == 7


def test_a_tool_conversation_continues_from_its_items():
    request = parse_responses_request(
        {
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "dry"}],
                },
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Sunny.", "annotations": [], "logprobs": []}],
                },
                {"role": "user", "content": "Thanks."},
            ],
            "tools": [TOOL],
        }
    )
    messages = request.chat.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert [c.id for c in messages[1].tool_calls] == ["call_1", "call_2"]
    assert (messages[2].tool_call_id, messages[2].text()) == ("call_1", "sunny")
    assert messages[3].text() == "dry" and messages[4].text() == "Sunny."


def test_formats_tools_and_logprobs_become_their_chat_forms():
    request = parse_responses_request(
        {
            "input": "Where?",
            "text": {"format": {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True}},
            "tools": [TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 3,
        }
    )
    chat = request.chat
    assert chat.response_format.json_schema.json_schema == SCHEMA
    assert chat.tools[0].function.name == "get_weather"
    assert [f.name for f in chat.forced_tools] == ["get_weather"]
    assert chat.parallel_tool_calls is False and chat.logprobs_count == 3
    assert request_features(chat) == {"response_format": "json_schema", "tool_choice": "named"}
    assert isinstance(parse_invoke({"prompt": "x"}), CompletionRequest)


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ({"input": "x", "store": True}, UnsupportedParameterError, "store"),
        ({"input": "x", "background": True}, UnsupportedParameterError, "background"),
        ({"input": "x", "previous_response_id": "resp_1"}, UnsupportedParameterError, "previous_response_id"),
        ({"input": "x", "conversation": "conv_1"}, UnsupportedParameterError, "conversation"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, UnsupportedParameterError, "tools"),
        ({"input": "x", "tools": [TOOL, {"type": "file_search"}]}, UnsupportedParameterError, "tools"),
        ({"input": "x", "tools": [{"type": "code_interpreter"}]}, UnsupportedParameterError, "tools"),
        ({"input": "x", "tools": [{"type": "mcp", "server_label": "s"}]}, UnsupportedParameterError, "tools"),
        (
            {"input": "x", "tool_choice": {"type": "web_search_preview"}},
            UnsupportedParameterError,
            "tool_choice",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, UnsupportedParameterError, "input"),
        # Reasoning items sent back are left out: an input of nothing else is empty.
        ({"input": [{"type": "reasoning", "summary": []}]}, InvalidRequestError, "input"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            UnsupportedParameterError,
            "input",
        ),
        ({"input": "x", "truncation": "auto"}, UnsupportedParameterError, "truncation"),
        ({"input": "x", "include": ["file_search_call.results"]}, UnsupportedParameterError, "include"),
        ({"input": "x", "stop": ["."]}, UnsupportedParameterError, "stop"),
        ({"input": "x", "max_output_tokens": "3"}, InvalidRequestError, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": 0}, InvalidRequestError, "max_output_tokens"),
        ({"input": "x", "temperature": 3}, InvalidRequestError, "temperature"),
        ({"input": "x", "seed": -1}, InvalidRequestError, "seed"),
        ({"input": 5}, InvalidRequestError, "input"),
        ({"input": []}, InvalidRequestError, "input"),
        ({"input": [{"role": "bot", "content": "x"}]}, InvalidRequestError, "input.0.role"),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            InvalidRequestError,
            "input.0.call_id",
        ),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, InvalidRequestError, "text.format"),
        (
            {
                "input": "x",
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "n",
                        "schema": {"$ref": "#/$defs/nothing"},
                    }
                },
            },
            UnsupportedParameterError,
            "text.format",
        ),
        (
            {
                "input": "x",
                "tools": [
                    {
                        **TOOL,
                        "parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nothing"}}},
                    }
                ],
            },
            UnsupportedParameterError,
            "tools.0.parameters",
        ),
        ({"input": "x", "tools": [TOOL, TOOL]}, InvalidRequestError, "tools"),
        (
            {"input": "x", "tools": [TOOL], "tool_choice": {"type": "function", "name": "g"}},
            InvalidRequestError,
            "tool_choice",
        ),
        ({"input": "x", "tool_choice": "required"}, InvalidRequestError, "tool_choice"),
        ({"input": "x", "messages": []}, InvalidRequestError, "messages"),
        ({"input": "\ud800"}, InvalidRequestError, "input"),
    ],
)
def test_bad_requests_name_the_responses_field(body, error, param):
    with pytest.raises(error) as caught:
        parse_invoke(body)
    assert caught.value.param == param
    response = caught.value.to_response()
    assert 400 <= response["statusCode"] < 500
    assert "Traceback" not in response["error"]["message"]


def test_refusals_say_why():
    with pytest.raises(UnsupportedParameterError, match="stateless"):
        parse_invoke({"input": "x", "store": True})
    with pytest.raises(UnsupportedParameterError, match="no such tool here"):
        parse_invoke({"input": "x", "tools": [{"type": "image_generation"}]})
    # The official SDK leaves store out; OpenAI's default would be true, but absent is accepted.
    assert parse_invoke({"input": "x"}).store is None


def test_limits_on_the_translation_name_the_responses_fields():
    request = parse_responses_request({"input": "x" * 50, "max_output_tokens": 100})
    with pytest.raises(InvalidRequestError) as caught, responses_fields(request):
        Limits(max_tokens=64).check(request.chat)
    assert caught.value.param == "max_output_tokens"
    assert caught.value.message.startswith("max_output_tokens is 100")
    with pytest.raises(ContextLengthExceededError) as caught, responses_fields(request):
        Limits(max_tokens=512, max_prompt_chars=10).check(request.chat)
    assert caught.value.param == "input"
    tools = [{**TOOL, "name": f"t{i}"} for i in range(33)]
    request = parse_responses_request({"input": "x", "tools": tools})
    with pytest.raises(InvalidRequestError) as caught, responses_fields(request):
        Limits(max_tokens=64).check(request.chat)
    assert caught.value.param == "tools"


# --- Answers ------------------------------------------------------------------------------------------------


def test_a_text_answer_parses_with_the_official_types():
    request = parse_responses_request({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 16})
    body = render_response(request, generation(), model="m")
    response = Response.model_validate(body)
    assert response.output_text == "Red." and response.status == "completed"
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")
    assert response.instructions == "Be brief." and response.max_output_tokens == 16
    assert response.usage.input_tokens == 12 and response.usage.input_tokens_details.cached_tokens == 4
    assert response.usage.total_tokens == 15 and body["store"] is False
    assert body["timings"]["tokens_per_second"] == 100.0 and body["seed"] == 5


def test_a_cut_answer_is_incomplete():
    request = parse_responses_request({"input": "Hi"})
    response = Response.model_validate(
        render_response(request, generation(finish_reason="length"), model="m")
    )
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"


def test_an_answer_cut_by_the_deadline_says_so_not_max_output_tokens():
    request = parse_responses_request({"input": "Hi", "max_output_tokens": 96})
    cut = generation(finish_reason="length", deadline_reached=True, completion_tokens=19)
    body = render_response(request, cut, model="m")
    # The official SDK builds its objects without validating literals, so it keeps a reason it does not
    # list as it is (as the integration tests check against a server).
    response = construct_type(type_=Response, value=body)
    assert response.status == "incomplete" and response.incomplete_details.reason == "deadline"
    assert body["deadline_reached"] is True and response.output[0].status == "incomplete"


def test_function_calls_are_output_items():
    request = parse_responses_request({"input": "Hi", "tools": [TOOL], "tool_choice": "required"})
    calls = (ToolCall("call_a", "get_weather", '{"city": "Paris"}'), ToolCall("call_b", "get_weather", "{}"))
    body = render_response(
        request, generation("[...]", finish_reason="tool_calls", tool_calls=calls), model="m"
    )
    response = Response.model_validate(body)
    assert [(o.type, o.call_id, o.name) for o in response.output] == [
        ("function_call", "call_a", "get_weather"),
        ("function_call", "call_b", "get_weather"),
    ]
    assert json.loads(response.output[0].arguments) == {"city": "Paris"}
    assert response.tool_choice == "required" and response.tools[0].name == "get_weather"
    # The items go back as input as they came, so the conversation continues.
    answers = [
        {"type": "function_call_output", "call_id": c, "output": "sunny"} for c in ("call_a", "call_b")
    ]
    follow_up = parse_responses_request({"input": [*body["output"], *answers]})
    assert [m.role for m in follow_up.chat.messages] == ["assistant", "tool", "tool"]


def test_logprobs_are_on_the_text_part_when_included():
    tokens = (TokenLogprob("Red", (82, 101, 100), -0.5, (("Red", (82, 101, 100), -0.5),)),)
    request = parse_responses_request(
        {"input": "Hi", "include": ["message.output_text.logprobs"], "top_logprobs": 1}
    )
    response = Response.model_validate(
        render_response(request, generation("Red", logprobs=tokens), model="m")
    )
    [logprob] = response.output[0].content[0].logprobs
    assert (logprob.token, logprob.logprob, logprob.top_logprobs[0].token) == ("Red", -0.5, "Red")


# --- Stream events ------------------------------------------------------------------------------------------


def _events(raw: bytes) -> list:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        name, data = block.split("\n")
        event = EVENTS.validate_python(json.loads(data.removeprefix("data: ")))
        assert name == f"event: {event.type}"
        events.append(event)
    return events


def test_a_streamed_text_answer_follows_the_documented_sequence():
    request = parse_responses_request({"input": "Hi", "stream": True})
    encoder = encoder_for(request, model="m")
    assert isinstance(encoder, ResponseEventEncoder)
    raw = encoder.start() + encoder.delta("Re") + encoder.delta("") + encoder.delta("d.")
    raw += encoder.finish(generation("Red."))
    events = _events(raw)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == deltas == "Red." and final.id == events[0].response.id
    assert events[0].response.status == "in_progress" and final.status == "completed"
    assert events[2].item.id == events[-2].item.id == final.output[0].id


def test_streamed_function_calls_are_sent_whole_after_the_text():
    request = parse_responses_request(
        {"input": "Hi", "tools": [TOOL], "tool_choice": "required", "stream": True}
    )
    encoder = encoder_for(request, model="m")
    calls = (ToolCall("call_a", "get_weather", '{"city": "Paris"}'),)
    raw = encoder.start() + encoder.finish(generation("{...}", finish_reason="tool_calls", tool_calls=calls))
    events = _events(raw)
    assert [e.type for e in events][2:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2].item.arguments == "" and events[4].arguments == '{"city": "Paris"}'
    assert events[-1].response.output[0].call_id == "call_a"


def test_a_cut_stream_ends_incomplete_and_an_error_is_an_error_event():
    request = parse_responses_request({"input": "Hi", "stream": True})
    encoder = encoder_for(request, model="m")
    events = _events(
        encoder.start() + encoder.delta("Re") + encoder.finish(generation("Re", finish_reason="length"))
    )
    assert events[-1].type == "response.incomplete" and events[-1].response.output_text == "Re"
    error = _events(encoder.error(InvalidRequestError("bad", param="input")))[0]
    assert (error.type, error.param, error.sequence_number) == ("error", "input", len(events))


def function_call(call_id: str) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": "{}"}


def function_output(call_id: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": "sunny"}


@pytest.mark.parametrize(
    ("items", "param", "words"),
    [
        (["Weather?", function_output("call_1")], "input.1", "must come after the call it answers"),
        ([function_call("call_1"), function_output("call_2")], "input.1", "which is not a call of input.0"),
        (
            ["Weather?", function_call("call_1"), function_call("call_2"), function_output("call_1")],
            "input.1",
            "no answer to 'call_2'",
        ),
        ([function_call("call_1"), "More?", function_output("call_1")], "input.0", "before input.1"),
    ],
)
def test_function_call_outputs_must_answer_the_calls_before_them(items, param, words):
    items = [{"role": "user", "content": i} if isinstance(i, str) else i for i in items]
    with pytest.raises(InvalidRequestError) as raised:
        parse_responses_request({"input": items})
    assert raised.value.param == param and words in raised.value.message
    assert "function_call_output item" in raised.value.message
