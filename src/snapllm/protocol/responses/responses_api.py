"""The Responses API request (``POST /v1/responses``), validated with OpenAI's field names and served
statelessly as the chat completion it translates to.

    request = parse_invoke({"input": "Name three colours.", "max_output_tokens": 32})
    serving.generate(request.chat)           # the ChatCompletionRequest served

docs/api.md ("The Responses API") says which input items are taken and what is refused.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    model_validator,
)

from snapllm.errors import InvalidRequestError, RequestError, UnsupportedParameterError
from snapllm.protocol.constraints.structured import check_schema
from snapllm.protocol.http.edge import check_json_value
from snapllm.protocol.http.fields import Endpoint
from snapllm.protocol.requests import (
    MAX_SEED,
    MAX_TOP_LOGPROBS,
    STRICT,
    ArgumentsText,
    ChatCompletionRequest,
    DecidedRequest,
    InferenceRequest,
    LocalSamplingFields,
    OpenAIName,
    ReasoningEffort,
    Turn,
    check_tool_turns,
    check_tools,
    parse_request,
    require_object,
    validation_error,
)

#: The one ``include`` value served: the answer's token log probabilities.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
_STATELESS = "this server is stateless and stores nothing"
_TEXT_PARTS = frozenset({"input_text", "output_text", "refusal"})
_ITEM_TYPES = frozenset({"message", "function_call", "function_call_output"})


class InputTextPart(BaseModel):
    model_config = STRICT
    type: Literal["input_text"]
    text: str


class OutputTextPart(BaseModel):
    """Text an earlier answer gave, sent back as it came (annotations and logprobs are not read)."""

    model_config = STRICT
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None
    parsed: Any = None  # what the official SDK's parse() added to an answer sent back


class RefusalPart(BaseModel):
    model_config = STRICT
    type: Literal["refusal"]
    refusal: str


def _type_tag(default: str | None = None) -> Callable[[Any], str | None]:
    """A union's branch by its ``type`` (``default`` when a dict has none), tagged ``type=...`` so that an
    error's location names the field, not the branch."""

    def tag(value: Any) -> str | None:
        kind = value.get("type", default) if isinstance(value, dict) else getattr(value, "type", None)
        return f"type={kind}" if isinstance(kind, str) else None

    return tag


ContentPart = Annotated[
    Annotated[InputTextPart, Tag("type=input_text")]
    | Annotated[OutputTextPart, Tag("type=output_text")]
    | Annotated[RefusalPart, Tag("type=refusal")],
    Discriminator(
        _type_tag(),
        custom_error_type="invalid_content_part",
        custom_error_message="type must be one of 'input_text', 'output_text' or 'refusal'",
    ),
]
ItemStatus = Literal["in_progress", "completed", "incomplete"]


class MessageItem(BaseModel):
    """A message: ``{"role", "content"}``, with or without ``type: "message"`` (an earlier answer's output
    item, with its ``id`` and ``status``, is one too)."""

    model_config = STRICT
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: ItemStatus | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.refusal if isinstance(part, RefusalPart) else part.text for part in self.content)


class FunctionCallItem(BaseModel):
    """A call the model made in an earlier answer: ``call_id`` ties its output to it."""

    model_config = STRICT
    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: str
    arguments: ArgumentsText
    id: str | None = None
    status: ItemStatus | None = None
    parsed_arguments: Any = None  # what the official SDK's parse() added to a call sent back


class FunctionCallOutputItem(BaseModel):
    """The result of a call, answered by ``call_id``."""

    model_config = STRICT
    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[InputTextPart]
    id: str | None = None
    status: ItemStatus | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


def _item_kind(value: Any) -> str | None:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


InputItem = Annotated[
    Annotated[MessageItem, Tag("type=message")]
    | Annotated[FunctionCallItem, Tag("type=function_call")]
    | Annotated[FunctionCallOutputItem, Tag("type=function_call_output")],
    Discriminator(
        _type_tag("message"),
        custom_error_type="invalid_input_item",
        custom_error_message="type must be one of 'message', 'function_call' or 'function_call_output'",
    ),
]


class TextFormatText(BaseModel):
    model_config = STRICT
    type: Literal["text"]


class TextFormatJSONObject(BaseModel):
    model_config = STRICT
    type: Literal["json_object"]


