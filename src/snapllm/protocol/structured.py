"""Structured output: which JSON schemas a grammar can enforce, and the shape of a tool call.

This module is pure (no llama.cpp), so the router refuses a schema it cannot serve before invoking
anything, with the same message as the inference function::

    check_schema({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
                 param="response_format")
    # UnsupportedParameterError: response_format: the schema uses minimum (at properties.n) ...

A checked schema becomes a llama.cpp grammar (:func:`snapllm.protocol.json_grammar.schema_grammar`, which
:func:`check_schema` runs too, so what it refuses for cost or shape is refused here as well), so
generation can only produce text of the schema's shape. What a grammar cannot keep (``uniqueItems``,
``not``, a lookaround in a ``pattern``: :data:`~snapllm.protocol.json_grammar.VALIDATED_KEYWORDS`) is
validated on the complete answer instead (:mod:`snapllm.protocol.answer_check`), which fails the request
when it does not hold. A keyword JSON Schema does not define, a format no grammar is written for, and a
schema that is not valid JSON Schema are refused.

Tool calls are generated as JSON in one format whatever the model (see :func:`tool_call_schema`)::

    {"name": "get_weather", "arguments": {"city": "Paris"}}            # one call
    [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]   # parallel calls
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import regex
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from snapllm.errors import ToolCallCutShortError, UnsupportedParameterError
from snapllm.protocol.answer_check import modern_schema, schema_validator
from snapllm.protocol.json_grammar import ANNOTATION_KEYWORDS, FORMATS, VALIDATED_KEYWORDS, schema_grammar

# Keywords the grammar converter enforces.
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
# Formats the converter turns into grammar rules; any other format would go unchecked.
ENFORCED_FORMATS = frozenset(FORMATS)
JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
# Keywords whose value is a map of name -> schema, a list of schemas, or one schema.
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties")
# Validated keywords that hold schemas (one, or a map of them): walked too, so every pattern in them is
# checked before it meets an answer.
_VALIDATED_SCHEMAS = ("not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems")
_VALIDATED_SCHEMAS += ("unevaluatedProperties", "additionalItems")
_VALIDATED_MAPS = ("patternProperties", "dependentSchemas")
_NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Counts the grammar spells out one by one (a string of minLength 10**9 would be a grammar of 10**9 rules):
# bounded so a small request cannot make a huge grammar.
MAX_REPEAT = 4096
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
_PATTERN_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
# More parallel calls than this would only let a small model repeat itself.
MAX_PARALLEL_TOOL_CALLS = 4


def _is_regex(pattern: str) -> bool:
    # Checked here, not only when the grammar is built: a target that is not a Lambda function (an
    # always-on server) would otherwise meet the broken pattern first and answer 500. The answer's check
    # matches with the regex module (ECMA's named groups and lookbehinds), so it compiles it here.
    try:
        regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError, ValueError):
        return False
    return True


def _walk(schema: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every (keyword, where) the grammar cannot enforce, depth first."""
    if isinstance(schema, bool):
        if schema is False:
            yield "a false schema", path or "the root"
        return
    if not isinstance(schema, Mapping):
        yield "a schema that is not an object", path or "the root"
        return
    where = path or "the root"
    for keyword, value in schema.items():
        if keyword in ANNOTATION_KEYWORDS:
            continue
        if keyword in VALIDATED_KEYWORDS:
            if keyword in _VALIDATED_SCHEMAS and not isinstance(value, bool):
                yield from _walk(value, f"{path}.{keyword}".lstrip("."))
            elif keyword in _VALIDATED_MAPS and isinstance(value, Mapping):
                for name, sub in value.items():
                    if keyword == "patternProperties" and not _is_regex(name):
                        yield (
                            f"a patternProperties name that is not a regular expression ({name[:40]!r})",
                            where,
                        )
                    yield from _walk(sub, f"{path}.{keyword}.{name}".lstrip("."))
            continue
        if keyword not in ENFORCED_KEYWORDS:
            yield keyword, where
            continue
        if keyword == "$ref" and not (isinstance(value, str) and (value == "#" or value.startswith("#/"))):
            yield "a $ref outside the schema", where
        elif keyword == "format" and (not isinstance(value, str) or value not in ENFORCED_FORMATS):
            yield f"format {value!r}", where
        elif keyword == "required" and not (
            isinstance(value, list) and all(isinstance(name, str) for name in value)
        ):
            yield "required that is not a list of names", where
        elif keyword == "enum" and not isinstance(value, list):
            yield "enum that is not a list", where
        elif keyword == "type":
            types = value if isinstance(value, list) else [value]
            if not types or any(not isinstance(t, str) or t not in JSON_TYPES for t in types):
                yield f"type {value!r}", where
        elif keyword == "pattern" and not isinstance(value, str):
            yield "a pattern that is not a string", where
        elif keyword == "pattern" and not _is_regex(value):
            yield f"a pattern that is not a regular expression ({value[:40]!r})", where
        elif keyword == "pattern" and any(
            int(n) > MAX_REPEAT for match in _PATTERN_COUNT.findall(value) for n in match if n
        ):
            yield f"a pattern repeat over {MAX_REPEAT}", where
        elif keyword in _NUMBER_BOUNDS and not (
            isinstance(value, int | float) and not isinstance(value, bool)
        ):
            yield f"{keyword} {value!r} (a number)", where
        elif keyword == "multipleOf" and not (
            isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        ):
            yield f"multipleOf {value!r} (a number above 0)", where
        elif keyword in _COUNTS and (
            not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_REPEAT
        ):
            yield f"{keyword} {value!r} (0 to {MAX_REPEAT})", where
        elif keyword in _SCHEMA_MAPS:
            if not isinstance(value, Mapping):
                yield f"{keyword} that is not an object", where
                continue
            for name, sub in value.items():
                yield from _walk(sub, f"{path}.{keyword}.{name}".lstrip("."))
        elif keyword in _SCHEMA_LISTS:
            if not isinstance(value, list) or not value:
                yield f"{keyword} that is not a non-empty list", where
                continue
            for index, sub in enumerate(value):
                yield from _walk(sub, f"{path}.{keyword}[{index}]".lstrip("."))
        elif keyword in _SCHEMA_VALUES and not isinstance(value, bool):
            if keyword == "items" and isinstance(value, list):
                for index, sub in enumerate(value):
                    yield from _walk(sub, f"{path}.items[{index}]".lstrip("."))
            else:
                yield from _walk(value, f"{path}.{keyword}".lstrip("."))
        elif keyword == "items" and value is False:
            yield "items: false", where


