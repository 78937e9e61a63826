"""The grammar a chat request is generated under: its ``response_format``, its tool calls, or both.

    grammar, tool_calls = chat_grammar(request)
    # (None, None): free text; (grammar, "all"): the answer is tool calls; (grammar, "auto"): it may be

A llguidance grammar (Lark, with ``%json`` schemas); docs/structured-output.md and docs/models.md say
what it holds. Pure: no llama.cpp.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import llguidance

from snapllm.protocol.constraints.compiled_schema import compile_schema
from snapllm.protocol.constraints.lark_grammar import Specials, is_token, spelled, text_until, text_without
from snapllm.protocol.families.reasoning import ThinkingMarkers, ThinkingState
from snapllm.protocol.families.tool_formats import GENERIC, ToolCallFormat
from snapllm.protocol.requests import ChatCompletionRequest, JSONSchemaResponseFormat

ToolCalls = Literal["all", "auto"]
# What the free-text branch of a tool_choice="auto" grammar does not start with, where the calls have no
# opener of their own: what opens a JSON call, and whitespace (so the first character tells them apart).
_NOT_FIRST = "{[ \t\r\n"
# Between the end of the thinking and the answer: the blank lines models write there.
_SPACING = "SPACING: /[ \\t\\n]{1,3}/\n"
_NO_SPECIALS: Mapping[str, int] = {}


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
    specials: Specials = _NO_SPECIALS,
) -> tuple[str | None, ToolCalls | None]:
    """The llguidance grammar that constrains the answer (None: free text), and whether the answer is tool
    calls.

    Calls are written in the model family's ``tool_format``. A model that thinks first (``thinking``, from
    where the prompt leaves it: ``state``) thinks freely: the grammar holds what follows the thinking.
    ``specials`` are the model's special tokens among the markers (text to id), written as tokens."""
    lark = chat_lark(request, tool_format=tool_format, thinking=thinking, state=state, specials=specials)
    if lark is None:
        return None, None
    text, tool_calls = lark
    return llguidance.LLMatcher.grammar_from_lark(text), tool_calls


def chat_lark(
    request: ChatCompletionRequest,
    *,
    tool_format: ToolCallFormat = GENERIC,
    thinking: ThinkingMarkers | None = None,
    state: ThinkingState = "closed",
    specials: Specials = _NO_SPECIALS,
) -> tuple[str, ToolCalls | None] | None:
    """:func:`chat_grammar`'s grammar as Lark text (None: free text)."""
    reply = _reply(request, tool_format, specials, answer_prefix=thinking.answer_prefix if thinking else "")
    if reply is None:
        return None
    expression, rules, tool_calls = reply
    if thinking is None or state == "closed":
        return f"start: {expression}\n{rules}", tool_calls
    thought, thought_rules = text_until(thinking.end, specials, "THOUGHT")
    resume = spelled(thinking.resume, specials) if thinking.resume else "SPACING?"
    think = f"{thought} {resume}"
    if state == "optional":
        opened = f"{spelled(thinking.start, specials)} {think}"
        think = opened if thinking.always else f"({opened})?"
    return f"start: {think} ({expression})\n{thought_rules}{_SPACING}{rules}", tool_calls


def _reply(
    request: ChatCompletionRequest,
    tool_format: ToolCallFormat,
    specials: Specials,
    *,
    answer_prefix: str = "",
) -> tuple[str, str, ToolCalls | None] | None:
    """The answer after any thinking: its Lark expression, the rules it uses, and whether it calls tools.
    An answer that is not a call opens with ``answer_prefix`` (its channel's header, where the model has
    channels)."""
    opened = f"{spelled(answer_prefix, specials)} " if answer_prefix else ""
    parallel = request.parallel_calls
    forced = request.forced_tools
    if forced:
        functions = [f.model_dump(exclude_none=True) for f in forced]
        return "calls", tool_format.grammar(functions, parallel=parallel, specials=specials), "all"
    schema = answer_schema(request)
    answer = f"answer: {compile_schema(schema, param='response_format').lark()}\n" if schema else ""
    if not request.calls_tools:
        if schema is None:
            return None
        return f"{opened}answer", answer, None
    functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []]
    calls = tool_format.grammar(functions, parallel=parallel, specials=specials)
    # Two branches: the calls, and the answer (the response_format's JSON, or text). A format with an
    # opener lets text come before the calls, and only the opener starts them.
    if answer:
        return f"calls | {opened}answer", calls + answer, "auto"
    prose = text_without(tool_format.openers, specials, "PROSE")
    if answer_prefix:  # text and calls are messages apart: a call, or text on the answer's channel
        return f"calls | {opened}PROSE?", calls + prose, "auto"
    if not tool_format.opener or not tool_format.text_before_calls:
        # A call, or text that does not start as one does.
        first = _NOT_FIRST + "".join(opener[0] for opener in tool_format.openers)
        free = text_without(tool_format.openers, specials, "FREE_TEXT", first=first)
        return "calls | FREE_TEXT", calls + free, "auto"
    if is_token(tool_format.opener, specials):  # text cannot hold the opener's token: text, then calls
        return "PROSE? calls?", calls + prose, "auto"
    # The opener is text: text without it, or text up to it and the calls after it.
    until, until_rules = text_until(tool_format.opener, specials, "PROSE_OPEN")
    return f"PROSE? | {until} calls_opened", calls + prose + until_rules, "auto"
