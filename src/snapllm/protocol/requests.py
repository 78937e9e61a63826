"""The inference contract: OpenAI-style requests, one set of pydantic models for direct invokes and HTTP.

    request = parse_request({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16})
    isinstance(request, ChatCompletionRequest)  # True

Both entry points get the same 400s; docs/api.md says which fields are taken and how strictly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from snapllm.engine.types import Timings, TokenLogprob
from snapllm.errors import InvalidRequestError, UnknownModelError, UnsupportedParameterError
from snapllm.protocol.constraints.structured import check_schema
from snapllm.protocol.http.edge import MAX_JSON_DEPTH, check_json_value, decodes_to_unicode, json_text_depth
from snapllm.protocol.http.fields import Endpoint, decision

MAX_STOP_SEQUENCES = 4
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat; text completions allow 5
MAX_COMPLETION_LOGPROBS = 5
MAX_SEED = 2**32 - 1
# OpenAI's limits on logit_bias: at most 300 tokens, each biased by -100 to 100.
MAX_LOGIT_BIAS_TOKENS = 300
MAX_LOGIT_BIAS = 100.0
# llama.cpp takes top_k and the penalty window as C ints; any value past the vocabulary (or the context
# window) means the whole of it, so the cost is bounded by those, not by the number sent.
MAX_SAMPLER_INT = 2**31 - 1
# Strict: JSON types are never converted ("10" is not an integer, true is not 1); an int is still a float.
STRICT = ConfigDict(extra="forbid", strict=True)


class RequestBody(BaseModel):
    """A top-level request: its raw input passes the edge checks before any field is validated."""

    model_config = STRICT

    @model_validator(mode="before")
    @classmethod
    def _edge(cls, data: Any) -> Any:
        check_json_value(data)
        return data


#: A function, tool or response-format name as OpenAI accepts it: letters, digits, _ and -, up to 64.
OpenAIName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]


class TextPart(BaseModel):
    """One part of a multi-part message; only text parts are supported by text-only models."""

    model_config = STRICT
    type: Literal["text"]
    text: str


def _check_arguments(arguments: str) -> str:
    """Refuse call arguments that a template or the generic tool format, which decode them, could not
    read: JSON nesting deeper than any request may (Python's decoder fails on deep nesting, a
    RecursionError near 1,000 levels, rather than refusing it; counted over the text, without decoding it),
    and escapes that decode to text that is not Unicode (a lone ``\\ud800``, which no tokenizer reads)."""
    if json_text_depth(arguments) > MAX_JSON_DEPTH:
        raise ValueError(f"the arguments nest deeper than {MAX_JSON_DEPTH} levels")
    if not decodes_to_unicode(arguments):
        raise ValueError(
            "the arguments' JSON decodes to text with an unpaired surrogate (\\ud800-\\udfff), which is not "
            "valid Unicode text"
        )
    return arguments


#: A call's ``arguments`` sent back: a JSON string, nesting no deeper than a request body may, whose
#: strings decode to Unicode text.
ArgumentsText = Annotated[str, AfterValidator(_check_arguments)]
# What a client sends back of an earlier answer's call is whatever its SDK dumped: keys beyond these
# (another server's extras) are dropped rather than refused.
_SENT_BACK = ConfigDict(extra="ignore", strict=True)


class FunctionCall(BaseModel):
    """The function an earlier assistant turn called; ``arguments`` is a JSON string, as OpenAI's."""

    model_config = _SENT_BACK
    name: str
    arguments: ArgumentsText


