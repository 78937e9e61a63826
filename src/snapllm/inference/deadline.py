"""The invoke's deadline: when the Lambda context's time runs out, or earlier when the caller says so.

A caller that stops waiting before the function's own timeout (the router, behind API Gateway's 30 s)
sends its deadline in the invoke's ClientContext (``custom``, :data:`CALLER_DEADLINE_KEY`, Unix epoch
milliseconds), so the function stops generating when nobody waits for the answer any more.
"""

from __future__ import annotations

import time
from typing import Any

from snapllm.engine.types import Deadline

CALLER_DEADLINE_KEY = "snapllm-deadline-epoch-ms"


def invoke_deadline(context: Any, *, margin_ms: int) -> Deadline | None:
    """The invoke's deadline, or the caller's if that is earlier (the router sends its own in the
    ClientContext), less ``margin_ms`` for the response. None when the context has no deadline at all."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    remaining_ms = float(remaining())
    custom = getattr(getattr(context, "client_context", None), "custom", None) or {}
    caller = custom.get(CALLER_DEADLINE_KEY) if isinstance(custom, dict) else None
    if isinstance(caller, int | float) and not isinstance(caller, bool):
        remaining_ms = min(remaining_ms, caller - time.time() * 1000.0)
    return Deadline(time.monotonic() + (remaining_ms - margin_ms) / 1000.0)
