"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) on the packaged model: the
always-on endpoint the router's per-model targets are tested against."""

from __future__ import annotations

import subprocess
import sys

from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.readiness import wait_until_answering
from snapllm_dev.local.s3 import free_port
from tests.support.generation import TEST_THREADS


def start_llama_cpp_server(model_path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", "127.0.0.1",
        "--port", str(port), "--n_threads", TEST_THREADS, "--n_ctx", "1024", "--verbose", "false",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    if wait_until_answering(process, f"{base_url}/models", timeout_s=60):
        return process, base_url
    assert process.poll() is None, "llama_cpp.server exited while starting"
    stop_process(process)
    raise AssertionError("llama_cpp.server did not start within 60 s")
