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

from snapllm.contract import ChatCompletionRequest, Generation, InferenceRequest, new_completion_id
from snapllm.errors import RequestError

DONE = b"data: [DONE]\n\n"


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


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

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def _choice(self, text: str | None, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}

    def start(self) -> bytes:
        """The opening event: chat streams announce the assistant role, as OpenAI's do."""
        if not self.chat:
            return b""
        return event(
            self._chunk(
                [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        )

    def delta(self, text: str) -> bytes:
        return event(self._chunk([self._choice(text, None)]))

    def finish(self, generation: Generation) -> bytes:
        """The finish_reason chunk (with snapllm's timings), the usage chunk if asked for, and ``[DONE]``."""
        extra: dict[str, Any] = {"timings": generation.timings.as_dict(), "seed": generation.seed}
        if generation.deadline_reached:
            extra["deadline_reached"] = True
        out = event(self._chunk([self._choice(None, generation.finish_reason)], **extra))
        if self.include_usage:
            out += event(self._chunk([], usage=generation.usage()))
        return out + DONE

    def error(self, error: RequestError) -> bytes:
        """An error after the stream started (its status line is sent): one error event, then [DONE]."""
        return event(error.to_body()) + DONE
