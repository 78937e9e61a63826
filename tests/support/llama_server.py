"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) on the packaged model: the
always-on endpoint the router's per-model targets are tested against."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import httpx

from snapllm_dev.local.processes import stop_process
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
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=2) as client:  # one for every probe, as ServeProcess.start's
        while time.monotonic() < deadline:
            assert process.poll() is None, "llama_cpp.server exited while starting"
            with contextlib.suppress(httpx.TransportError):
                if client.get(f"{base_url}/models").status_code == 200:
                    return process, base_url
            time.sleep(0.2)
    stop_process(process)
    raise AssertionError("llama_cpp.server did not start within 60 s")
