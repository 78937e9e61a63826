"""``snapllm local serve`` as a child process: the whole local stack over real TCP, as a user starts it, for
the tests that talk to it as a client would (OpenAI SDK, LangChain, schemathesis, httpx).

:func:`shared_server` is one such server per test process, shared by the modules that need no settings of
their own (``tests/integration/conftest.py`` hands it out as the ``server`` fixture);
:func:`shared_keyed_server` serves the embedding model beside the chat model, behind a key;
:func:`shared_long_answer_server` allows answers long enough for JSON objects and tool calls. Each is
started once per worker, and the modules that share one run on the same worker (:data:`SERVER_GROUP`,
:data:`KEYED_SERVER_GROUP`, :data:`LONG_ANSWERS_GROUP`).

Limits are set low so every generated request is quick (max_tokens <= 16, for the agent's model calls too,
but on the long-answer server) and the error paths are easy to reach (64 KB bodies, 2,000-character
prompts).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from snapllm_dev.local.lwa import LocalServeError
from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.readiness import wait_until_answering
from snapllm_dev.local.s3 import free_port
from snapllm_dev.packaged_models import TEST_MODEL, smollm2_path
from tests.support.generation import NO_PROMPT_PREFIXES, TEST_THREADS
from tests.support.paths import TEMPLATE

SERVE_ENV = {
    "SNAPLLM_THREADS": TEST_THREADS,
    "SNAPLLM_MAX_TOKENS": "16",
    "SNAPLLM_N_CTX": "1024",
    "SNAPLLM_MAX_BODY_BYTES": "65536",
    "SNAPLLM_MAX_PROMPT_CHARS": "2000",
    # The agent's model calls must fit the server's max_tokens.
    "SNAPLLM_AGENT_PLAN_MAX_TOKENS": "16",
    "SNAPLLM_AGENT_TOOL_CALL_MAX_TOKENS": "16",
    "SNAPLLM_AGENT_SUMMARY_MAX_TOKENS": "16",
    "SNAPLLM_AGENT_ANSWER_MAX_TOKENS": "16",
    # shared_server() leaves this out: it keeps the template's prefixes, as a user's server has.
    **NO_PROMPT_PREFIXES,
}
MODEL = "smollm2-135m-instruct"
#: The packaged model served as an embedding model (mean pooling) beside the chat model.
EMBEDDING_MODEL = "smollm2-embedding"
#: An embedding model's request limits in the tests: room for 32 short texts, little more.
EMBEDDING_LIMITS = {"SNAPLLM_MAX_EMBEDDING_INPUTS": "64", "SNAPLLM_MAX_EMBEDDING_TOKENS": "2048"}
#: The variables of a model function that serves the packaged model as that embedding model.
EMBEDDING_FUNCTION_ENV = {
    "SNAPLLM_THREADS": TEST_THREADS,
    "SNAPLLM_EMBEDDING_POOLING": "mean",
    "SNAPLLM_MODEL_NAME": EMBEDDING_MODEL,
    **EMBEDDING_LIMITS,
}


#: The key :func:`shared_keyed_server` takes from ``$SNAPLLM_API_KEY``, and the one browser origin it serves
#: CORS for (``--cors-origin``, as ``CorsAllowedOrigins`` does).
API_KEY = "sk-local-test-0123456789abcdef"
CORS_ORIGIN = "http://localhost:5173"
#: The modules that share :func:`shared_server` are one group (``pytest.mark.xdist_group``), so one worker
#: starts it once; so are those that share :func:`shared_keyed_server`.
SERVER_GROUP = "server"
KEYED_SERVER_GROUP = "keyed-server"
#: The modules that share :func:`shared_long_answer_server`.
LONG_ANSWERS_GROUP = "long-answers"
#: :func:`shared_long_answer_server`'s max_tokens: the longest complete answer of the structured-output
#: tests takes about 120 tokens; an answer that runs on (digits without end, a tree nesting deeper) is cut
#: at this many.
LONG_ANSWER_TOKENS = 128

#: The test-model builder's reranker (:mod:`tests.support.family_models`), served under its own name.
RERANK_MODEL = "qwen3-reranker"


#: The variables of a model function that serves the reranker (the same limits as an embedding model's,
#: a small context so a pair past it is quick to write).
RERANK_FUNCTION_ENV = {
    "SNAPLLM_THREADS": TEST_THREADS,
    "SNAPLLM_EMBEDDING_POOLING": "rank",
    "SNAPLLM_MODEL_NAME": RERANK_MODEL,
    "SNAPLLM_N_CTX": "256",
    **EMBEDDING_LIMITS,
}


def rerank_serve_args(model_path: Path) -> list[str]:
    """``snapllm local serve``'s arguments that serve ``model_path`` as the reranker :data:`RERANK_MODEL`."""
    return ["--embedding-model", f"{RERANK_MODEL}={model_path}", "--embedding-pooling", "rank"]


