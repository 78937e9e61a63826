"""Chat completions for the agent through the :class:`~snapllm.inference.client.InferenceClient` protocol.

    reply = chat(client, system="Be brief.", user="Summarize: ...", max_tokens=40)
    reply = complete(client, messages, max_tokens=96, tools=[...], tool_choice={"type": "function", ...})
    reply.text, reply.json(), reply.tool_calls

Every request carries a seed derived from itself and ``cache_prompt``: docs/agents.md says why.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from snapllm.agent.errors import InferenceDeadlineError, InferenceRejectedError, ModelAnswerIncompleteError
from snapllm.errors import DeadlineExceededError, InferenceInvokeError, RequestError
from snapllm.inference.client import InferenceClient

# A sentence's end: its mark, any closing quote or bracket, then a space or the text's end ("3.5" is none).
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")


@dataclass(frozen=True)
class ChatReply:
    text: str
    completion_tokens: int
    finish_reason: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    #: The prompt's tokens the model reused from a saved state (a declared prefix, an earlier request).
    cached_tokens: int = 0

    @property
    def prose(self) -> str:
        """The text, ended at its last whole sentence when ``max_tokens`` cut it: an answer stops at a
        sentence, not mid-word."""
        return whole_sentences(self.text) if self.finish_reason == "length" else self.text

    def json(self, what: str = "answer") -> Any:
        """The reply's text as JSON. The grammar guarantees valid JSON unless ``max_tokens`` cut it."""
        try:
            return json.loads(self.text)
        except ValueError:
            raise ModelAnswerIncompleteError(
                f"the model's {what} is not complete JSON (finish_reason {self.finish_reason!r}); "
                "raise its max_tokens"
            ) from None


def whole_sentences(text: str) -> str:
    """``text`` up to the end of its last whole sentence; all of it when no sentence ends in it.

    >>> whole_sentences("It restores a snapshot. So the requ")
    'It restores a snapshot.'
    """
    ends = [match.end() for match in _SENTENCE_END.finditer(text)]
    return text[: ends[-1]] if ends else text


def complete_items(text: str, key: str) -> list[Any]:
    """The complete items of the list ``key`` in a JSON object that ``max_tokens`` cut short.

    The grammar made every item that was finished valid; only the one being written when the cut came is
    lost. ``'{"steps": [{"a": 1}, {"a": 2}, {"a"'`` -> ``[{"a": 1}, {"a": 2}]``.
    """
    decoder = json.JSONDecoder()
    start = text.find(f'"{key}"')
    bracket = text.find("[", start) if start >= 0 else -1
    items: list[Any] = []
    if bracket < 0:
        return items
    position = bracket + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        try:
            item, position = decoder.raw_decode(text, position)
        except ValueError:
            return items
        items.append(item)


def prompt_seed(system: str, user: str) -> int:
    """The sampling seed of a prompt: the same question gets the same answer, so an execution (and a replay
    of its event) is reproducible, while different questions still sample differently."""
    digest = hashlib.sha256(f"{system}\0{user}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def request_seed(request: dict[str, Any]) -> int:
    """The seed of a whole request (messages, tools, format): :func:`prompt_seed` for any request shape."""
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).digest()
    return int.from_bytes(digest[:4], "big")


def chat(
    client: InferenceClient, *, system: str, user: str, max_tokens: int, temperature: float = 0.2
) -> ChatReply:
    """Ask the model once, in text. A 4xx answer raises :class:`InferenceRejectedError` (retrying cannot
    help); throttles, timeouts and 5xx raise the client's ``InferenceInvokeError`` subclasses (transient)."""
    return _send(
        client,
        {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": prompt_seed(system, user),
            "cache_prompt": True,
        },
    )


def complete(
    client: InferenceClient,
    messages: Sequence[dict[str, Any]],
    *,
    max_tokens: int,
    temperature: float = 0.2,
    response_format: dict[str, Any] | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
) -> ChatReply:
    """Ask the model once with any messages, optionally constrained by ``response_format`` or ``tools``
    (the inference function enforces both with a grammar). Errors as :func:`chat`."""
    request: dict[str, Any] = {
        "messages": list(messages),
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    if response_format is not None:
        request["response_format"] = response_format
    if tools:
        request["tools"] = list(tools)
        if tool_choice is not None:
            request["tool_choice"] = tool_choice
        if parallel_tool_calls is not None:
            request["parallel_tool_calls"] = parallel_tool_calls
    request["seed"] = request_seed(request)
    request["cache_prompt"] = True
    return _send(client, request)


def _send(client: InferenceClient, request: dict[str, Any]) -> ChatReply:
    try:
        body: dict[str, Any] = client.invoke(request)
    except InferenceInvokeError:
        raise
    except DeadlineExceededError as exc:
        # The invoke's time ran out before the prompt was evaluated: as a cut answer, retried.
        raise InferenceDeadlineError(f"the model stopped at its invoke deadline: {exc.message}") from None
    except RequestError as exc:
        raise InferenceRejectedError(
            f"the model rejected the request ({exc.status_code}): {exc.message}"
        ) from None
    try:
        choice = body["choices"][0]
        message = choice["message"]
        text = str(message.get("content") or "").strip()
        calls = [
            {
                "id": str(call["id"]),
                "name": str(call["function"]["name"]),
                "arguments": _arguments(call["function"]["arguments"]),
            }
            for call in message.get("tool_calls") or []
            # A call cut short comes back as OpenAI returns one (partial arguments, finish_reason
            # "length"): it is no call to make; the caller decides what a cut answer means.
            if choice.get("finish_reason") != "length"
        ]
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise InferenceRejectedError("the model's answer has no choices[0].message") from exc
    usage = body.get("usage") or {}
    if body.get("deadline_reached"):
        # Generation stopped where the invoke's time ran out: the text is as long as the machine was fast,
        # not what the model would answer. Used as it is, a slow invoke would silently shorten a plan or a
        # call; as an error it is retried, and a run that keeps hitting it fails naming the deadline.
        raise InferenceDeadlineError(
            "the model stopped at its invoke deadline after "
            f"{int(usage.get('completion_tokens', 0))} of {request.get('max_tokens')} tokens"
        )
    details = usage.get("prompt_tokens_details") or {}
    return ChatReply(
        text=text,
        completion_tokens=int(usage.get("completion_tokens", 0)),
        finish_reason=choice.get("finish_reason"),
        tool_calls=calls,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens", 0)),
    )


def _arguments(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise ModelAnswerIncompleteError(
            "the model's tool call arguments are not complete JSON; raise its max_tokens"
        ) from None
    if not isinstance(value, dict):
        raise ModelAnswerIncompleteError("the model's tool call arguments are not a JSON object")
    return value
