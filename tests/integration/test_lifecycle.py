"""The inference function through its whole local lifecycle: a fresh interpreter imports the handler
(init: local S3 over HTTP -> memfd -> llama.cpp), the before-snapshot hooks warm it up, and each restore
forks that snapshotted process into a new environment, as SnapStart restores many environments from one
snapshot."""

from __future__ import annotations

import json
import time

import pytest

from snapllm.inference.deadline import CALLER_DEADLINE_KEY
from snapllm_dev import sam
from snapllm_dev.local.lifecycle import LocalFunctionError
from snapllm_dev.local.session import LocalDeployment
from tests.support.generation import LONG_GENERATION, NO_PROMPT_PREFIXES, TEST_THREADS
from tests.support.paths import TEMPLATE
from tests.support.serve import MODEL

CHAT = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 12}


@pytest.fixture(scope="module")
def snapshotted(deployment):
    # The template's variables, its declared prompt prefixes among them: the snapshot a deployment takes.
    with deployment.function("InferenceFunction", SNAPLLM_THREADS=TEST_THREADS) as function:
        init = function.init()
        snapshot = function.snapshot()
        yield function, init, snapshot


@pytest.fixture(scope="module")
def environment(snapshotted):
    function, _, _ = snapshotted
    with function.restore() as restored:
        yield restored


def test_init_loads_from_s3_and_the_snapshot_is_warm(snapshotted):
    _, init, snapshot = snapshotted
    assert init["phases"]["s3_to_memfd"] > 0 and init["phases"]["model_load"] > 0
    assert "warm_up" not in init["phases"]  # the warm-up belongs to the before-snapshot hook
    assert snapshot["phases"]["warm_up"] > 0


def test_peak_memory_holds_one_copy_of_the_weights(snapshotted, model_path):
    _, _, snapshot = snapshotted
    kv_cache = 2 * 30 * 3 * 64 * 2048 * 2  # SmolLM2-135M: 30 layers, 3 KV heads of 64, f16, n_ctx 2048
    budget = model_path.stat().st_size + kv_cache + 300_000_000
    assert snapshot["peak_rss_bytes"] <= budget


