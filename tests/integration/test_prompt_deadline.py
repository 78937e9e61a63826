"""A request's work stops when nobody waits for it any more, its prompt's evaluation included.

- A client that closes its connection while its prompt is evaluated frees the model within about one of
  the prompt's batches, streamed or not: the streaming app under uvicorn (real TCP, as Lambda Web Adapter
  reaches it), on the real model. Without that the rest of the prompt (and, not streamed, the answer) ran
  on, and the next request waited behind it.
- A prompt, or a rerank's documents, that would run past the deadline stop before the batch that would
  pass it, with a 504 ``deadline_exceeded`` that says what to send instead: the router as API Gateway
  reaches it, over the restored InferenceFunction, its deadline made small through its setting.

The prompt is evaluated in batches of 128 tokens here, so a prompt of about 1,000 tokens takes eight.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest

from snapllm.engine.types import Deadline
from snapllm.errors import DeadlineExceededError
from snapllm.protocol.model_routes.model_routes import RERANK
from snapllm.protocol.responses.responses_api import inference_request
from snapllm.router.app import RouterApp
from snapllm.router.events import http_api_event
from snapllm.router.settings import RouterSettings
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.inference import LocalInferenceClient
from tests.support.serve import MODEL, RERANK_MODEL
from tests.support.stream_server import stream_server

pytestmark = pytest.mark.slow

N_BATCH = 128
SENTENCE = "The quick brown fox jumps over the lazy dog. "
# About 1,000 tokens once the chat template is around it: eight batches of 128.
LONG_TEXT = SENTENCE * 95
# A seed evaluates the whole prompt afresh every time (nothing is reused from the cache).
LONG_CHAT = {"messages": [{"role": "user", "content": LONG_TEXT}], "max_tokens": 8, "seed": 1}
SHORT_CHAT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "stream": True}
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def inference_overrides() -> dict[str, str]:
    return {"SNAPLLM_N_BATCH": str(N_BATCH), "SNAPLLM_N_CTX": "2048"}


@pytest.fixture(scope="module")
def serve_overrides() -> dict[str, str]:
    # The local stack's functions evaluate prompts in batches of 128 too, and take the long prompt.
    return {
        "SNAPLLM_N_BATCH": str(N_BATCH),
        "SNAPLLM_N_CTX": "2048",
        "SNAPLLM_MAX_PROMPT_CHARS": "32000",
    }


@pytest.fixture(scope="module")
def stream_url(runtime):
    with stream_server(runtime, max_body_bytes=65536) as url:
        yield url


def _post(url: str, body: dict[str, Any]) -> socket.socket:
    """Send ``body`` to the chat route on a connection of its own, without reading the answer."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=60)
    head = f"POST {CHAT} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
    sock.sendall(f"{head}content-length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def _batch_ends(engine: Any, count: int) -> list[float]:
    """When each of the first ``count`` batches of a prompt evaluated into an empty cache ended."""
    ends: list[float] = []
    evaluated = 0
    started = time.monotonic()
    while len(ends) < count:
        assert time.monotonic() - started < 180, "the prompt's evaluation did not start"
        now = len(engine.cached_tokens)
        if now > evaluated:
            ends.append(time.monotonic())
            evaluated = now
        time.sleep(0.002)
    return ends


def _first_token_s(url: str, since: float, body: dict[str, Any] = SHORT_CHAT) -> float:
    """Seconds from ``since`` until the first token of a streamed chat (by default a short one) arrives."""
    with httpx.Client(timeout=180) as client, client.stream("POST", url + CHAT, json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line.removeprefix("data: "))["choices"][0]["delta"]
            if delta.get("content"):
                return time.monotonic() - since
    raise AssertionError("the chat streamed no token")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_a_client_that_leaves_during_its_prompt_frees_the_model_within_a_batch(runtime, stream_url, stream):
    engine, serving = runtime.engine, runtime.serving
    body = {**LONG_CHAT, "stream": stream}
    prompt = len(serving.prepare(inference_request(serving.parse(body))).engine_request.tokens)
    assert prompt >= 6 * N_BATCH, prompt
    ttft = _first_token_s(stream_url, time.monotonic())  # the short chat alone, warm
    engine.prime([])  # an empty cache: the long prompt's batches are then what it holds
    sock = _post(stream_url, body)
    try:
        ends = _batch_ends(engine, 2)
        batch_s = ends[1] - ends[0]
    finally:
        sock.close()  # two batches of at least six evaluated: the client leaves
    closed = time.monotonic()
    while engine._lock.locked():
        assert time.monotonic() - closed < 180, "the prompt's evaluation never stopped"
        time.sleep(0.002)
    freed_s = time.monotonic() - closed
    first_token_s = _first_token_s(stream_url, closed)
    left = len(engine.cached_tokens)
    print(
        f"\nprompt of {prompt} tokens, {'streamed' if stream else 'not streamed'}: "
        f"a batch took {batch_s:.2f} s; "
        f"the model was free {freed_s:.2f} s after the client left, the next request's first token came "
        f"{first_token_s:.2f} s after (its time to first token alone: {ttft:.2f} s)"
    )
    # The batch under way when the client left finishes; the rest of the prompt is never evaluated.
    assert freed_s < 2.5 * batch_s + 0.3, (freed_s, batch_s)
    assert first_token_s < 2.5 * batch_s + 2 * ttft + 0.5, (first_token_s, batch_s, ttft)
    assert left < prompt


def test_local_serve_passes_a_client_leaving_on_to_the_streaming_function(server):
    """``snapllm local serve`` forwards a stream to the streaming function: a client that leaves it closes
    that connection too, and the function stops as above."""
    long_chat = {**LONG_CHAT, "stream": True}
    whole_s = _first_token_s(server.url, time.monotonic(), long_chat)
    sock = _post(server.url, long_chat)
    time.sleep(whole_s / 8)  # about one of its eight batches
    sock.close()
    closed = time.monotonic()
    first_token_s = _first_token_s(server.url, closed)
    print(
        f"\nthrough local serve: the long prompt's first token after {whole_s:.2f} s; with its client gone "
        f"after {whole_s / 8:.2f} s, the next request's first token came {first_token_s:.2f} s later"
    )
    # The rest of the long prompt would have taken seven eighths of its time.
    assert first_token_s < whole_s / 2, (first_token_s, whole_s)


def test_a_prompt_stops_before_a_deadline_its_next_batch_would_pass(runtime):
    serving = runtime.serving
    request = inference_request(serving.parse(LONG_CHAT))
    started = time.monotonic()
    serving.generate(request)
    whole_s = time.monotonic() - started
    limit_s = whole_s / 5  # one of its eight batches fits, and the next would pass the deadline
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError) as caught:
        serving.generate(request, deadline=Deadline.after(limit_s))
    elapsed = time.monotonic() - started
    print(f"\nwhole prompt {whole_s:.2f} s; a deadline of {limit_s:.2f} s stopped it after {elapsed:.2f} s")
    # At the pace of the batch before it, the batch that would pass the deadline is not started; a batch
    # slower than the one before it (a busy machine) may still end a little past it.
    assert elapsed < limit_s + whole_s / 8, (elapsed, limit_s)
    error = caught.value
    assert (error.status_code, error.code, error.error_type) == (504, "deadline_exceeded", "timeout_error")
    assert "send a shorter prompt" in error.message
    assert error.headers == {"x-should-retry": "false"}


