"""Tool calls written without their family's tags: an answer that is bare JSON calls, read as those calls.

    >>> tools = (("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),)
    >>> bare_call(' {"name": "get_weather", "arguments": {"city": "Paris"}} ', tools)
    ('get_weather', '{"city": "Paris"}')

When such an answer is a call (and when it is text) is in docs/models.md. Pure: no llama.cpp.
"""

from __future__ import annotations

import json
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
    calls = bare_calls(text, tools, arguments_key=arguments_key, parallel=False)
    return calls[0] if calls else None


def bare_calls(
    text: str, tools: Tools, *, arguments_key: str = "arguments", parallel: bool
) -> list[tuple[str, str]] | None:
    """The (name, JSON arguments) of the calls ``text`` is, or None: one call, or with ``parallel`` several
    call objects one after another (as a model writes the calls it means in one block)."""
    body = _unfenced(text.strip())
    objects = _objects(body)
    if not objects or (len(objects) > 1 and not parallel):
        return None
    names, parameters = [name for name, _ in tools], dict(tools)
    calls = []
    for part in objects:
        parsed = parse_tool_calls(part, names, arguments_key=arguments_key)
        if (
            parsed is None
            or len(parsed) != 1
            or not arguments_valid(parsed[0][1], parameters.get(parsed[0][0]))
        ):
            return None
        calls.append(parsed[0])
    return calls


def _objects(body: str) -> list[str]:
    """The JSON objects ``body`` is, one after another with only whitespace around them ([] if it is not)."""
    decoder = json.JSONDecoder()
    objects, position = [], 0
    while position < len(body):
        if body[position] != "{":
            return []
        try:
            _, end = decoder.raw_decode(body, position)
        except ValueError:
            return []
        objects.append(body[position:end])
        position = end
        while position < len(body) and body[position] in " \t\r\n":
            position += 1
    return objects


def _unfenced(text: str) -> str:
    """``text`` without one Markdown code block around all of it (```` ```json ```` or ```` ``` ````), or
    opening all of it (an answer cut before its fence closed)."""
    for opening in ("```json\n", "```\n"):
        if text.startswith(opening) and text.endswith("```") and text.count("```") == 2:
            return text[len(opening) : -3].strip()
        if text.startswith(opening) and text.count("```") == 1:
            return text[len(opening) :].rstrip("`").strip()
    return text
