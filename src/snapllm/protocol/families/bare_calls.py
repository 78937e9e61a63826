"""A tool call written without its family's tags: an answer that is one bare JSON call, read as the call.

    >>> tools = (("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),)
    >>> bare_call(' {"name": "get_weather", "arguments": {"city": "Paris"}} ', tools)
    ('get_weather', '{"city": "Paris"}')

When such an answer is a call (and when it is text) is in docs/models.md. Pure: no llama.cpp.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from snapllm.protocol.constraints.structured import arguments_valid, parse_tool_calls

Tools = Sequence[tuple[str, Mapping[str, Any] | None]]
#: How a bare call may open: the object itself, or a Markdown code block holding it.
_OPENINGS = ("{", "```json\n{", "```\n{")


def bare_calls_allowed(*, tool_calls: str | None, answer_schema: Any, opener: str) -> bool:
    """Whether a request's answer may be read as a bare JSON call: tools under ``auto``, no
    ``response_format``, in a format whose calls open with a marker."""
    return tool_calls == "auto" and answer_schema is None and bool(opener)


def may_be_bare_call(answer: str) -> bool:
    """Whether a streamed answer so far may still be a bare call (nothing yet, or a JSON object begun), so
    that it is held back rather than sent as text."""
    stripped = answer.lstrip()
    return any(stripped.startswith(opening) or opening.startswith(stripped) for opening in _OPENINGS)


def bare_call(text: str, tools: Tools, *, arguments_key: str = "arguments") -> tuple[str, str] | None:
    """The (name, JSON arguments) of the one call ``text`` is, or None (see the module's rules)."""
    body = _unfenced(text.strip())
    if not body.startswith("{"):
        return None
    calls = parse_tool_calls(body, [name for name, _ in tools], arguments_key=arguments_key)
    if calls is None or len(calls) != 1:
        return None
    name, arguments = calls[0]
    return (name, arguments) if arguments_valid(arguments, dict(tools).get(name)) else None


def _unfenced(text: str) -> str:
    """``text`` without one Markdown code block around all of it (```` ```json ```` or ```` ``` ````), or
    opening all of it (an answer cut before its fence closed)."""
    for opening in ("```json\n", "```\n"):
        if text.startswith(opening) and text.endswith("```") and text.count("```") == 2:
            return text[len(opening) : -3].strip()
        if text.startswith(opening) and text.count("```") == 1:
            return text[len(opening) :].rstrip("`").strip()
    return text
