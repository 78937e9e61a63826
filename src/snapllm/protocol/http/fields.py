"""One decision for every request field a client may send: the official ``openai`` package's request
types, and the fields local-model servers (llama-server, vLLM) take that clients send to them::

    decision("chat", "verbosity")   # Decision(kind="ignored", reason="...")

Each field is served, validated, ignored or refused (docs/api.md says what each means, and what happens to
a field in no list, and holds :func:`field_table`). A unit test walks the installed ``openai`` package's
TypedDicts and fails on any field without a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from snapllm.protocol.http.routes import CHAT_COMPLETIONS, COMPLETIONS, RESPONSES

Endpoint = Literal["chat", "completion", "responses"]
ENDPOINT_PATHS: dict[Endpoint, str] = {
    "chat": CHAT_COMPLETIONS,
    "completion": COMPLETIONS,
    "responses": RESPONSES,
}
#: The response header naming the unknown top-level fields a request sent, which were ignored.
IGNORED_FIELDS_HEADER = "x-snapllm-ignored-fields"
# A header lists this many of them (a body may hold thousands of keys), each cut to this length.
_LISTED_FIELDS = 20
_LISTED_NAME_CHARS = 64


@dataclass(frozen=True)
class Decision:
    kind: Literal["served", "validated", "ignored", "refused"]
    reason: str


def _served(reason: str) -> Decision:
    return Decision("served", reason)


def _validated(reason: str) -> Decision:
    return Decision("validated", reason)


def _ignored(reason: str) -> Decision:
    return Decision("ignored", reason)


def _refused(reason: str) -> Decision:
    return Decision("refused", reason)


_NOTHING_STORED = _ignored("nothing is stored or billed per user here; the answer is the same")
_PREFIX_CACHE_KEY = _ignored("the prompt prefix cache is automatic (usage reports the cached tokens)")
_CACHE_LIFETIME = _ignored("the prompt prefix cache lives as long as the environment")
_ONE_TIER = _ignored("there is one tier: every request runs on the same function")
_MODEL = _served("must name the served model, or be left out")
_STREAM = _served("server-sent events from the streaming endpoint; the router and a direct invoke refuse it")
_TEMPERATURE = _served("0 to 2; 0 picks the most likely token")
_TOP_P = _served("above 0, at most 1")
_SEED = _served("0 to 2^32-1; the answer reproduces (the prompt is evaluated afresh, unless cache_prompt)")
_CACHE_PROMPT = _served(
    "true with a seed reuses the prompt cache, and the answer still reproduces: with flash attention over "
    "bf16 values (the default) a reused prefix computes as the whole prompt does; otherwise a seed evaluates "
    "afresh"
)
_SPECULATIVE = _served(
    "snapllm's own: false turns speculative decoding off for the request; the tokens are the same either way"
)
_CLOSE_AT_MAX_TOKENS = _served(
    "snapllm's own: false leaves a structured answer (response_format, text.format, tool arguments) cut by "
    "max_tokens where the limit falls; by default its last tokens end it the shortest valid way, "
    "finish_reason still length"
)
_MODERATION = _refused("no moderation runs here; moderate before or after calling")
_MAX_TOKENS = _served("at least 1, at most the deployment's SNAPLLM_MAX_TOKENS; capped by the context window")

_SHARED: dict[str, Decision] = {
    "model": _MODEL,
    "frequency_penalty": _served("-2 to 2, over the last repeat_last_n tokens"),
    "presence_penalty": _served("-2 to 2, over the last repeat_last_n tokens"),
    "max_tokens": _MAX_TOKENS,
    "n": _validated(
        "1 only: an environment generates one answer at a time, so n answers would take n times as long "
        "within one invoke's deadline; send n requests (they run in parallel environments)"
    ),
    "seed": _SEED,
    "stop": _served("up to 4 non-empty strings"),
    "stream": _STREAM,
    "stream_options": _served("include_usage adds the usage chunk"),
    "temperature": _TEMPERATURE,
    "top_p": _TOP_P,
    "logit_bias": _served(
        "up to 300 token ids of the served model's vocabulary, each biased by -100 to 100; an id outside "
        "the vocabulary is a 400"
    ),
    "user": _NOTHING_STORED,
}
#: The sampling fields of llama-server and vLLM (not OpenAI's): served on every endpoint.
LOCAL_SAMPLING: dict[str, Decision] = {
    "top_k": _served("-1 to 2^31-1; 0 or -1 keeps every token (default 40)"),
    "min_p": _served("0 to 1 (default 0.05)"),
    "typical_p": _served("0 to 1; 1 turns it off (the default)"),
    "repeat_penalty": _served("above 0, at most 2 (default 1: off)"),
    "repetition_penalty": _served(
        "vLLM's name for repeat_penalty; sending both with different values is a 400"
    ),
    "repeat_last_n": _served("-1 to 2^31-1 tokens; -1 or more than the context window is the whole of it"),
}
_SAMPLER_NOT_RUN = "this sampler is not run here; use temperature, top_p, top_k, min_p or typical_p"
_GRAMMAR_FORM = (
    "grammars are taken as response_format (json_object or json_schema) or tools, not in this form"
)
#: Fields local-model servers take that would change the answer, and that are not honoured here.
LOCAL_REFUSED: dict[str, Decision] = {
    **dict.fromkeys(
        ("mirostat", "mirostat_tau", "mirostat_eta", "xtc_probability", "xtc_threshold", "top_n_sigma"),
        _refused(_SAMPLER_NOT_RUN),
    ),
    **dict.fromkeys(("tfs_z", "top_a", "dynatemp_range", "dynatemp_exponent"), _refused(_SAMPLER_NOT_RUN)),
    **dict.fromkeys(
        ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers"),
        _refused("DRY repetition sampling is not run here; use repeat_penalty"),
    ),
    **dict.fromkeys(
        ("grammar", "json_schema", "guided_json", "guided_regex", "guided_choice", "guided_grammar"),
        _refused(_GRAMMAR_FORM),
    ),
    "structured_outputs": _refused(_GRAMMAR_FORM),
    "ignore_eos": _refused("an answer ends at the model's end of sequence here; set max_tokens"),
    "min_tokens": _refused("an answer ends at the model's end of sequence here; set max_tokens"),
    "use_beam_search": _refused("beam search is not run here"),
    "length_penalty": _refused("beam search is not run here"),
    "samplers": _refused("the sampler order is fixed here"),
    "chat_template": _refused("every chat is rendered with the served model's own chat template"),
    "chat_template_kwargs": _refused("the served model's chat template takes no arguments here"),
    "stop_token_ids": _refused("send stop strings instead"),
    "bad_words": _refused("send logit_bias with -100 for the tokens instead"),
    "allowed_token_ids": _refused("send logit_bias instead"),
    "n_predict": _refused("llama-server's own name for the limit is not taken; send max_tokens"),
    "n_probs": _refused("send logprobs and top_logprobs instead"),
    "prompt_logprobs": _refused("log probabilities are reported for the answer's tokens only"),
    "include_stop_str_in_output": _refused("a stop string always ends the answer without being part of it"),
    "skip_special_tokens": _refused("special tokens are always left out of the answer's text"),
    "truncate_prompt_tokens": _refused("a prompt that does not fit is refused here, never truncated"),
}
#: Fields local-model servers take that cannot change the answer here.
LOCAL_IGNORED: dict[str, Decision] = {
    "id_slot": _ignored("there is one slot: each environment serves one request at a time"),
    "priority": _ignored("each environment serves one request at a time, in the order they come"),
    "request_id": _ignored("every answer carries its own x-request-id"),
}

#: Fields of llama-server's and snapllm's own served here.
LOCAL_SERVED: dict[str, Decision] = {
    "cache_prompt": _CACHE_PROMPT,
    "speculative": _SPECULATIVE,
    "close_at_max_tokens": _CLOSE_AT_MAX_TOKENS,
}

FIELD_DECISIONS: dict[Endpoint, dict[str, Decision]] = {
    "chat": {
        **LOCAL_SERVED,
        **LOCAL_IGNORED,
        **LOCAL_REFUSED,
        **_SHARED,
        **LOCAL_SAMPLING,
        "messages": _served(
            "text content only; the fields OpenAI's answers carry (refusal, annotations, audio, "
            "function_call, reasoning_content) and name on any role are accepted when sent back"
        ),
        "max_completion_tokens": _MAX_TOKENS,
        "logprobs": _served("the model's own log probabilities of the answer's tokens"),
        "top_logprobs": _served("0 to 20 alternatives per token; needs logprobs: true"),
        "tools": _served("function tools, at most 32; each call's arguments are held to its parameters"),
        "tool_choice": _served("none, auto, required or a named function"),
        "parallel_tool_calls": _served("false: at most one call"),
        "response_format": _served("text, json_object or json_schema, enforced by a grammar"),
        "modalities": _validated('["text"] only: the models served here produce text only'),
        "store": _NOTHING_STORED,
        "metadata": _NOTHING_STORED,
        "service_tier": _ONE_TIER,
        "safety_identifier": _NOTHING_STORED,
        "prompt_cache_key": _PREFIX_CACHE_KEY,
        "prompt_cache_retention": _CACHE_LIFETIME,
        "prompt_cache_options": _CACHE_LIFETIME,
        "reasoning_effort": _served(
            "a reasoning model's thinking budget (none, minimal, low, medium by default, high, xhigh); "
            '"none" switches thinking off'
        ),
        "chat_template_kwargs": _served(
            'extra chat template variables, as llama-server and vLLM take them ({"enable_thinking": false}); '
            "the variables the request itself sets and the template language's own names (self, range, "
            "namespace...) cannot be replaced"
        ),
        "verbosity": _ignored("a hint for reasoning models; length is set by max_tokens here"),
        "audio": _refused("the models served here take and produce text only"),
        "functions": _refused("the deprecated functions API is not served; send tools instead"),
        "function_call": _refused("the deprecated functions API is not served; send tool_choice instead"),
        "prediction": _refused("predicted outputs are not supported by this engine"),
        "web_search_options": _refused("there is no built-in web search; send a function tool instead"),
        "moderation": _MODERATION,
        "echo": _refused("a chat answer never repeats the prompt here"),
        "add_generation_prompt": _refused("every chat is answered as a new assistant turn"),
        "continue_final_message": _refused("every chat is answered as a new assistant turn"),
    },
    "completion": {
        **LOCAL_SERVED,
        **LOCAL_IGNORED,
        **LOCAL_REFUSED,
        **_SHARED,
        **LOCAL_SAMPLING,
        "prompt": _served(
            "a string, a list of one string, a list of token ids, or a list of one such list; token ids "
            "must be in the served model's vocabulary"
        ),
        "logprobs": _served("0 to 5 alternatives per token"),
        "best_of": _validated("1 only: more candidates per request would multiply its cost"),
        "echo": _validated("false only: the answer never repeats the prompt here"),
        "suffix": _validated("empty only: fill-in-the-middle is not supported by this engine"),
    },
    "responses": {
        **LOCAL_SERVED,
        **LOCAL_IGNORED,
        **LOCAL_REFUSED,
        **LOCAL_SAMPLING,
        # Chat fields a client may send here too: they would change the answer, and this API has none.
        **dict.fromkeys(
            ("logit_bias", "stop", "presence_penalty", "frequency_penalty", "n", "max_tokens"),
            _refused("not a Responses API field; /v1/chat/completions serves it"),
        ),
        "messages": _refused("the Responses API takes the conversation as input; send it there"),
        "model": _MODEL,
        "input": _served("a string, or message, function_call and function_call_output items with text"),
        "instructions": _served("a system message before the input"),
        "max_output_tokens": _MAX_TOKENS,
        "temperature": _TEMPERATURE,
        "top_p": _TOP_P,
        "text": _served("format text, json_object or json_schema; its verbosity is ignored"),
        "tools": _served("function tools; built-in tools are refused, with the reason"),
        "tool_choice": _served("none, auto, required or a named function"),
        "parallel_tool_calls": _served("false: at most one call"),
        "stream": _STREAM,
        "include": _validated("message.output_text.logprobs only: there are no built-in tools or images"),
        "top_logprobs": _served("0 to 20 alternatives per token"),
        "store": _validated("false or absent only: this server is stateless and stores nothing"),
        "background": _validated("false only: each request answers before it returns"),
        "truncation": _validated('"disabled" only: an input that does not fit is refused, never cut'),
        "seed": _SEED,
        "metadata": _NOTHING_STORED,
        "user": _NOTHING_STORED,
        "safety_identifier": _NOTHING_STORED,
        "service_tier": _ONE_TIER,
        "prompt_cache_key": _PREFIX_CACHE_KEY,
        "prompt_cache_retention": _CACHE_LIFETIME,
        "reasoning": _served(
            "effort, as chat's reasoning_effort (a reasoning model's thinking budget); the thinking comes "
            "back whole as a reasoning item, so summary changes nothing"
        ),
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
        "prompt_cache_options": _CACHE_LIFETIME,
        "moderation": _MODERATION,
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
    """The decision for ``field`` of ``endpoint``; None for a field no client is known to send."""
    return FIELD_DECISIONS[endpoint].get(field)


def ignored_fields() -> dict[str, Decision]:
    """Every accepted-and-ignored field of any endpoint (docs/api.md lists them)."""
    return {
        field: found
        for table in FIELD_DECISIONS.values()
        for field, found in table.items()
        if found.kind == "ignored"
    }


def field_table() -> str:
    """The Markdown table of every field and its decision on each endpoint (docs/api.md holds it)."""
    rows = ["| field | endpoints | decision | why |", "| --- | --- | --- | --- |"]
    names = sorted({name for table in FIELD_DECISIONS.values() for name in table})
    for name in names:
        by_decision: dict[Decision, list[str]] = {}
        for endpoint, table in FIELD_DECISIONS.items():
            if name in table:
                by_decision.setdefault(table[name], []).append(ENDPOINT_PATHS[endpoint].removeprefix("/v1/"))
        for found, endpoints in by_decision.items():
            rows.append(f"| `{name}` | {', '.join(endpoints)} | {found.kind} | {found.reason} |")
    return "\n".join(rows) + "\n"


def ignored_fields_header(names: Sequence[str]) -> str:
    """The :data:`IGNORED_FIELDS_HEADER` value naming ``names``: ASCII only (a header cannot carry the rest),
    at most 20 names of at most 64 characters, then how many more there were."""
    listed = [ascii(name)[1:-1][:_LISTED_NAME_CHARS] for name in names[:_LISTED_FIELDS]]
    if len(names) > _LISTED_FIELDS:
        listed.append(f"and {len(names) - _LISTED_FIELDS} more")
    return ", ".join(listed)
