"""The official ``openai`` client against ``snapllm local serve``: the real router handler, the restored
inference environment and the streaming ASGI app, with the packaged model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.serve import MODEL, SERVER_GROUP

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SERVER_GROUP)]

MESSAGES = [{"role": "user", "content": "Say hello in three words."}]


def test_models_lists_the_routed_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_completion_answers(client):
    completion = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, seed=1)
    choice = completion.choices[0]
    assert completion.object == "chat.completion" and completion.model == MODEL
    assert choice.message.role == "assistant" and choice.message.content.strip()
    assert choice.finish_reason in {"stop", "length"}
    assert 0 < completion.usage.completion_tokens <= 8
    assert (
        completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


def test_text_completion_answers(client):
    completion = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6)
    assert completion.object == "text_completion"
    assert completion.choices[0].text.strip()
    assert completion.usage.completion_tokens <= 6


def test_chat_completion_streams_token_by_token(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=8,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 2, "tokens should arrive as separate events"
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finished) == 1 and finished[0].choices[0].finish_reason in {"stop", "length"}
    usage = chunks[-1].usage
    # A token is sent when it completes text: one that carries part of a character's bytes (an emoji is
    # often several tokens) waits for the rest, so a stream may have fewer pieces than tokens, never more.
    assert chunks[-1].choices == [] and len(pieces) <= usage.completion_tokens <= 8


def test_fields_current_clients_send_are_accepted(client):
    completion = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=4,
        reasoning_effort="low",
        prompt_cache_key="k",
        safety_identifier="user-1",
        modalities=["text"],
        parallel_tool_calls=True,
        store=False,
        metadata={"team": "a"},
        service_tier="auto",
    )
    assert completion.choices[0].message.content is not None
    assert completion.usage.prompt_tokens_details.cached_tokens >= 0
    assert completion.system_fingerprint.startswith("fp_")


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
def test_unknown_fields_are_ignored_and_named_in_a_header(client, stream):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=4, seed=1, stream=stream, extra_body={"top_kk": 3, "ab": 1}
    )
    assert raw.headers["x-snapllm-ignored-fields"] == "top_kk, ab"
    answer = raw.parse()
    if stream:
        assert [c for c in answer if c.choices and c.choices[0].finish_reason]
    else:
        assert answer.choices[0].message.content is not None
    plain = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert "x-snapllm-ignored-fields" not in plain.headers


def test_local_sampling_fields_are_served(client):
    greedy = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0)
    narrowed = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=6,
        temperature=1.5,
        seed=2,
        extra_body={
            "top_k": 1,
            "min_p": 0.1,
            "typical_p": 1.0,
            "repetition_penalty": 1.0,
            "repeat_last_n": 32,
        },
    )
    assert narrowed.choices[0].message.content == greedy.choices[0].message.content


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def test_an_earlier_answer_sent_back_as_the_sdk_returns_it_is_served(client):
    first = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, seed=1)
    earlier = first.choices[0].message.model_dump()  # every field, nulls included
    assert {"refusal", "annotations", "audio", "function_call", "tool_calls"} <= set(earlier)
    follow_up = {"role": "user", "content": "Again, shorter."}
    second = client.chat.completions.create(
        model=MODEL, messages=[*MESSAGES, earlier, follow_up], max_tokens=4, seed=1
    )
    assert second.choices[0].message.content is not None
    # What reasoning servers and frameworks add, and a name on every role, are accepted as well.
    decorated = {
        **earlier,
        "annotations": [],
        "reasoning_content": "They asked for three words.",
        "name": "bot",
    }
    named = {**MESSAGES[0], "name": "alice"}
    third = client.chat.completions.create(model=MODEL, messages=[named, decorated, follow_up], max_tokens=4)
    assert third.choices[0].message.content is not None


def test_an_earlier_tool_call_sent_back_as_the_sdk_returns_it_is_served(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model=MODEL, messages=ask, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=16, seed=1
    )
    calling = first.choices[0].message
    assert calling.tool_calls, first
    answers = [{"role": "tool", "tool_call_id": call.id, "content": "sunny"} for call in calling.tool_calls]
    second = client.chat.completions.create(
        model=MODEL, messages=[*ask, calling.model_dump(), *answers], tools=[WEATHER_TOOL], max_tokens=4
    )
    assert second.choices[0].finish_reason in {"stop", "length", "tool_calls"}


def test_token_prompts_are_served_as_the_text_they_spell(client, engine):
    text = "The capital of France is"
    tokens = engine.tokenize(text, add_bos=True)
    by_text = client.completions.create(model=MODEL, prompt=text, max_tokens=4, temperature=0, seed=1)
    for prompt in (tokens, [tokens]):
        by_tokens = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0, seed=1)
        assert by_tokens.choices[0].text == by_text.choices[0].text
        assert by_tokens.usage.prompt_tokens == by_text.usage.prompt_tokens == len(tokens)


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
@pytest.mark.parametrize(
    "prompt",
    [[[1, 2], [3, 4]], [1, 1_000_000], [[1, -1]], [], [1, 2] * 600],
    ids=["batch-of-two", "outside-the-vocabulary", "negative", "empty", "past-the-context"],
)
def test_bad_token_prompts_get_400s_naming_prompt(client, prompt, stream):
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, stream=stream)
    assert raised.value.body["param"].startswith("prompt"), raised.value.body


def test_chat_logprobs_cover_every_token(client):
    completion = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, seed=1, logprobs=True, top_logprobs=3
    )
    choice = completion.choices[0]
    content = choice.logprobs.content
    assert len(content) == completion.usage.completion_tokens
    assert "".join(t.token for t in content) == choice.message.content
    for token in content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3
        assert token.top_logprobs[0].logprob >= token.top_logprobs[-1].logprob >= -1e9
        assert bytes(token.bytes).decode() == token.token


def test_streamed_chat_logprobs_match_the_tokens(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, seed=2, logprobs=True, stream=True
    )
    chunks = [c for c in stream if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    tokens = [t.token for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert "".join(tokens) == text and tokens


def test_text_completion_logprobs(client):
    completion = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=4, seed=1, logprobs=2)
    logprobs = completion.choices[0].logprobs
    assert "".join(logprobs.tokens) == completion.choices[0].text
    assert len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.text_offset)
    assert all(len(top) <= 2 for top in logprobs.top_logprobs)


def test_text_completion_streams(client):
    stream = client.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=6, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks).strip()
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}


def test_stream_ends_with_done(server):
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in events)


# --- Errors: the openai client raises its typed errors, with the OpenAI error body ------------------------

CHAT_ERRORS = [
    ({"model": "no-such-model"}, openai.NotFoundError, "model", "model_not_found"),
    ({"n": 2}, openai.BadRequestError, "n", "unsupported_parameter"),
    ({"temperature": 5}, openai.BadRequestError, "temperature", None),
    ({"max_tokens": 17}, openai.BadRequestError, "max_tokens", None),
    ({"max_tokens": 0}, openai.BadRequestError, "max_tokens", None),
    ({"logprobs": True, "top_logprobs": 21}, openai.BadRequestError, "top_logprobs", None),
    (
        {
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/$defs/nothing"}}}
            ]
        },
        openai.BadRequestError,
        "tools.0.function.parameters",
        "unsupported_parameter",
    ),
    ({"extra_body": {"mirostat": 2}}, openai.BadRequestError, "mirostat", "unsupported_parameter"),
    ({"extra_body": {"top_k": -5}}, openai.BadRequestError, "top_k", None),
    ({"extra_body": {"repetition_penalty": 0}}, openai.BadRequestError, "repetition_penalty", None),
    ({"logit_bias": {"1000000": 5}}, openai.BadRequestError, "logit_bias", None),
    ({"logit_bias": {"5": 101}}, openai.BadRequestError, "logit_bias", None),
    ({"messages": [{"role": "user", "content": "x" * 2001}]}, openai.BadRequestError, "messages", None),
]


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
@pytest.mark.parametrize(("overrides", "error", "param", "code"), CHAT_ERRORS, ids=lambda v: str(v)[:30])
def test_bad_chat_requests_get_openai_errors(client, stream, overrides, error, param, code):
    kwargs = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "stream": stream, **overrides}
    with pytest.raises(error) as raised:
        client.chat.completions.create(**kwargs)
    body = raised.value.body
    assert set(body) == {"message", "type", "param", "code"}, body
    assert body["param"] == param and body["message"]
    if code:
        assert body["code"] == code


def test_oversized_body_gets_413(client):
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 70_000}])
    assert raised.value.status_code == 413
    assert raised.value.body["code"] == "payload_too_large"


RAW_ERRORS = [
    ("POST", "/chat/completions", b'{"model": "x", "messages": [', "application/json", 400),
    ("POST", "/chat/completions", b"[1, 2]", "application/json", 400),
    ("POST", "/chat/completions", b'{"messages": "hello"}', "application/json", 400),
    (
        "POST",
        "/chat/completions",
        b'{"messages": [{"role": "robot", "content": "x"}]}',
        "application/json",
        400,
    ),
    ("POST", "/chat/completions", b'{"prompt": "x"}', "application/json", 400),
    ("POST", "/completions", b'{"prompt": "x", "echo": true}', "application/json", 400),
    ("POST", "/completions", b'{"prompt": "\\ud800"}', "application/json", 400),
    ("POST", "/completions", b"prompt=x", "text/plain", 415),
    ("POST", "/completions", b'{"prompt": "x", "stream": true, "best_of": 3}', "application/json", 400),
    ("GET", "/nowhere", b"", "", 404),
    ("DELETE", "/models", b"", "", 405),  # a known path: 405 with Allow
]


@pytest.mark.parametrize(("method", "path", "body", "content_type", "status"), RAW_ERRORS)
def test_malformed_requests_get_4xx_and_the_server_keeps_serving(
    server, client, method, path, body, content_type, status
):
    headers = {"content-type": content_type} if content_type else {}
    response = httpx.request(method, f"{server.base_url}{path}", content=body, headers=headers, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    json.dumps(error)
    assert client.models.list().data


def test_server_still_answers_after_errors(client):
    completion = client.completions.create(model=MODEL, prompt="Hello", max_tokens=2)
    assert completion.usage.completion_tokens >= 1
