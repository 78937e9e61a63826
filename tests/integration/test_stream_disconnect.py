"""A client that closes a stream stops generation: the streaming app under uvicorn (real TCP, as Lambda Web
Adapter reaches it), on the real model, for answers whose text the stream holds back (a tool call is sent
whole at the end, so no byte goes out while it is generated)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from snapllm.protocol.responses.responses_api import inference_request
from tests.support.stream_server import stream_server

pytestmark = pytest.mark.slow

# The call's one argument must be at least 400 characters: whole, it is at least 100 tokens.
WRITE = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 400, "maxLength": 600}},
    "required": ["text"],
    "additionalProperties": False,
}
PROMPT = "Write a long story about a dragon and save it."
RESPONSE_CALL = {
    "input": PROMPT,
    "tools": [{"type": "function", "name": "save", "parameters": WRITE}],
    "tool_choice": "required",
    "max_output_tokens": 400,
    "seed": 1,
    "stream": True,
}
CHAT_CALL = {
    "messages": [{"role": "user", "content": PROMPT}],
    "tools": [{"type": "function", "function": {"name": "save", "parameters": WRITE}}],
    "tool_choice": "required",
    "max_tokens": 400,
    "seed": 1,
    "stream": True,
}
# Generous for a loaded machine: the prompt and a token or two, where the whole call is 100 tokens or more.
STOPPED_WITHIN_S = 5.0
STOPPED_WITHIN_TOKENS = 8


@pytest.fixture(scope="module")
def inference_overrides() -> dict[str, str]:
    return {"SNAPLLM_MAX_TOKENS": "400"}


@pytest.fixture(scope="module")
def stream_url(runtime):
    with stream_server(runtime, max_body_bytes=65536) as url:
        yield url


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", RESPONSE_CALL),
        ("/v1/chat/completions", CHAT_CALL),
    ],
    ids=["responses-required-call", "chat-required-call"],
)
def test_closing_a_stream_stops_generation_at_once(runtime, stream_url, path: str, body: dict[str, Any]):
    engine, serving = runtime.engine, runtime.serving
    prompt_tokens = len(serving.prepare(inference_request(serving.parse(body))).engine_request.tokens)
    with httpx.Client(timeout=60) as client, client.stream("POST", stream_url + path, json=body) as response:
        assert response.status_code == 200
        # The first event goes out before any token is generated; wait until generation has begun.
        lines = response.iter_lines()  # held open until the blocks end: dropping it closes the response
        assert next(lines)
        started = time.monotonic()
        while len(engine.cached_tokens) < prompt_tokens + 1:
            assert time.monotonic() - started < 60, "generation did not start"
            time.sleep(0.01)
    closed = time.monotonic()  # leaving both blocks closed the response and its connection
    while engine._lock.locked():
        assert time.monotonic() - closed < 60, "generation never stopped"
        time.sleep(0.01)
    stopped_after_s = time.monotonic() - closed
    generated = len(engine.cached_tokens) - prompt_tokens
    assert stopped_after_s < STOPPED_WITHIN_S, stopped_after_s
    assert generated <= STOPPED_WITHIN_TOKENS, generated


def test_the_held_call_is_long_enough_for_the_check_above(runtime):
    """The same call, whole: at least 100 tokens, so stopping within a few tokens is not its natural end."""
    serving = runtime.serving
    body = {**RESPONSE_CALL, "stream": False, "max_output_tokens": 400}
    answer, generation = serving.complete(serving.parse(body), deadline=None)
    assert generation.completion_tokens >= 100, generation.completion_tokens
    # Parallel calls may follow the first, which is the long one.
    call, *_ = [item for item in answer["output"] if item["type"] == "function_call"]
    assert len(json.loads(call["arguments"])["text"]) >= 400
