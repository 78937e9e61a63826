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

from snapllm.protocol.json_grammar import schema_grammar
from snapllm.protocol.requests import ChatCompletionRequest, JSONSchemaResponseFormat
from snapllm.protocol.structured import tool_call_schema

ToolCalls = Literal["all", "auto"]
# The free-text branch of a tool_choice="auto" grammar: anything that does not open a JSON call (and
# does not start with whitespace, so the first character alone tells a call from an answer).
TEXT_RULE = "free-text ::= [^{[ \\t\\r\\n] [^\\x00]*\n"


def answer_schema(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The JSON schema the answer must follow under ``response_format``, if any."""
    form = request.response_format
    if isinstance(form, JSONSchemaResponseFormat):
        return form.json_schema.json_schema or {"type": "object"}
    if form is not None and form.type == "json_object":
        return {"type": "object"}
    return None


def chat_grammar(request: ChatCompletionRequest) -> tuple[str | None, ToolCalls | None]:
    """The grammar that constrains the answer (None: free text), and whether the answer is tool calls."""
    parallel = request.parallel_calls
    forced = request.forced_tools
    if forced:
        functions = [f.model_dump(exclude_none=True) for f in forced]
        return schema_grammar(tool_call_schema(functions, parallel=parallel), param="tools"), "all"
    schema = answer_schema(request)
    answer = schema_grammar(schema, param="response_format") if schema is not None else None
    if not request.calls_tools:
        return answer, None
    functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []]
    calls = schema_grammar(tool_call_schema(functions, parallel=parallel), param="tools", prefix="call-")
    # One grammar, two branches whose rules are named apart: the call, and the answer (free text, or the
    # response_format's JSON); the first character tells which branch the model took.
    if schema is not None:
        other = schema_grammar(schema, param="response_format", prefix="answer-")
        branch = "answer-root"
    else:
        other, branch = TEXT_RULE, "free-text"
    return f"root ::= call-root | {branch}\n{calls}{other}", "auto"
