"""The router handler with API Gateway events, calling a stand-in Lambda service over real HTTP.

The Lambda service itself cannot run here, so a small HTTP server on 127.0.0.1 answers the Invoke API
(``POST /2015-03-31/functions/{name}/invocations``) the way Lambda does: a payload, a function error
(``X-Amz-Function-Error``), a throttle (429 ``TooManyRequestsException``) or nothing in time. Everything
else is real: boto3 and ``LambdaInferenceClient`` (retries, timeouts), Powertools' resolver, validation,
Logger and Metrics.
"""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import openai
import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventV2Model
from botocore.config import Config

from snapllm.aws_auth import SigV4
from snapllm.errors import ConfigurationError
from snapllm.inference.client import LambdaInferenceClient
from snapllm.inference.deadline import CALLER_DEADLINE_KEY
from snapllm.router.app import RouterApp
from snapllm.router.events import http_api_event
from snapllm.router.settings import RouterSettings
from snapllm_dev.local.context import LocalContext
from snapllm_dev.replay.events import Manifest
from tests.support.http_stub import HttpStub, Reply

EVENTS = Path(__file__).resolve().parents[2] / "events" / "router"
MODEL = "qwen2.5-coder-0.5b-instruct"  # the template's ModelName, which the events name
ALIAS = "arn:aws:lambda:us-east-1:123456789012:function:snapllm-Inference:live"
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Red."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
    "timings": {"time_to_first_token_ms": 12.5, "tokens_per_second": 110.0},
    "seed": 1,
}


def invoked(body: dict) -> Reply:
    """Lambda's answer to an Invoke whose function returned ``body``."""
    return Reply(body=body)


def function_error(body: dict) -> Reply:
    """Lambda's answer to an Invoke whose function raised."""
    return Reply(body=body, headers={"X-Amz-Function-Error": "Unhandled"})


def service_error(status: int, error_type: str, message: str | None = None) -> Reply:
    """An error of the Lambda service itself."""
    return Reply(status, {"Type": "User", "message": message or error_type}, {"x-amzn-ErrorType": error_type})


THROTTLED = service_error(429, "TooManyRequestsException", "Rate Exceeded.")


@pytest.fixture
def fake_lambda() -> Iterator[HttpStub]:
    """Lambda's Invoke API on the tests' HTTP stub: each call returns COMPLETION unless replies are queued."""
    with HttpStub(lambda request: invoked(COMPLETION)) as stub:
        yield stub


def make_router(
    fake_lambda: HttpStub, *, logs: io.StringIO | None = None, routers=(), **settings
) -> RouterApp:
    options = {"routes": {MODEL: ALIAS}, "max_body_bytes": 4096, "max_prompt_chars": 200, "max_tokens": 64}
    settings = RouterSettings(**{**options, **settings})
    client = boto3.client(
        "lambda",
        region_name="us-east-1",
        endpoint_url=fake_lambda.base_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            connect_timeout=1,
            read_timeout=settings.invoke_timeout_s,
            retries={"mode": "standard", "total_max_attempts": 1},  # as RouterApp.from_env
        ),
    )
    inference = LambdaInferenceClient(ALIAS, lambda_client=client, backoff_base_s=0.01)
    # Powertools configures a logger once per service name; a fresh name gives this router its own stream.
    logger = Logger(service=f"router-test-{uuid.uuid4().hex}", stream=logs) if logs is not None else None
    return RouterApp(settings, {MODEL: inference}, logger=logger, routers=routers)


def call(router: RouterApp, method: str, path: str, body=None, **headers) -> tuple[int, dict, dict]:
    raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    headers = {"content-type": "application/json", **headers} if raw else headers
    event = http_api_event(method, path, body=raw, headers=headers)
    result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256))
    return result["statusCode"], result.get("headers") or {}, json.loads(result["body"])


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8}


# --- Events ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [e.path for e in Manifest.load(EVENTS.parent).events([EVENTS])], ids=lambda p: p.name
)
def test_router_events_parse_with_powertools_models(path):
    event = json.loads(path.read_text())
    model = APIGatewayProxyEventV2Model.model_validate(event)
    assert model.version == "2.0" and model.requestContext.http.path.startswith("/")
    assert APIGatewayProxyEventV2(event).path == model.rawPath


