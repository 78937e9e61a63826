"""Fixtures the integration modules share: the model loaded in this process, the InferenceFunction
restored from its local snapshot (also as an embedding model, and on the test reranker), the inference
runtime, the agent over it, ``snapllm local serve`` with an OpenAI client on it (and, behind a key, also
serving an embedding model), and llama-cpp-python's server as an always-on endpoint.

Each is module-scoped (a loaded model costs seconds), and a module sets its own limits by overriding the
fixture that holds them: ``inference_overrides`` for the function and the runtime, ``serve_overrides`` for
the server. A module that sets no server limits shares its process's one server; the keyed server with the
embedding model is shared the same way. The agent is the process's one, with the template's variables,
shared by the modules of :data:`~tests.support.agent.AGENT_GROUP`.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm.protocol.serving import OpenAIServing
from snapllm_dev.local.durable import LocalAgent, agent_settings
from snapllm_dev.local.inference import LocalInferenceClient
from snapllm_dev.local.kinds import MODEL_KEY_VARIABLE
from snapllm_dev.local.lifecycle import RestoredEnvironment
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET, LocalDeployment
from tests.support.family_models import family_model
from tests.support.generation import NO_PROMPT_PREFIXES, TEST_THREADS, serving_over
from tests.support.llama_server import start_llama_cpp_server
from tests.support.paths import TEMPLATE
from tests.support.serve import (
    EMBEDDING_FUNCTION_ENV,
    RERANK_FUNCTION_ENV,
    RERANK_MODEL,
    SERVE_ENV,
    ServeProcess,
    shared_keyed_server,
    shared_long_answer_server,
    shared_server,
)


@pytest.fixture(scope="module")
def engine(model_path) -> Engine:
    """The packaged model loaded in this process, with no function around it."""
    return Engine.load(str(model_path), EngineSettings(threads=1), model_name="smollm2")


@pytest.fixture(scope="module")
def serving(engine) -> OpenAIServing:
    """The OpenAI protocol over :func:`engine`: what the functions serve, without a function around it."""
    return serving_over(engine)


@pytest.fixture(scope="module")
def inference_overrides() -> dict[str, str]:
    """The module's InferenceFunction variables over the template's (for ``environment`` and ``runtime``)."""
    return {}


@pytest.fixture(scope="module")
def environment(
    deployment: LocalDeployment, inference_overrides: dict[str, str]
) -> Iterator[RestoredEnvironment]:
    """The InferenceFunction initialized, snapshotted and restored, with no declared prompt prefixes: the
    direct invoke, and what the router's local inference client calls."""
    overrides = {"SNAPLLM_THREADS": TEST_THREADS, **NO_PROMPT_PREFIXES, **inference_overrides}
    with deployment.function("InferenceFunction", **overrides) as function:
        function.init()
        function.snapshot()
        with function.restore() as restored:
            yield restored


@pytest.fixture(scope="module")
def embedding_environment(deployment: LocalDeployment) -> Iterator[RestoredEnvironment]:
    """The InferenceFunction restored with the packaged model loaded as an embedding model (mean pooling)
    named :data:`~tests.support.serve.EMBEDDING_MODEL`, as an embedding model's own function runs."""
    with deployment.function("InferenceFunction", **EMBEDDING_FUNCTION_ENV) as function:
        function.init()
        function.snapshot()
        with function.restore() as restored:
            yield restored


@pytest.fixture(scope="module")
def rerank_environment(deployment: LocalDeployment) -> Iterator[RestoredEnvironment]:
    """The InferenceFunction restored with the test-model builder's reranker (rank pooling) named
    :data:`~tests.support.serve.RERANK_MODEL`, its file uploaded to the local bucket as a deployment's is."""
    path = family_model(RERANK_MODEL).path
    key = f"rerank/{path.name}"
    digest = deployment.s3.put_model(path, bucket=LOCAL_MODEL_BUCKET, key=key)
    overrides = {**RERANK_FUNCTION_ENV, MODEL_KEY_VARIABLE: key, "SNAPLLM_MODEL_SHA256": digest}
    with deployment.function("InferenceFunction", **overrides) as function:
        function.init()
        function.snapshot()
        with function.restore() as restored:
            yield restored


@pytest.fixture(scope="module")
def keyed_server() -> ServeProcess:
    """``snapllm local serve`` with the packaged model as the chat model and, beside it, as the embedding
    model :data:`~tests.support.serve.EMBEDDING_MODEL` (mean pooling), behind
    :data:`~tests.support.serve.API_KEY`, with CORS for one origin, its output in a file: this process's
    one, shared by the modules of :data:`~tests.support.serve.KEYED_SERVER_GROUP`."""
    return shared_keyed_server()


@pytest.fixture(scope="module")
def runtime(deployment: LocalDeployment, inference_overrides: dict[str, str]) -> InferenceRuntime:
    """The inference runtime in this process, set up from the function's environment as Lambda would (with no
    declared prompt prefixes)."""
    overrides = {"SNAPLLM_THREADS": TEST_THREADS, **NO_PROMPT_PREFIXES, **inference_overrides}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in deployment.environment(**overrides).items():
            patch.setenv(name, value)
        return InferenceRuntime.initialize(InferenceSettings.from_env())


@pytest.fixture(scope="session")
def agent(deployment: LocalDeployment) -> Iterator[LocalAgent]:
    """The agent of the template, its model calls going to the InferenceFunction restored with the
    template's variables: this process's one, as the modules of its group run on one worker."""
    with deployment.function("InferenceFunction", SNAPLLM_THREADS=TEST_THREADS) as function:
        function.init()
        function.snapshot()
        with function.restore() as restored:
            yield LocalAgent(deployment, agent_settings(deployment.template), LocalInferenceClient(restored))


@pytest.fixture(scope="module")
def serve_overrides() -> dict[str, str]:
    """The module's server variables over :data:`tests.support.serve.SERVE_ENV`; any gives the module a
    server of its own."""
    return {}


@pytest.fixture(scope="module")
def long_answer_server() -> ServeProcess:
    """The worker's server with room for whole JSON answers and tool calls (the modules of
    :data:`~tests.support.serve.LONG_ANSWERS_GROUP` share it)."""
    return shared_long_answer_server()


@pytest.fixture(scope="module")
def server(serve_overrides: dict[str, str]) -> Iterator[ServeProcess]:
    """``snapllm local serve`` on the repository's template."""
    if not serve_overrides:
        yield shared_server()
        return
    with ServeProcess.start(template=TEMPLATE, env={**SERVE_ENV, **serve_overrides}) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> openai.OpenAI:
    """The OpenAI SDK on ``server``, without retries (a retry would hide an error)."""
    return openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def always_on_endpoint(model_path) -> Iterator[str]:
    """llama-cpp-python's own server on the packaged model: the base URL (``.../v1``) of an always-on
    endpoint, as the router's per-model targets reach one."""
    process, base_url = start_llama_cpp_server(model_path)
    try:
        yield base_url
    finally:
        stop_process(process)
