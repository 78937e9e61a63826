"""OpenAI server-sent events: ``chat.completion.chunk`` and text-completion chunks, then ``[DONE]``.

encoder = ChunkEncoder.for_request(request, model="smollm2")
encoder.start()             # b'data: {"object": "chat.completion.chunk", ... "role": "assistant"}\\n\\n'
encoder.delta("Hel")        # one event per token
encoder.finish(generation)  # finish_reason (and usage when stream_options.include_usage), then [DONE]
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from snapllm.contract import (
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
    TokenLogprob,
)
from snapllm.errors import RequestError
from snapllm.responses import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChatLogprobs,
    Completion,
    CompletionLogprobs,
    FunctionCallDelta,
    OpenAIObject,
    TextChoice,
    ToolCallDelta,
    Usage,
    new_completion_id,
)

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