def test_chat_completion_response(environment):
    result = environment.invoke(CHAT)
    response = result.response
    assert result.error is None
    assert response["object"] == "chat.completion"
    assert response["id"].startswith("chatcmpl-")
    assert response["model"] == MODEL
    assert isinstance(response["created"], int)
    choice = response["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip()
    assert choice["finish_reason"] in {"stop", "length"}
    usage = response["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert set(response["timings"]) >= {"prompt_ms", "time_to_first_token_ms", "tokens_per_second"}


def test_text_completion_response(environment):
    response = environment.invoke({"prompt": "The sky is", "max_tokens": 6, "seed": 5}).response
    assert response["object"] == "text_completion"
    assert response["id"].startswith("cmpl-")
    assert response["choices"][0]["text"]
    assert response["seed"] == 5


def test_event_files_in_the_repository_are_served(environment):
    # Here on the tests' model, named as it is served (`snapllm replay` plays the files as they are, on the
    # default model they name).
    for name in ("chat.json", "completion.json"):
        event = json.loads((TEMPLATE.parent / "events" / "inference" / name).read_text())
        event = {**event, "model": MODEL} if "model" in event else event
        assert "choices" in environment.invoke(event).response, name


def test_restored_environments_do_not_answer_alike(snapshotted):
    function, _, _ = snapshotted
    request = {"prompt": "My favourite animal is the", "max_tokens": 8, "temperature": 1.0}
    with function.restore() as first, function.restore() as second:
        assert first.pid != second.pid
        one = first.invoke(request).response
        two = second.invoke(request).response
    assert one["seed"] != two["seed"]


BAD_EVENTS = [
    ([1, 2], 400, None),
    ('{"messages": [', 400, None),
    ({}, 400, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content"),
    ({**CHAT, "temperature": 7}, 400, "temperature"),
    ({**CHAT, "n": 3}, 400, "n"),
    ({**CHAT, "stream": True}, 400, "stream"),
    ({**CHAT, "max_tokens": 100_000}, 400, "max_tokens"),
    ({"prompt": "lorem ipsum " * 2000}, 400, "prompt"),
    ({**CHAT, "model": "gpt-4o"}, 404, "model"),
]


@pytest.mark.parametrize(("event", "status", "param"), BAD_EVENTS)
def test_bad_input_gets_a_structured_error_and_the_environment_keeps_serving(
    environment, event, status, param
):
    result = environment.invoke(event)
    assert result.error is None, "bad input must not raise out of the handler"
    body = result.response
    assert body["statusCode"] == status
    assert body["error"]["param"] == param
    assert body["error"]["type"] == "invalid_request_error"
    assert "Traceback" not in json.dumps(body)
    assert (
        environment.invoke({"prompt": "Still here:", "max_tokens": 2}).response["object"] == "text_completion"
    )


def test_generation_stops_before_the_invoke_deadline(snapshotted):
    function, _, _ = snapshotted
    # 3 s timeout less the 1.5 s margin leaves 1.5 s to generate: far less than 512 tokens take here.
    with function.restore(timeout_s=3.0) as short:
        result = short.invoke({**LONG_GENERATION, "max_tokens": 512})
    response = result.response
    assert response["choices"][0]["finish_reason"] == "length"
    assert response["deadline_reached"] is True
    assert 0 < response["usage"]["completion_tokens"] < 512
    assert result.duration_s < 3.0


def test_a_restored_environment_never_downloads(local_s3, model_path):
    # A deployment of its own whose S3 endpoint is stopped after the snapshot: restore and invoke must
    # still work, because the model is in the snapshotted memory.
    from snapllm_dev.local.s3 import LocalS3

    own_s3 = LocalS3.start()
    deployment = LocalDeployment.start(sam.load(TEMPLATE), model_path=model_path, s3=own_s3)
    overrides = {"SNAPLLM_THREADS": TEST_THREADS, **NO_PROMPT_PREFIXES}
    with deployment.function("InferenceFunction", **overrides) as function:
        function.init()
        function.snapshot()
        own_s3.stop()
        assert not own_s3.running
        with function.restore() as restored:
            response = restored.invoke({"prompt": "Hello", "max_tokens": 3}).response
    assert response["object"] == "text_completion"


def test_init_fails_loudly_when_the_model_is_missing(deployment):
    with (
        deployment.function("InferenceFunction", SNAPLLM_MODEL_KEY="models/absent.gguf") as function,
        pytest.raises(LocalFunctionError, match=r"ModelNotFoundError.*models/absent\.gguf"),
    ):
        function.init()


def test_a_callers_earlier_deadline_stops_generation(environment):
    # The router gives up after its invoke timeout; the function (120 s here) must stop by then too.
    caller_deadline_ms = int((time.time() + 2.0) * 1000)
    result = environment.invoke(
        {**LONG_GENERATION, "max_tokens": 512},
        client_context={CALLER_DEADLINE_KEY: caller_deadline_ms},
    )
    response = result.response
    assert response["deadline_reached"] is True
    assert response["choices"][0]["finish_reason"] == "length"
    assert result.duration_s < 2.0


def test_the_prefault_takes_the_first_requests_page_faults_into_the_restore(deployment):
    # A restored environment is a fork of the snapshotted process: without a prefault its first request
    # copies every page of llama.cpp's buffers it writes (and maps the weights, where they are mapped).
    first_faults = {}
    for mode in ("none", "all"):
        with (
            deployment.function(
                "InferenceFunction", SNAPLLM_THREADS=TEST_THREADS, SNAPLLM_PREFAULT=mode, **NO_PROMPT_PREFIXES
            ) as fn,
        ):
            fn.init()
            fn.snapshot()
            with fn.restore() as restored:
                first = restored.invoke(CHAT)
                assert first.error is None
                first_faults[mode] = sum(first.faults.values())
    assert first_faults["none"] > 1000, first_faults
    assert first_faults["all"] < first_faults["none"] / 10, first_faults