def test_events_answer_as_documented(fake_lambda):
    router = make_router(fake_lambda, max_prompt_chars=32_000)
    expected = {
        "chat.json": 200,
        "completion.json": 200,
        "models.json": 200,
        "retrieve-model.json": 200,
        "health.json": 200,
        "openapi.json": 200,
        "unknown-model.json": 404,
        "unsupported-n.json": 400,
        "stream-on-http-api.json": 400,
        "malformed-json.json": 400,
    }
    fake_lambda.replies = [
        invoked(COMPLETION),
        invoked({**COMPLETION, "object": "text_completion", "choices": []}),
    ]
    for name, status in expected.items():
        event = json.loads((EVENTS / name).read_text())
        result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256))
        assert result["statusCode"] == status, (name, result["body"])


# --- Routing and limits -------------------------------------------------------------------------------------


def test_chat_is_routed_to_the_alias_as_sent(fake_lambda):
    status, _, body = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert status == 200 and body["choices"][0]["message"]["content"] == "Red."
    [request] = fake_lambda.requests
    assert request.path == f"/2015-03-31/functions/{ALIAS.replace(':', '%3A')}/invocations"
    # Untouched: the function checks the model it serves itself (one check per hop).
    assert request.json()["model"] == MODEL and request.json()["max_tokens"] == 8


def test_a_request_without_model_goes_to_the_default(fake_lambda):
    status, _, body = call(
        make_router(fake_lambda), "POST", "/v1/chat/completions", {"messages": CHAT["messages"]}
    )
    assert status == 200 and body["model"] == MODEL


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({**CHAT, "model": "gpt-4o"}, 404, "model"),
        ({**CHAT, "max_tokens": 65}, 400, "max_tokens"),
        ({**CHAT, "messages": [{"role": "user", "content": "x" * 201}]}, 400, "messages"),
        ({**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}, 413, None),
        ({**CHAT, "stream": True}, 400, "stream"),
        ({**CHAT, "n": 2}, 400, "n"),
        ({**CHAT, "temperature": "hot"}, 400, "temperature"),
        ({**CHAT, "frequency_penalty": 3}, 400, "frequency_penalty"),
        ({**CHAT, "mirostat": 2}, 400, "mirostat"),
        ({"model": MODEL}, 400, "messages"),
        (
            {**CHAT, "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(33)]},
            400,
            "tools",
        ),
        (
            {
                **CHAT,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "n", "schema": {"$ref": "#/$defs/nothing"}},
                },
            },
            400,
            "response_format",
        ),
    ],
)
def test_limits_and_validation_are_checked_before_invoking(fake_lambda, body, status, param):
    got, _, error = call(make_router(fake_lambda), "POST", "/v1/chat/completions", body)
    assert got == status
    assert set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["param"] == param
    assert fake_lambda.requests == []


def test_inference_rejections_pass_through(fake_lambda):
    error = {"message": "too long", "type": "invalid_request_error", "param": "messages", "code": "x"}
    rejection = {"statusCode": 400, "error": error}
    fake_lambda.replies = [invoked(rejection)]
    status, _, body = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert status == 400 and body == {"error": rejection["error"]}


RESPONSE_REQUEST = {"model": MODEL, "input": "Name a colour.", "max_output_tokens": 8}
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": MODEL,
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Red.", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 20, "output_tokens": 2, "total_tokens": 22},
    "timings": {"time_to_first_token_ms": 12.5, "tokens_per_second": 110.0},
}


