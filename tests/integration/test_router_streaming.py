"""The streaming function's ASGI app in-process (Starlette's test client), on a runtime initialized the
real way (local S3 -> memfd -> llama.cpp), and ``Engine.stream`` itself."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.testclient import TestClient

from snapllm.engine.types import TokenDelta
from snapllm.protocol.requests import parse_request
from snapllm.streaming.app import AFTER_RESTORE_PATH, BEFORE_CHECKPOINT_PATH, create_app
from tests.support.generation import LONG_GENERATION

pytestmark = pytest.mark.slow

CHAT = {"messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 8, "seed": 3}


@pytest.fixture(scope="module")
def inference_overrides() -> dict[str, str]:
    return {"SNAPLLM_MAX_TOKENS": "24", "SNAPLLM_MAX_PROMPT_CHARS": "500"}


@pytest.fixture(scope="module")
def client(runtime) -> TestClient:
    """The streaming function's app on the runtime (this module's client is not the OpenAI SDK)."""
    return TestClient(create_app(runtime, max_body_bytes=8192))


def _events(response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.iter_lines() if line]


def test_lwa_hooks_run_the_runtimes_snapstart_work(client, runtime):
    before = runtime.environment_id
    assert client.post(BEFORE_CHECKPOINT_PATH).status_code == 200
    restored = client.post(AFTER_RESTORE_PATH)
    assert restored.status_code == 200 and restored.json()["environment_id"] != before
    assert runtime.restores >= 1


@pytest.mark.parametrize("header", ["x-amzn-request-context", "x-amzn-lambda-context"])
@pytest.mark.parametrize("path", [BEFORE_CHECKPOINT_PATH, AFTER_RESTORE_PATH])
def test_hooks_refuse_requests_that_came_through_an_invoke(client, path, header):
    assert client.post(path, headers={header: "{}"}).status_code == 403


def test_chat_streams_chunks_then_done(client):
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}
    assert chunks[-1]["timings"]["time_to_first_token_ms"] > 0
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    buffered = client.post("/v1/chat/completions", json=CHAT).json()
    assert text == buffered["choices"][0]["message"]["content"], "same seed, same text, streamed or not"


def test_deadline_from_lwas_context_header_stops_generation(client):
    # LWA passes the invoke's deadline (epoch ms); one already past leaves no time for more than a token.
    headers = {"x-amzn-lambda-context": json.dumps({"deadline": 0})}
    body = {**LONG_GENERATION, "max_tokens": 16, "stream": True}
    with client.stream("POST", "/v1/completions", json=body, headers=headers) as response:
        chunks = [json.loads(e) for e in _events(response)[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["deadline_reached"]
    assert len(chunks) <= 3


def test_the_model_is_retrieved_by_its_id(client, runtime):
    name = runtime.engine.model_name
    card = client.get(f"/v1/models/{name}")
    assert card.status_code == 200 and card.json() == client.get("/v1/models").json()["data"][0]
    unknown = client.get("/v1/models/gpt-4o")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_answers_carry_the_invokes_request_id(client):
    # LWA passes the invoke's context; its request id names the answer, errors and streams included.
    headers = {"x-amzn-lambda-context": json.dumps({"request_id": "8476a536-e9f4-11e8-9739-2dfe598c3fcd"})}
    for method, path, body in [
        ("GET", "/v1/models", None),
        ("GET", "/v1/models/gpt-4o", None),
        ("POST", "/v1/chat/completions", {**CHAT, "n": 2}),
        ("POST", "/v1/chat/completions", {**CHAT, "max_tokens": 1, "stream": True}),
    ]:
        response = client.request(method, path, json=body, headers=headers)
        assert response.headers["x-request-id"] == "8476a536-e9f4-11e8-9739-2dfe598c3fcd", path
    # What is not a plain id is not echoed into the headers.
    odd = client.get("/health", headers={"x-amzn-lambda-context": json.dumps({"request_id": "a\r\nb: c"})})
    assert "\n" not in odd.headers["x-request-id"] and len(odd.headers["x-request-id"]) == 36
    # Without LWA's context (a request that did not come through an invoke), each answer gets its own.
    ids = {client.get("/health").headers["x-request-id"] for _ in range(2)}
    assert len(ids) == 2 and all(ids)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({**CHAT, "model": "other"}, 404, "model"),
        ({**CHAT, "max_tokens": 25}, 400, "max_tokens"),
        ({**CHAT, "n": 2}, 400, "n"),
        ({"prompt": "x" * 501}, 400, "prompt"),
        ({"prompt": "x" * 9000}, 413, None),
        ({"prompt": ""}, 400, "prompt"),
    ],
)
def test_errors_come_before_the_stream_starts(client, body, status, param):
    response = client.post(
        "/v1/completions" if "prompt" in body else "/v1/chat/completions", json={**body, "stream": True}
    )
    assert response.status_code == status and response.json()["error"]["param"] == param


def _emf(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"_aws"')]


def test_each_completion_publishes_the_routers_metrics(client, runtime, capsys):
    capsys.readouterr()
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
        _events(response)
    assert client.post("/v1/completions", json={"prompt": "Hi", "model": "gpt-4o"}).status_code == 404
    blobs = _emf(capsys.readouterr().out)
    generated = [b for b in blobs if "TimeToFirstToken" in b]
    assert len(generated) == 1, blobs
    streamed = generated[0]
    assert streamed["model"] == runtime.engine.model_name and streamed["service"] == "snapllm-stream"
    assert streamed["RequestCount"] == [1.0] and 0 < streamed["CompletionTokens"][0] <= 8
    assert streamed["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "snapllm"
    errors = [b for b in blobs if "Errors" in b]
    assert [(e["model"], e["error_type"], e["status"]) for e in errors] == [
        ("unknown", "UnknownModelError", "404")
    ]


def test_a_consumer_that_stops_early_releases_the_engine(runtime):
    engine, serving = runtime.engine, runtime.serving
    request = parse_request({"prompt": "The alphabet: a, b, c,", "max_tokens": 16})
    items = serving.stream(request)
    assert isinstance(next(items), TokenDelta)
    assert engine._lock.locked()
    items.close()
    assert not engine._lock.locked()
    generation = serving.generate(parse_request({"prompt": "Hi", "max_tokens": 2}))
    assert generation.completion_tokens >= 1


def test_stream_ends_with_a_generation_matching_the_deltas(runtime):
    items = list(runtime.serving.stream(parse_request({"prompt": "Hello", "max_tokens": 6, "seed": 5})))
    *deltas, final = items
    assert all(isinstance(d, TokenDelta) for d in deltas)
    assert final.text == "".join(d.text for d in deltas)
    assert final.completion_tokens == len(deltas) and final.prompt_tokens > 0


TINY = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
PING = {
    "messages": [{"role": "user", "content": "Ping the server."}],
    # No arguments (the object closed, or a small model fills it with properties of its own): the call, 17
    # tokens with the spacing SmolLM2 writes, must fit this runtime's 24.
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "ping",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            },
        }
    ],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "max_tokens": 24,
    "seed": 1,
    "temperature": 0,
}


def _call(message: dict) -> tuple[str, dict]:
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    return call["function"]["name"], json.loads(call["function"]["arguments"])


def test_direct_invoke_http_and_stream_give_the_same_tool_calls(runtime, client):
    direct = runtime.handle(PING, None)
    http = client.post("/v1/chat/completions", json=PING).json()
    for answer in (direct, http):
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        name, arguments = _call(choice["message"])
        assert name == "ping" and arguments == {}
    assert _call(direct["choices"][0]["message"]) == _call(http["choices"][0]["message"])
    assert direct["system_fingerprint"] == http["system_fingerprint"]
    with client.stream("POST", "/v1/chat/completions", json={**PING, "stream": True}) as response:
        chunks = [json.loads(e) for e in _events(response)[:-1]]
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert deltas[0]["id"].startswith("call_") and deltas[0]["function"]["name"] == "ping"
    arguments = "".join(d["function"].get("arguments", "") for d in deltas)
    assert ("ping", json.loads(arguments)) == _call(direct["choices"][0]["message"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_direct_invoke_answers_json_schema_requests(runtime):
    body = {
        "messages": [{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": TINY}},
        "max_tokens": 16,
        "seed": 2,
    }
    answer = runtime.handle(body, None)
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert isinstance(json.loads(answer["choices"][0]["message"]["content"])["ok"], bool)
    refused = runtime.handle(
        {**body, "response_format": {"type": "json_object"}, "tools": [{"type": "x"}]}, None
    )
    assert refused["statusCode"] == 400 and refused["error"]["param"].startswith("tools")


def test_requests_are_decoded_and_checked_off_the_event_loop(runtime, client, monkeypatch):
    """A request's body (its schemas' grammars included) is checked on a worker thread, so a costly one
    cannot stall the streams the event loop is serving. The serving path's model check is wrapped to see
    where it runs: a worker thread has no running event loop."""
    on_the_loop: list[bool] = []
    check_model = runtime.serving.check_model

    def spy(requested: str | None) -> None:
        try:
            asyncio.get_running_loop()
            on_the_loop.append(True)
        except RuntimeError:
            on_the_loop.append(False)
        check_model(requested)

    monkeypatch.setattr(runtime.serving, "check_model", spy)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    body = {
        "messages": [{"role": "user", "content": "Answer in JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        "max_tokens": 8,
        "temperature": 0,
    }
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200 and _events(response)[-1] == "[DONE]"
    assert on_the_loop == [False, False]


def test_unknown_fields_are_named_by_the_stream_and_the_direct_invoke(client, runtime):
    body = {**CHAT, "max_tokens": 2, "top_kk": 1, "caf\u00e9": True}
    answer = runtime.handle(dict(body), None)
    assert answer["ignored_fields"] == ["top_kk", "caf\u00e9"] and answer["choices"][0]["message"]["content"]
    assert "ignored_fields" not in runtime.handle(dict(CHAT), None)
    buffered = client.post("/v1/chat/completions", json=body)
    assert buffered.status_code == 200 and buffered.headers["x-snapllm-ignored-fields"] == "top_kk, caf\\xe9"
    with client.stream("POST", "/v1/responses", json={"input": "Hi", "stream": True, "zz": 1}) as response:
        assert response.status_code == 200 and response.headers["x-snapllm-ignored-fields"] == "zz"
    refused = client.post("/v1/chat/completions", json={**body, "max_tokens": 999})
    assert refused.status_code == 400 and refused.headers["x-snapllm-ignored-fields"] == "top_kk, caf\\xe9"
