"""One chat completion through the :class:`~snapllm.inference_client.InferenceClient` protocol.

The agent never loads a model: it invokes the inference alias (or, locally, a restored environment)::

    reply = chat(client, system="Be brief.", user="Summarize: ...", max_tokens=40)
    reply.text, reply.completion_tokens
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from snapllm.agent.errors import InferenceRejectedError
from snapllm.errors import InferenceInvokeError, RequestError
from snapllm.inference_client import InferenceClient


@dataclass(frozen=True)
class ChatReply:
    text: str
    completion_tokens: int
    finish_reason: str | None


def prompt_seed(system: str, user: str) -> int:
    """The sampling seed of a prompt: the same question gets the same answer, so an execution (and a replay
    of its event) is reproducible, while different questions still sample differently."""
    digest = hashlib.sha256(f"{system}\0{user}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def chat(
    client: InferenceClient, *, system: str, user: str, max_tokens: int, temperature: float = 0.2
) -> ChatReply:
    """Ask the model once. A 4xx answer raises :class:`InferenceRejectedError` (retrying cannot help);
    throttles, timeouts and 5xx raise the client's ``InferenceInvokeError`` subclasses (transient)."""
    try:
        body: dict[str, Any] = client.invoke(
            {
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "max_tokens": max_tokens,
                "temperature": temperature,
                "seed": prompt_seed(system, user),
            }
        )
    except InferenceInvokeError:
        raise
    except RequestError as exc:
        raise InferenceRejectedError(
            f"the model rejected the request ({exc.status_code}): {exc.message}"
        ) from None
    try:
        choice = body["choices"][0]
        text = str(choice["message"]["content"] or "").strip()
    except (KeyError, IndexError, TypeError) as exc:
        raise InferenceRejectedError("the model's answer has no choices[0].message.content") from exc
    usage = body.get("usage") or {}
    return ChatReply(
        text=text,
        completion_tokens=int(usage.get("completion_tokens", 0)),
        finish_reason=choice.get("finish_reason"),
    )
