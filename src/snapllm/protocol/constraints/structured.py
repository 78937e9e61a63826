"""Structured output: a schema's checks at the request's edge, and the shape of a tool call.

Pure (no llama.cpp), so the router refuses a schema it cannot serve before invoking anything, with the same
message as the inference function::

    check_schema({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
                 param="response_format")   # the CompiledSchema; a 400 only when it cannot be served

What a schema becomes (enforced, validated, refused) is in docs/structured-output.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from snapllm.errors import InvalidRequestError, SnapllmError, ToolCallCutShortError
from snapllm.protocol.constraints.compiled_schema import CompiledSchema, compile_schema, subschemas

# What the agent keeps when it narrows a tool's schema for a small model (snapllm.agent.schemas): the
# keywords a constraint holds while generating, the formats spelled out, and the annotations.
ENFORCED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    }
)
ENFORCED_FORMATS = frozenset(
    {"date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid"}
)
ANNOTATION_KEYWORDS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "strict",
        "discriminator",
        "nullable",
    }
)
# Keywords whose value is a map of name -> schema, a list of schemas, or one schema.
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties")
# More parallel calls than this would only let a small model repeat itself.
MAX_PARALLEL_TOOL_CALLS = 4


def check_schema(
    schema: Any, *, param: str, strict: bool = False, listed_keys_only: bool = False
) -> CompiledSchema:
    """``schema`` compiled (:func:`~snapllm.protocol.constraints.compiled_schema.compile_schema`), or the 400
    that refuses it: not valid JSON Schema in its draft, over the size limit, or over llguidance's limits.
    ``strict`` (OpenAI's ``strict: true``) holds it to OpenAI's strict-mode rules too
    (:func:`strict_mode_breach`)."""
    compiled = compile_schema(schema, param=param, listed_keys_only=listed_keys_only)
    breach = strict_mode_breach(schema) if strict else None
    if breach is not None:
        raise InvalidRequestError(f"{param}: strict mode: {breach}", param=param)
    return compiled


def strict_mode_breach(schema: Mapping[str, Any]) -> str | None:
    """What in ``schema`` breaks OpenAI's strict mode, which refuses it rather than guess: the root is an
    object, and every object lists each of its properties in ``required`` and sets ``additionalProperties``
    to false (an optional field is a required one that may be null). None when it keeps them."""
    if schema.get("type") != "object":
        return f"the root must be an object (type 'object'), not {schema.get('type', 'untyped')!r}"
    stack: list[tuple[str, Any]] = [("the root", schema)]
    while stack:
        place, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        kind = node.get("type")
        if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node:
            properties = node.get("properties", {})
            required = node.get("required", [])
            missing = [name for name in properties if name not in required]
            if missing:
                return (
                    f"'required' must list every key in properties (at {place}); missing "
                    f"{', '.join(repr(name) for name in missing[:5])}"
                )
            if node.get("additionalProperties") is not False:
                return f"'additionalProperties' must be false (at {place})"
        inner = "" if place == "the root" else f"{place}."
        stack.extend((f"{inner}{where}", sub) for where, sub in reversed(list(subschemas(node))))
    return None


# --- Tool calls -------------------------------------------------------------------------------------------


def arguments_schema(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """A function's ``parameters`` as written (an empty object where it has none): what its arguments are
    checked against."""
    if not parameters:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return dict(parameters)


def tool_arguments(parameters: Mapping[str, Any] | None, *, param: str = "tools") -> CompiledSchema:
    """A function's arguments compiled (:func:`arguments_schema`), once for the request's validation, its
    grammar and its answer's check: generated with only the keys each object lists
    (``listed_keys_only``), checked against the schema as written."""
    return compile_schema(arguments_schema(parameters), param=param, listed_keys_only=True)


def _pointer_token(name: str) -> str:
    """``name`` as one step of a ``$ref`` (JSON pointer escapes, then URI escapes)."""
    return quote(name.replace("~", "~0").replace("/", "~1"), safe="")


def map_subschemas(schema: Mapping[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of ``schema`` with ``change`` applied to each schema it holds one level down (each entry of
    ``properties``, ``$defs`` and ``definitions``, each of ``anyOf``, ``oneOf``, ``allOf`` and
    ``prefixItems``, ``items`` and ``additionalProperties``); every other value (an ``enum``, a
    ``const``, a ``$ref``) stays as it is. ``change`` recurses, if it should."""
    out = dict(schema)
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {name: change(sub) for name, sub in value.items()}
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [change(sub) for sub in value]
        elif keyword in _SCHEMA_VALUES:
            out[keyword] = change(value)
    return out


def embed_schema(schema: Any, at: str) -> Any:
    """``schema`` rewritten to live at the pointer ``at`` (``#/$defs/tool``) inside another schema: every
    local ``$ref`` (to its ``$defs``, its ``properties`` or itself) then names the same part of it there.

    Only schema positions are rewritten, so an ``enum`` or ``const`` value that looks like a ``$ref``
    stays as it is."""
    if not isinstance(schema, Mapping):
        return schema
    out = map_subschemas(schema, lambda sub: embed_schema(sub, at))
    ref = out.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        out["$ref"] = at + ref[1:]
    return out


def embed_schemas(schemas: Mapping[str, Any]) -> tuple[dict[str, dict[str, str]], dict[str, Any]]:
    """Several schemas (by name) made parts of one: a ``$ref`` to each, and the ``$defs`` that hold them.

    Each schema keeps its own ``$defs``, and its ``$ref``s resolve against it, whatever the names of the
    others (a tool ``a`` with a def ``b-c`` and a tool ``a-b`` with a def ``c`` stay apart)."""
    refs: dict[str, dict[str, str]] = {}
    defs: dict[str, Any] = {}
    for name, schema in schemas.items():
        at = f"#/$defs/{_pointer_token(name)}"
        defs[name] = embed_schema(schema, at)
        refs[name] = {"$ref": at}
    return refs, defs


def named_arguments_schema(
    parameters: Mapping[str, Any], *, name_key: str, arguments_key: str = "arguments"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One object naming one of ``parameters``' keys (``{name_key: <name>, "arguments": ...}``) with
    arguments valid against that name's schema, and the ``$defs`` it needs: each schema is an entry of its
    own (:func:`embed_schemas`), which the ``arguments`` refer to. A tool call and an agent's plan step
    are both this shape."""
    refs, defs = embed_schemas(parameters)
    choices = [
        {
            "type": "object",
            "properties": {name_key: {"const": name}, arguments_key: ref},
            "required": [name_key, arguments_key],
            "additionalProperties": False,
        }
        for name, ref in refs.items()
    ]
    return (choices[0] if len(choices) == 1 else {"anyOf": choices}), defs


def tool_call_schema(
    functions: Sequence[Mapping[str, Any]], *, parallel: bool, arguments_key: str = "arguments"
) -> dict[str, Any]:
    """The JSON schema of what the model generates to call one of ``functions`` (OpenAI ``function``
    objects: ``name`` and ``parameters``): one call, or with ``parallel`` a list of 1 to
    :data:`MAX_PARALLEL_TOOL_CALLS` calls (:func:`named_arguments_schema`)."""
    call, defs = named_arguments_schema(
        {str(function["name"]): arguments_schema(function.get("parameters")) for function in functions},
        name_key="name",
        arguments_key=arguments_key,
    )
    schema: dict[str, Any] = (
        {"type": "array", "items": call, "minItems": 1, "maxItems": MAX_PARALLEL_TOOL_CALLS}
        if parallel
        else call
    )
    return {**schema, "$defs": defs}


def generic_tool_instructions(functions: Sequence[Mapping[str, Any]], *, parallel: bool) -> str:
    """The system-prompt text that describes ``functions`` to a model whose chat template has no tools.

    This is the documented generic format: the functions as a JSON list, and the reply format the
    grammar enforces when the model calls one."""
    shape = '{"name": <function name>, "arguments": {<arguments>}}'
    many = f" or a JSON list of such objects to call several at once ({MAX_PARALLEL_TOOL_CALLS} at most)"
    return (
        f"{listed_functions(functions)}\n"
        f"To call a function, reply with only the JSON object {shape}{many if parallel else ''}."
    )


def listed_functions(functions: Sequence[Mapping[str, Any]]) -> str:
    """The sentence that lists ``functions`` (name, description, parameters) as JSON to a model whose chat
    template describes no tools."""
    listed = [
        {
            "name": f["name"],
            "description": f.get("description") or "",
            "parameters": arguments_schema(f.get("parameters")),
        }
        for f in functions
    ]
    return f"You can call these functions: {json.dumps(listed, ensure_ascii=False)}"


def generic_tool_call_text(calls: Sequence[tuple[str, str]]) -> str:
    """An earlier assistant turn's tool calls (name, JSON arguments) in the generic reply format."""
    rendered = []
    for name, arguments in calls:
        try:
            parsed: Any = json.loads(arguments)
        except ValueError:
            parsed = arguments
        rendered.append({"name": name, "arguments": parsed})
    value: Any = rendered[0] if len(rendered) == 1 else rendered
    return json.dumps(value, ensure_ascii=False)


def arguments_valid(arguments: str, parameters: Mapping[str, Any] | None) -> bool:
    """Whether a call's JSON ``arguments`` are valid against its function's ``parameters``."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return False
    # The answer check's validator (compiled when the request was read: a cache hit).
    try:
        compiled = tool_arguments(parameters)
    except SnapllmError:
        return False
    return not compiled.value_violations(value)


def parse_tool_calls(
    text: str, names: Collection[str], *, arguments_key: str = "arguments"
) -> list[tuple[str, str]] | None:
    """The (name, JSON arguments) of the calls to ``names`` in a generated tool-call text; None if it is
    not one (a reply in text or in JSON of another shape, or a call cut short by ``max_tokens``)."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls: list[tuple[str, str]] = []
    for item in items:
        if (
            not isinstance(item, dict)
            or item.get("name") not in names
            or set(item) != {"name", arguments_key}
        ):
            return None
        calls.append((item["name"], json.dumps(item[arguments_key], ensure_ascii=False)))
    return calls or None


#: A call read from an answer that was cut short: its function's name (None when the cut came before the
#: name was decided) and its arguments as far as they were generated (complete JSON for every call but the
#: last; the last one's text as it stands, possibly empty).
CutCall = tuple[str | None, str]
_SPACE = " \t\r\n"
_DECODER = json.JSONDecoder()


def cut_call_error(*, deadline: bool, max_tokens: int, text: str) -> ToolCallCutShortError:
    """The error for an answer cut inside a tool call before its function's name was decided (see
    :func:`parse_cut_tool_calls`): 400 naming ``max_tokens``, or 504 when the deadline cut it."""
    generated = f"after {text.strip()!r}" if text.strip() else "before its first token"
    if deadline:
        error = ToolCallCutShortError(
            f"generation reached the time limit inside a tool call, {generated}, before the function's "
            "name: there is no call to return; retry, or send a shorter conversation"
        )
        error.status_code, error.error_type = 504, "timeout_error"
        return error
    return ToolCallCutShortError(
        f"max_tokens ({max_tokens}) ended the answer inside a tool call, {generated}, before the function's "
        "name: there is no call to return; raise max_tokens",
        param="max_tokens",
    )


class _Cut(Exception):
    """The text ended here."""


class _NotACall(Exception):
    """The text is not the beginning of a tool-call answer."""


class _CallReader:
    """Reads a tool-call answer (the shape :func:`tool_call_schema` makes the grammar generate) that may
    stop anywhere, one part at a time."""

    def __init__(self, text: str, names: Collection[str], arguments_key: str) -> None:
        self.text = text
        self.names = names
        self.arguments_key = arguments_key
        self.at = 0

    def space(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in _SPACE:
            self.at += 1

    def expect(self, literal: str) -> None:
        self.space()
        rest = self.text[self.at : self.at + len(literal)]
        if not literal.startswith(rest):
            raise _NotACall
        if len(rest) < len(literal):
            raise _Cut
        self.at += len(literal)

    def peek(self) -> str:
        self.space()
        if self.at == len(self.text):
            raise _Cut
        return self.text[self.at]

    def value(self) -> Any:
        """A whole JSON value; _Cut if it is unfinished."""
        self.space()
        try:
            value, self.at = _DECODER.raw_decode(self.text, self.at)
        except ValueError:
            raise _Cut from None
        return value

    def name_from(self, prefix: str) -> str | None:
        """The function a name beginning with ``prefix`` must be (the grammar allows only these names),
        or None if more than one may be."""
        matches = [name for name in self.names if name.startswith(prefix)]
        return matches[0] if len(matches) == 1 else None

    def call(self, calls: list[CutCall]) -> None:
        """One ``{"name": ..., "arguments": ...}``, appended to ``calls`` as far as it goes."""
        calls.append((self.name_from(""), ""))
        self.expect("{")
        self.expect('"name"')
        self.expect(":")
        if self.peek() != '"':
            raise _NotACall
        start = self.at
        try:
            name = self.value()
        except _Cut:
            calls[-1] = (self.name_from(self.text[start + 1 :]), "")
            raise
        if name not in self.names:
            raise _NotACall
        calls[-1] = (name, "")
        self.expect(",")
        self.expect(json.dumps(self.arguments_key))
        self.expect(":")
        self.space()
        start = self.at
        try:
            arguments = self.value()
        except _Cut:
            calls[-1] = (name, self.text[start:])
            raise
        calls[-1] = (name, json.dumps(arguments, ensure_ascii=False))
        self.expect("}")


def parse_cut_tool_calls(
    text: str, names: Collection[str], *, arguments_key: str = "arguments"
) -> list[CutCall] | None:
    """The calls in a tool-call answer cut short (by ``max_tokens`` or a deadline), as OpenAI returns a
    truncated call: each call's name and its arguments as generated so far; None if ``text`` is not the
    beginning of a tool-call answer (free text, or JSON of another shape)::

        parse_cut_tool_calls('[{"name": "get_weather", "arguments": {"city": "Pa', {"get_weather"})
        # [("get_weather", '{"city": "Pa')]

    Nothing generated is no call (None); a call whose name was cut has the one name the grammar allowed
    from that prefix, else None for its name."""
    reader = _CallReader(text, names, arguments_key)
    calls: list[CutCall] = []
    try:
        if reader.peek() == "[":
            reader.at += 1
            reader.call(calls)
            while reader.peek() == ",":
                reader.at += 1
                reader.call(calls)
            reader.expect("]")
        else:
            reader.call(calls)
    except _Cut:
        pass
    except _NotACall:
        return None
    if not calls or (len(calls) == 1 and not text.strip()):
        return None
    return calls
