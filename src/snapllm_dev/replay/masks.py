"""What legitimately varies between two runs of one event, masked before an answer is compared or recorded.

Each mask is a pure function of a value's location (its path of keys and indexes) and the value; it returns
the placeholder that stands for the value, or ``None`` to keep it. :data:`MASKS` lists them, so a new kind
of varying field is one function. Only what differs from run to run is masked: the model's text, token
counts, status codes, error types and messages stay, and are compared.

    >>> normalize({"id": "chatcmpl-4f1c2a9e0b7d", "created": 1795323000, "model": "smollm2"})
    {'id': '<generated id>', 'created': '<time>', 'model': 'smollm2'}
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from snapllm.protocol.requests import GenerationParameters

Path = tuple[str | int, ...]
Mask = Callable[[Path, Any], Any]

# chatcmpl-..., cmpl-..., resp_..., call_..., msg_..., fc_...: ids the API mints per response.
_GENERATED_ID = re.compile(r"(?:chatcmpl|cmpl|resp|call|msg|fc)[-_][0-9A-Za-z]{6,}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_CLOCK_KEYS = frozenset(
    {"created", "created_at", "completed_at", "started_at", "ended_at", "timestamp", "date"}
)
_REQUEST_ID_KEYS = frozenset(
    {"requestid", "request_id", "x-amzn-requestid", "x-request-id", "apigw-requestid", "x-amzn-trace-id"}
)
_DEFAULT_TEMPERATURE = GenerationParameters.model_fields["temperature"].default
# What sampling without a seed changes: the text and everything derived from it.
_SAMPLED_KEYS = frozenset(
    {
        "content",
        "text",
        "finish_reason",
        "usage",
        "seed",
        "logprobs",
        "output",
        "status",
        "incomplete_details",
    }
)


def _key(path: Path) -> str | None:
    return path[-1].lower() if path and isinstance(path[-1], str) else None


def generated_id(path: Path, value: Any) -> str | None:
    if isinstance(value, str) and _GENERATED_ID.fullmatch(value):
        return "<generated id>"
    return None


def clock_time(path: Path, value: Any) -> str | None:
    if _key(path) in _CLOCK_KEYS and isinstance(value, int | float | str):
        return "<time>"
    return None


def request_id(path: Path, value: Any) -> str | None:
    return "<request id>" if _key(path) in _REQUEST_ID_KEYS else None


def measured_time(path: Path, value: Any) -> str | None:
    """snapllm's ``timings`` block, and any duration (``duration_s``, ``wait_ms``...): wall-clock figures."""
    key = _key(path)
    if key == "timings" or (key is not None and re.search(r"(?:^|_)(?:duration|seconds|ms|s)$", key)):
        return "<measured>"
    return None


def stack_trace(path: Path, value: Any) -> str | None:
    return "<stack trace>" if _key(path) == "stacktrace" else None


def uuid_in_text(path: Path, value: Any) -> str | None:
    """Execution names and ARNs, run ids inside S3 keys: the uuid part only, so the rest is still compared."""
    if isinstance(value, str) and _UUID.search(value):
        return _UUID.sub("<uuid>", value)
    return None


def drawn_seed(path: Path, value: Any) -> str | None:
    """For a request without a seed: the function draws one per request, and says which in ``seed``."""
    return "<drawn seed>" if _key(path) == "seed" else None


def unseeded_sample(path: Path, value: Any) -> str | None:
    """For a request that samples (temperature above 0) without a seed: its text cannot be reproduced, only
    its shape."""
    return "<sampled without a seed>" if _key(path) in _SAMPLED_KEYS else None


MASKS: tuple[Mask, ...] = (generated_id, clock_time, request_id, measured_time, stack_trace, uuid_in_text)


def normalize(value: Any, masks: tuple[Mask, ...] = MASKS, path: Path = ()) -> Any:
    """``value`` with every varying part replaced by its mask's placeholder (the first mask that applies)."""
    for mask in masks:
        placeholder = mask(path, value)
        if placeholder is not None:
            return placeholder
    if isinstance(value, dict):
        return {key: normalize(item, masks, (*path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [normalize(item, masks, (*path, index)) for index, item in enumerate(value)]
    return value


def masks_for(request: Any) -> tuple[Mask, ...]:
    """The masks for the answer to ``request`` (a chat or text completion, a response, or anything else): a
    request without a seed gets a drawn one, and one that also samples gets text that differs from run to
    run."""
    if not isinstance(request, dict) or not any(
        field in request for field in ("messages", "prompt", "input")
    ):
        return MASKS
    if request.get("seed") is not None:
        return MASKS
    temperature = request.get("temperature", _DEFAULT_TEMPERATURE)
    if isinstance(temperature, int | float) and temperature == 0:
        return (*MASKS, drawn_seed)
    return (*MASKS, unseeded_sample)
