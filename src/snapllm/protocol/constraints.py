"""The grammar a chat request is generated under: its ``response_format``, its tool calls, or both.

Pure (no llama.cpp): the engine only hands the text to llama.cpp::

    grammar, tool_calls = chat_grammar(request)
    # (None, None): free text; (gbnf, "all"): the answer is tool calls; (gbnf, "auto"): it may be

Schemas become grammars with :func:`snapllm.protocol.json_grammar.schema_grammar` (compact JSON, bounded
cost);
tool calls with the schema of :func:`snapllm.protocol.structured.tool_call_schema`.
"""

from __future__ import annotations

from typing import Any, Literal

from snapllm.protocol.json_grammar import literal, schema_grammar, text_without
from snapllm.protocol.reasoning import ThinkingMarkers, ThinkingState
from snapllm.protocol.requests import ChatCompletionRequest, JSONSchemaResponseFormat
from snapllm.protocol.tool_formats import GENERIC, ToolCallFormat

ToolCalls = Literal["all", "auto"]
# The free-text branch of a tool_choice="auto" grammar in a format without an opener: anything that does
# not open a JSON call (and does not start with whitespace, so the first character tells a call from text).
TEXT_RULE = "free-text ::= [^{[ \\t\\r\\n] [^\\x00]*\n"
# Between the end of the thinking and the answer: the blank lines models write there.
_SPACING = "spacing ::= ( [ \\t\\n] ( [ \\t\\n] [ \\t\\n]? )? )?\n"


def answer_schema(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The JSON schema the answer must follow under ``response_format``, if any."""
    form = request.response_format
    if isinstance(form, JSONSchemaResponseFormat):
        return form.json_schema.json_schema or {"type": "object"}
    if form is not None and form.type == "json_object":
        return {"type": "object"}
    return None


def chat_grammar(
    request: ChatCompletionRequest,
    *,
    tool_format: ToolCallFormat = GENERIC,
    thinking: ThinkingMarkers | None = None,
    state: ThinkingState = "closed",
) -> tuple[str | None, ToolCalls | None]:
    """The grammar that constrains the answer (None: free text), and whether the answer is tool calls.

    Calls are written in the model family's ``tool_format``. A model that thinks first (``thinking``, from
    where the prompt leaves it: ``state``) thinks freely: the grammar starts where the thinking ends."""
    reply = _reply(request, tool_format, answer_prefix=thinking.answer_prefix if thinking else "")
    if reply is None:
        return None, None
    expression, rules, tool_calls = reply
    if thinking is None or state == "closed":
        return f"root ::= {expression}\n{rules}", tool_calls
    resume = literal(thinking.resume) if thinking.resume else "spacing"
    think = f"think-body {literal(thinking.end)} {resume}"
    if state == "optional":
        think = (
            f"{literal(thinking.start)} {think}"
            if thinking.always
            else f"( {literal(thinking.start)} {think} )?"
        )
    thought = text_without(thinking.end, "think-body") + _SPACING
    return f"root ::= {think} ( {expression} )\n{thought}{rules}", tool_calls


def _reply(
    request: ChatCompletionRequest, tool_format: ToolCallFormat, *, answer_prefix: str = ""
) -> tuple[str, str, ToolCalls | None] | None:
    """The answer after any thinking: its GBNF expression, the rules it uses, and whether it calls tools.
    An answer that is not a call opens with ``answer_prefix`` (its channel's header, where the model has
    channels)."""
    opened = f"{literal(answer_prefix)} " if answer_prefix else ""
    parallel = request.parallel_calls
    forced = request.forced_tools
    if forced:
        functions = [f.model_dump(exclude_none=True) for f in forced]
        return "call-root", tool_format.grammar(functions, parallel=parallel, prefix="call-"), "all"
    schema = answer_schema(request)
    if not request.calls_tools:
        if schema is None:
            return None
        return f"{opened}answer-root", schema_grammar(schema, param="response_format", prefix="answer-"), None
    functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []]
    calls = tool_format.grammar(functions, parallel=parallel, prefix="call-")
    # Two branches whose rules are named apart: the calls, and the answer (the response_format's JSON, or
    # text). A format with an opener lets text come before the calls, and only the opener starts them.
    if schema is not None:
        answer = schema_grammar(schema, param="response_format", prefix="answer-")
        return f"call-root | {opened}answer-root", calls + answer, "auto"
    if answer_prefix:  # text and calls are messages apart: a call, or text on the answer's channel
        return f"call-root | {opened}prose", calls + text_without(tool_format.opener, "prose"), "auto"
    if tool_format.opener:
        return "prose call-root?", calls + text_without(tool_format.opener, "prose"), "auto"
    return "call-root | free-text", calls + TEXT_RULE, "auto"