def test_a_response_request_is_routed_to_the_alias_as_sent(fake_lambda, capsys):
    fake_lambda.replies = [invoked(RESPONSE)]
    request = {**RESPONSE_REQUEST, "store": False, "text": {"format": {"type": "json_object"}}}
    status, _, body = call(make_router(fake_lambda), "POST", "/v1/responses", request)
    assert status == 200 and body == RESPONSE
    [sent] = fake_lambda.requests
    assert sent.json() == request
    [counted] = [blob for blob in _emf(capsys.readouterr().out) if "PromptTokens" in blob]
    assert (counted["PromptTokens"], counted["CompletionTokens"]) == ([20.0], [2.0])
    assert counted["response_format"] == "json_object"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**RESPONSE_REQUEST, "stream": True}, "stream"),
        ({**RESPONSE_REQUEST, "max_output_tokens": 65}, "max_output_tokens"),
        ({**RESPONSE_REQUEST, "input": "x" * 201}, "input"),
        ({**RESPONSE_REQUEST, "store": True}, "store"),
        ({**RESPONSE_REQUEST, "previous_response_id": "resp_1"}, "previous_response_id"),
        ({**RESPONSE_REQUEST, "tools": [{"type": "web_search"}]}, "tools"),
        ({**RESPONSE_REQUEST, "tools": [{"type": "function", "name": f"f{i}"} for i in range(33)]}, "tools"),
        ({**RESPONSE_REQUEST, "logit_bias": {"1": 1}}, "logit_bias"),
        ({"model": MODEL}, "input"),
    ],
)
def test_response_requests_are_checked_before_invoking(fake_lambda, body, param):
    status, _, error = call(make_router(fake_lambda), "POST", "/v1/responses", body)
    assert status == 400 and error["error"]["param"] == param, error
    assert fake_lambda.requests == []


# --- Invoke failures ---------------------------------------------------------------------------------------


def test_throttles_are_retried_then_answered_with_429_and_retry_after(fake_lambda):
    fake_lambda.replies = [THROTTLED] * 3
    status, headers, body = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert status == 429 and headers["Retry-After"] == "1"
    assert body["error"]["type"] == "rate_limit_error"
    assert len(fake_lambda.requests) == 3


def test_a_throttle_that_clears_is_invisible(fake_lambda):
    fake_lambda.replies = [THROTTLED, invoked(COMPLETION)]
    status, _, _ = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert status == 200 and len(fake_lambda.requests) == 2


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (409, "SnapStartNotReadyException"),  # optimising, or re-optimising after 14 days uninvoked
        (408, "SnapStartTimeoutException"),  # a restore over Lambda's 10 s
        (502, "ResourceNotReadyException"),  # the function is still being created or updated
    ],
)
def test_a_version_that_is_not_ready_is_a_503_with_retry_after(fake_lambda, status, error_type):
    fake_lambda.replies = [service_error(status, error_type)]
    code, headers, body = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert code == 503 and headers["Retry-After"] == "5"
    assert body["error"]["code"] == "model_not_ready" and error_type in body["error"]["message"]
    assert len(fake_lambda.requests) == 1  # the client retries, not the router within its 30 s


def test_a_function_error_is_a_502(fake_lambda):
    fake_lambda.replies = [function_error({"errorMessage": "segfault", "errorType": "Runtime.ExitError"})]
    status, _, body = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert status == 502 and "segfault" in body["error"]["message"]


def test_a_5xx_from_the_function_is_a_502(fake_lambda):
    fake_lambda.replies = [invoked({"statusCode": 500, "error": {"message": "boom", "type": "server_error"}})]
    status, _, body = call(make_router(fake_lambda), "POST", "/v1/chat/completions", CHAT)
    assert status == 502 and body["error"]["code"] == "inference_failed"


def test_a_slow_function_is_a_504_within_the_deadline(fake_lambda):
    fake_lambda.replies = [Reply(body=COMPLETION, delay_s=3.0)]
    started = time.monotonic()
    status, _, body = call(
        make_router(fake_lambda, invoke_timeout_s=0.5), "POST", "/v1/chat/completions", CHAT
    )
    assert status == 504 and body["error"]["code"] == "timeout"
    assert time.monotonic() - started < 2.5


# --- Observability -----------------------------------------------------------------------------------------