class TextFormatJSONSchema(BaseModel):
    """``text.format`` with a schema: the Responses shape puts ``name`` and ``schema`` at this level."""

    model_config = ConfigDict(extra="forbid", strict=True, serialize_by_alias=True, validate_by_name=True)
    type: Literal["json_schema"]
    name: OpenAIName
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


TextFormat = Annotated[
    Annotated[TextFormatText, Tag("type=text")]
    | Annotated[TextFormatJSONObject, Tag("type=json_object")]
    | Annotated[TextFormatJSONSchema, Tag("type=json_schema")],
    Discriminator(
        _type_tag(),
        custom_error_type="invalid_text_format",
        custom_error_message="type must be one of 'text', 'json_object' or 'json_schema'",
    ),
]


class TextConfig(BaseModel):
    """``text``: the answer's format; ``verbosity`` is a hint for reasoning models and is not used."""

    model_config = STRICT
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class FunctionTool(BaseModel):
    """A function tool in the Responses shape (name and parameters at the tool's level)."""

    model_config = STRICT
    type: Literal["function"]
    name: OpenAIName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionToolChoice(BaseModel):
    """``tool_choice`` naming the one function the model must call."""

    model_config = STRICT
    type: Literal["function"]
    name: str


def _input_form(value: Any) -> str | None:
    return "type=text" if isinstance(value, str) else "type=items" if isinstance(value, list) else None


ResponsesToolChoice = Literal["none", "auto", "required"] | FunctionToolChoice


def _without_reasoning_items(data: dict[str, Any]) -> dict[str, Any]:
    """The request without the ``reasoning`` items of earlier output sent back as input: a client that sends
    a response's output back whole sends them, and a model reads its earlier answers without their
    thinking (its template drops it too)."""
    items = data.get("input")
    if not isinstance(items, list) or not any(_item_kind(item) == "reasoning" for item in items):
        return data
    return {**data, "input": [item for item in items if _item_kind(item) != "reasoning"]}


def _refuse_unservable(data: dict[str, Any]) -> None:
    """Built-in tools, other tool choices, stored items and non-text content: refused by name and reason,
    before the models' own errors would list every branch of a union."""
    tools = data.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise UnsupportedParameterError(
                f"tools.{index} is a {kind!r} tool: built-in tools run in OpenAI's service, and there is "
                "no such tool here; send a function tool and run it yourself",
                param="tools",
            )
    choice = data.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if isinstance(kind, str) and kind != "function":
        raise UnsupportedParameterError(
            f"tool_choice of type {kind!r} is not supported: only function tools exist here; send "
            "'none', 'auto', 'required' or {'type': 'function', 'name': ...}",
            param="tool_choice",
        )
    items = data.get("input")
    for index, item in enumerate(items if isinstance(items, list) else []):
        kind = _item_kind(item)
        if kind == "item_reference":
            raise UnsupportedParameterError(
                f"input.{index} refers to a stored item; {_STATELESS}: send the item itself",
                param="input",
            )
        if isinstance(kind, str) and kind not in _ITEM_TYPES:
            raise UnsupportedParameterError(
                f"input.{index} is a {kind!r} item; only message, function_call and function_call_output "
                "items are served here (no built-in tools; reasoning items sent back are left out)",
                param="input",
            )
        parts = item.get("content") if isinstance(item, dict) else None
        if kind == "function_call_output" and isinstance(item, dict):
            parts = item.get("output")
        for part in parts if isinstance(parts, list) else []:
            part_kind = part.get("type") if isinstance(part, dict) else None
            if isinstance(part_kind, str) and part_kind not in _TEXT_PARTS:
                raise UnsupportedParameterError(
                    f"input.{index}: a {part_kind!r} content part was sent; this model takes text only "
                    "(send input_text parts or a string)",
                    param="input",
                )


