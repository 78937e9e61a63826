"""The HTTP path to an always-on endpoint under the project's fault injection (reset, close, stall, 5xx),
and the router's fallback order over it.

The endpoint is llama-cpp-python's own server on the packaged model; the faults are done to the real TCP
stream by :class:`~snapllm_dev.local.faults.FaultProxy` in front of it.
"""

from __future__ import annotations

import json

import pytest

from snapllm.errors import (
    InferenceFailedError,
    InferenceNotReadyError,
    InferenceThrottledError,
    InferenceTimeoutError,
)
from snapllm.inference.client import HttpInferenceClient
from snapllm.router.app import RouterApp
from snapllm.router.events import http_api_event
from snapllm.router.settings import RouterSettings
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.faults import Fault, FaultProxy, StreamFault
from snapllm_dev.local.s3 import free_port

CHAT = {"model": "always-on", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}


def _through(fault: Fault | None):
    def rule(request):
        return fault if request.method == "POST" else None

    return rule


def test_clean_answer_through_the_proxy(always_on_endpoint):
    upstream = always_on_endpoint.removesuffix("/v1")
    with FaultProxy(upstream, rule=_through(None)) as proxy:
        body = HttpInferenceClient(f"{proxy.url}/v1").invoke(CHAT)
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
    completion = {"prompt": "The capital of France is", "max_tokens": 3}
    text = HttpInferenceClient(always_on_endpoint).invoke(completion)
    assert text["object"] == "text_completion"


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        (Fault(stream=StreamFault.RESET, after=20), InferenceFailedError, 502),
        (Fault(stream=StreamFault.CLOSE, after=20), InferenceFailedError, 502),
        (Fault(stream=StreamFault.STALL, after=20), InferenceTimeoutError, 504),
        (Fault(status=500), InferenceFailedError, 502),
        (Fault(status=503), InferenceNotReadyError, 503),
        (Fault(status=429), InferenceThrottledError, 429),
    ],
    ids=["reset", "close", "stall", "500", "503", "429"],
)
def test_faults_become_the_projects_errors(always_on_endpoint, fault, error, status):
    with FaultProxy(always_on_endpoint.removesuffix("/v1"), rule=_through(fault)) as proxy:
        # A stall must end by the read timeout; every other fault must fire first, after the server's
        # answer, which can take over a second on a loaded machine.
        read_timeout_s = 1.0 if fault.stream is StreamFault.STALL else 15.0
        client = HttpInferenceClient(f"{proxy.url}/v1", read_timeout_s=read_timeout_s)
        with pytest.raises(error) as raised:
            client.invoke(CHAT)
    assert raised.value.status_code == status
    assert raised.value.to_body()["error"]["message"]


def test_nothing_listening_is_unavailable():
    with pytest.raises(InferenceNotReadyError):
        HttpInferenceClient(f"http://127.0.0.1:{free_port()}/v1").invoke(CHAT)


def _router(primary: str, fallback: str) -> RouterApp:
    settings = RouterSettings(
        routes={"always-on": primary, "backup": fallback},
        fallbacks={"always-on": ("backup",)},
        invoke_timeout_s=5.0,
    )
    clients = {name: HttpInferenceClient(url, read_timeout_s=5.0) for name, url in settings.routes.items()}
    return RouterApp(settings, clients)


def _post(router: RouterApp, body: dict) -> dict:
    event = http_api_event(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    # Through the Lambda handler, as on AWS: its metrics are flushed at the end of each invoke.
    return router.handler(event, LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256))


@pytest.mark.parametrize("status", [503, 429])
def test_router_falls_back_on_throttle_or_unavailable_and_counts_it(always_on_endpoint, status):
    with FaultProxy(always_on_endpoint.removesuffix("/v1"), rule=_through(Fault(status=status))) as proxy:
        router = _router(f"{proxy.url}/v1", always_on_endpoint)
        result = _post(router, CHAT)
    assert result["statusCode"] == 200, result["body"]
    assert json.loads(result["body"])["choices"][0]["message"]["content"]
    assert router.fallbacks == {("always-on", "backup"): 1}


def test_router_does_not_fall_back_on_a_failure_and_maps_it(always_on_endpoint):
    with FaultProxy(
        always_on_endpoint.removesuffix("/v1"), rule=_through(Fault(stream=StreamFault.RESET, after=20))
    ) as proxy:
        router = _router(f"{proxy.url}/v1", always_on_endpoint)
        result = _post(router, CHAT)
    assert result["statusCode"] == 502
    assert json.loads(result["body"])["error"]["code"] == "inference_failed"
    assert not router.fallbacks


def test_router_answers_503_when_every_target_is_down():
    down = f"http://127.0.0.1:{free_port()}/v1"
    router = _router(down, down)
    result = _post(router, CHAT)
    assert result["statusCode"] == 503
    assert result["headers"].get("Retry-After")
    assert router.fallbacks == {("always-on", "backup"): 1}
