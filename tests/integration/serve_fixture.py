"""One ``snapllm local serve`` per test session, shared by the OpenAI-client and schemathesis tests.

Limits are set low so every generated request is quick (max_tokens <= 16, for the agent's model calls too)
and the error paths are easy to reach (64 KB bodies, 2,000-character prompts).
"""

from __future__ import annotations

import atexit
import subprocess
import sys

from snapllm.router.serve import ServeProcess
from tests.conftest import TEMPLATE, TEST_THREADS

SERVE_ENV = {
    "SNAPLLM_THREADS": TEST_THREADS,
    "SNAPLLM_MAX_TOKENS": "16",
    "SNAPLLM_N_CTX": "1024",
    "SNAPLLM_MAX_BODY_BYTES": "65536",
    "SNAPLLM_MAX_PROMPT_CHARS": "2000",
    # The agent's model calls must fit the server's max_tokens.
    "SNAPLLM_AGENT_PLAN_MAX_TOKENS": "16",
    "SNAPLLM_AGENT_SUMMARY_MAX_TOKENS": "16",
    "SNAPLLM_AGENT_ANSWER_MAX_TOKENS": "16",
}
MODEL = "smollm2-135m-instruct"

_server: ServeProcess | None = None


def shared_server() -> ServeProcess:
    global _server
    if _server is None or _server.process.poll() is not None:
        # The router's EMF metrics and JSON logs go to stderr with the functions' logs (shown on failure).
        _server = ServeProcess.start(template=TEMPLATE, env=SERVE_ENV, stdout=sys.stderr.fileno())
        atexit.register(_server.stop)
    return _server


__all__ = ["MODEL", "SERVE_ENV", "shared_server", "subprocess"]
