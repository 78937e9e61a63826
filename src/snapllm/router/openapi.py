"""Response models for the router's OpenAPI document (``GET /openapi.json``).

Requests are validated with the shared models of :mod:`snapllm.contract`; these models only describe
what the router answers, so schema-driven clients and tests (schemathesis) can check responses::

    app.post("/v1/chat/completions", responses=completion_responses(ChatCompletion))
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """The OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: Any = None
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    """``chat.completion``; snapllm adds ``timings`` and ``seed``."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class TextChoice(BaseModel):
    index: int
    text: str
    logprobs: Any = None
    finish_reason: Literal["stop", "length"]


class Completion(BaseModel):
    """``text_completion``; snapllm adds ``timings`` and ``seed``."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"]
    models: list[str]


SSE_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}},
    "required": ["data"],
}


def error_doc(description: str) -> dict[str, Any]:
    """A documented error answer in the OpenAI error shape."""
    return {"description": description, "content": {"application/json": {"model": ErrorResponse}}}


# What every route that takes a JSON body may answer before its own checks (snapllm.edge).
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
        504: error_doc("The inference function did not answer in time."),
    }


def simple_responses(model: type[BaseModel]) -> dict[int, dict[str, Any]]:
    return {200: {"description": "OK", "content": {"application/json": {"model": model}}}}


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
