"""OpenAI server-sent events: ``chat.completion.chunk`` and text-completion chunks, then ``[DONE]``; and
the Responses API's typed events (:class:`ResponseEventEncoder`).

encoder = encoder_for(request, model="smollm2")
encoder.start()             # b'data: {"object": "chat.completion.chunk", ... "role": "assistant"}\\n\\n'
encoder.delta("Hel")        # one event per token
encoder.finish(generation)  # finish_reason (and usage when stream_options.include_usage), then [DONE]
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from snapllm.engine.types import TokenLogprob
from snapllm.errors import RequestError
from snapllm.protocol.completions.objects import (
    AnyOutputItem,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChatLogprobs,
    Completion,
    CompletionLogprobs,
    ContentPartEvent,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    FunctionCallDelta,
    FunctionCallItemOut,
    OpenAIObject,
    OutputItemEvent,
    OutputMessage,
    OutputText,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    ReasoningItemOut,
    ReasoningText,
    ResponseErrorEvent,
    ResponseLifecycleEvent,
    ResponseObject,
    ResponseStreamEvent,
    TextChoice,
    ToolCallDelta,
    Usage,
    function_call_items,
    item_status,
    new_completion_id,
    new_item_id,
    response_logprobs,
)
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
)
from snapllm.protocol.responses.responses_api import AnyRequest, ResponsesRequest

DONE = b"data: [DONE]\n\n"


def event(payload: OpenAIObject | dict[str, Any]) -> bytes:
    data = (
        payload.model_dump_json()
        if isinstance(payload, OpenAIObject)
        else json.dumps(payload, separators=(",", ":"))
    )
    return b"data: " + data.encode() + b"\n\n"


@dataclass
class ChunkEncoder:
    """Renders one streamed completion; every chunk of a stream shares its id and creation time."""

    chat: bool
    model: str
    include_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def for_request(cls, request: InferenceRequest, *, model: str) -> ChunkEncoder:
        chat = isinstance(request, ChatCompletionRequest)
        include_usage = bool((request.stream_options or {}).get("include_usage"))
        return cls(
            chat=chat,
            model=model,
            include_usage=include_usage,
            id=new_completion_id("chatcmpl" if chat else "cmpl"),
        )

    def _chunk(
        self,
        delta: ChatDelta | str | None,
        finish_reason: FinishReason | None = None,
        logprobs: tuple[TokenLogprob, ...] | None = None,
        **extra: Any,
    ) -> ChatCompletionChunk | Completion:
        """One chunk: a chat delta or a piece of text, a finish reason, or neither (the usage chunk)."""
        common = {"id": self.id, "created": self.created, "model": self.model, **extra}
        if self.chat:
            choices = [] if delta is None and finish_reason is None else [
                ChatChunkChoice(
                    index=0,
                    delta=delta or ChatDelta(),
                    logprobs=ChatLogprobs.of(logprobs),
                    finish_reason=finish_reason,
                )
            ]  # fmt: skip
            return ChatCompletionChunk(choices=choices, **common)
        texts = [] if delta is None and finish_reason is None else [
            TextChoice(
                index=0,
                text=str(delta or ""),
                logprobs=CompletionLogprobs.of(logprobs),
                finish_reason=finish_reason,
            )
        ]  # fmt: skip
        return Completion(choices=texts, **common)

    def start(self) -> bytes:
        """The opening event: chat streams announce the assistant role, as OpenAI's do."""
        if not self.chat:
            return b""
        return event(self._chunk(ChatDelta(role="assistant", content="")))

    def delta(self, text: str, logprobs: tuple[TokenLogprob, ...] | None = None) -> bytes:
        return event(self._chunk(ChatDelta(content=text) if self.chat else text, logprobs=logprobs))

    def reasoning(self, text: str) -> bytes:
        """A piece of a reasoning model's thinking: ``delta.reasoning_content`` (as llama-server names it)."""
        return event(self._chunk(ChatDelta(reasoning_content=text)))

    def tool_calls(self, generation: Generation) -> bytes:
        """The answer's tool calls as OpenAI streams them: per call, one delta that opens it (id, type,
        name, empty arguments) and one with its arguments."""
        out = b""
        for index, call in enumerate(generation.tool_calls):
            opening = ToolCallDelta(
                index=index,
                id=call.id,
                type="function",
                function=FunctionCallDelta(name=call.name, arguments=""),
            )
            arguments = ToolCallDelta(index=index, function=FunctionCallDelta(arguments=call.arguments))
            out += event(self._chunk(ChatDelta(tool_calls=[opening])))
            out += event(self._chunk(ChatDelta(tool_calls=[arguments])))
        return out

    def finish(self, generation: Generation) -> bytes:
        """Any tool calls, the finish_reason chunk (with snapllm's timings), the usage chunk if asked for,
        and ``[DONE]``."""
        finished = self._chunk(None, generation.finish_reason, **Completion.extras(generation))
        out = self.tool_calls(generation) if self.chat else b""
        out += event(finished)
        if self.include_usage:
            out += event(self._chunk(None, usage=Usage.of(generation)))
        return out + DONE

    def error(self, error: RequestError) -> bytes:
        """An error after the stream started (its status line is sent): one error event, then [DONE]."""
        return event(error.to_body()) + DONE


