"""OpenAPI documentation of the HTTP answers: each route's success model and its errors.

The models are :mod:`snapllm.protocol.completions.objects` (one source for answers and document); requests are
documented
from the contract's models by the router's resolver::

    app.post("/v1/chat/completions", responses=completion_responses(ChatCompletion))
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from snapllm.errors import ErrorResponse

SSE_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}},
    "required": ["data"],
}


def error_doc(description: str) -> dict[str, Any]:
    """A documented error answer in the OpenAI error shape."""
    return {"description": description, "content": {"application/json": {"model": ErrorResponse}}}


# What every route that takes a JSON body may answer before its own checks (snapllm.protocol.http.edge).
BODY_ERRORS = {
    413: error_doc("The body is larger than the configured limit."),
    415: error_doc("The body is not JSON."),
}


def completion_responses(model: type[BaseModel]) -> dict[int, dict[str, Any]]:
    """The documented answers of a completion route, errors included (in the OpenAI error shape)."""
    return {
        200: {
            "description": "The completion. With stream=true (streaming endpoint only): server-sent events.",
            "content": {
                "application/json": {"model": model},
                # One schema per event: data is a JSON chunk, or "[DONE]" last.
                "text/event-stream": {"schema": SSE_EVENT},
            },
        },
        400: error_doc("Invalid or unsupported request (the error's param names the field)."),
        404: error_doc("Unknown model."),
        **BODY_ERRORS,
        429: error_doc("The model is at its concurrency limit; see Retry-After."),
        500: error_doc("Unexpected router failure."),
        502: error_doc("The inference function failed."),
        503: error_doc(
            "The model is not ready yet (its SnapStart version is being optimised); see Retry-After."
        ),
        504: error_doc("The inference function did not answer in time."),
    }


def model_route_responses(model: type[BaseModel]) -> dict[int, dict[str, Any]]:
    """The documented answers of a route answered by a model function without generating (tokens,
    counts, embeddings)."""
    return {
        200: {"description": "OK", "content": {"application/json": {"model": model}}},
        **{status: answer for status, answer in completion_responses(model).items() if status != 200},
    }


def simple_responses(model: type[BaseModel]) -> dict[int, dict[str, Any]]:
    return {200: {"description": "OK", "content": {"application/json": {"model": model}}}}


def lookup_responses(model: type[BaseModel], missing: str) -> dict[int, dict[str, Any]]:
    """The documented answers of a route that reads one thing by its id: it, or a 404 saying ``missing``."""
    return {**simple_responses(model), 404: error_doc(missing)}


# Powertools documents a 422 on every validated route; this API answers invalid requests with a 400 in the
# OpenAI error shape instead, so the 422 and its schemas would only mislead clients generated from it.
_FRAMEWORK_SCHEMAS = ("HTTPValidationError", "ValidationError")


def without_validation_errors(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the framework's 422 answers and the schemas only they use."""
    for item in (document.get("paths") or {}).values():
        for operation in item.values():
            if isinstance(operation, dict):
                (operation.get("responses") or {}).pop("422", None)
    schemas = (document.get("components") or {}).get("schemas") or {}
    for name in _FRAMEWORK_SCHEMAS:
        schemas.pop(name, None)
    return document