def embedding_serve_args(model_path: Path) -> list[str]:
    """``snapllm local serve``'s arguments that serve ``model_path`` as :data:`EMBEDDING_MODEL`."""
    return ["--embedding-model", f"{EMBEDDING_MODEL}={model_path}", "--embedding-pooling", "mean"]


class ServeProcess:
    """``snapllm local serve`` in a child process, for tests that need a real server.

    with ServeProcess.start(env={"SNAPLLM_THREADS": "1"}) as server:
        OpenAI(base_url=server.base_url, api_key="local")
    """

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port
        #: The file its output goes to, where the starter gave one.
        self.log: Path | None = None
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.url}/v1"

    @classmethod
    def start(
        cls,
        *,
        template: Path = Path("template.yaml"),
        env: Mapping[str, str] | None = None,
        timeout_s: float = 180.0,
        stdout: Any = subprocess.DEVNULL,
        stderr: Any = None,
        args: Sequence[str] = (),
        api_key: str | None = None,
        api_key_variable: bool = False,
    ) -> ServeProcess:
        """``api_key``: serve with ``--api-key`` (ApiAuth=KEY), or with ``$SNAPLLM_API_KEY`` when
        ``api_key_variable``; the readiness probe sends it too."""
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "snapllm_dev.cli",
            "local",
            "serve",
            "--port",
            str(port),
            "-t",
            str(template),
            # The tests' model unless ``args`` name another (the last --model counts).
            "--model",
            TEST_MODEL,
            *args,
            *(["--api-key", api_key] if api_key and not api_key_variable else []),
        ]
        env = {**(env or {}), **({"SNAPLLM_API_KEY": api_key} if api_key and api_key_variable else {})}
        probe = {"authorization": f"Bearer {api_key}"} if api_key else {}
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=stdout, stderr=stderr)
        server = cls(process, port)
        if wait_until_answering(process, f"{server.url}/health", timeout_s=timeout_s, headers=probe):
            return server
        if process.poll() is not None:
            raise LocalServeError(f"snapllm local serve exited with {process.returncode} while starting")
        server.stop()
        raise LocalServeError(f"snapllm local serve was not ready within {timeout_s:g} s")

    def stop(self) -> None:
        stop_process(self.process, timeout_s=20)

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_shared: dict[str, ServeProcess] = {}


def _per_process(name: str, start: Callable[[], ServeProcess]) -> ServeProcess:
    """The server ``name`` of this test process, started on first use (or again, if it has exited)."""
    server = _shared.get(name)
    if server is None or server.process.poll() is not None:
        server = _shared[name] = start()
        atexit.register(server.stop)
    return server


def shared_server() -> ServeProcess:
    """The template's stack with :data:`SERVE_ENV`'s limits, and the template's prompt prefixes."""
    env = {name: value for name, value in SERVE_ENV.items() if name not in NO_PROMPT_PREFIXES}
    # The router's EMF metrics and JSON logs go to stderr with the functions' logs (shown on failure).
    return _per_process(
        "plain", lambda: ServeProcess.start(template=TEMPLATE, env=env, stdout=sys.stderr.fileno())
    )


def shared_long_answer_server() -> ServeProcess:
    """:func:`shared_server`'s stack allowing :data:`LONG_ANSWER_TOKENS` per answer, room for whole JSON
    answers and tool calls."""
    env = {**SERVE_ENV, "SNAPLLM_MAX_TOKENS": str(LONG_ANSWER_TOKENS)}
    return _per_process("long-answers", lambda: ServeProcess.start(template=TEMPLATE, env=env))


def shared_keyed_server() -> ServeProcess:
    """The packaged model as the chat model and, beside it, as :data:`EMBEDDING_MODEL` (mean pooling), behind
    :data:`API_KEY` (from ``$SNAPLLM_API_KEY``, so on no command line), with CORS for :data:`CORS_ORIGIN`;
    its output goes to the file :attr:`ServeProcess.log`."""

    def start() -> ServeProcess:
        folder = Path(tempfile.mkdtemp(prefix="snapllm-keyed-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        log = folder / "serve.log"
        args = [*embedding_serve_args(smollm2_path()), "--cors-origin", CORS_ORIGIN]
        with log.open("wb") as sink:
            server = ServeProcess.start(
                template=TEMPLATE,
                env={**SERVE_ENV, **EMBEDDING_LIMITS},
                stdout=sink,
                stderr=sink,
                args=args,
                api_key=API_KEY,
                api_key_variable=True,
            )
        server.log = log
        return server

    return _per_process("keyed", start)


__all__ = [
    "API_KEY",
    "CORS_ORIGIN",
    "EMBEDDING_FUNCTION_ENV",
    "EMBEDDING_LIMITS",
    "EMBEDDING_MODEL",
    "KEYED_SERVER_GROUP",
    "LONG_ANSWERS_GROUP",
    "LONG_ANSWER_TOKENS",
    "MODEL",
    "SERVER_GROUP",
    "SERVE_ENV",
    "ServeProcess",
    "embedding_serve_args",
    "shared_keyed_server",
    "shared_long_answer_server",
    "shared_server",
]