class ToolCallIn(BaseModel):
    """A tool call of an earlier assistant turn, sent back with the conversation."""

    model_config = _SENT_BACK
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """A chat turn. ``content`` is a string or a list of text parts; an assistant turn that called tools
    carries ``tool_calls`` (and may have no content); a ``tool`` turn answers one call by its id.

    An earlier answer comes back as the client got it: the fields OpenAI's answers carry (``refusal``,
    ``annotations``, ``audio``, the deprecated ``function_call``) and ``reasoning_content`` (what reasoning
    servers return and chat templates read) are accepted on any message, and ``name`` on any role.
    ``reasoning_content`` is kept for chat templates that read it; the others do not reach the prompt.
    """

    model_config = STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: dict[str, Any] | None = None
    function_call: FunctionCall | None = None
    reasoning_content: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        """Image, audio and file parts get a plain answer instead of a dump of every union branch."""
        parts = data.get("content") if isinstance(data, dict) else None
        if isinstance(parts, list):
            for part in parts:
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str) and kind != "text":
                    raise UnsupportedParameterError(
                        f"messages: a {kind!r} content part was sent; this model takes text only "
                        "(send text parts or a string)",
                        param="messages",
                    )
        return data

    @model_validator(mode="after")
    def _roles(self) -> ChatMessage:
        called = self.tool_calls or self.function_call
        if self.content is None and not (self.role == "assistant" and called):
            raise ValueError("content may be null only in an assistant message with tool_calls")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def prompt_chars(self) -> int:
        """How many characters of this message can reach the prompt: its text, its calls' names and
        arguments, and its reasoning (a sent-back call counts toward the prompt's limit as text does)."""
        calls = self.tool_calls or []
        return (
            len(self.text())
            + sum(len(call.function.name) + len(call.function.arguments) for call in calls)
            + len(self.reasoning_content or "")
        )