def _emf(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"_aws"')]


def test_metrics_are_emf_with_the_model_dimension(fake_lambda, capsys):
    from aws_lambda_powertools.metrics.provider import cold_start

    cold_start.is_cold_start = True  # as in a new execution environment
    router = make_router(fake_lambda)
    call(router, "POST", "/v1/chat/completions", CHAT)
    call(router, "POST", "/v1/chat/completions", {**CHAT, "n": 3})
    tools = [{"type": "function", "function": {"name": "f"}}]
    call(router, "POST", "/v1/chat/completions", {**CHAT, "tools": tools, "tool_choice": "required"})
    blobs = _emf(capsys.readouterr().out)
    requests = [blob for blob in blobs if "RequestCount" in blob]
    assert requests[0]["response_format"] == "text" and requests[0]["tool_choice"] == "none"
    assert requests[-1]["tool_choice"] == "required"
    by_name = {
        m["Name"]: blob for blob in blobs for d in blob["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]
    }
    for name in ("RequestCount", "Latency", "TimeToFirstToken", "PromptTokens", "CompletionTokens",
                 "TokensPerSecond", "ColdStart", "Errors", "RouterOverhead"):  # fmt: skip
        assert name in by_name, name
    assert by_name["TimeToFirstToken"]["model"] == MODEL
    assert by_name["Errors"]["error_type"] == "UnsupportedParameterError"
    assert by_name["Errors"]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "snapllm"


def test_a_prompt_cache_hit_is_counted_with_its_cached_tokens(fake_lambda, capsys):
    cached = {**COMPLETION, "usage": {**COMPLETION["usage"], "prompt_tokens_details": {"cached_tokens": 7}}}
    fake_lambda.replies = [
        invoked(cached),
        invoked(
            {**COMPLETION, "usage": {**COMPLETION["usage"], "prompt_tokens_details": {"cached_tokens": 0}}}
        ),
    ]
    router = make_router(fake_lambda)
    call(router, "POST", "/v1/chat/completions", CHAT)
    call(router, "POST", "/v1/chat/completions", CHAT)
    hit, miss = [blob for blob in _emf(capsys.readouterr().out) if "PromptTokens" in blob]
    assert (hit["PromptCacheHits"], hit["PromptCacheMisses"], hit["CachedPromptTokens"]) == (
        [1.0],
        [0.0],
        [7.0],
    )
    assert (miss["PromptCacheHits"], miss["PromptCacheMisses"], miss["CachedPromptTokens"]) == (
        [0.0],
        [1.0],
        [0.0],
    )


def test_logs_are_json_with_correlation_id_and_no_prompt_by_default(fake_lambda):
    stream = io.StringIO()
    call(make_router(fake_lambda, logs=stream), "POST", "/v1/chat/completions", CHAT)
    logs = [json.loads(line) for line in stream.getvalue().splitlines()]
    completion = next(log for log in logs if log["message"] == "completion")
    assert completion["correlation_id"] and completion["model"] == MODEL and "cold_start" in completion
    assert all("Name a colour" not in json.dumps(log) for log in logs)


def test_request_keys_do_not_leak_into_the_next_requests_logs(fake_lambda):
    stream = io.StringIO()
    router = make_router(fake_lambda, logs=stream)
    call(router, "POST", "/v1/chat/completions", {**CHAT, "model": "no-such-model"})
    call(router, "POST", "/v1/chat/completions", b"{not json")
    logs = [json.loads(line) for line in stream.getvalue().splitlines()]
    rejected = [log for log in logs if log["message"] == "request rejected"]
    assert [log.get("model") for log in rejected] == ["no-such-model", None]


@pytest.mark.parametrize("field", ["model", "user"])
def test_a_rejected_surrogate_is_logged_like_any_rejection(fake_lambda, field):
    # A UTF-8 stream, as Lambda's stdout is: text that is not Unicode would fail to encode there.
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    status, _, body = call(make_router(fake_lambda, logs=stream), "POST", "/v1/chat/completions",
                           {**CHAT, field: "\ud800"})  # fmt: skip
    assert status == 400 and body["error"]["param"] == field
    logs = [json.loads(line) for line in raw.getvalue().decode().splitlines()]
    rejected = [log for log in logs if log["message"] == "request rejected"]
    assert len(rejected) == 1 and rejected[0]["param"] == field
    assert fake_lambda.requests == []


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/v1/chat/completions", 405, "POST"),
        ("DELETE", "/v1/models", 405, "GET"),
        ("POST", "/v1/chat/completions\n", 404, None),
        ("POST", "/v1/chat/completions\ud800", 404, None),
        ("GET", "/v1/chat", 404, None),
    ],
)
def test_unknown_paths_and_methods(fake_lambda, method, path, status, allow):
    code, headers, body = call(make_router(fake_lambda), method, path, CHAT if method == "POST" else None)
    assert code == status and body["error"]["code"] in {"unknown_url", "method_not_allowed"}
    assert headers.get("Allow") == allow


