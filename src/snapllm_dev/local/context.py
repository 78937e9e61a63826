"""A Lambda context object for local invokes, with a real deadline.

context = LocalContext.create("InferenceFunction", timeout_s=120, memory_mb=10240)
context.get_remaining_time_in_millis()
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LocalClientContext:
    """What Lambda's Python runtime exposes as ``context.client_context`` (its ``custom`` fields)."""

    custom: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    client: Any = None


@dataclass
class LocalContext:
    """The attributes and method of ``awslambdaric``'s context that handlers use."""

    function_name: str
    memory_limit_in_mb: int
    timeout_s: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "1"
    client_context: LocalClientContext | None = None
    _deadline: float = 0.0

    @classmethod
    def create(
        cls, function_name: str, *, timeout_s: float, memory_mb: int, custom: dict[str, Any] | None = None
    ) -> LocalContext:
        context = cls(function_name=function_name, memory_limit_in_mb=memory_mb, timeout_s=timeout_s)
        if custom is not None:
            context.client_context = LocalClientContext(custom=custom)
        context._deadline = time.monotonic() + timeout_s
        return context

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}:live"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "local"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
