"""One decision for every field of the official ``openai`` package's request types.

Each field a current client may send is supported, accepted and ignored (it cannot change the answer
here; docs/api.md lists these), or refused with ``code: "unsupported_parameter"`` and the reason. A
field in no list is unknown: a typo, refused as ``unrecognized request argument``. A unit test walks the
installed ``openai`` package's TypedDicts and fails on any field without a decision, so a new client
version shows up as a failing test rather than as broken users::

    decision("chat", "reasoning_effort")   # Decision(kind="ignored", reason="...")

The Responses API (``responses``) is served statelessly: nothing it asks OpenAI's service to keep
(``store: true``, ``previous_response_id``, ``conversation``, ``background``) can be honoured here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Endpoint = Literal["chat", "completion", "responses"]


@dataclass(frozen=True)
class Decision:
    kind: Literal["supported", "ignored", "refused"]
    reason: str = ""


SUPPORTED = Decision("supported")


def _ignored(reason: str) -> Decision:
    return Decision("ignored", reason)


def _refused(reason: str) -> Decision:
    return Decision("refused", reason)


_NOTHING_STORED = _ignored("nothing is stored or billed per user here; the answer is the same")
_PREFIX_CACHE_KEY = _ignored("the prompt prefix cache is automatic (usage reports the cached tokens)")
_SHARED: dict[str, Decision] = {
    "model": SUPPORTED,
    "frequency_penalty": SUPPORTED,
    "presence_penalty": SUPPORTED,
    "logprobs": SUPPORTED,
    "max_tokens": SUPPORTED,
    "n": SUPPORTED,  # n=1 only: refused otherwise, with the reason
    "seed": SUPPORTED,
    "stop": SUPPORTED,
    "stream": SUPPORTED,
    "stream_options": SUPPORTED,
    "temperature": SUPPORTED,
    "top_p": SUPPORTED,
    "logit_bias": SUPPORTED,  # token ids of the served model's vocabulary
    "user": _NOTHING_STORED,
}
#: The sampling fields of llama-server and vLLM (not OpenAI's): served on every endpoint.
LOCAL_SAMPLING: dict[str, Decision] = {
    "top_k": SUPPORTED,
    "min_p": SUPPORTED,
    "typical_p": SUPPORTED,
    "repeat_penalty": SUPPORTED,
    "repetition_penalty": SUPPORTED,  # vLLM's name for repeat_penalty
    "repeat_last_n": SUPPORTED,
}

FIELD_DECISIONS: dict[Endpoint, dict[str, Decision]] = {
    "chat": {
        **_SHARED,
        **LOCAL_SAMPLING,
        "messages": SUPPORTED,
        "max_completion_tokens": SUPPORTED,
        "top_logprobs": SUPPORTED,
        "tools": SUPPORTED,
        "tool_choice": SUPPORTED,
        "parallel_tool_calls": SUPPORTED,
        "response_format": SUPPORTED,
        "modalities": SUPPORTED,  # ["text"] only: audio output is refused
        "store": _NOTHING_STORED,
        "metadata": _NOTHING_STORED,
        "service_tier": _ignored("there is one tier: every request runs on the same function"),
        "safety_identifier": _NOTHING_STORED,
        "prompt_cache_key": _PREFIX_CACHE_KEY,
        "prompt_cache_retention": _ignored("the prompt prefix cache lives as long as the environment"),
        "prompt_cache_options": _ignored("the prompt prefix cache lives as long as the environment"),
        "reasoning_effort": _ignored("the models served here have no reasoning mode to adjust"),
        "verbosity": _ignored("a hint for reasoning models; length is set by max_tokens here"),
        "audio": _refused("the models served here take and produce text only"),
        "functions": _refused("the deprecated functions API is not served; send tools instead"),
        "function_call": _refused("the deprecated functions API is not served; send tool_choice instead"),
        "prediction": _refused("predicted outputs are not supported by this engine"),
        "web_search_options": _refused("there is no built-in web search; send a function tool instead"),
        "moderation": _refused("no moderation runs here; moderate before or after calling"),
    },
    "completion": {
        **_SHARED,
        **LOCAL_SAMPLING,
        "prompt": SUPPORTED,
        "best_of": SUPPORTED,  # 1 only: refused otherwise, with the reason
        "echo": SUPPORTED,  # false only: refused otherwise, with the reason
        "suffix": SUPPORTED,  # empty only: fill-in-the-middle is refused, with the reason
    },
    "responses": {
        **LOCAL_SAMPLING,
        "model": SUPPORTED,
        "input": SUPPORTED,
        "instructions": SUPPORTED,
        "max_output_tokens": SUPPORTED,
        "temperature": SUPPORTED,
        "top_p": SUPPORTED,
        "text": SUPPORTED,  # format text, json_object or json_schema; its verbosity is ignored
        "tools": SUPPORTED,  # function tools; built-in tools are refused, with the reason
        "tool_choice": SUPPORTED,
        "parallel_tool_calls": SUPPORTED,
        "stream": SUPPORTED,
        "include": SUPPORTED,  # message.output_text.logprobs only: other inclusions are refused
        "top_logprobs": SUPPORTED,
        "store": SUPPORTED,  # false or absent only: store=true is refused, with the reason
        "background": SUPPORTED,  # false only: background=true is refused, with the reason
        "truncation": SUPPORTED,  # "disabled" only: "auto" is refused, with the reason
        "metadata": _NOTHING_STORED,
        "user": _NOTHING_STORED,
        "safety_identifier": _NOTHING_STORED,
        "service_tier": _ignored("there is one tier: every request runs on the same function"),
        "prompt_cache_key": _PREFIX_CACHE_KEY,
        "prompt_cache_retention": _ignored("the prompt prefix cache lives as long as the environment"),
        "reasoning": _ignored("the models served here have no reasoning mode to adjust"),
        "max_tool_calls": _ignored("it caps calls to built-in tools, and there are none here"),
        "stream_options": _ignored("stream events are not padded against side channels here"),
        "previous_response_id": _refused(
            "this server is stateless and stores no response to continue from; send the whole "
            "conversation as input (earlier output items included)"
        ),
        "conversation": _refused(
            "this server is stateless and stores no conversation; send the whole conversation as input"
        ),
        "prompt": _refused(
            "stored prompt templates live in OpenAI's service; send instructions and input instead"
        ),
        "prompt_cache_options": _ignored("the prompt prefix cache lives as long as the environment"),
        "moderation": _refused("no moderation runs here; moderate before or after calling"),
        "image": _refused("the models served here take and produce text only"),
        "access_programs": _refused("domain-specific access programs belong to OpenAI's service"),
        "background_options": _refused(
            "background responses are not served here (this server is stateless): each request answers "
            "before it returns"
        ),
        "context_management": _refused(
            "this server is stateless and compacts no stored context; send the conversation as input"
        ),
    },
}


def decision(endpoint: Endpoint, field: str) -> Decision | None:
    """The decision for ``field`` of ``endpoint``; None for a field no client version defines."""
    return FIELD_DECISIONS[endpoint].get(field)


def ignored_fields() -> dict[str, Decision]:
    """Every accepted-and-ignored field of any endpoint (docs/api.md lists them)."""
    return {
        field: found
        for table in FIELD_DECISIONS.values()
        for field, found in table.items()
        if found.kind == "ignored"
    }