def check_schema(schema: Any, *, param: str) -> None:
    """Refuse a JSON schema that cannot be served, naming every construct that is why: a keyword JSON Schema
    does not define, a format without a grammar, a schema that is not valid JSON Schema, one whose grammar
    would cost too much. Keywords a grammar cannot hold are accepted: the answer is validated on them."""
    if not isinstance(schema, Mapping):
        raise UnsupportedParameterError(f"{param}: the schema must be a JSON object", param=param)
    problems = list(dict.fromkeys(f"{keyword} (at {where})" for keyword, where in _walk(schema, "")))
    if problems:
        shown = ", ".join(problems[:8]) + (f" and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise UnsupportedParameterError(
            f"{param}: the schema uses {shown}, which cannot be served; supported are type, properties, "
            "required, additionalProperties, items, prefixItems, minItems, maxItems, enum, const, anyOf, "
            "oneOf, allOf, local $ref/$defs (recursive ones too), minLength, maxLength, pattern, minimum, "
            "maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, the formats "
            f"{', '.join(sorted(ENFORCED_FORMATS))}, and (validated on the answer, not generated) the "
            "other keywords of JSON Schema 2020-12 (uniqueItems, not, if/then/else, dependentRequired...)",
            param=param,
        )
    try:
        Draft202012Validator.check_schema(modern_schema(schema))
    except SchemaError as exc:
        place = ".".join(str(p) for p in exc.path) or "the root"
        raise UnsupportedParameterError(
            f"{param}: the schema is not valid JSON Schema: {exc.message[:200]} (at {place})", param=param
        ) from None
    # What remains is what only building the grammar shows (a $ref to nothing or to itself, a pattern
    # too costly to enforce, a grammar too large...): it is built here, by the same code as the engine's.
    try:
        schema_grammar(schema, param=param)
    except (TypeError, ValueError, KeyError, RecursionError) as exc:
        # A keyword's value of a shape the checks above do not foresee: still the caller's schema.
        raise UnsupportedParameterError(
            f"{param}: the schema could not be read ({type(exc).__name__}: {exc})", param=param
        ) from None


def schema_size(schema: Any) -> int:
    """A schema's size as compact JSON, in characters: what the deployment's limit counts."""
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


# --- Tool calls -------------------------------------------------------------------------------------------


def arguments_schema(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    if not parameters:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return dict(parameters)


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
    listed = json.dumps(
        [
            {
                "name": f["name"],
                "description": f.get("description") or "",
                "parameters": arguments_schema(f.get("parameters")),
            }
            for f in functions
        ],
        ensure_ascii=False,
    )
    shape = '{"name": <function name>, "arguments": {<arguments>}}'
    many = f" or a JSON list of such objects to call several at once ({MAX_PARALLEL_TOOL_CALLS} at most)"
    return (
        f"You can call these functions: {listed}\n"
        f"To call a function, reply with only the JSON object {shape}{many if parallel else ''}."
    )


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
    # The answer check's validator: patterns matched under a time limit, multipleOf on decimals.
    return schema_validator(arguments_schema(parameters)).is_valid(value)


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
