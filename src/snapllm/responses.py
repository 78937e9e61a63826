"""What snapllm answers, as pydantic models: the single source of every response shape.

The direct invoke, the router, the streaming function and ``/openapi.json`` all use these, so a field
added here appears in every answer and in the document at once::

    completion = completion_response(request, generation, model="smollm2")
    completion.model_dump(mode="json")     # the chat.completion / text_completion object
    ModelList.of(["smollm2"], created=0, owned_by="snapllm")

snapllm adds ``timings`` and ``seed`` (and ``deadline_reached`` when generation stopped at the caller's
deadline) to OpenAI's objects; clients ignore fields they do not know.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer

from snapllm.contract import (
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
    Timings,
    TokenLogprob,
    ToolCall,
)
from snapllm.errors import ErrorResponse

__all__ = ["ErrorResponse"]


def new_completion_id(kind: Literal["chatcmpl", "cmpl"]) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


class OpenAIObject(BaseModel):
    """A response object; the fields in ``omit_when_none`` are left out rather than sent as null."""

    omit_when_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler):  # the model's schema
        data = handler(self)
        for name in self.omit_when_none:
            if data.get(name) is None:
                data.pop(name, None)
        return data


class PromptTokensDetails(OpenAIObject):
    cached_tokens: int


class Usage(OpenAIObject):
    """Token counts; ``prompt_tokens_details.cached_tokens`` is the prompt prefix reused from the KV cache."""

    omit_when_none = frozenset({"prompt_tokens_details"})

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, generation: Generation) -> Usage:
        return cls(
            prompt_tokens=generation.prompt_tokens,
            completion_tokens=generation.completion_tokens,
            total_tokens=generation.prompt_tokens + generation.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=generation.cached_tokens),
        )


class _Generated(OpenAIObject):
    """Fields every completion object shares, snapllm's extras included."""

    omit_when_none = frozenset({"timings", "seed", "deadline_reached", "usage", "system_fingerprint"})

    id: str
    object: str  # each object's own literal
    created: int
    model: str
    system_fingerprint: str | None = None
    timings: Timings | None = None
    seed: int | None = None
    deadline_reached: Literal[True] | None = None

    @staticmethod
    def extras(generation: Generation) -> dict[str, Any]:
        return {
            "timings": generation.timings,
            "seed": generation.seed,
            "deadline_reached": True if generation.deadline_reached else None,
            "system_fingerprint": generation.system_fingerprint,
        }


class FunctionCallOut(OpenAIObject):
    name: str
    arguments: str


class ToolCallOut(OpenAIObject):
    """A call in ``message.tool_calls``: ``arguments`` is a JSON string valid against the parameters."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut

    @classmethod
    def of(cls, call: ToolCall) -> ToolCallOut:
        return cls(id=call.id, function=FunctionCallOut(name=call.name, arguments=call.arguments))


class ChatMessageOut(OpenAIObject):
    """The answer: text in ``content``, or ``tool_calls`` (and a null ``content``)."""

    omit_when_none = frozenset({"tool_calls"})

    role: Literal["assistant"]
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class TopLogprob(OpenAIObject):
    token: str
    logprob: float
    bytes: list[int]


class ContentLogprob(OpenAIObject):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChatLogprobs(OpenAIObject):
    """``choices[].logprobs`` of a chat completion: one entry per generated token."""

    content: list[ContentLogprob]
    refusal: None = None

    @classmethod
    def of(cls, tokens: tuple[TokenLogprob, ...] | None) -> ChatLogprobs | None:
        if tokens is None:
            return None
        return cls(
            content=[
                ContentLogprob(
                    token=t.token,
                    logprob=t.logprob,
                    bytes=list(t.token_bytes),
                    top_logprobs=[TopLogprob(token=a, logprob=lp, bytes=list(b)) for a, b, lp in t.top],
                )
                for t in tokens
            ]
        )


class CompletionLogprobs(OpenAIObject):
    """``choices[].logprobs`` of a text completion (the older, column-wise shape)."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]

    @classmethod
    def of(cls, tokens: tuple[TokenLogprob, ...] | None, *, offset: int = 0) -> CompletionLogprobs | None:
        if tokens is None:
            return None
        offsets = []
        for t in tokens:
            offsets.append(offset)
            offset += len(t.token)
        return cls(
            tokens=[t.token for t in tokens],
            token_logprobs=[t.logprob for t in tokens],
            top_logprobs=[{a: lp for a, _, lp in t.top} for t in tokens],
            text_offset=offsets,
        )


class ChatChoice(OpenAIObject):
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason


class ChatCompletion(_Generated):
    """``chat.completion``."""

    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: Usage


class TextChoice(OpenAIObject):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None


class Completion(_Generated):
    """``text_completion``; streamed text completions are chunks of this same object."""

    object: Literal["text_completion"] = "text_completion"
    choices: list[TextChoice]
    usage: Usage | None = None


class FunctionCallDelta(OpenAIObject):
    omit_when_none = frozenset({"name", "arguments"})

    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(OpenAIObject):
    """A piece of a streamed tool call: the first names it (``id``, ``type``, function name), the next
    carry its ``arguments``; clients join the pieces by ``index``."""

    omit_when_none = frozenset({"id", "type"})

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class ChatDelta(OpenAIObject):
    omit_when_none = frozenset({"role", "content", "tool_calls"})

    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(OpenAIObject):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None


class ChatCompletionChunk(_Generated):
    """``chat.completion.chunk``: one event of a streamed chat completion."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


def completion_response(
    request: InferenceRequest, generation: Generation, *, model: str
) -> ChatCompletion | Completion:
    """The OpenAI object answering ``request``, with snapllm's timings and seed."""
    common = {"created": int(time.time()), "model": model, **_Generated.extras(generation)}
    usage = Usage.of(generation)
    if isinstance(request, ChatCompletionRequest):
        message = (
            ChatMessageOut(
                role="assistant",
                content=None,
                tool_calls=[ToolCallOut.of(call) for call in generation.tool_calls],
            )
            if generation.tool_calls
            else ChatMessageOut(role="assistant", content=generation.text)
        )
        return ChatCompletion(
            id=new_completion_id("chatcmpl"),
            choices=[
                ChatChoice(
                    index=0,
                    message=message,
                    logprobs=ChatLogprobs.of(generation.logprobs),
                    finish_reason=generation.finish_reason,
                )
            ],
            usage=usage,
            **common,
        )
    return Completion(
        id=new_completion_id("cmpl"),
        choices=[
            TextChoice(
                index=0,
                text=generation.text,
                logprobs=CompletionLogprobs.of(generation.logprobs),
                finish_reason=generation.finish_reason,
            )
        ],
        usage=usage,
        **common,
    )


def render_response(request: InferenceRequest, generation: Generation, *, model: str) -> dict[str, Any]:
    """:func:`completion_response` as the JSON object a direct invoke returns."""
    return completion_response(request, generation, model=model).model_dump(mode="json")


class ModelCard(OpenAIObject):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(OpenAIObject):
    object: Literal["list"] = "list"
    data: list[ModelCard]

    @classmethod
    def of(cls, names: Iterable[str], *, created: int, owned_by: str) -> ModelList:
        return cls(data=[ModelCard(id=name, created=created, owned_by=owned_by) for name in sorted(names)])


class Health(OpenAIObject):
    status: Literal["ok"]
    models: list[str]
