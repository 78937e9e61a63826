"""A tool call written without its family's tags: an answer that is one bare JSON call, read as the call.

Small instruct models often answer a tools request (``tool_choice`` "auto") with the call's JSON alone,
without the envelope their template asks for: Qwen2.5-Coder-0.5B-Instruct answers "What is the weather in
Paris?" with ``{"name": "get_weather", "arguments": {"city": "Paris"}}`` in a ```` ```json ```` block and no
``<tool_call>`` tags. Such an answer is a call when nothing else could have meant it:

- the request has tools, lets the model choose (``auto``), and asks for no ``response_format`` (a
  ``json_object`` or ``json_schema`` answer is an answer, whatever its shape);
- the answer is exactly one JSON object (whitespace around it, or one Markdown code block around it and
  nothing else), with exactly the keys ``name`` and the format's arguments key;
- ``name`` is one of the request's tools and the arguments are valid against its ``parameters``.

    >>> tools = (("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),)
    >>> bare_call(' {"name": "get_weather", "arguments": {"city": "Paris"}}\\n', tools)
    ('get_weather', '{"city": "Paris"}')
    >>> bare_call('Call {"name": "get_weather", "arguments": {"city": "Paris"}}', tools) is None
    True

Formats whose calls are bare JSON anyway (the generic one, Llama 3's) read them as their own calls; this
is for formats with an opener. Pure: no llama.cpp.
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
    """``text`` without one Markdown code block around all of it (```` ```json ```` or ```` ``` ````)."""
    for opening in ("```json\n", "```\n"):
        if text.startswith(opening) and text.endswith("```") and text.count("```") == 2:
            return text[len(opening) : -3].strip()
    return text