def named_event(payload: ResponseStreamEvent) -> bytes:
    """A Responses stream event: its type as the SSE ``event`` name, the object as its ``data``."""
    return b"event: " + payload.type.encode() + b"\ndata: " + payload.model_dump_json().encode() + b"\n\n"


@dataclass
class ResponseEventEncoder:
    """Renders one streamed response as OpenAI's event sequence, numbered by ``sequence_number``::

        response.created, response.in_progress
        response.output_item.added (message), response.content_part.added,
        response.output_text.delta ..., response.output_text.done, response.content_part.done,
        response.output_item.done
        (per function call) response.output_item.added, response.function_call_arguments.delta,
        response.function_call_arguments.done, response.output_item.done
        response.completed (or response.incomplete, when max_output_tokens or the deadline cut it)

    The message opens at the first piece of text; the function calls, which the engine sends whole,
    follow at the end. The final response holds exactly the text the deltas carried. No ``[DONE]``
    follows, as OpenAI sends none on this route.
    """

    request: ResponsesRequest
    model: str
    response: ResponseObject = field(init=False)
    sequence: int = 0
    message_id: str | None = None
    pieces: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    # The items finished before the message (a reasoning item): the message's output_index is after them.
    earlier: list[ReasoningItemOut] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.response = ResponseObject.started(
            self.request, model=self.model, id=new_item_id("resp"), created_at=int(time.time())
        )

    def _event(self, kind: type[ResponseStreamEvent], **fields: Any) -> bytes:
        payload = kind(sequence_number=self.sequence, **fields)
        self.sequence += 1
        return named_event(payload)

    def start(self) -> bytes:
        return self._event(
            ResponseLifecycleEvent, type="response.created", response=self.response
        ) + self._event(ResponseLifecycleEvent, type="response.in_progress", response=self.response)

    def reasoning(self, text: str) -> bytes:
        """A piece of the thinking: sent as one reasoning item before the message (or the calls)."""
        self.thinking.append(text)
        return b""

    def _close_reasoning(self) -> bytes:
        if not self.thinking or self.earlier:
            return b""
        item = ReasoningItemOut(
            id=new_item_id("rs"),
            summary=[],
            content=[ReasoningText(text="".join(self.thinking))],
            status="completed",
        )
        self.earlier.append(item)
        opened = item.model_copy(update={"status": "in_progress"})
        return self._event(
            OutputItemEvent, type="response.output_item.added", output_index=0, item=opened
        ) + (self._event(OutputItemEvent, type="response.output_item.done", output_index=0, item=item))

    def _open_message(self) -> bytes:
        out = self._close_reasoning()
        self.message_id = new_item_id("msg")
        item = OutputMessage(id=self.message_id, status="in_progress", content=[])
        part = OutputText(text="", annotations=[], logprobs=[] if self.request.logprobs else None)
        index = len(self.earlier)
        return (
            out
            + self._event(OutputItemEvent, type="response.output_item.added", output_index=index, item=item)
            + (
                self._event(
                    ContentPartEvent,
                    type="response.content_part.added",
                    item_id=self.message_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                )
            )
        )

    def delta(self, text: str, logprobs: tuple[TokenLogprob, ...] | None = None) -> bytes:
        out = b"" if self.message_id is not None else self._open_message()
        if not text and not logprobs:
            return out
        assert self.message_id is not None
        self.pieces.append(text)
        self.logprobs.extend(logprobs or ())
        return out + self._event(
            OutputTextDeltaEvent,
            item_id=self.message_id,
            output_index=len(self.earlier),
            content_index=0,
            delta=text,
            logprobs=response_logprobs(logprobs),
        )

    def _close_message(self, generation: Generation) -> tuple[OutputMessage, bytes]:
        out = b"" if self.message_id is not None else self._open_message()
        assert self.message_id is not None
        text = "".join(self.pieces)
        logprobs = response_logprobs(tuple(self.logprobs))
        part = OutputText(text=text, annotations=[], logprobs=logprobs if self.request.logprobs else None)
        message = OutputMessage(id=self.message_id, status=item_status(generation), content=[part])
        index = len(self.earlier)
        common = {"item_id": self.message_id, "output_index": index, "content_index": 0}
        out += self._event(OutputTextDoneEvent, text=text, logprobs=logprobs, **common)
        out += self._event(ContentPartEvent, type="response.content_part.done", part=part, **common)
        out += self._event(
            OutputItemEvent, type="response.output_item.done", output_index=index, item=message
        )
        return message, out

    def _calls(self, generation: Generation, *, first_index: int) -> tuple[list[FunctionCallItemOut], bytes]:
        items = function_call_items(generation)
        out = b""
        for index, item in enumerate(items, start=first_index):
            opened = item.model_copy(update={"arguments": "", "status": "in_progress"})
            common = {"item_id": item.id, "output_index": index}
            out += self._event(
                OutputItemEvent, type="response.output_item.added", output_index=index, item=opened
            )
            out += self._event(FunctionCallArgumentsDeltaEvent, delta=item.arguments, **common)
            out += self._event(
                FunctionCallArgumentsDoneEvent, name=item.name, arguments=item.arguments, **common
            )
            out += self._event(
                OutputItemEvent, type="response.output_item.done", output_index=index, item=item
            )
        return items, out

    def finish(self, generation: Generation) -> bytes:
        """The open message's closing events (or the function calls'), then the final response."""
        out = self._close_reasoning()
        output: list[AnyOutputItem] = [*self.earlier]
        if self.message_id is not None or not generation.tool_calls:
            message, closed = self._close_message(generation)
            out += closed
            output.append(message)
        calls, sent = self._calls(generation, first_index=len(output))
        output.extend(calls)
        self.response = self.response.finished(generation, output)
        final = "response.incomplete" if self.response.status == "incomplete" else "response.completed"
        return out + sent + self._event(ResponseLifecycleEvent, type=final, response=self.response)

    def error(self, error: RequestError) -> bytes:
        """An error after the stream started: one ``error`` event."""
        return self._event(ResponseErrorEvent, code=error.code, message=error.message, param=error.param)


StreamEncoder = ChunkEncoder | ResponseEventEncoder


def encoder_for(request: AnyRequest, *, model: str) -> StreamEncoder:
    """The encoder of a streamed answer to ``request``: Responses events, or completion chunks."""
    if isinstance(request, ResponsesRequest):
        return ResponseEventEncoder(request, model)
    return ChunkEncoder.for_request(request, model=model)