class ReasoningConfig(BaseModel):
    """``reasoning``: a reasoning model's thinking budget (``effort``, as ``reasoning_effort`` in chat); the
    thinking comes back whole as a ``reasoning`` item, so ``summary`` changes nothing here."""

    model_config = STRICT
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(DecidedRequest, LocalSamplingFields):
    """``POST /v1/responses`` and the ``input`` form of a direct invoke.

    :attr:`chat` is the same request as a chat completion, which is what the engine runs.
    """

    endpoint: ClassVar[Endpoint] = "responses"

    model: str | None = Field(default=None, description="Model name; the router routes by it.")
    input: Annotated[
        Annotated[str, Tag("type=text")] | Annotated[list[InputItem], Field(min_length=1), Tag("type=items")],
        Discriminator(
            _input_form,
            custom_error_type="invalid_input",
            custom_error_message="input must be a string or a list of input items",
        ),
    ]
    instructions: str | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.7
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: ResponsesToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    include: list[str] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    store: bool | None = None
    background: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    # Not an OpenAI field: snapllm's own, as on chat completions, so an answer can be reproduced (the
    # official SDK sends it with extra_body={"seed": ...}).
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

    _chat: ChatCompletionRequest | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _servable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            # The edge's checks first (this runs before RequestBody's): a refusal below quotes an item's type,
            # which must be text a response can carry.
            check_json_value(data)
            data = _without_reasoning_items(data)
            _refuse_unservable(data)
        return data

    @model_validator(mode="after")
    def _stateless(self) -> ResponsesRequest:
        if self.store:
            raise UnsupportedParameterError(
                f"store=true asks for the response to be kept for later retrieval; {_STATELESS}: send "
                "store=false (leaving store out is accepted too, as the official SDK omits it, and nothing "
                "is stored either way)",
                param="store",
            )
        if self.background:
            raise UnsupportedParameterError(
                f"background=true asks for a stored response to poll later; {_STATELESS}: each request "
                "answers (or streams) before it returns",
                param="background",
            )
        if self.truncation == "auto":
            raise UnsupportedParameterError(
                "truncation 'auto' would drop input items to fit the context window; nothing is dropped "
                "here: an input that does not fit is refused (send 'disabled' or leave it out)",
                param="truncation",
            )
        for value in self.include or []:
            if value != LOGPROBS_INCLUDE:
                raise UnsupportedParameterError(
                    f"include {value!r} is not available here: only {LOGPROBS_INCLUDE!r} is (no built-in "
                    "tools, no images, no reasoning)",
                    param="include",
                )
        return self

    @model_validator(mode="after")
    def _structure(self) -> ResponsesRequest:
        choice = self.tool_choice
        check_tools(
            self.tools or [],
            named=choice.name if isinstance(choice, FunctionToolChoice) else None,
            required=choice == "required",
            parameters_param="tools.{index}.parameters",
        )
        form = self.text.format if self.text else None
        if isinstance(form, TextFormatJSONSchema):
            check_schema(form.json_schema, param="text.format", strict=form.strict is True)
        if isinstance(self.input, list):
            check_tool_turns(_turns(self.input), field="input")
        with responses_fields(self):
            self._chat = ChatCompletionRequest.model_validate(self._chat_body())
        return self

    @property
    def chat(self) -> ChatCompletionRequest:
        """This request as the chat completion the engine runs."""
        assert self._chat is not None
        return self._chat

    @property
    def logprobs(self) -> bool:
        return LOGPROBS_INCLUDE in (self.include or []) or self.top_logprobs is not None

    @property
    def format(self) -> TextFormatText | TextFormatJSONObject | TextFormatJSONSchema:
        """The answer's format (``text`` unless ``text.format`` says otherwise)."""
        form = self.text.format if self.text else None
        return form or TextFormatText(type="text")

    def _chat_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messages": self._chat_messages(),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stream": self.stream,
        }
        if self.model is not None:
            body["model"] = self.model
        body.update(self.model_dump(include=set(LocalSamplingFields.model_fields), exclude_none=True))
        if self.seed is not None:
            body["seed"] = self.seed
        if self.cache_prompt is not None:
            body["cache_prompt"] = self.cache_prompt
        if self.speculative is not None:
            body["speculative"] = self.speculative
        if self.close_at_max_tokens is not None:
            body["close_at_max_tokens"] = self.close_at_max_tokens
        if self.max_output_tokens is not None:
            body["max_completion_tokens"] = self.max_output_tokens
        if self.reasoning is not None and self.reasoning.effort is not None:
            body["reasoning_effort"] = self.reasoning.effort
        if self.tools:
            body["tools"] = [
                {"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
                for tool in self.tools
            ]
        if isinstance(self.tool_choice, FunctionToolChoice):
            body["tool_choice"] = {"type": "function", "function": {"name": self.tool_choice.name}}
        elif self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = self.parallel_tool_calls
        form = self.format
        if isinstance(form, TextFormatJSONSchema):
            schema = form.model_dump(by_alias=True, exclude={"type"}, exclude_none=True)
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif form.type == "json_object":
            body["response_format"] = {"type": "json_object"}
        if self.logprobs:
            body["logprobs"] = True
            if self.top_logprobs:
                body["top_logprobs"] = self.top_logprobs
        return body

    def _chat_messages(self) -> list[dict[str, Any]]:
        """The conversation as chat messages: instructions first (a system message), consecutive
        ``function_call`` items as one assistant turn with its tool calls, each output as a tool turn."""
        messages: list[dict[str, Any]] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        items = [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else self.input
        for item in items:
            if isinstance(item, MessageItem):
                messages.append({"role": item.role, "content": item.text()})
            elif isinstance(item, FunctionCallItem):
                call = {
                    "id": item.call_id,
                    "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments},
                }
                last = messages[-1] if messages else None
                if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                    last["tool_calls"].append(call)
                else:
                    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            else:
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
        return messages


def _turns(items: list[MessageItem | FunctionCallItem | FunctionCallOutputItem]) -> list[Turn]:
    """The input items as conversation turns: consecutive ``function_call`` items are one assistant turn
    (named by its first item), as the chat translation sends them."""
    turns: list[Turn] = []
    for index, item in enumerate(items):
        if isinstance(item, FunctionCallItem):
            previous = items[index - 1] if index else None
            if isinstance(previous, FunctionCallItem):
                position, role, made, _ = turns[-1]
                turns[-1] = (position, role, [*made, item.call_id], None)
            else:
                turns.append((index, "assistant", [item.call_id], None))
        elif isinstance(item, FunctionCallOutputItem):
            turns.append((index, "tool", [], item.call_id))
        else:
            turns.append((index, item.role, [], None))
    return turns


AnyRequest = InferenceRequest | ResponsesRequest

# Chat fields and the Responses fields they come from, for errors raised while serving the translation.
_CHAT_TO_RESPONSES = (
    (re.compile(r"^messages\b"), "input"),
    (re.compile(r"^response_format\b"), "text.format"),
    (re.compile(r"^max_(?:completion_)?tokens\b"), "max_output_tokens"),
    (re.compile(r"^tools\.(\d+)\.function\.parameters\b"), r"tools.\1.parameters"),
    (re.compile(r"^tools\.(\d+)\.function\b"), r"tools.\1"),
    (re.compile(r"^logprobs\b"), "include"),
)


def responses_param(text: str) -> str:
    """``text`` with the chat field it starts with renamed to the Responses field it stands for
    (``messages`` -> ``input``, ``response_format: ...`` -> ``text.format: ...``)."""
    for pattern, replacement in _CHAT_TO_RESPONSES:
        renamed, count = pattern.subn(replacement, text, count=1)
        if count:
            return renamed
    return text


@contextlib.contextmanager
def responses_fields(request: AnyRequest) -> Iterator[None]:
    """Errors raised while serving a Responses request's chat translation (limits, context window,
    grammar) name the Responses fields, as if the request had been checked in its own terms::

        with responses_fields(request):
            limits.check(request.chat)   # "max_output_tokens is 600; ..." rather than max_tokens
    """
    try:
        yield
    except RequestError as exc:
        if isinstance(request, ResponsesRequest) and exc.param:
            exc.param = responses_param(exc.param)
            exc.message = responses_param(exc.message)
            exc.args = (exc.message,)
        raise


def inference_request(request: AnyRequest) -> InferenceRequest:
    """The chat or text completion ``request`` is served as: a Responses request's chat translation, else
    the request itself."""
    return request.chat if isinstance(request, ResponsesRequest) else request


def parse_responses_request(body: Any) -> ResponsesRequest:
    """Validate a ``POST /v1/responses`` body; raises :class:`~snapllm.errors.RequestError` subclasses with
    ``param`` naming the offending field."""
    body = require_object(body)
    if "input" not in body:
        raise InvalidRequestError("missing required field: input", param="input")
    try:
        return ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None


def parse_invoke(body: Any) -> AnyRequest:
    """A direct invoke's request: ``input`` makes it a response, ``messages`` a chat completion,
    ``prompt`` a text completion."""
    if isinstance(body, dict) and "input" in body:
        others = [field for field in ("messages", "prompt") if field in body]
        if others:
            raise InvalidRequestError(
                f"send 'input' (a response) without {others[0]!r}, or {others[0]!r} without 'input'",
                param=others[0],
            )
        return parse_responses_request(body)
    return parse_request(body)
