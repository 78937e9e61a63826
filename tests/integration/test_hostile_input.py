"""One table of hostile requests against every entry point a request can reach.

Entry points: the HTTP server (``snapllm local serve``: local gateway, router, streaming process, agent
routes, over real TCP), the router's Lambda handler with API Gateway events (routed to the inference
function, and routed to an always-on endpoint: llama-cpp-python's own server), the streaming function's ASGI
app under uvicorn (as Lambda Web Adapter reaches it), and the inference function's direct invoke (a
restored local environment, fed JSON as Lambda's runtime feeds it). Every hostile request must get a 4xx
in the OpenAI error shape (never a 5xx, never a traceback), and a good request must still succeed on the
same entry point afterwards.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from snapllm.api_keys import LOCAL_REALM, ApiKeyVerifier, local_store
from snapllm.authorizer import KeyAuthorizer
from snapllm.errors import ConfigurationError
from snapllm.inference.client import HttpInferenceClient
from snapllm.protocol.model_routes.model_routes import (
    CHAT_INPUT_TOKENS,
    DETOKENIZE,
    EMBEDDINGS,
    RERANK,
    RERANK_ALIAS,
    ROUTED_PATHS,
    TOKENIZE,
)
from snapllm.router.app import RouterApp
from snapllm.router.events import http_api_event
from snapllm.router.settings import RouterSettings
from snapllm.streaming.app import create_app
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.inference import LocalInferenceClient
from tests.support.hostile_schemas import HOSTILE
from tests.support.serve import (
    API_KEY,
    EMBEDDING_MODEL,
    KEYED_SERVER_GROUP,
    MODEL,
    RERANK_MODEL,
    SERVE_ENV,
)
from tests.support.stream_server import stream_server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(KEYED_SERVER_GROUP)]

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
COMPLETIONS = "/v1/completions"
JSON = {"content-type": "application/json"}
GOOD = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0.0}
GOOD_RESPONSE = {"input": "Say hi.", "max_output_tokens": 4, "temperature": 0.0}
GOOD_EMBEDDING = {"model": EMBEDDING_MODEL, "input": ["Say hi.", "Say bye."]}
GOOD_RERANK = {"model": RERANK_MODEL, "query": "Who says hi?", "documents": ["Say hi.", {"text": "Say bye."}]}
MAX_BODY_BYTES = int(SERVE_ENV["SNAPLLM_MAX_BODY_BYTES"])
CALLING = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
TOOL_ANSWER = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def chat_with(**fields: Any) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


def response_with(**fields: Any) -> bytes:
    return json.dumps({**GOOD_RESPONSE, **fields}).encode()


def completion_with(**fields: Any) -> bytes:
    return json.dumps({"prompt": "Say hi.", "max_tokens": 4, **fields}).encode()


def sent_back(arguments: str, stream: bool) -> bytes:
    """A chat that sends back an earlier call with these ``arguments``, and its answer."""
    call = {
        **CALLING,
        "tool_calls": [{**CALLING["tool_calls"][0], "function": {"name": "f", "arguments": arguments}}],
    }
    return chat_with(messages=[GOOD["messages"][0], call, TOOL_ANSWER], stream=stream)


def raw_response(extra: str) -> bytes:
    """A Responses body with ``extra`` (raw JSON text) spliced in as one more field."""
    return b'{"input": "Say hi.", "max_output_tokens": 4, ' + extra.encode() + b"}"


def embed_with(**fields: Any) -> bytes:
    return json.dumps({**GOOD_EMBEDDING, **fields}).encode()


def raw_embed(extra: str) -> bytes:
    """An embeddings body with ``extra`` (raw JSON text) spliced in as one more field."""
    return b'{"model": "' + EMBEDDING_MODEL.encode() + b'", "input": "hi", ' + extra.encode() + b"}"


def rerank_with(**fields: Any) -> bytes:
    return json.dumps({**GOOD_RERANK, **fields}).encode()


def raw_rerank(extra: str) -> bytes:
    """A rerank body with ``extra`` (raw JSON text) spliced in as one more field."""
    return b'{"query": "hi", "documents": ["a"], ' + extra.encode() + b"}"


def raw_tokens(number: str) -> bytes:
    """A detokenize body whose one id is ``number`` (raw JSON text)."""
    return b'{"tokens": [' + number.encode() + b"]}"


def raw_chat(extra: str) -> bytes:
    """A chat body with ``extra`` (raw JSON text, possibly not JSON at all) spliced in as one more field."""
    return b'{"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, ' + extra.encode() + b"}"


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes = b""
    status: int = 400
    method: str = "POST"
    path: str = CHAT
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))
    # Entry points that cannot receive this request at all: an Invoke payload has no path, method, headers
    # or content type, and Lambda's Invoke API refuses a payload that is not JSON before any code runs.
    skip: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return self.name


HTTP_ONLY = frozenset({"invoke"})
ALWAYS_ON = frozenset({"router-always-on"})
# Refused by the embedding model itself: the streaming app, which serves the chat model, answers 404.
EMBEDDING_MODEL_ONLY = frozenset({"stream"})
# Refused by the reranker itself: the streaming app serves the chat model, the served stack has no reranker.
RERANKER_ONLY = frozenset({"stream", "http"})
NOT_JSON = frozenset({"invoke"})
AGENT = frozenset(
    {"router", "router-always-on", "stream", "invoke"}
)  # the agent's routes: the HTTP server mounts them

CASES = [
    # Nesting, numbers and JSON that Python accepts but JSON does not.
    Case("nesting-10000", raw_chat(f'"metadata": {nested(10_000)}'), skip=NOT_JSON),
    Case("nesting-5000", raw_chat(f'"metadata": {nested(5_000)}')),
    Case("nesting-100-in-an-open-field", chat_with(stream_options={"a": json.loads(nested(100))})),
    Case("whole-body-nesting-10000", nested(10_000).encode(), skip=NOT_JSON),
    Case("huge-integer", raw_chat('"seed": ' + "9" * 5000), skip=NOT_JSON),
    Case("integer-past-the-range", chat_with(seed=2**70)),
    Case("float-overflow", raw_chat('"temperature": 1e999')),
    Case("nan", raw_chat('"temperature": NaN'), skip=NOT_JSON),
    Case("infinity", raw_chat('"top_p": Infinity'), skip=NOT_JSON),
    Case("minus-infinity", raw_chat('"presence_penalty": -Infinity'), skip=NOT_JSON),
    # Encodings.
    Case("invalid-utf8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', skip=NOT_JSON),
    Case("raw-nul-in-a-string", b'{"messages": [{"role": "user", "content": "a\x00b"}]}', skip=NOT_JSON),
    Case("nul-in-the-model-name", chat_with(model="smollm\u0000"), status=404),
    Case("utf8-bom", b"\xef\xbb\xbf" + chat_with(), skip=NOT_JSON),
    Case("surrogate-in-content", chat_with(messages=[{"role": "user", "content": "\ud800"}])),
    Case("surrogate-in-name", chat_with(messages=[{"role": "user", "content": "hi", "name": "\ud800"}])),
    Case("surrogate-in-user", chat_with(user="\udfff")),
    Case("surrogate-in-model", chat_with(model="\ud800")),
    Case("surrogate-in-a-key", chat_with(metadata={"\ud800": "x"})),
    # Wrong types: OpenAI answers 400; nothing is converted.
    Case("max-tokens-string", chat_with(max_tokens="10")),
    Case("max-tokens-true", chat_with(max_tokens=True)),
    Case("max-tokens-float", chat_with(max_tokens=4.5)),
    Case("temperature-string", chat_with(temperature="0.5")),
    Case("stream-string", chat_with(stream="true")),
    Case("messages-object", chat_with(messages={"role": "user", "content": "hi"})),
    Case("messages-string", chat_with(messages="hi")),
    Case("content-number", chat_with(messages=[{"role": "user", "content": 5}])),
    Case("unknown-role", chat_with(messages=[{"role": "bot", "content": "hi"}])),
    # Unknown fields are ignored, but what they hold passes the edge's checks.
    Case("unknown-field-nesting-100", chat_with(unknown=json.loads(nested(100)))),
    Case("unknown-field-surrogate-in-its-name", chat_with(**{"\ud800": 1})),
    Case("unknown-field-surrogate-in-its-value", chat_with(unknown="\udfff")),
    # The sampling fields of llama-server and vLLM, and logit_bias.
    Case("top-k-below-minus-one", chat_with(top_k=-2)),
    Case("top-k-past-a-c-int", chat_with(top_k=2**31)),
    Case("top-k-string", chat_with(top_k="40")),
    Case("min-p-past-one", chat_with(min_p=1.5)),
    Case("typical-p-negative", chat_with(typical_p=-0.1)),
    Case("repeat-penalty-zero", chat_with(repeat_penalty=0)),
    Case("repetition-penalty-past-two", chat_with(repetition_penalty=3)),
    Case("repeat-penalties-disagree", chat_with(repeat_penalty=1.1, repetition_penalty=1.2)),
    Case("repeat-last-n-past-a-c-int", chat_with(repeat_last_n=2**31)),
    Case("repeat-last-n-nan", raw_chat('"repeat_last_n": NaN'), skip=NOT_JSON),
    Case("logit-bias-301-tokens", chat_with(logit_bias={str(t): 1 for t in range(301)})),
    Case("logit-bias-word-key", chat_with(logit_bias={"hello": 1})),
    Case("logit-bias-negative-id", chat_with(logit_bias={"-5": 1})),
    Case("logit-bias-past-100", chat_with(logit_bias={"5": 1e6})),
    Case("logit-bias-list", chat_with(logit_bias=[[5, 1]])),
    # The router cannot know an always-on endpoint's vocabulary: that server answers for it.
    Case("logit-bias-outside-the-vocabulary", chat_with(logit_bias={"1000000000": 1}), skip=ALWAYS_ON),
    Case("refused-local-sampler", chat_with(mirostat=2)),
    # Token prompts.
    # An always-on endpoint (llama-cpp-python's server) answers these with its own 500: the router knows
    # neither its vocabulary nor its context window.
    Case(
        "token-prompt-outside-the-vocabulary",
        completion_with(prompt=[1, 10**12]),
        path=COMPLETIONS,
        skip=ALWAYS_ON,
    ),
    Case("token-prompt-negative", completion_with(prompt=[-1]), path=COMPLETIONS),
    Case("token-prompt-nested-three-deep", completion_with(prompt=[[[1]]]), path=COMPLETIONS),
    Case("token-prompt-batch-of-two", completion_with(prompt=[[1], [2]]), path=COMPLETIONS),
    Case("token-prompt-empty", completion_with(prompt=[]), path=COMPLETIONS),
    Case("token-prompt-mixed", completion_with(prompt=[1, "a"]), path=COMPLETIONS),
    Case("token-prompt-booleans", completion_with(prompt=[True]), path=COMPLETIONS),
    Case(
        "token-prompt-past-the-context",
        completion_with(prompt=[1] * 15_000),
        path=COMPLETIONS,
        skip=ALWAYS_ON,
    ),
    # An earlier call sent back with deep or huge arguments: refused before anything is rendered.
    *(
        Case(
            f"sent-back-arguments-nesting-{depth}{'-streamed' if stream else ''}",
            sent_back(arguments, stream),
        )
        for depth, arguments in ((65, nested(65)), (1_200, nested(1_200)), (10_000, nested(10_000)))
        for stream in (False, True)
    ),
    Case("sent-back-arguments-40000-characters", sent_back(json.dumps({"a": "x" * 40_000}), False)),
    *(
        Case(
            f"responses-sent-back-arguments-nesting-10000{'-streamed' if stream else ''}",
            response_with(
                stream=stream,
                input=[
                    {"role": "user", "content": "Say hi."},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": nested(10_000)},
                    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                ],
            ),
            path=RESPONSES,
        )
        for stream in (False, True)
    ),
    # A lone surrogate escaped twice: ASCII in the body, text no tokenizer reads once the arguments are
    # decoded (tests/integration/test_hostile_text.py tries every field; these go through every entry point).
    *(
        Case(f"sent-back-arguments-escaped-surrogate{suffix}", sent_back(json.dumps({"a": "\ud800"}), stream))
        for suffix, stream in (("", False), ("-streamed", True))
    ),
    Case(
        "count-sent-back-arguments-escaped-surrogate",
        sent_back(json.dumps({"a": "\udfff"}), False),
        path=CHAT_INPUT_TOKENS,
    ),
    Case(
        "responses-sent-back-arguments-escaped-surrogate",
        response_with(
            input=[
                {"role": "user", "content": "Say hi."},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": "\\ud800"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
        ),
        path=RESPONSES,
    ),
    Case("streamed-wrong-type", chat_with(stream=True, max_tokens="10")),
    Case("streamed-surrogate", chat_with(stream=True, user="\ud800")),
    # Structured output and tools: what cannot be served (a $ref to nothing) is refused.
    Case(
        "schema-with-a-ref-to-nothing",
        chat_with(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {"$ref": "#/$defs/nothing"}},
            }
        ),
    ),
    Case(
        "schema-not-an-object",
        chat_with(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": []}}),
    ),
    Case(
        "schema-recursive-ref",
        chat_with(
            response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"$ref": "#"}}}
        ),
    ),
    Case(
        "schema-dangling-ref",
        chat_with(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {"$ref": "#/$defs/x"}},
            }
        ),
    ),
    Case(
        "schema-bad-pattern",
        chat_with(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {"type": "string", "pattern": "(("}},
            }
        ),
    ),
    *(
        Case(
            f"schema-{name}",
            chat_with(
                response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
            ),
        )
        for name, (schema, refusal) in HOSTILE.items()
        if refusal is not None
    ),
    Case(
        "tool-schema-unsatisfiable",
        chat_with(
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {"type": "object", "required": ["x"], "additionalProperties": False},
                    },
                }
            ]
        ),
    ),
    Case("tool-without-function", chat_with(tools=[{"type": "function"}])),
    Case(
        "tool-choice-unknown-function",
        chat_with(
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": "g"}},
        ),
    ),
    Case(
        "image-part",
        chat_with(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
    ),
    Case("top-logprobs-21", chat_with(logprobs=True, top_logprobs=21)),
    Case("refused-field", chat_with(audio={"voice": "alloy", "format": "wav"})),
    # Not an object.
    Case("empty-body", b"", skip=NOT_JSON),
    Case("null-body", b"null"),
    Case("array-body", b"[]"),
    Case("string-body", b'"hi"'),
    Case("number-body", b"5"),
    # A JSON string holding a whole good request is a string, not a request (a direct invoke decoded it).
    Case("string-body-holding-a-request", json.dumps(json.dumps(GOOD)).encode()),
    Case("array-holding-a-request", json.dumps([GOOD]).encode()),
    Case("not-json", b"messages=hi", skip=NOT_JSON),
    # Content types: curl -d sends form encoding unless told otherwise.
    Case(
        "form-encoded-json",
        chat_with(),
        415,
        headers={"content-type": "application/x-www-form-urlencoded"},
        skip=HTTP_ONLY,
    ),
    Case("text-plain", chat_with(), 415, headers={"content-type": "text/plain"}, skip=HTTP_ONLY),
    Case(
        "multipart",
        chat_with(),
        415,
        headers={"content-type": "multipart/form-data; boundary=x"},
        skip=HTTP_ONLY,
    ),
    # Paths and methods.
    Case("trailing-newline", chat_with(), 404, path=f"{CHAT}%0A", skip=HTTP_ONLY),
    Case("trailing-nul", chat_with(), 404, path=f"{CHAT}%00", skip=HTTP_ONLY),
    Case("trailing-tab", chat_with(), 404, path=f"{CHAT}%09", skip=HTTP_ONLY),
    Case("trailing-slash", chat_with(), 404, path=f"{CHAT}/", skip=HTTP_ONLY),
    Case("double-slash", chat_with(), 404, path=f"/{CHAT}", skip=HTTP_ONLY),
    Case("dot-segments", chat_with(), 404, path="/v1/../v1/chat/completions", skip=HTTP_ONLY),
    Case("upper-case", chat_with(), 404, path=CHAT.upper(), skip=HTTP_ONLY),
    Case("long-path", b"", 404, method="GET", path="/v1/" + "a" * 6000, skip=HTTP_ONLY),
    Case("get-on-a-post-route", b"", 405, method="GET", skip=HTTP_ONLY),
    Case("delete-models", b"", 405, method="DELETE", path="/v1/models", skip=HTTP_ONLY),
    # Retrieving one model: an unknown id is OpenAI's 404 model_not_found; what no id can be is a 404 too.
    Case("retrieve-unknown-model", b"", 404, method="GET", path="/v1/models/gpt-4o", skip=HTTP_ONLY),
    Case("retrieve-model-newline", b"", 404, method="GET", path=f"/v1/models/{MODEL}%0A", skip=HTTP_ONLY),
    Case("retrieve-model-nul", b"", 404, method="GET", path=f"/v1/models/{MODEL}%00", skip=HTTP_ONLY),
    Case("retrieve-model-empty-id", b"", 404, method="GET", path="/v1/models/", skip=HTTP_ONLY),
    Case("retrieve-model-nested", b"", 404, method="GET", path=f"/v1/models/{MODEL}/x", skip=HTTP_ONLY),
    Case("retrieve-model-long-id", b"", 404, method="GET", path="/v1/models/" + "m" * 6000, skip=HTTP_ONLY),
    Case("retrieve-model-post", chat_with(), 405, path=f"/v1/models/{MODEL}", skip=HTTP_ONLY),
    # Sizes.
    Case("oversized-headers", chat_with(), 431, headers={**JSON, "x-pad": "a" * 12_000}, skip=HTTP_ONLY),
    Case(
        "oversized-body",
        chat_with(messages=[{"role": "user", "content": "a" * (MAX_BODY_BYTES + 1)}]),
        413,
        skip=HTTP_ONLY,
    ),
    # The Responses route: the same edge, its own fields, and what needs server state refused by name.
    Case("responses-nesting-5000", raw_response(f'"metadata": {nested(5_000)}'), path=RESPONSES),
    Case(
        "responses-nesting-10000",
        raw_response(f'"metadata": {nested(10_000)}'),
        path=RESPONSES,
        skip=NOT_JSON,
    ),
    Case(
        "responses-nested-content",
        response_with(input=[{"role": "user", "content": json.loads(nested(100))}]),
        path=RESPONSES,
    ),
    Case("responses-nan", raw_response('"temperature": NaN'), path=RESPONSES, skip=NOT_JSON),
    Case("responses-input-number", response_with(input=5), path=RESPONSES),
    Case("responses-input-null", response_with(input=None), path=RESPONSES),
    Case("responses-input-object", response_with(input={"role": "user", "content": "hi"}), path=RESPONSES),
    Case("responses-input-empty", response_with(input=[]), path=RESPONSES),
    Case("responses-unknown-item", response_with(input=[{"type": "bogus"}]), path=RESPONSES),
    Case(
        "responses-item-reference",
        response_with(input=[{"type": "item_reference", "id": "x"}]),
        path=RESPONSES,
    ),
    Case(
        "responses-image-part",
        response_with(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
        path=RESPONSES,
    ),
    Case(
        "responses-part-without-text",
        response_with(input=[{"role": "user", "content": [{}]}]),
        path=RESPONSES,
    ),
    Case(
        "responses-call-without-call-id",
        response_with(input=[{"type": "function_call", "name": "f", "arguments": "{}"}]),
        path=RESPONSES,
    ),
    Case("responses-surrogate-in-input", response_with(input="\ud800"), path=RESPONSES),
    Case("responses-surrogate-in-instructions", response_with(instructions="\udfff"), path=RESPONSES),
    Case("responses-max-output-tokens-string", response_with(max_output_tokens="4"), path=RESPONSES),
    Case(
        "responses-unknown-field-nesting-100", response_with(unknown=json.loads(nested(100))), path=RESPONSES
    ),
    Case("responses-top-k-below-minus-one", response_with(top_k=-2), path=RESPONSES),
    Case("responses-store-true", response_with(store=True), path=RESPONSES),
    Case("responses-previous-response-id", response_with(previous_response_id="resp_1"), path=RESPONSES),
    Case("responses-background", response_with(background=True), path=RESPONSES),
    Case("responses-built-in-tool", response_with(tools=[{"type": "web_search"}]), path=RESPONSES),
    Case(
        "responses-built-in-tool-choice", response_with(tool_choice={"type": "file_search"}), path=RESPONSES
    ),
    Case("responses-tool-without-name", response_with(tools=[{"type": "function"}]), path=RESPONSES),
    Case(
        "responses-schema-with-a-ref-to-nothing",
        response_with(
            text={"format": {"type": "json_schema", "name": "n", "schema": {"$ref": "#/$defs/nothing"}}}
        ),
        path=RESPONSES,
    ),
    Case("responses-format-unknown", response_with(text={"format": {"type": "xml"}}), path=RESPONSES),
    Case("responses-streamed-wrong-type", response_with(stream=True, max_output_tokens="4"), path=RESPONSES),
    Case("responses-with-messages", response_with(messages=[]), path=RESPONSES),
    Case("responses-array-body", b"[]", path=RESPONSES),
    Case(
        "responses-string-holding-a-request", json.dumps(json.dumps(GOOD_RESPONSE)).encode(), path=RESPONSES
    ),
    # Tool turns pair up by call id (OpenAI answers 400).
    Case("tool-message-without-a-call", chat_with(messages=[GOOD["messages"][0], TOOL_ANSWER])),
    Case(
        "tool-message-unknown-call-id",
        chat_with(messages=[GOOD["messages"][0], CALLING, {**TOOL_ANSWER, "tool_call_id": "call_unknown"}]),
    ),
    Case("tool-call-unanswered", chat_with(messages=[GOOD["messages"][0], CALLING, GOOD["messages"][0]])),
    Case(
        "responses-output-without-a-call",
        response_with(input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]),
        path=RESPONSES,
    ),
    Case(
        "responses-form-encoded",
        response_with(),
        415,
        path=RESPONSES,
        headers={"content-type": "text/plain"},
        skip=HTTP_ONLY,
    ),
    Case("responses-trailing-newline", response_with(), 404, path=f"{RESPONSES}%0A", skip=HTTP_ONLY),
    Case("responses-get", b"", 405, method="GET", path=RESPONSES, skip=HTTP_ONLY),
    # The agent's routes.
    Case(
        "agent-nesting",
        raw_chat(f'"x": {nested(10_000)}'),
        path="/v1/agent/runs",
        skip=AGENT,
        headers={**JSON, "idempotency-key": "hostile-1"},
    ),
    Case(
        "agent-wrong-type",
        json.dumps({"task": "t", "approval": {"required": "yes"}}).encode(),
        path="/v1/agent/runs",
        headers={**JSON, "idempotency-key": "hostile-2"},
        skip=AGENT,
    ),
    Case(
        "agent-surrogate",
        json.dumps({"task": "\ud800"}).encode(),
        path="/v1/agent/runs",
        headers={**JSON, "idempotency-key": "hostile-3"},
        skip=AGENT,
    ),
    Case(
        "agent-form-encoded",
        json.dumps({"task": "t"}).encode(),
        415,
        path="/v1/agent/runs",
        headers={"content-type": "application/x-www-form-urlencoded", "idempotency-key": "hostile-4"},
        skip=AGENT,
    ),
    Case(
        "agent-approval-string",
        json.dumps({"approved": "true"}).encode(),
        path="/v1/agent/runs/run-0000000000000000000000000000000000000000/approval",
        skip=AGENT,
    ),
    Case("agent-run-id-newline", b"", 404, method="GET", path="/v1/agent/runs/run-1%0A", skip=AGENT),
    Case("agent-get-on-start", b"", 405, method="GET", path="/v1/agent/runs", skip=AGENT),
    # The token routes (a direct invoke gets them as routed events).
    Case("tokenize-content-number", json.dumps({"content": 5}).encode(), path=TOKENIZE),
    Case("tokenize-no-content", json.dumps({"with_pieces": True}).encode(), path=TOKENIZE),
    Case("tokenize-flag-string", json.dumps({"content": "x", "add_special": "yes"}).encode(), path=TOKENIZE),
    Case("tokenize-surrogate", json.dumps({"content": "\ud800"}).encode(), path=TOKENIZE),
    Case(
        "tokenize-unknown-model", json.dumps({"content": "x", "model": "gpt-4o"}).encode(), 404, path=TOKENIZE
    ),
    # Refused by the model function itself (llama-cpp-python's server has no /tokenize to refuse them).
    Case(
        "tokenize-huge-content",
        json.dumps({"content": "a" * 40_000}).encode(),
        path=TOKENIZE,
        skip=frozenset({"router-always-on"}),
    ),
    Case(
        "detokenize-id-past-the-vocabulary",
        json.dumps({"tokens": [1, 10**9]}).encode(),
        path=DETOKENIZE,
        skip=frozenset({"router-always-on"}),
    ),
    Case(
        "detokenize-negative-id",
        json.dumps({"tokens": [-1]}).encode(),
        path=DETOKENIZE,
        skip=frozenset({"router-always-on"}),
    ),
    # More ids than a detokenize takes do not fit an HTTP body under the configured limit.
    Case(
        "detokenize-too-many-ids",
        json.dumps({"tokens": [0] * 40_000}).encode(),
        path=DETOKENIZE,
        skip=frozenset({"http", "router", "router-always-on", "stream"}),
    ),
    Case("detokenize-id-string", json.dumps({"tokens": ["1"]}).encode(), path=DETOKENIZE),
    Case("detokenize-id-float", json.dumps({"tokens": [1.5]}).encode(), path=DETOKENIZE),
    Case("detokenize-tokens-object", json.dumps({"tokens": {"0": 1}}).encode(), path=DETOKENIZE),
    Case("detokenize-huge-id", raw_tokens("9" * 5000), path=DETOKENIZE, skip=NOT_JSON),
    Case("detokenize-array-body", b"[1, 2]", path=DETOKENIZE),
    Case("detokenize-get", b"", 405, method="GET", path=DETOKENIZE, skip=HTTP_ONLY),
    Case("count-messages-string", chat_with(messages="hi"), path=CHAT_INPUT_TOKENS),
    Case("count-max-tokens-string", chat_with(max_tokens="4"), path=CHAT_INPUT_TOKENS),
    Case("count-max-tokens-over-the-limit", chat_with(max_tokens=10_000), path=CHAT_INPUT_TOKENS),
    # Embeddings, sent to the embedding model (the streaming app serves the chat model only: it cannot take
    # what only the embedding model refuses).
    Case("embeddings-input-number", embed_with(input=5), path=EMBEDDINGS),
    Case("embeddings-input-null", embed_with(input=None), path=EMBEDDINGS),
    Case("embeddings-input-object", embed_with(input={"text": "hi"}), path=EMBEDDINGS),
    Case("embeddings-text-and-tokens-mixed", embed_with(input=["a", [1, 2]]), path=EMBEDDINGS),
    Case("embeddings-nested-token-arrays", embed_with(input=[[[1]]]), path=EMBEDDINGS),
    Case("embeddings-float-token", embed_with(input=[1.5]), path=EMBEDDINGS),
    Case("embeddings-format-unknown", embed_with(encoding_format="int8"), path=EMBEDDINGS),
    Case("embeddings-dimensions-string", embed_with(dimensions="8"), path=EMBEDDINGS),
    Case("embeddings-dimensions-zero", embed_with(dimensions=0), path=EMBEDDINGS),
    Case("embeddings-unknown-field", embed_with(inputs=["a"]), path=EMBEDDINGS),
    Case("embeddings-surrogate", embed_with(input=["\ud800"]), path=EMBEDDINGS),
    Case("embeddings-huge-number", raw_embed('"dimensions": ' + "9" * 5000), path=EMBEDDINGS, skip=NOT_JSON),
    Case("embeddings-array-body", json.dumps([GOOD_EMBEDDING]).encode(), path=EMBEDDINGS),
    Case("embeddings-get", b"", 405, method="GET", path=EMBEDDINGS, skip=HTTP_ONLY),
    Case("embeddings-empty-list", embed_with(input=[]), path=EMBEDDINGS, skip=EMBEDDING_MODEL_ONLY),
    Case("embeddings-empty-string", embed_with(input=""), path=EMBEDDINGS, skip=EMBEDDING_MODEL_ONLY),
    Case(
        "embeddings-empty-token-array",
        embed_with(input=[[1], []]),
        path=EMBEDDINGS,
        skip=EMBEDDING_MODEL_ONLY,
    ),
    Case(
        "embeddings-too-many-inputs", embed_with(input=["a"] * 65), path=EMBEDDINGS, skip=EMBEDDING_MODEL_ONLY
    ),
    Case(
        "embeddings-too-many-tokens",
        embed_with(input=["word " * 60] * 40),
        path=EMBEDDINGS,
        skip=EMBEDDING_MODEL_ONLY,
    ),
    Case("embeddings-huge-input", embed_with(input="a" * 40_000), path=EMBEDDINGS, skip=EMBEDDING_MODEL_ONLY),
    Case(
        "embeddings-id-past-the-vocabulary",
        embed_with(input=[[1, 10**9]]),
        path=EMBEDDINGS,
        skip=EMBEDDING_MODEL_ONLY,
    ),
    Case("embeddings-negative-id", embed_with(input=[-1]), path=EMBEDDINGS, skip=EMBEDDING_MODEL_ONLY),
    Case(
        "embeddings-dimensions-refused", embed_with(dimensions=8), path=EMBEDDINGS, skip=EMBEDDING_MODEL_ONLY
    ),
    # Rerank: what any model refuses before it is a question of being a reranker (the body's shape), then
    # what only the reranker can refuse (its limits and its prompt).
    Case("rerank-query-missing", json.dumps({"documents": ["a"]}).encode(), path=RERANK),
    Case("rerank-query-number", rerank_with(query=5), path=RERANK),
    Case("rerank-query-list", rerank_with(query=["a"]), path=RERANK),
    Case("rerank-documents-string", rerank_with(documents="a text"), path=RERANK),
    Case("rerank-documents-null", rerank_with(documents=None), path=RERANK),
    Case("rerank-documents-numbers", rerank_with(documents=[1, 2]), path=RERANK),
    Case("rerank-document-without-text", rerank_with(documents=[{"content": "a"}]), path=RERANK),
    Case("rerank-document-extra-field", rerank_with(documents=[{"text": "a", "x": 1}]), path=RERANK),
    Case("rerank-nested-documents", rerank_with(documents=[["a"]]), path=RERANK),
    Case("rerank-top-n-zero", rerank_with(top_n=0), path=RERANK),
    Case("rerank-top-n-negative", rerank_with(top_n=-1), path=RERANK),
    Case("rerank-top-n-string", rerank_with(top_n="2"), path=RERANK),
    Case("rerank-top-n-float", rerank_with(top_n=1.5), path=RERANK),
    Case("rerank-return-documents-string", rerank_with(return_documents="yes"), path=RERANK),
    Case("rerank-unknown-field", rerank_with(texts=["a"]), path=RERANK),
    Case("rerank-surrogate", rerank_with(query="\ud800"), path=RERANK),
    Case("rerank-huge-number", raw_rerank('"top_n": ' + "9" * 5000), path=RERANK, skip=NOT_JSON),
    Case("rerank-array-body", json.dumps([GOOD_RERANK]).encode(), path=RERANK),
    Case("rerank-get", b"", 405, method="GET", path=RERANK, skip=HTTP_ONLY),
    Case("rerank-alias-query-number", rerank_with(query=5), path=RERANK_ALIAS),
    Case("rerank-alias-get", b"", 405, method="GET", path=RERANK_ALIAS, skip=HTTP_ONLY),
    Case("rerank-empty-documents", rerank_with(documents=[]), path=RERANK, skip=RERANKER_ONLY),
    Case("rerank-empty-query", rerank_with(query=""), path=RERANK, skip=RERANKER_ONLY),
    Case(
        "rerank-empty-document", rerank_with(documents=["a", {"text": ""}]), path=RERANK, skip=RERANKER_ONLY
    ),
    Case("rerank-too-many-documents", rerank_with(documents=["a"] * 65), path=RERANK, skip=RERANKER_ONLY),
    Case(
        "rerank-pair-past-the-context",
        rerank_with(documents=["x " * 400]),
        path=RERANK,
        skip=RERANKER_ONLY,
    ),
    Case(
        "rerank-too-many-tokens",
        rerank_with(documents=["word " * 100] * 30),
        path=RERANK,
        skip=RERANKER_ONLY,
    ),
    Case("rerank-huge-query", rerank_with(query="a" * 40_000), path=RERANK, skip=RERANKER_ONLY),
    Case("rerank-control-token", rerank_with(documents=["a<|im_end|>b"]), path=RERANK, skip=RERANKER_ONLY),
    Case("rerank-alias-empty-documents", rerank_with(documents=[]), path=RERANK_ALIAS, skip=RERANKER_ONLY),
    Case(
        "count-prompt-past-the-context",
        chat_with(messages=[{"role": "user", "content": "word " * 3000}]),
        path=CHAT_INPUT_TOKENS,
        skip=frozenset({"router-always-on"}),
    ),
]

Answer = tuple[int, dict[str, str], bytes]
EntryPoint = Callable[[Case], Answer]


# --- Entry points ------------------------------------------------------------------------------------------


def _http(url: str, *, key: str | None = None) -> EntryPoint:
    """The table over HTTP to ``url``, each request sent with ``key`` (when given) as a bearer token."""
    host, port = url.removeprefix("http://").split(":")
    authorization = {"authorization": f"Bearer {key}"} if key else {}

    def send(case: Case) -> Answer:
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            # skip_accept_encoding etc. keep the request exactly as the table says; the path is sent as is.
            connection.putrequest(case.method, case.path, skip_accept_encoding=True)
            headers = {**authorization, **case.headers, "content-length": str(len(case.body))}
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders(case.body or None)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    return send


@pytest.fixture(scope="module")
def inference_overrides() -> dict[str, str]:
    return {"SNAPLLM_MAX_TOKENS": "16"}


def _router_entry(environment: Any, embedding: Any, reranker: Any, endpoint: str | None = None) -> EntryPoint:
    settings = RouterSettings.from_env(
        {
            "SNAPLLM_ROUTES": json.dumps(
                {
                    MODEL: endpoint or "local:InferenceFunction",
                    EMBEDDING_MODEL: "local:embedding",
                    RERANK_MODEL: "local:reranker",
                }
            ),
            "SNAPLLM_MAX_TOKENS": "16",
            "SNAPLLM_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        }
    )
    client = HttpInferenceClient(endpoint) if endpoint else LocalInferenceClient(environment)
    others = {EMBEDDING_MODEL: LocalInferenceClient(embedding), RERANK_MODEL: LocalInferenceClient(reranker)}
    router = RouterApp(settings, {MODEL: client, **others})

    def send(case: Case) -> Answer:
        # The path arrives percent-decoded in the event, as API Gateway decodes it.
        path = case.path.replace("%0A", "\n").replace("%00", "\x00").replace("%09", "\t")
        event = http_api_event(case.method, path, body=case.body, headers=case.headers)
        result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=30, memory_mb=256))
        return (
            result["statusCode"],
            {k.lower(): v for k, v in result["headers"].items()},
            result["body"].encode(),
        )

    return send


def _invoke_entry(environment: Any, embedding: Any, reranker: Any) -> EntryPoint:
    def send(case: Case) -> Answer:
        # The payload goes to the environment as JSON text, which it decodes as Lambda's runtime does; a
        # route other than the completions' gets its body as a routed event.
        payload = case.body
        if case.path in ROUTED_PATHS:
            payload = b'{"route": ' + json.dumps(case.path).encode() + b', "body": ' + payload + b"}"
        target = {EMBEDDINGS: embedding, RERANK: reranker, RERANK_ALIAS: reranker}.get(case.path, environment)
        result = target.invoke_json(payload)
        assert result.error is None, result.error  # an unhandled exception: Lambda would report it as such
        response = dict(result.response)
        return response.pop("statusCode", 200), {}, json.dumps(response).encode()

    return send


@pytest.fixture(scope="module")
def entry_points(
    runtime, environment, embedding_environment, rerank_environment, keyed_server, always_on_endpoint
) -> Iterator[dict[str, EntryPoint]]:
    with stream_server(runtime, max_body_bytes=MAX_BODY_BYTES) as stream_url:
        yield {
            # The server with a key, as a deployment's API is: each request carries it (the key's own faults
            # are the table below).
            "http": _http(keyed_server.url, key=API_KEY),
            "router": _router_entry(environment, embedding_environment, rerank_environment),
            "router-always-on": _router_entry(
                environment, embedding_environment, rerank_environment, always_on_endpoint
            ),
            "stream": _http(stream_url),
            "invoke": _invoke_entry(environment, embedding_environment, rerank_environment),
        }


# --- The table -------------------------------------------------------------------------------------------


ENTRY_POINTS = ["http", "router", "router-always-on", "stream", "invoke"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_hostile_request_gets_a_structured_4xx(entry_points, entry, case):
    if entry in case.skip:
        pytest.skip(f"{entry} cannot receive this request")
    status, headers, body = entry_points[entry](case)

    assert status == case.status, body[:300]
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"] and 'File "' not in error["message"]
    if status == 405:
        assert headers.get("allow"), headers
    if entry != "invoke":  # every HTTP answer names its request, errors too (the SDK's request_id)
        assert headers.get("x-request-id"), headers
        assert headers.get("content-type", "").startswith("application/json"), headers


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_good_request_succeeds_after_the_table(entry_points, entry):
    good = Case("good", json.dumps(GOOD).encode(), 200)
    status, _headers, body = entry_points[entry](good)
    assert status == 200, body[:300]
    answer = json.loads(body)
    assert answer["choices"][0]["message"]["content"].strip()
    assert answer["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e != "router-always-on"])
def test_a_good_response_succeeds_after_the_table(entry_points, entry):
    # An always-on target gets a Responses request on its own /v1/responses, which llama-cpp-python's server
    # does not serve: that entry point is checked for refusals only.
    good = Case("good-response", json.dumps(GOOD_RESPONSE).encode(), 200, path=RESPONSES)
    status, _headers, body = entry_points[entry](good)
    assert status == 200, body[:300]
    answer = json.loads(body)
    assert answer["object"] == "response" and answer["output"][0]["content"][0]["text"].strip()
    assert answer["usage"]["output_tokens"] >= 1


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e != "stream"])
def test_good_embeddings_succeed_after_the_table(entry_points, entry):
    good = Case("good-embeddings", json.dumps(GOOD_EMBEDDING).encode(), 200, path=EMBEDDINGS)
    status, _headers, body = entry_points[entry](good)
    assert status == 200, body[:300]
    answer = json.loads(body)
    assert [len(item["embedding"]) for item in answer["data"]] == [576, 576]


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e not in RERANKER_ONLY])
@pytest.mark.parametrize("path", [RERANK, RERANK_ALIAS])
def test_a_good_rerank_succeeds_after_the_table(entry_points, entry, path):
    good = Case("good-rerank", json.dumps({**GOOD_RERANK, "top_n": 1}).encode(), 200, path=path)
    status, _headers, body = entry_points[entry](good)
    assert status == 200, body[:300]
    answer = json.loads(body)
    assert answer["model"] == RERANK_MODEL and len(answer["results"]) == 1
    assert answer["results"][0]["index"] in (0, 1)


def test_a_client_that_leaves_mid_upload_leaves_no_traceback(keyed_server):
    server, log = keyed_server, keyed_server.log
    host, port = server.url.removeprefix("http://").split(":")
    for path in (CHAT, "/v1/agent/runs"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\n"
                "content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
                '{"messages": ['.encode()
            )
    # The server still serves, and has had the time to log whatever the two left behind.
    assert httpx.get(f"{server.url}/health", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
    text = log.read_text(errors="replace")
    assert "snapllm-router" in text and "Traceback" not in text  # the server's logs, and no traceback


def test_an_event_too_deep_to_decode_is_the_runtimes_unmarshal_error(environment):
    # Lambda's runtime decodes the event before the handler runs; past the decoder's limit that is the
    # runtime's own error, and the environment keeps serving.
    result = environment.invoke_json(nested(100_000))
    assert result.response is None and result.error["errorType"] == "Runtime.UnmarshalError"
    assert result.error["stackTrace"] == []
    assert environment.invoke(GOOD).response["choices"][0]["message"]["content"].strip()


# --- Headers with ApiAuth=KEY -----------------------------------------------------------------------------

KEY = API_KEY
# A key of this project's form that another deployment (another realm, another salt) could have made.
ANOTHER_STACKS_KEY = "sk-snapllm-0a1b2c3d4e5f-" + "Q" * 43
NO_HEADER = "no-authorization"


@dataclass(frozen=True)
class KeyCase:
    """A request whose only fault (or none, with 200) is its Authorization header(s): ``authorization`` is
    each value sent, as raw bytes (a header is not always ASCII)."""

    name: str
    authorization: tuple[bytes, ...]
    status: int = 401

    def __str__(self) -> str:
        return self.name


KEY_CASES = [
    KeyCase(NO_HEADER, ()),
    KeyCase("bearer-with-no-key", (b"Bearer",)),
    KeyCase("key-with-no-scheme", (KEY.encode(),)),
    KeyCase("basic-scheme", (b"Basic dXNlcjpwYXNz",)),
    KeyCase("lowercase-bearer-wrong-key", (b"bearer sk-wrong",)),
    KeyCase("wrong-case-key", (f"Bearer {KEY.upper()}".encode(),)),
    KeyCase("key-with-a-trailing-comma", (f"Bearer {KEY},".encode(),)),
    KeyCase("two-keys-in-one-header", (f"Bearer {KEY} {KEY}".encode(),)),
    KeyCase("repeated-header", (f"Bearer {KEY}".encode(), f"Bearer {KEY}".encode())),
    KeyCase("non-ascii-key", (("Bearer ключ-" + KEY).encode(),)),
    KeyCase("latin1-key", (b"Bearer \xe9" + KEY.encode(),)),
    KeyCase("another-stacks-key", (f"Bearer {ANOTHER_STACKS_KEY}".encode(),)),
    KeyCase("long-authorization", (b"Bearer " + b"k" * 600,)),
    KeyCase("huge-authorization", (b"Bearer " + b"k" * 12_000,), status=431),
    # The scheme is case-insensitive (RFC 7235): the right key with a lowercase scheme gets in.
    KeyCase("lowercase-bearer-right-key", (f"bearer {KEY}".encode(),), status=200),
]


def _keyed_http(url: str, *, stream: bool) -> Callable[[KeyCase], Answer]:
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({**GOOD, "stream": stream}).encode()

    def send(case: KeyCase) -> Answer:
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            connection.putrequest("POST", CHAT, skip_accept_encoding=True)
            connection.putheader("content-type", "application/json")
            connection.putheader("content-length", str(len(body)))
            for value in case.authorization:
                connection.putheader("authorization", value)
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    return send


def _keyed_router(environment: Any, keys: Any) -> Callable[[KeyCase], Answer]:
    """The authorizer and the router as API Gateway chains them: no header, API Gateway's own 401; else the
    authorizer's verdict in the router's event."""
    settings = RouterSettings.from_env(
        {"SNAPLLM_ROUTES": json.dumps({MODEL: "local:InferenceFunction"}), "SNAPLLM_API_AUTH": "KEY"}
    )
    router = RouterApp(settings, {MODEL: LocalInferenceClient(environment)})
    authorizer = KeyAuthorizer(keys)

    def send(case: KeyCase) -> Answer:
        # API Gateway hands on header values as text, repeated ones joined by commas.
        values = [value.decode("latin-1") for value in case.authorization]
        headers = [*JSON.items(), *(("authorization", value) for value in values)]
        event = http_api_event("POST", CHAT, body=json.dumps(GOOD).encode(), headers=headers)
        if not values:
            return 401, {}, b'{"message":"Unauthorized"}'
        verdict = authorizer.handle({"headers": event["headers"]})
        event["requestContext"]["authorizer"] = {"lambda": verdict["context"]}
        result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=30, memory_mb=256))
        return (
            result["statusCode"],
            {k.lower(): v for k, v in result["headers"].items()},
            result["body"].encode(),
        )

    return send


@pytest.fixture(scope="module")
def key_entry_points(runtime, environment, keyed_server) -> Iterator[dict[str, Callable[[KeyCase], Answer]]]:
    keys = ApiKeyVerifier(local_store([KEY]), realm=LOCAL_REALM)
    keyed = keyed_server
    with stream_server(runtime, max_body_bytes=MAX_BODY_BYTES, api_keys=keys) as stream_url:
        yield {
            "http": _keyed_http(keyed.url, stream=False),
            "http-stream": _keyed_http(keyed.url, stream=True),
            "router": _keyed_router(environment, keys),
            "stream": _keyed_http(stream_url, stream=True),
        }


@pytest.mark.parametrize("entry", ["http", "http-stream", "router", "stream"])
@pytest.mark.parametrize("case", KEY_CASES, ids=str)
def test_a_hostile_authorization_header_gets_a_401_before_any_work(key_entry_points, entry, case):
    status, headers, body = key_entry_points[entry](case)
    assert status == case.status, body[:300]
    if status == 200:
        return
    if case.name == NO_HEADER and entry in ("http", "router"):
        # The HTTP API: API Gateway itself refuses a request without the authorizer's identity source.
        assert json.loads(body) == {"message": "Unauthorized"}
        return
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["code"] == ("invalid_api_key" if status == 401 else "request_header_fields_too_large")
    assert KEY not in error["message"]  # a refusal never repeats what was sent
    if status == 401:
        assert headers.get("www-authenticate") == "Bearer"


@pytest.mark.parametrize("text", ["", "# keys\n\n", "\n  \n"], ids=["empty", "comments", "blank-lines"])
def test_a_keys_file_with_no_key_stops_the_streaming_app_and_the_authorizer(
    runtime, tmp_path, monkeypatch, text
):
    # Keys asked for and none found fails closed: the function does not start, rather than check nothing.
    # (`snapllm local serve --api-keys-file` with such a file: the command-line table.)
    path = tmp_path / "api-keys.jsonl"
    path.write_text(text)
    monkeypatch.setenv("SNAPLLM_API_KEYS_FILE", str(path))
    with pytest.raises(ConfigurationError, match=str(path)):
        create_app(runtime)
    with pytest.raises(ConfigurationError, match=str(path)):
        KeyAuthorizer.from_env()


def test_the_streaming_app_answers_a_cors_preflight_without_a_key_and_nothing_else(runtime):
    keys = ApiKeyVerifier(local_store([KEY]), realm=LOCAL_REALM)
    with stream_server(runtime, max_body_bytes=MAX_BODY_BYTES, api_keys=keys) as url:
        send = _http(url)
        preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
        status, _headers, body = send(Case("preflight", b"", 204, method="OPTIONS", headers=preflight))
        assert status == 204 and body == b""
        # An OPTIONS that is no preflight, and LWA's readiness check coming through an invoke, need the key.
        assert send(Case("options", b"", 401, method="OPTIONS", headers={}))[0] == 401
        invoked = {"x-amzn-request-context": "{}"}
        assert send(Case("health", b"", 401, method="GET", path="/health", headers=invoked))[0] == 401
        assert send(Case("health", b"", 200, method="GET", path="/health", headers={}))[0] == 200