def test_openapi_documents_only_answers_the_api_gives(fake_lambda):
    _, _, document = call(make_router(fake_lambda), "GET", "/openapi.json")
    operations = [op for item in document["paths"].values() for op in item.values()]
    assert all("422" not in op["responses"] for op in operations)
    assert "HTTPValidationError" not in document["components"]["schemas"]
    posts = [op for item in document["paths"].values() for method, op in item.items() if method == "post"]
    assert posts and all({"413", "415"} <= set(op["responses"]) for op in posts)


def test_prompts_are_logged_only_when_enabled(fake_lambda):
    stream = io.StringIO()
    call(make_router(fake_lambda, logs=stream, log_prompts=True), "POST", "/v1/chat/completions", CHAT)
    assert "Name a colour" in stream.getvalue()


# --- OpenAPI, other routes ---------------------------------------------------------------------------------


def test_openapi_document_is_served(fake_lambda):
    status, _, document = call(make_router(fake_lambda), "GET", "/openapi.json")
    assert status == 200 and document["openapi"].startswith("3.")
    assert {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/health"} <= set(
        document["paths"]
    )
    responses = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"200", "400", "404", "413", "429", "502", "504"} <= set(responses)
    assert "ChatCompletionRequest" in json.dumps(
        document["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    )


def test_another_router_is_included_with_one_argument(fake_lambda):
    extra = APIGatewayHttpRouter()

    @extra.get("/v1/agent/ping")
    def ping() -> dict:
        return {"pong": True}

    router = make_router(fake_lambda, routers=[extra])
    assert call(router, "GET", "/v1/agent/ping")[:3:2] == (200, {"pong": True})
    assert call(router, "GET", "/v1/models")[0] == 200


def test_a_model_is_retrieved_by_its_id_as_openai_answers(fake_lambda):
    router = make_router(fake_lambda)
    status, _, card = call(router, "GET", f"/v1/models/{MODEL}")
    assert status == 200 and card == {**call(router, "GET", "/v1/models")[2]["data"][0]}
    assert card["object"] == "model" and card["id"] == MODEL and card["owned_by"] == "snapllm"
    status, _, body = call(router, "GET", "/v1/models/gpt-4o")
    assert status == 404 and body["error"]["code"] == "model_not_found" and body["error"]["param"] == "model"
    assert "'gpt-4o'" in body["error"]["message"] and MODEL in body["error"]["message"]
    assert call(router, "POST", f"/v1/models/{MODEL}", CHAT)[0] == 405
    assert fake_lambda.requests == []


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/v1/models", None, 200),
        ("GET", f"/v1/models/{MODEL}", None, 200),
        ("GET", "/v1/models/nope", None, 404),
        ("POST", "/v1/chat/completions", CHAT, 200),
        ("POST", "/v1/chat/completions", {**CHAT, "n": 2}, 400),
        ("POST", "/v1/chat/completions", b"{", 400),
        ("GET", "/v2/nothing", None, 404),
        ("GET", "/health", None, 200),
    ],
)
def test_every_answer_carries_the_request_id(fake_lambda, method, path, body, status):
    raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    headers = {"content-type": "application/json"} if raw else {}
    event = http_api_event(method, path, body=raw, headers=headers, request_id="JkE1LjXYIAMEbXQ=")
    result = make_router(fake_lambda).handler(
        event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256)
    )
    assert result["statusCode"] == status
    assert result["headers"]["x-request-id"] == "JkE1LjXYIAMEbXQ="


