"""The inference client of local runs: direct invokes of a restored environment instead of Lambda ``Invoke``.

with function.restore() as environment:
    client = LocalInferenceClient(environment)
    router = RouterApp(settings, {"smollm2": client})
"""

from __future__ import annotations

import threading
from typing import Any

from snapllm.errors import InferenceFailedError
from snapllm.inference.client import checked_response
from snapllm.inference.deadline import CALLER_DEADLINE_KEY
from snapllm_dev.local.lifecycle import RestoredEnvironment


class LocalInferenceClient:
    """Invokes a locally restored environment (see :mod:`snapllm_dev.local.lifecycle`); thread-safe.

    One environment answers one invoke at a time, as on Lambda: concurrent callers queue.
    """

    def __init__(self, environment: RestoredEnvironment) -> None:
        self._environment = environment
        self._lock = threading.Lock()

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        custom = {CALLER_DEADLINE_KEY: int(deadline * 1000)} if deadline is not None else None
        with self._lock:
            result = self._environment.invoke(payload, client_context=custom)
        if result.error is not None:
            raise InferenceFailedError(f"the model function failed: {result.error.get('errorMessage')}")
        return checked_response(result.response)