class FunctionSchema(Protocol):
    """A function tool as both APIs declare it: a name and the JSON schema of its arguments."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any] | None: ...

    @property
    def strict(self) -> bool | None: ...


def check_tools(
    functions: Sequence[FunctionSchema], *, named: str | None, required: bool, parameters_param: str
) -> None:
    """Refuse tools and a ``tool_choice`` that cannot be honoured, each with a 400 naming the field, in
    chat completions and the Responses API alike: two functions of one name, a ``tool_choice`` naming a
    function (``named``) not in the tools, ``required`` without tools, an arguments schema the grammar
    cannot enforce. ``parameters_param`` places a schema's error, ``{index}`` its tool's position:
    ``tools.{index}.function.parameters``.
    """
    names = [function.name for function in functions]
    if len(set(names)) != len(names):
        raise InvalidRequestError("tools: function names must be unique", param="tools")
    if named is not None and named not in names:
        raise InvalidRequestError(
            f"tool_choice names the function {named!r}, which is not in tools", param="tool_choice"
        )
    if required and not names:
        raise InvalidRequestError("tool_choice 'required' needs at least one tool", param="tool_choice")
    for index, function in enumerate(functions):
        if function.parameters is not None:
            check_schema(
                function.parameters,
                param=parameters_param.format(index=index),
                strict=function.strict is True,
                listed_keys_only=True,  # as the grammar and the answer check compile it (tool_arguments)
            )


#: One turn of a conversation, for :func:`check_tool_turns`: its position (what an error names), its role,
#: the ids of the calls it makes (an assistant turn) and the id of the call it answers (a tool turn).
Turn = tuple[int, str, Sequence[str], str | None]


def check_tool_turns(turns: Iterable[Turn], *, field: str) -> None:
    """Refuse a conversation whose tool turns do not pair up, as OpenAI does (each with a 400):

    - a tool turn answers a call of the assistant turn before it: OpenAI's chat completions refuse a
      ``tool`` message whose nearest earlier non-tool message is not an assistant message with
      ``tool_calls`` ("messages with role 'tool' must be a response to a preceding message with
      'tool_calls'"), and one whose ``tool_call_id`` is not among that message's calls ("'tool_call_id'
      ... not found in 'tool_calls' of previous message");
    - an assistant turn's calls are all answered by the tool turns right after it, before any other turn
      and before the conversation ends ("An assistant message with 'tool_calls' must be followed by tool
      messages responding to each 'tool_call_id'").

    The Responses API pairs its items the same way ("No tool call found for function call output with
    call_id ...", "No tool output found for function call ..."), so its ``input`` is checked here too
    (consecutive ``function_call`` items are one assistant turn). ``field`` names the list (``messages``,
    ``input``) and each error's ``param`` the turn: ``messages.3``. Without these rules a model reads an
    answer to a call it never made, or a call with no answer, and continues from nonsense.
    """
    answer, call = _TURN_WORDS.get(field, ("a tool answer", "a tool call"))
    caller: int | None = None  # position of the assistant turn the tool turns now answer
    calls: Sequence[str] = ()
    unanswered: list[str] = []
    for position, role, made, answers in turns:
        if role == "tool":
            if caller is None:
                raise InvalidRequestError(
                    f"{field}.{position}: {answer} must come after the call it answers: after {call}, "
                    "with only the answers to those calls in between",
                    param=f"{field}.{position}",
                )
            if answers not in calls:
                known = ", ".join(repr(c) for c in calls)
                raise InvalidRequestError(
                    f"{field}.{position}: {answer} answers the call id {answers!r}, which is not a call of "
                    f"{field}.{caller} (its calls: {known})",
                    param=f"{field}.{position}",
                )
            if answers in unanswered:
                unanswered.remove(answers)
            continue
        _check_answered(caller, unanswered, answer, field=field, before=position)
        caller, calls = (position, made) if made else (None, ())
        unanswered = list(made)
    _check_answered(caller, unanswered, answer, field=field, before=None)


_TURN_WORDS = {
    "messages": ("a tool message", "an assistant message with tool_calls"),
    "input": ("a function_call_output item", "function_call items"),
}


def _check_answered(
    caller: int | None, unanswered: Sequence[str], answer: str, *, field: str, before: int | None
) -> None:
    if caller is None or not unanswered:
        return
    where = f"before {field}.{before}" if before is not None else "after it"
    missing = ", ".join(repr(c) for c in unanswered)
    raise InvalidRequestError(
        f"{field}.{caller}: every call must be answered by {answer} {where}; no answer to {missing}",
        param=f"{field}.{caller}",
    )


class JSONSchemaFormat(BaseModel):
    """``response_format.json_schema``: the schema the answer must validate against."""

    model_config = ConfigDict(extra="forbid", strict=True, serialize_by_alias=True, validate_by_name=True)
    name: OpenAIName
    description: str | None = None
    json_schema: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class TextFormat(BaseModel):
    model_config = STRICT
    type: Literal["text"]


class JSONObjectFormat(BaseModel):
    model_config = STRICT
    type: Literal["json_object"]


class JSONSchemaResponseFormat(BaseModel):
    model_config = STRICT
    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


def _format_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"type={kind}" if isinstance(kind, str) else None


# Tagged "type=..." so an error's location names the field, not the branch (see _param).
ResponseFormat = Annotated[
    Annotated[TextFormat, Tag("type=text")]
    | Annotated[JSONObjectFormat, Tag("type=json_object")]
    | Annotated[JSONSchemaResponseFormat, Tag("type=json_schema")],
    Discriminator(
        _format_tag,
        custom_error_type="invalid_response_format",
        custom_error_message="type must be one of 'text', 'json_object' or 'json_schema'",
    ),
]


class FunctionDefinition(BaseModel):
    """A function the model may call: its name and its arguments' JSON schema."""

    model_config = STRICT
    name: OpenAIName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = STRICT
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    model_config = STRICT
    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming the one function the model must call."""

    model_config = STRICT
    type: Literal["function"]
    function: NamedFunction


class DecidedRequest(RequestBody):
    """A request of one of OpenAI's endpoints, whose fields are decided in one table.

    Fields that snapllm refuses or ignores are decided in
    :data:`snapllm.protocol.http.fields.FIELD_DECISIONS`: a refused one is answered with its reason, an
    ignored one that no field here declares is dropped before validation. A top-level field in no table is
    unknown: it is dropped too, and named in
    :attr:`ignored_fields` (each entry point logs it and names it in a response header), as clients expect
    of an OpenAI-compatible server when they send a field it does not know.
    """

    endpoint: ClassVar[Endpoint]
    _ignored_fields: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _decided(cls, data: Any, handler: ModelWrapValidatorHandler[DecidedRequest]) -> DecidedRequest:
        if not isinstance(data, dict):
            return handler(data)
        dropped: list[str] = []
        unknown: list[str] = []
        for field in data:
            found = decision(cls.endpoint, field) if isinstance(field, str) else None
            if found is None:
                if field not in cls.model_fields:
                    unknown.append(field)
                continue
            if found.kind == "refused":
                raise UnsupportedParameterError(f"{field} is not supported: {found.reason}", param=field)
            if found.kind == "ignored" and field not in cls.model_fields:
                dropped.append(field)
        if unknown:
            # What is dropped unread still passes the edge's checks: a name or value that is not Unicode
            # text, or nests too deep, is refused as it would be in a known field.
            check_json_value({field: data[field] for field in unknown})
        leaving = {*dropped, *unknown}
        request = handler({k: v for k, v in data.items() if k not in leaving} if leaving else data)
        request._ignored_fields = tuple(unknown)
        return request

    @property
    def ignored_fields(self) -> tuple[str, ...]:
        """The unknown top-level fields the request sent, which were ignored (in the order sent)."""
        return self._ignored_fields


class LocalSamplingFields(BaseModel):
    """The sampling fields local-model servers take beyond OpenAI's, under their names: llama-server's
    ``top_k``, ``min_p``, ``typical_p``, ``repeat_penalty`` and ``repeat_last_n``, and vLLM's
    ``repetition_penalty`` (the same penalty). Each left out keeps the engine's default
    (:class:`snapllm.engine.types.Sampling`), so a request without them is answered as before they existed.
    """

    model_config = STRICT
    top_k: Annotated[int, Field(ge=-1, le=MAX_SAMPLER_INT)] | None = Field(
        default=None, description="Sample among the k most likely tokens; 0 or -1: all of them (default 40)."
    )
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        default=None, description="Drop tokens less likely than min_p times the most likely (default 0.05)."
    )
    typical_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        default=None, description="Locally typical sampling; 1.0 turns it off (the default)."
    )
    repeat_penalty: Annotated[float, Field(gt=0.0, le=2.0)] | None = Field(
        default=None, description="Divide the logits of recently seen tokens by this (default 1.0: off)."
    )
    repetition_penalty: Annotated[float, Field(gt=0.0, le=2.0)] | None = Field(
        default=None, description="vLLM's name for repeat_penalty."
    )
    repeat_last_n: Annotated[int, Field(ge=-1, le=MAX_SAMPLER_INT)] | None = Field(
        default=None,
        description="How many recent tokens the penalties look at; 0: none, -1: the context (default 64).",
    )

    @model_validator(mode="after")
    def _one_repeat_penalty(self) -> LocalSamplingFields:
        both = self.repeat_penalty is not None and self.repetition_penalty is not None
        if both and self.repeat_penalty != self.repetition_penalty:
            raise InvalidRequestError(
                "repeat_penalty and repetition_penalty are one setting under two names and disagree; "
                "send one of them",
                param="repetition_penalty",
            )
        return self

    @property
    def sampler_settings(self) -> dict[str, Any]:
        """The fields sent, under the engine's names (:class:`snapllm.engine.types.Sampling`)."""
        penalty = self.repeat_penalty if self.repeat_penalty is not None else self.repetition_penalty
        given = {
            "top_k": self.top_k,
            "min_p": self.min_p,
            "typical_p": self.typical_p,
            "repeat_penalty": penalty,
            "penalty_last_n": self.repeat_last_n,
        }
        return {name: value for name, value in given.items() if value is not None}


def _check_logit_bias(value: dict[str, float] | None) -> dict[str, float] | None:
    """OpenAI's rules: token ids (as JSON keys, so strings) mapped to a bias from -100 to 100, at most 300."""
    if value is None:
        return None
    if len(value) > MAX_LOGIT_BIAS_TOKENS:
        raise ValueError(f"at most {MAX_LOGIT_BIAS_TOKENS} tokens may be biased, got {len(value)}")
    for key, bias in value.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 10):
            raise ValueError(f'invalid key {key!r}: keys are token ids, such as "50256"')
        if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
            raise ValueError(f"the bias of token {key} is {bias}; biases go from -100 to 100")
    return value


class GenerationParameters(DecidedRequest, LocalSamplingFields):
    """Sampling and limits shared by chat and text completions."""

    model: str | None = Field(default=None, description="Model name; the router routes by it.")
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.7
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    stop: str | list[str] | None = None
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    cache_prompt: bool | None = Field(
        default=None,
        description="llama-server's field: with a seed, true reuses the prompt cache (the answer still "
        "reproduces where reuse computes as the whole prompt does: with flash attention, the default).",
    )
    speculative: bool | None = Field(
        default=None,
        description="snapllm's own: false turns speculative decoding off (the same tokens either way).",
    )
    close_at_max_tokens: bool | None = Field(
        default=None,
        description="snapllm's own: false leaves a constrained answer cut by max_tokens where the limit "
        "falls, rather than ending it the shortest valid way in its last tokens.",
    )
    n: int = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        return _check_logit_bias(value)

    @field_validator("stop")
    @classmethod
    def _stop_sequences(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed")
        if any(not stop for stop in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    @model_validator(mode="after")
    def _supported(self) -> GenerationParameters:
        if self.n != 1:
            raise UnsupportedParameterError("only n=1 is supported", param="n")
        if self.top_logprobs and not self.logprobs:
            raise InvalidRequestError("top_logprobs needs logprobs: true", param="top_logprobs")
        if (
            self.max_tokens is not None
            and self.max_completion_tokens is not None
            and self.max_tokens != self.max_completion_tokens
        ):
            raise InvalidRequestError(
                "max_tokens and max_completion_tokens disagree; send one of them", param="max_tokens"
            )
        return self

    @property
    def logprobs_count(self) -> int | None:
        """How many alternatives to report per token (0: only the chosen one), or None for no logprobs."""
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def token_biases(self) -> tuple[tuple[int, float], ...]:
        """``logit_bias`` as (token id, bias) pairs."""
        return tuple((int(token), bias) for token, bias in (self.logit_bias or {}).items())

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
#: The variables a chat template gets from the request itself, which ``chat_template_kwargs`` cannot replace.
TEMPLATE_VARIABLES = frozenset(
    {
        "messages",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "bos_token",
        "eos_token",
        "add_generation_prompt",
        "raise_exception",
        "strftime_now",
    }
)
#: Names the template language (Jinja) gives a meaning of its own: its functions (``range`` is the
#: renderer's bounded one, ``namespace`` what templates keep state in) and the names it binds itself
#: (``self``, ``loop``...). A variable of that name would break the template or never be read.
TEMPLATE_LANGUAGE_NAMES = frozenset(
    {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "self", "loop", "super", "caller"}
    | {"varargs", "kwargs"}
)


class ChatCompletionRequest(GenerationParameters):
    """``POST /v1/chat/completions`` and the chat form of a direct invoke."""

    endpoint: ClassVar[Endpoint] = "chat"

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    #: How much the model may think before it answers (a reasoning model's thinking budget; "none" switches
    #: thinking off where the template can, and otherwise closes it at once).
    reasoning_effort: ReasoningEffort | None = None
    #: Extra variables for the chat template, as llama-server and vLLM take them: ``{"enable_thinking":
    #: false}`` switches a Qwen3 model's thinking off.
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _chat_supported(self) -> ChatCompletionRequest:
        if self.modalities and "audio" in self.modalities:
            raise UnsupportedParameterError(
                "modalities: the models served here produce text only", param="modalities"
            )
        choice = self.tool_choice
        check_tools(
            [tool.function for tool in self.tools or []],
            named=choice.function.name if isinstance(choice, NamedToolChoice) else None,
            required=choice == "required",
            parameters_param="tools.{index}.function.parameters",
        )
        if isinstance(self.response_format, JSONSchemaResponseFormat):
            form = self.response_format.json_schema
            check_schema(form.json_schema, param="response_format", strict=form.strict is True)
        names = set(self.chat_template_kwargs or {})
        reserved = sorted(TEMPLATE_VARIABLES & names)
        if reserved:
            raise InvalidRequestError(
                f"chat_template_kwargs: {', '.join(reserved)} come from the request itself and cannot be "
                "set here",
                param="chat_template_kwargs",
            )
        reserved = sorted(TEMPLATE_LANGUAGE_NAMES & names)
        if reserved:
            raise InvalidRequestError(
                f"chat_template_kwargs: {', '.join(map(repr, reserved))} "
                f"{'is a name' if len(reserved) == 1 else 'are names'} of the chat template language "
                "itself, not template variables: choose another name",
                param="chat_template_kwargs",
            )
        turns = (
            (index, m.role, [c.id for c in m.tool_calls or []], m.tool_call_id)
            for index, m in enumerate(self.messages)
        )
        check_tool_turns(turns, field="messages")
        return self

    @property
    def calls_tools(self) -> bool:
        """Whether the model may answer with tool calls (tools given, and tool_choice is not "none")."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def forced_tools(self) -> list[FunctionDefinition]:
        """The functions the answer must call (``required`` or a named function), else empty."""
        choice = self.tool_choice
        if not self.tools or choice in (None, "none", "auto"):
            return []
        if isinstance(choice, NamedToolChoice):
            return [t.function for t in self.tools if t.function.name == choice.function.name]
        return [t.function for t in self.tools]

    @property
    def parallel_calls(self) -> bool:
        """OpenAI's default: parallel calls allowed unless refused (and never with one named function)."""
        return self.parallel_tool_calls is not False and not isinstance(self.tool_choice, NamedToolChoice)


def _prompt_form(value: Any) -> str | None:
    """Which form a ``prompt`` takes: text, a batch of texts, token ids, or a batch of token-id lists (told
    apart by the first element; an empty list is an empty prompt of tokens, refused)."""
    if isinstance(value, str):
        return "type=text"
    if not isinstance(value, list):
        return None
    first = value[0] if value else 0
    if isinstance(first, str):
        return "type=texts"
    return "type=token_lists" if isinstance(first, list) else "type=tokens"


TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
#: OpenAI's ``prompt``: text or token ids, alone or as a batch. A batch of one is served; more is a 400.
Prompt = Annotated[
    Annotated[str, Tag("type=text")]
    | Annotated[list[str], Field(min_length=1, max_length=1), Tag("type=texts")]
    | Annotated[TokenIds, Tag("type=tokens")]
    | Annotated[list[TokenIds], Field(min_length=1, max_length=1), Tag("type=token_lists")],
    Discriminator(
        _prompt_form,
        custom_error_type="invalid_prompt",
        custom_error_message="prompt must be a string, a list of strings, a list of token ids or a list "
        "of lists of token ids",
    ),
]


class CompletionRequest(GenerationParameters):
    """``POST /v1/completions`` and the plain form of a direct invoke."""

    endpoint: ClassVar[Endpoint] = "completion"

    prompt: Prompt
    # Text completions take a number here: how many alternatives to report per token (OpenAI's max is 5).
    logprobs: Annotated[int, Field(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None  # type: ignore[assignment]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @model_validator(mode="after")
    def _completion_supported(self) -> CompletionRequest:
        if self.echo:
            raise UnsupportedParameterError("echo is not supported", param="echo")
        if self.suffix:
            raise UnsupportedParameterError("suffix (fill-in-the-middle) is not supported", param="suffix")
        if self.best_of not in (None, 1):
            raise UnsupportedParameterError("only best_of=1 is supported", param="best_of")
        return self

    @property
    def logprobs_count(self) -> int | None:
        return self.logprobs

    @property
    def text(self) -> str | None:
        """The prompt's text; None for a prompt of token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return prompt
        return prompt[0] if prompt and isinstance(prompt[0], str) else None

    @property
    def tokens(self) -> list[int] | None:
        """The prompt's token ids, as sent; None for a prompt of text."""
        prompt = self.prompt
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], str)):
            return None
        return prompt[0] if prompt and isinstance(prompt[0], list) else prompt  # type: ignore[return-value]


InferenceRequest = ChatCompletionRequest | CompletionRequest


_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _param(location: tuple[int | str, ...]) -> str | None:
    """The field path of an error, without pydantic's union-branch tags (``str``, ``list[str]``...)."""
    parts: list[str] = []
    for part in location:
        text = str(part)
        if isinstance(part, str) and text.startswith("type="):
            continue  # a tagged union's branch
        if isinstance(part, str) and (text in _UNION_TAGS or "[" in text or text[:1].isupper()):
            break
        parts.append(text)
    return ".".join(parts) or None


#: Pydantic's errors for a value of the wrong JSON type, said in JSON's terms: pydantic names Python's types
#: and this package's classes ("a valid dictionary or instance of FunctionDefinition").
_JSON_TYPE_ERRORS = {
    "model_type": "Input should be an object",
    "model_attributes_type": "Input should be an object",
    "dict_type": "Input should be an object",
    "list_type": "Input should be an array",
    "tuple_type": "Input should be an array",
    "none_required": "Input should be null",
}


def validation_error(errors: Sequence[Mapping[str, Any]]) -> InvalidRequestError:
    """Turn pydantic's error list into one clear message; ``param`` names the first offending field.

    Takes the errors of a ``ValidationError`` or of a framework that validated with these models (the
    router's Powertools resolver, whose locations start with ``body``).
    """
    first = errors[0]
    location = tuple(first["loc"])
    param = _param(location[1:] if location[:1] == ("body",) else location)
    kind = first["type"]
    if kind == "extra_forbidden":
        message = f"unrecognized request argument: {param}"
    elif kind == "missing":
        message = f"missing required field: {param}"
    else:
        detail = _JSON_TYPE_ERRORS.get(kind) or str(first["msg"]).removeprefix("Value error, ")
        message = f"{param}: {detail}" if param else detail
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return InvalidRequestError(message, param=param)


def prompt_chars(request: InferenceRequest) -> tuple[int, str]:
    """How many characters of the request can reach the prompt, and the field they come from (``messages``
    or ``prompt``; a prompt of token ids has none: its tokens are checked against the context window)."""
    if isinstance(request, ChatCompletionRequest):
        return sum(message.prompt_chars() for message in request.messages), "messages"
    return len(request.text or ""), "prompt"


_JSON_TYPE_NAMES = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "an array"))


def check_served_model(requested: str | None, served: str) -> None:
    """Refuse a request that names a model other than the one served here (no name means this one)."""
    if requested is not None and requested != served:
        raise UnknownModelError(f"the model {requested!r} does not exist; available: {served}", param="model")


def require_object(body: Any) -> dict[str, Any]:
    """``body`` if it is a JSON object; else the 400 every entry point gives a body of another JSON type
    (``[...]``, ``"..."``, ``5``, ``null``), named in JSON's terms."""
    if isinstance(body, dict):
        return body
    kind = next((name for types, name in _JSON_TYPE_NAMES if isinstance(body, types)), "null")
    raise InvalidRequestError(f"the request must be a JSON object, got {kind}")


def parse_request(body: Any, *, required: Literal["messages", "prompt"] | None = None) -> InferenceRequest:
    """Validate a request body: ``messages`` makes it a chat completion, ``prompt`` a text completion.

    An HTTP route serves one of the two and names its field in ``required``; a direct invoke takes either.
    Raises :class:`~snapllm.errors.RequestError` subclasses with ``param`` set to the offending field.
    """
    body = require_object(body)
    if required is not None and required not in body:
        raise InvalidRequestError(f"missing required field: {required}", param=required)
    has_messages, has_prompt = "messages" in body, "prompt" in body
    if has_messages == has_prompt:
        raise InvalidRequestError(
            "send either 'messages' (chat completion) or 'prompt' (text completion), or 'input' alone "
            "(a response)",
            param="messages" if not has_messages else "prompt",
        )
    model = ChatCompletionRequest if has_messages else CompletionRequest
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None
    return request


@dataclass(frozen=True)
class ToolCall:
    """A function call the model generated; ``arguments`` is the JSON string OpenAI clients expect."""

    id: str
    name: str
    arguments: str


FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class Generation:
    """What one request produced, as the protocol renders it: the answer's text (with tool calls, the text
    written before them), its tool calls, its thinking, and the fingerprint of what generated it."""

    text: str
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    timings: Timings
    seed: int
    deadline_reached: bool = False
    tool_calls: tuple[ToolCall, ...] = ()
    cached_tokens: int = 0
    logprobs: tuple[TokenLogprob, ...] | None = None
    system_fingerprint: str | None = None
    #: A reasoning model's thinking (None: the model did not think), told apart from ``text``, and the
    #: tokens it took.
    reasoning: str | None = None
    reasoning_tokens: int = 0
    #: The response_format's constraints the grammar did not hold, which the complete answer was validated
    #: against instead (it passed: an answer that fails is a 422).
    validated: tuple[str, ...] = ()

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