def test_a_request_id_that_is_not_a_plain_id_is_replaced(fake_lambda):
    event = http_api_event("GET", "/health", request_id="id\r\nset-cookie: a=b")
    result = make_router(fake_lambda).handler(
        event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256)
    )
    assert str(uuid.UUID(result["headers"]["x-request-id"])) == result["headers"]["x-request-id"]


def test_an_event_that_is_not_http_gets_the_invokes_request_id(fake_lambda):
    context = LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256)
    result = make_router(fake_lambda).handler([1, 2], context)
    assert result["statusCode"] == 400 and result["headers"]["x-request-id"] == context.aws_request_id


def test_unknown_paths_are_openai_404s(fake_lambda):
    status, _, body = call(make_router(fake_lambda), "GET", "/v2/nothing")
    assert status == 404 and body["error"]["code"] == "unknown_url"


@pytest.mark.parametrize(
    "event",
    [
        json.loads((EVENTS.parent / "inference" / "chat.json").read_text()),
        {},
        {"requestContext": "not an object", "rawPath": "/health"},
        [1, 2],
        "text",
    ],
    ids=["inference-event", "empty", "odd-request-context", "list", "string"],
)
def test_an_event_that_is_not_an_http_request_is_a_400(fake_lambda, event):
    router = make_router(fake_lambda)
    result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256))
    assert result["statusCode"] == 400
    assert "HTTP API" in json.loads(result["body"])["error"]["message"]
    assert fake_lambda.requests == [], "nothing was invoked"


# --- Settings -----------------------------------------------------------------------------------------------


def test_settings_read_the_routing_table_and_limits():
    env = {
        "SNAPLLM_ROUTES": json.dumps({MODEL: ALIAS}),
        "SNAPLLM_EXTRA_ROUTES": json.dumps({"gemma3-270m": ALIAS.replace("Inference", "Gemma")}),
        "SNAPLLM_MAX_BODY_BYTES": "1000",
        "POWERTOOLS_METRICS_NAMESPACE": "custom",
    }
    settings = RouterSettings.from_env(env)
    assert set(settings.routes) == {MODEL, "gemma3-270m"}
    assert settings.resolve_model(None) == MODEL and settings.resolve_model("nope") is None
    assert settings.max_body_bytes == 1000 and settings.metrics_namespace == "custom"


@pytest.mark.parametrize(
    "env",
    [
        {"SNAPLLM_ROUTES": "{not json"},
        {"SNAPLLM_ROUTES": '["a"]'},
        {"SNAPLLM_ROUTES": '{"a": "arn"}', "SNAPLLM_DEFAULT_MODEL": "b"},
        {"SNAPLLM_ROUTES": '{"a": "arn"}', "SNAPLLM_INVOKE_TIMEOUT_S": "31"},
    ],
)
def test_bad_settings_are_configuration_errors(env):
    with pytest.raises(ConfigurationError):
        RouterSettings.from_env(env)


# --- SigV4 for OpenAI clients ----------------------------------------------------------------------------


def test_openai_requests_are_sigv4_signed_for_iam_deployments():
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        # Stands in for API Gateway, which is not reachable here: captures what the client sends.
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": []})

    session = boto3.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="eu-west-1"
    )
    auth = SigV4(region="eu-west-1", service="execute-api", session=session)
    client = openai.OpenAI(
        base_url="https://abc123.execute-api.eu-west-1.amazonaws.com/v1",
        api_key="unused",
        http_client=httpx.Client(auth=auth, transport=httpx.MockTransport(answer)),
    )
    client.models.list()
    [request] = seen
    authorization = request.headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "x-amz-date" in request.headers and "Bearer" not in authorization


def test_the_invoke_carries_the_routers_deadline(fake_lambda):
    router = make_router(fake_lambda, invoke_timeout_s=5.0)
    before = time.time()
    status, _, _ = call(router, "POST", "/v1/chat/completions", CHAT)
    assert status == 200
    context = json.loads(base64.b64decode(fake_lambda.requests[-1].headers["x-amz-client-context"]))
    deadline_s = context["custom"][CALLER_DEADLINE_KEY] / 1000
    assert before + 5.0 - 1 <= deadline_s <= time.time() + 5.0


