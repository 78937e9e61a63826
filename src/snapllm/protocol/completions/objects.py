"""What snapllm answers, as pydantic models: the single source of every response shape.

    completion_response(request, generation, model="smollm2")   # chat.completion / text_completion
    response_object(request, generation, model="smollm2")       # a Responses API answer
    ModelList.of(["smollm2"], created=0, owned_by="snapllm")

The invoke, the router, the stream and ``/openapi.json`` use these: a field added here shows in them all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, field_serializer, model_serializer

from snapllm.engine.types import Timings, TokenLogprob
from snapllm.errors import ErrorResponse, UnknownModelError
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
    ToolCall,
)
from snapllm.protocol.responses.responses_api import (
    AnyRequest,
    FunctionTool,
    ResponsesRequest,
    ResponsesToolChoice,
    TextFormatJSONObject,
    TextFormatJSONSchema,
    TextFormatText,
)

__all__ = ["ErrorResponse"]


#: What ``deadline_reached`` says, in /openapi.json.
DEADLINE_REACHED = (
    "Present (true) when generation stopped at the time limit rather than at max_tokens or the end of the "
    "answer: finish_reason is then 'length' (a response's incomplete_details.reason 'deadline'), and the "
    "answer holds what was generated before the limit."
)


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


class CompletionTokensDetails(OpenAIObject):
    reasoning_tokens: int


class Usage(OpenAIObject):
    """Token counts; ``prompt_tokens_details.cached_tokens`` is the prompt prefix reused from the KV cache,
    ``completion_tokens_details.reasoning_tokens`` the tokens a reasoning model thought in."""

    omit_when_none = frozenset({"prompt_tokens_details", "completion_tokens_details"})

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None

    @classmethod
    def of(cls, generation: Generation) -> Usage:
        return cls(
            prompt_tokens=generation.prompt_tokens,
            completion_tokens=generation.completion_tokens,
            total_tokens=generation.prompt_tokens + generation.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=generation.cached_tokens),
            completion_tokens_details=CompletionTokensDetails(reasoning_tokens=generation.reasoning_tokens)
            if generation.reasoning is not None
            else None,
        )


class _Generated(OpenAIObject):
    """Fields every completion object shares, snapllm's extras included."""

    omit_when_none = frozenset(
        {"timings", "seed", "deadline_reached", "usage", "system_fingerprint", "validated"}
    )

    id: str
    object: str  # each object's own literal
    created: int
    model: str
    system_fingerprint: str | None = None
    timings: Timings | None = None
    seed: int | None = None
    deadline_reached: Literal[True] | None = Field(default=None, description=DEADLINE_REACHED)
    validated: list[str] | None = Field(
        default=None,
        description="snapllm's: the response_format's constraints the grammar did not enforce, which the "
        "complete answer was validated against instead",
    )

    @field_serializer("timings")
    def _rounded(self, timings: Timings | None) -> Timings | None:
        return None if timings is None else Timings(**timings.as_dict())

    @staticmethod
    def extras(generation: Generation) -> dict[str, Any]:
        return {
            "timings": generation.timings,
            "seed": generation.seed,
            "deadline_reached": True if generation.deadline_reached else None,
            "system_fingerprint": generation.system_fingerprint,
            "validated": list(generation.validated) or None,
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
    """The answer: text in ``content``, and ``tool_calls`` when it calls (``content`` then holds any text
    the model wrote before its calls, else null); a reasoning model's thinking in ``reasoning_content``
    (llama-server's and DeepSeek's name)."""

    omit_when_none = frozenset({"tool_calls", "reasoning_content"})

    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None
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
    omit_when_none = frozenset({"role", "content", "reasoning_content", "tool_calls"})

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
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
        message = ChatMessageOut(
            role="assistant",
            content=(generation.text or None) if generation.tool_calls else generation.text,
            reasoning_content=generation.reasoning,
            tool_calls=[ToolCallOut.of(call) for call in generation.tool_calls] or None,
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


def render_response(request: AnyRequest, generation: Generation, *, model: str) -> dict[str, Any]:
    """The JSON object a direct invoke returns: :func:`completion_response`, or for a Responses request
    :func:`response_object`."""
    if isinstance(request, ResponsesRequest):
        return response_object(request, generation, model=model).model_dump(mode="json")
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

    def card(self, model: str) -> ModelCard:
        """The listed model ``model`` (``GET /v1/models/{model}``); :class:`UnknownModelError` (404
        ``model_not_found``, as OpenAI answers) if there is none."""
        for card in self.data:
            if card.id == model:
                return card
        available = ", ".join(card.id for card in self.data)
        raise UnknownModelError(f"the model {model!r} does not exist; available: {available}", param="model")


class Health(OpenAIObject):
    status: Literal["ok"]
    models: list[str]


# --- The Responses API (/v1/responses) --------------------------------------------------------------------


def new_item_id(kind: Literal["resp", "msg", "fc", "rs"]) -> str:
    return f"{kind}_{uuid.uuid4().hex}"


class OutputText(OpenAIObject):
    """The answer's text; ``logprobs`` only when the request included them."""

    omit_when_none = frozenset({"logprobs"})

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[dict[str, Any]]
    logprobs: list[ContentLogprob] | None = None


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(OpenAIObject):
    """An output item holding the answer's text."""

    type: Literal["message"] = "message"
    id: str
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class FunctionCallItemOut(OpenAIObject):
    """An output item holding one function call: ``call_id`` is what its ``function_call_output`` answers."""

    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class ReasoningText(OpenAIObject):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItemOut(OpenAIObject):
    """An output item holding a reasoning model's thinking, before the answer's items."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[dict[str, Any]]
    content: list[ReasoningText]
    status: ItemStatus

    @classmethod
    def of(cls, generation: Generation) -> ReasoningItemOut:
        return cls(
            id=new_item_id("rs"),
            summary=[],
            content=[ReasoningText(text=generation.reasoning or "")],
            status="completed" if generation.text or generation.tool_calls else item_status(generation),
        )


AnyOutputItem = ReasoningItemOut | OutputMessage | FunctionCallItemOut
OutputItem = Annotated[AnyOutputItem, Field(discriminator="type")]


class InputTokensDetails(OpenAIObject):
    """``cached_tokens`` were reused from the KV cache; the others were evaluated and written to it (the
    next request may reuse them as its prefix)."""

    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(OpenAIObject):
    reasoning_tokens: int


class ResponseUsage(OpenAIObject):
    """Token counts; ``input_tokens_details.cached_tokens`` is the prompt prefix reused from the KV cache."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, generation: Generation) -> ResponseUsage:
        return cls(
            input_tokens=generation.prompt_tokens,
            input_tokens_details=InputTokensDetails(
                cached_tokens=generation.cached_tokens,
                cache_write_tokens=generation.prompt_tokens - generation.cached_tokens,
            ),
            output_tokens=generation.completion_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=generation.reasoning_tokens),
            total_tokens=generation.prompt_tokens + generation.completion_tokens,
        )


class IncompleteDetails(OpenAIObject):
    """Why a response is ``incomplete``: ``max_output_tokens`` (OpenAI's value) when the token limit cut it,
    ``deadline`` (snapllm's) when generation stopped at the time limit, with what it had generated (the
    invoke's deadline, or the router's, less a margin to answer in). OpenAI's SDKs keep a value they do not
    know as it is."""

    reason: Literal["max_output_tokens", "deadline"]


class ResponseTextOut(OpenAIObject):
    """``text``: the format the answer was given in."""

    format: TextFormatText | TextFormatJSONObject | TextFormatJSONSchema


ResponseStatus = Literal["in_progress", "completed", "incomplete"]


class ResponseObject(OpenAIObject):
    """``response``: the answer of ``POST /v1/responses``, with the request's settings as they were applied.

    Nothing is stored (``store`` is false). snapllm adds ``timings`` and ``seed`` (and
    ``deadline_reached``), as to its completions."""

    omit_when_none = frozenset({"timings", "seed", "deadline_reached", "top_logprobs"})

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    error: None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    temperature: float
    top_p: float
    tool_choice: ResponsesToolChoice
    tools: list[FunctionTool]
    text: ResponseTextOut
    top_logprobs: int | None = None
    truncation: Literal["disabled"] = "disabled"
    store: Literal[False] = False
    background: Literal[False] = False
    previous_response_id: None = None
    metadata: dict[str, str]
    usage: ResponseUsage | None = None
    timings: Timings | None = None
    seed: int | None = None
    deadline_reached: Literal[True] | None = Field(default=None, description=DEADLINE_REACHED)

    @field_serializer("timings")
    def _rounded(self, timings: Timings | None) -> Timings | None:
        return None if timings is None else Timings(**timings.as_dict())

    @classmethod
    def started(cls, request: ResponsesRequest, *, model: str, id: str, created_at: int) -> ResponseObject:
        """The response as it stands before any output: ``in_progress``, no output, no usage."""
        return cls(
            id=id,
            created_at=created_at,
            status="in_progress",
            instructions=request.instructions,
            max_output_tokens=request.max_output_tokens,
            model=model,
            output=[],
            parallel_tool_calls=request.parallel_tool_calls is not False,
            temperature=request.temperature,
            top_p=request.top_p,
            tool_choice=request.tool_choice or "auto",
            tools=list(request.tools or []),
            text=ResponseTextOut(format=request.format),
            top_logprobs=request.top_logprobs,
            metadata=dict(request.metadata or {}),
        )

    def finished(self, generation: Generation, output: list[AnyOutputItem]) -> ResponseObject:
        """This response with its output, status and usage, once ``generation`` has ended."""
        incomplete = generation.finish_reason == "length"
        reason = "deadline" if generation.deadline_reached else "max_output_tokens"
        return self.model_copy(
            update={
                "status": "incomplete" if incomplete else "completed",
                "incomplete_details": IncompleteDetails(reason=reason) if incomplete else None,
                "output": output,
                "usage": ResponseUsage.of(generation),
                "timings": generation.timings,
                "seed": generation.seed,
                "deadline_reached": True if generation.deadline_reached else None,
            }
        )


def response_logprobs(tokens: tuple[TokenLogprob, ...] | None) -> list[ContentLogprob]:
    """Per-token log probabilities in the Responses shape (the chat completion's entries)."""
    found = ChatLogprobs.of(tokens)
    return found.content if found is not None else []


def item_status(generation: Generation) -> ItemStatus:
    return "incomplete" if generation.finish_reason == "length" else "completed"


def function_call_items(generation: Generation) -> list[FunctionCallItemOut]:
    """One output item per function call the generation made."""
    return [
        FunctionCallItemOut(
            id=new_item_id("fc"),
            call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            status=item_status(generation),
        )
        for call in generation.tool_calls
    ]


def output_items(generation: Generation, *, logprobs: bool = False) -> list[AnyOutputItem]:
    """The output items of a finished generation: its thinking (a reasoning item), then its function calls
    (after a message with any text before them), else one message with its text."""
    thinking: list[AnyOutputItem] = (
        [ReasoningItemOut.of(generation)] if generation.reasoning is not None else []
    )
    if generation.tool_calls:
        return [*thinking, *function_call_items(generation)]
    part = OutputText(
        text=generation.text,
        annotations=[],
        logprobs=response_logprobs(generation.logprobs) if logprobs else None,
    )
    return [*thinking, OutputMessage(id=new_item_id("msg"), status=item_status(generation), content=[part])]


def response_object(request: ResponsesRequest, generation: Generation, *, model: str) -> ResponseObject:
    """The ``response`` object answering ``request``."""
    started = ResponseObject.started(
        request, model=model, id=new_item_id("resp"), created_at=int(time.time())
    )
    return started.finished(generation, output_items(generation, logprobs=request.logprobs))


# --- Streamed responses: one event per step, each with its sequence_number ----------------------------------


class ResponseStreamEvent(OpenAIObject):
    """One server-sent event of a streamed response (sent as ``event: <type>`` and ``data: <json>``)."""

    type: str
    sequence_number: int


class ResponseLifecycleEvent(ResponseStreamEvent):
    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete"]
    response: ResponseObject


class OutputItemEvent(ResponseStreamEvent):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class ContentPartEvent(ResponseStreamEvent):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class OutputTextDeltaEvent(ResponseStreamEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[ContentLogprob]


class OutputTextDoneEvent(ResponseStreamEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[ContentLogprob]


class FunctionCallArgumentsDeltaEvent(ResponseStreamEvent):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDoneEvent(ResponseStreamEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    name: str
    arguments: str


class ResponseErrorEvent(ResponseStreamEvent):
    """An error after the stream started (its status line was sent)."""

    type: Literal["error"] = "error"
    code: str | None
    message: str
    param: str | None
