"""The streaming function's ASGI app under uvicorn on loopback, in a thread of the test process: what Lambda
Web Adapter reaches (real HTTP parsing, real TCP, a client that can go away), over a runtime the test holds.

    with stream_server(runtime, max_body_bytes=65536) as url:
        httpx.post(f"{url}/v1/chat/completions", json=body)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from snapllm.inference.runtime import InferenceRuntime
from snapllm.streaming.app import create_app
from snapllm_dev.local.s3 import free_port


@contextlib.contextmanager
def stream_server(runtime: InferenceRuntime, *, max_body_bytes: int, api_keys: Any = None) -> Iterator[str]:
    """The app on ``runtime`` served by uvicorn; yields its base URL (``http://127.0.0.1:PORT``). With
    ``api_keys`` (a verifier) it checks keys as ApiAuth=KEY does."""
    app = create_app(runtime, max_body_bytes=max_body_bytes, api_keys=api_keys)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