@pytest.mark.parametrize(
    "body", [[CHAT], "text", 5, None], ids=["array-holding-a-request", "string", "number", "null"]
)
def test_a_body_that_is_not_an_object_is_a_400_not_a_request(fake_lambda, body):
    raw = json.dumps(body).encode()
    status, _, error = call(make_router(fake_lambda), "POST", "/v1/chat/completions", raw)
    assert status == 400 and "must be a JSON object" in error["error"]["message"], error
    assert fake_lambda.requests == [], "nothing was invoked"


def test_embeddings_and_token_routes_invoke_the_model_with_a_routed_event(fake_lambda):
    router = make_router(fake_lambda)
    answer = {"object": "list", "data": [], "model": MODEL, "usage": {"prompt_tokens": 1, "total_tokens": 1}}
    fake_lambda.replies = [invoked(answer), invoked({"tokens": [1, 2]})]
    status, _, body = call(router, "POST", "/v1/embeddings", {"model": MODEL, "input": ["a", "b"]})
    assert status == 200 and body == answer
    status, _, body = call(router, "POST", "/tokenize", {"content": "hi"})  # no model: the default one
    assert status == 200 and body == {"tokens": [1, 2]}
    assert [r.json() for r in fake_lambda.requests] == [
        {"route": "/v1/embeddings", "body": {"model": MODEL, "input": ["a", "b"]}},
        {"route": "/tokenize", "body": {"content": "hi"}},
    ]


def test_a_count_the_completion_would_refuse_is_refused_before_invoking(fake_lambda):
    router = make_router(fake_lambda)
    status, _, body = call(router, "POST", "/v1/chat/completions/input_tokens", {**CHAT, "max_tokens": 65})
    assert status == 400 and body["error"]["param"] == "max_tokens"
    status, _, body = call(router, "POST", "/v1/embeddings", {"model": "gpt", "input": "a"})
    assert status == 404 and body["error"]["param"] == "model"
    assert fake_lambda.requests == []


# --- ApiAuth=KEY ------------------------------------------------------------------------------------------


def _with_verdict(router: RouterApp, verdict: dict | None, method: str = "POST", **headers) -> dict:
    event = http_api_event(method, "/v1/chat/completions", body=json.dumps(CHAT).encode(), headers=headers)
    if verdict is not None:
        event["requestContext"]["authorizer"] = {"lambda": verdict}
    return router.handler(event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256))


def test_with_key_auth_only_the_authorizers_valid_verdict_reaches_a_route(fake_lambda):
    router = make_router(fake_lambda, api_auth="KEY")
    assert _with_verdict(router, {"snapllm_api_key": "valid", "key_id": "0a1b2c3d4e5f"})["statusCode"] == 200
    for verdict in (None, {}, {"snapllm_api_key": "invalid", "message": "no API key: ..."}, {"x": "valid"}):
        refused = _with_verdict(router, verdict)
        assert refused["statusCode"] == 401 and refused["headers"]["WWW-Authenticate"] == "Bearer"
        assert json.loads(refused["body"]) == {
            "error": {
                # The authorizer's message is passed on only when it is one of its own.
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    assert len(fake_lambda.requests) == 1  # nothing refused was invoked


def test_a_cors_preflight_gets_204_without_a_key_and_other_options_do_not(fake_lambda):
    router = make_router(fake_lambda, api_auth="KEY")
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    answer = _with_verdict(router, None, "OPTIONS", **preflight)
    assert answer["statusCode"] == 204 and answer["body"] == ""
    assert _with_verdict(router, None, "OPTIONS")["statusCode"] == 401
    assert (
        make_router(fake_lambda).handler(  # without keys, a plain OPTIONS is still a 405
            http_api_event("OPTIONS", "/v1/chat/completions"),
            LocalContext.create("R", timeout_s=29, memory_mb=256),
        )["statusCode"]
        == 405
    )
