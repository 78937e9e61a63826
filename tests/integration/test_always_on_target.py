"""Per-model targets through ``snapllm local serve``: one model routed to an always-on OpenAI-compatible
server (llama-cpp-python's own ``llama_cpp.server`` on the packaged model), one to the local Lambda
lifecycle, and the always-on route falling back to Lambda when its server is stopped, counted in the
router's ``TargetFallback`` metric. The official ``openai`` client makes every request."""

from __future__ import annotations

import openai
import pytest

from snapllm_dev.local.processes import stop_process
from tests.support.llama_server import start_llama_cpp_server
from tests.support.paths import TEMPLATE
from tests.support.serve import MODEL, SERVE_ENV, ServeProcess

pytestmark = pytest.mark.slow

ALWAYS_ON = "smollm2-always-on"
MESSAGES = [{"role": "user", "content": "Say hello in three words."}]


def test_always_on_route_lambda_route_and_fallback(model_path, tmp_path):
    llama_server, base_url = start_llama_cpp_server(model_path)
    metrics_log = tmp_path / "serve-stdout.log"
    try:
        with (
            metrics_log.open("wb") as stdout,
            ServeProcess.start(
                template=TEMPLATE,
                env=SERVE_ENV,
                stdout=stdout,
                args=[
                    "--no-stream",
                    "--route",
                    f"{ALWAYS_ON}={base_url}",
                    "--fallback",
                    f"{ALWAYS_ON}={MODEL}",
                ],
            ) as server,
        ):
            client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=60)
            assert sorted(m.id for m in client.models.list().data) == sorted([MODEL, ALWAYS_ON])

            # The always-on route: llama_cpp.server answers, without the timings snapllm's function adds.
            direct = client.chat.completions.create(model=ALWAYS_ON, messages=MESSAGES, max_tokens=8)
            assert direct.choices[0].message.content.strip()
            assert direct.model == ALWAYS_ON and "timings" not in (direct.model_extra or {})
            assert 0 < direct.usage.completion_tokens <= 8

            # The Lambda route: the restored local environment answers as the function's model.
            via_lambda = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)
            assert via_lambda.model == MODEL and via_lambda.choices[0].message.content.strip()
            assert via_lambda.model_extra["timings"]["tokens_per_second"] > 0

            # The same limits for both targets: max_tokens over the router's limit is refused before either.
            for model in (ALWAYS_ON, MODEL):
                with pytest.raises(openai.BadRequestError):
                    client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=10_000)

            # The always-on server stops: its route falls back to Lambda, and each fallback is counted.
            stop_process(llama_server)
            for _ in range(2):
                fallen_back = client.chat.completions.create(model=ALWAYS_ON, messages=MESSAGES, max_tokens=8)
                assert fallen_back.model == MODEL and fallen_back.choices[0].message.content.strip()
                assert "timings" in fallen_back.model_extra
            # A text completion falls back too.
            text = client.completions.create(model=ALWAYS_ON, prompt="The capital of France is", max_tokens=4)
            assert text.model == MODEL and text.choices[0].text.strip()
    finally:
        stop_process(llama_server)
    emf = [line for line in metrics_log.read_text().splitlines() if '"TargetFallback"' in line]
    assert len(emf) == 3, emf
    assert all(f"{ALWAYS_ON}->{MODEL}" in line for line in emf)