def _router(clients: dict[str, Any], invoke_timeout_s: float) -> RouterApp:
    settings = RouterSettings.from_env(
        {
            "SNAPLLM_ROUTES": json.dumps({name: f"local:{name}" for name in clients}),
            "SNAPLLM_INVOKE_TIMEOUT_S": str(invoke_timeout_s),
        }
    )
    return RouterApp(settings, clients)


def _through_router(router: RouterApp, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    event = http_api_event(
        "POST", path, body=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    result = router.handler(event, LocalContext.create("RouterFunction", timeout_s=30, memory_mb=256))
    return result["statusCode"], result["headers"], json.loads(result["body"])


def test_the_router_answers_a_prompt_its_deadline_cuts_with_a_504_before_the_deadline(environment):
    client = LocalInferenceClient(environment)
    started = time.monotonic()
    whole = client.invoke(LONG_CHAT)  # the whole prompt, with no deadline to meet
    whole_s = time.monotonic() - started
    assert whole["choices"][0]["finish_reason"] in ("stop", "length")
    # The function keeps SNAPLLM_DEADLINE_MARGIN_MS (1.5 s) back: it has about a quarter of the prompt's time
    # (two of its eight batches).
    timeout_s = min(1.5 + whole_s / 4, 29.0)
    router = _router({MODEL: client}, timeout_s)
    started = time.monotonic()
    status, headers, body = _through_router(router, CHAT, LONG_CHAT)
    elapsed = time.monotonic() - started
    print(
        f"\nwhole prompt {whole_s:.2f} s; with the router's {timeout_s:.2f} s deadline it answered after "
        f"{elapsed:.2f} s"
    )
    assert status == 504, body
    assert body["error"]["code"] == "deadline_exceeded" and body["error"]["type"] == "timeout_error"
    message = body["error"]["message"]
    assert "send a shorter prompt" in message and "stream=true" in message, message
    assert headers.get("x-should-retry") == "false"
    assert elapsed < timeout_s, (elapsed, timeout_s)
    # The environment serves the next request as before: a prompt of three batches, which a deadline left
    # over from the one cut would stop at its first check.
    usage = client.invoke(
        {**LONG_CHAT, "messages": [{"role": "user", "content": SENTENCE * 30}], "max_tokens": 2}
    )["usage"]
    assert usage["prompt_tokens"] > 2 * N_BATCH and usage["completion_tokens"] >= 1, usage


def test_the_router_answers_a_rerank_its_deadline_cuts_with_a_504(rerank_environment):
    client = LocalInferenceClient(rerank_environment)
    documents = [f"Document {index} is about foxes." for index in range(40)]
    request = {"model": RERANK_MODEL, "query": "Which one is about foxes?", "documents": documents}
    # With time enough, the environment ranks them: in several batches of the reranker's 256-token context.
    status, _headers, body = _through_router(_router({RERANK_MODEL: client}, 29), RERANK, request)
    assert status == 200 and len(body["results"]) == 40, body
    assert body["usage"]["prompt_tokens"] > 3 * 256, body["usage"]
    # The router's deadline (1 s) less the function's margin (1.5 s) has passed when the function starts:
    # the first batch is scored, and no other.
    status, headers, body = _through_router(_router({RERANK_MODEL: client}, 1.0), RERANK, request)
    assert status == 504, body
    message = body["error"]["message"]
    assert body["error"]["code"] == "deadline_exceeded" and "send fewer documents" in message, message
    assert headers.get("x-should-retry") == "false"
