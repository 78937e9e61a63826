"""A request's JSON schema compiled once: the constraint llguidance enforces, and the rest validated.

Every place that turns a schema into something (the router's check, the function's request validation,
the grammar the decode loop follows, the answer's check) asks :func:`compile_schema`, which compiles a
schema once and keeps it in a bounded LRU keyed by its compact JSON::

    compiled = compile_schema({"type": "object", "properties": {"city": {"type": "string"}}},
                              param="response_format")
    compiled.grammar          # a whole llguidance grammar: the answer is this JSON alone
    compiled.lark()           # '%json {...}': the schema inside a larger Lark grammar (tool calls)
    compiled.check_answer(text, param="response_format")   # 422 when the finished answer breaks it

What llguidance enforces while generating is generated only that way. What it does not (``uniqueItems``,
``not``, ``if``/``then``/``else``, ``dependencies``, a lookaround in a ``pattern``, a format it has no
grammar for such as ``int32``...) is listed in :attr:`CompiledSchema.validated` and checked on the finished
answer by ``jsonschema`` in the draft the schema declares (``$schema``; 2020-12 when it declares none). A
keyword JSON Schema does not define is an annotation. A schema is refused (400) only when it is not valid
JSON Schema, is larger than :data:`MAX_SCHEMA_CHARS`, or its constraint exceeds llguidance's limits
(:data:`PARSER_LIMITS`) or :data:`COMPILE_BUDGET_S`.

JSON may carry bounded whitespace between its tokens (:data:`WHITESPACE`): ``{"city":"Paris"}``,
``{"city": "Paris"}`` and an object indented on new lines are all reachable, and no gap is longer than a
newline and :data:`MAX_INDENT` spaces, so a weak model cannot spend ``max_tokens`` on spaces.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import islice
from threading import Lock
from typing import Any

import llguidance
import regex
from jsonschema import Draft3Validator, Draft4Validator, Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError

from snapllm.errors import InvalidRequestError, SchemaValidationFailedError, UnsupportedParameterError

#: A schema's size as compact JSON, in characters, above which it is refused before anything compiles it
#: (a deployment may set a lower limit: :class:`snapllm.protocol.limits.Limits`).
MAX_SCHEMA_CHARS = 16_000
#: The longest indentation after a newline between two JSON tokens (``indent=2`` ten levels deep).
MAX_INDENT = 20
#: What may stand between two JSON tokens: nothing, one space or tab, or a newline and an indentation.
WHITESPACE = rf"[ \t]?|\r?\n[ \t]{{0,{MAX_INDENT}}}"
#: The JSON compiler's options, inside every compiled schema (``x-guidance``; a request's own
#: ``x-guidance`` is replaced). ``lenient``: a keyword llguidance does not implement leaves the constraint
#: wider, and the answer is validated on it.
OPTIONS: dict[str, Any] = {"whitespace_pattern": WHITESPACE, "lenient": True, "coerce_one_of": True}
#: llguidance's limits on one constraint, the same when the schema is compiled here as when the decode
#: loop builds its matcher: lexer fuel bounds the compile (~50k/ms) and each token's mask (~14k/ms), the
#: Earley items each step, the lexer's states its memory (1-2 kB each), the grammar's size its symbols.
PARSER_LIMITS: dict[str, int] = {
    "initial_lexer_fuel": 1_000_000,
    "step_lexer_fuel": 200_000,
    "step_max_items": 50_000,
    "max_lexer_states": 50_000,
    "max_grammar_size": 200_000,
}
#: A compile that takes longer is refused (and remembered, so a repeat costs nothing).
COMPILE_BUDGET_S = 1.0
#: Compiled schemas kept: a conversation's requests repeat the same tools and response_format.
CACHE_SIZE = 256
#: How long one ``pattern`` may take to match one string of the answer.
PATTERN_TIMEOUT_S = 0.05
#: The violations an error lists (the first ones, in the answer's order).
MAX_VIOLATIONS = 8

_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[(.*)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (.*)")


@dataclass
class Compilations:
    """How many schemas were really compiled in this process (a cache hit is not one)."""

    count: int = 0


COMPILATIONS = Compilations()


def parser_limits() -> llguidance.LLParserLimits:
    """:data:`PARSER_LIMITS` as llguidance takes them."""
    return llguidance.LLParserLimits(**PARSER_LIMITS)


def schema_size(schema: Any) -> int:
    """A schema's size as compact JSON, in characters: what the deployment's limit counts."""
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


# --- Validation -------------------------------------------------------------------------------------------


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = regex.search(pattern, instance, timeout=PATTERN_TIMEOUT_S)
    except TimeoutError:
        yield ValidationError(f"{instance[:40]!r} could not be matched against {pattern!r} in time")
        return
    except regex.error:
        yield ValidationError(f"{pattern!r} is not a regular expression")
        return
    if found is None:
        yield ValidationError(f"{instance[:80]!r} does not match {pattern!r}")


def _multiple_of(
    validator: Any, step: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "number"):
        return
    try:
        remainder = Decimal(repr(instance)) % Decimal(repr(step))
    except (InvalidOperation, ValueError):
        remainder = Decimal(1)  # too large to divide exactly (1e300 by 0.01): not shown to be a multiple
    if remainder != 0:
        yield ValidationError(f"{instance!r} is not a multiple of {step!r}")


def _draft_validator(draft: Any) -> Any:
    """``draft``'s validator, whose ``pattern`` is matched under a time limit (ECMA's syntax, with the
    ``regex`` module) and whose ``multipleOf`` divides decimals exactly."""
    return validators.extend(draft, {"pattern": _pattern, "multipleOf": _multiple_of})


_VALIDATORS: dict[Any, Any] = {}


def _validator_class(draft: Any) -> Any:
    """``draft``'s validator as :func:`_draft_validator` makes it, made once."""
    if draft not in _VALIDATORS:
        _VALIDATORS[draft] = _draft_validator(draft)
    return _VALIDATORS[draft]


# Where a schema holds schemas: maps of them, lists of them, one of them.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_SCHEMA_ONE += ("unevaluatedItems", "unevaluatedProperties", "additionalItems", "items")


def _subschemas(schema: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each schema ``schema`` holds one level down, with where (``properties.city``)."""
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            for name, sub in value.items():
                yield f"{keyword}.{name}", sub
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            for index, sub in enumerate(value):
                yield f"{keyword}[{index}]", sub
        elif keyword in _SCHEMA_ONE:
            yield keyword, value
        elif keyword == "dependencies" and isinstance(value, Mapping):
            for name, sub in value.items():
                if isinstance(sub, Mapping | bool):
                    yield f"dependencies.{name}", sub


def _modern(schema: Any, *, draft4: bool) -> Any:
    """``schema`` as llguidance reads it (2020-12's spelling): a tuple ``items`` (a list) becomes
    ``prefixItems`` with ``additionalItems`` as ``items``; under draft-04 a boolean ``exclusiveMaximum``
    moves ``maximum`` (and the same below). Values (``enum``, ``const``) are left as they are."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {name: _modern(sub, draft4=draft4) for name, sub in value.items()}
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [_modern(sub, draft4=draft4) for sub in value]
        elif keyword in _SCHEMA_ONE:
            out[keyword] = _modern(value, draft4=draft4)
    if isinstance(out.get("items"), list) and "prefixItems" not in out:
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    for exclusive, bound in (("exclusiveMaximum", "maximum"), ("exclusiveMinimum", "minimum")):
        if isinstance(out.get(exclusive), bool):
            if out[exclusive] and draft4 and bound in out:
                out[exclusive] = out.pop(bound)
            else:
                del out[exclusive]
    out.pop("x-guidance", None)  # the project's options, never the request's
    return out


def _without_patterns(schema: Any, broken: set[str]) -> Any:
    """``schema`` without the ``pattern``s llguidance cannot read (a lookaround, a backreference):
    those strings are generated freely and their pattern validated on the answer."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {name: _without_patterns(sub, broken) for name, sub in value.items()}
            if keyword == "patternProperties" and any(name in broken for name in value):
                # A property name llguidance cannot match: any extra property is allowed while generating.
                del out[keyword]
                out.pop("additionalProperties", None)
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [_without_patterns(sub, broken) for sub in value]
        elif keyword in _SCHEMA_ONE:
            out[keyword] = _without_patterns(value, broken)
    if isinstance(out.get("pattern"), str) and out["pattern"] in broken:
        del out["pattern"]
    return out


def _patterns(schema: Any) -> Iterator[str]:
    """Every ``pattern`` and ``patternProperties`` name in ``schema``."""
    if not isinstance(schema, Mapping):
        return
    if isinstance(schema.get("pattern"), str):
        yield schema["pattern"]
    names = schema.get("patternProperties")
    if isinstance(names, Mapping):
        yield from names
    for _, sub in _subschemas(schema):
        yield from _patterns(sub)


def _places(schema: Any, keyword: str, path: str = "") -> Iterator[str]:
    """Where ``keyword`` is used in ``schema``, as ``properties.city`` (``the root``)."""
    if not isinstance(schema, Mapping):
        return
    if keyword in schema:
        yield path or "the root"
    for where, sub in _subschemas(schema):
        yield from _places(sub, keyword, f"{path}.{where}".lstrip("."))


def _format_places(schema: Any, name: str, path: str = "") -> Iterator[str]:
    if not isinstance(schema, Mapping):
        return
    if schema.get("format") == name:
        yield path or "the root"
    for where, sub in _subschemas(schema):
        yield from _format_places(sub, name, f"{path}.{where}".lstrip("."))


# --- Compiling --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledSchema:
    """One schema compiled: what llguidance enforces (:attr:`enforced`, with :data:`OPTIONS`), what is
    validated on the finished answer instead (:attr:`validated`), and the validator of its draft."""

    schema: Any
    enforced: Mapping[str, Any]
    validated: tuple[str, ...]
    validator: Any = field(repr=False)
    compile_ms: float = 0.0

    def lark(self) -> str:
        """This schema as a Lark expression, to embed in a larger llguidance grammar."""
        return "%json " + json.dumps({**self.enforced, "x-guidance": OPTIONS}, ensure_ascii=False)

    @property
    def grammar(self) -> str:
        """A whole llguidance grammar: an answer that is this JSON alone."""
        return llguidance.LLMatcher.grammar_from_json_schema(dict(self.enforced), overrides=OPTIONS)

    def violations(self, text: str) -> list[str]:
        """What in ``text`` (a finished answer) breaks the schema in its declared draft, each as
        ``[$path] message`` (at most :data:`MAX_VIOLATIONS`); empty when it validates."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            return [f"the answer is not JSON ({exc})"]
        return self.value_violations(value)

    def value_violations(self, value: Any) -> list[str]:
        """:meth:`violations` of a value already parsed."""
        errors = sorted(
            islice(self.validator.iter_errors(value), 64), key=lambda e: [str(p) for p in e.absolute_path]
        )
        return [f"{_place(error)} {error.message[:200]}" for error in islice(errors, MAX_VIOLATIONS)]

    def check_answer(self, text: str, *, param: str) -> None:
        """Raise :class:`SchemaValidationFailedError` when ``text`` does not validate."""
        violations = self.violations(text)
        if not violations:
            return
        held = (
            f"; validated on the answer, not enforced by the grammar: {', '.join(self.validated)}"
            if self.validated
            else ""
        )
        raise SchemaValidationFailedError(
            f"{param}: the answer does not validate against the schema: {'; '.join(violations)}{held}. "
            f"The answer was {text[:300]!r}; it is not returned as valid "
            "(retry, with another seed or prompt)",
            param=param,
        )


def _place(error: ValidationError) -> str:
    return "$" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)


class _Refused(Exception):
    """Why a schema cannot be served, without the parameter's name (which differs between requests)."""


def _check_patterns(schema: Any) -> set[str]:
    """The patterns llguidance cannot read; a pattern no regular-expression engine reads is refused."""
    broken: set[str] = set()
    for pattern in dict.fromkeys(_patterns(schema)):
        try:
            regex.compile(pattern)
        except (regex.error, RecursionError, OverflowError, ValueError):
            raise _Refused(f"a pattern that is not a regular expression ({pattern[:40]!r})") from None
        grammar = llguidance.LLMatcher.grammar_from_json_schema({"type": "string", "pattern": pattern})
        if llguidance.LLMatcher.validate_grammar(grammar, None, limits=parser_limits()):
            broken.add(pattern)
    return broken


def _llguidance(enforced: Mapping[str, Any]) -> tuple[bool, list[str]]:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(dict(enforced), overrides=OPTIONS)
    return llguidance.LLMatcher.validate_grammar_with_warnings(grammar, None, limits=parser_limits())


def _compile(schema: Mapping[str, Any]) -> CompiledSchema:
    started = time.perf_counter()
    # The draft the schema declares ($schema) judges the schema and, later, the answer.
    draft = validators.validator_for(schema, default=Draft202012Validator)
    cls = _validator_class(draft)
    judged = _validation_schema(schema)
    try:
        cls.check_schema(judged)
    except SchemaError as exc:
        place = ".".join(str(p) for p in exc.path) or "the root"
        raise _Refused(f"the schema is not valid JSON Schema: {exc.message[:200]} (at {place})") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise _Refused(f"the schema could not be read ({type(exc).__name__})") from None
    enforced = _modern(schema, draft4=draft in (Draft3Validator, Draft4Validator))
    validated: list[str] = []
    failed, messages = _llguidance(enforced)
    if failed and "regex" in messages[0]:
        broken = _check_patterns(enforced)
        if broken:
            enforced = _without_patterns(enforced, broken)
            validated.extend(f"pattern {p[:40]!r}" for p in sorted(broken))
            failed, messages = _llguidance(enforced)
    if failed:
        raise _Refused(f"the schema cannot be enforced: {messages[0].splitlines()[0][:300]}")
    elapsed = time.perf_counter() - started
    if elapsed > COMPILE_BUDGET_S:
        raise _Refused(
            f"the schema took {elapsed * 1000:.0f} ms to compile; at most {COMPILE_BUDGET_S * 1000:.0f} ms "
            "is allowed (fewer $refs, choices or patterns)"
        )
    for message in messages:
        if found := _UNIMPLEMENTED.search(message):
            for keyword in json.loads(f"[{found.group(1)}]"):
                places = list(islice(dict.fromkeys(_places(schema, keyword)), 3))
                validated.append(f"{keyword} (at {', '.join(places)})" if places else keyword)
        elif found := _UNKNOWN_FORMAT.search(message):
            name = found.group(1).strip()
            places = list(islice(dict.fromkeys(_format_places(schema, name)), 3))
            validated.append(f"format {name!r} (at {', '.join(places)})" if places else f"format {name!r}")
    validator = cls(judged, format_checker=cls.FORMAT_CHECKER)
    COMPILATIONS.count += 1
    return CompiledSchema(
        schema=schema,
        enforced=enforced,
        validated=tuple(dict.fromkeys(validated)),
        validator=validator,
        compile_ms=(time.perf_counter() - started) * 1000,
    )


def _validation_schema(schema: Mapping[str, Any]) -> Any:
    """What the answer is validated against: the schema as given, except that one declaring no draft is
    read as 2020-12 with the spellings of the drafts before it that 2020-12 renamed (a tuple ``items``
    with ``additionalItems``, ``dependencies``), so they are validated rather than ignored."""
    if "$schema" in schema:
        return schema
    return _renamed(schema)


def _renamed(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {name: _renamed(sub) for name, sub in value.items()}
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [_renamed(sub) for sub in value]
        elif keyword in _SCHEMA_ONE:
            out[keyword] = _renamed(value)
    if isinstance(out.get("items"), list) and "prefixItems" not in out:
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    dependencies = out.pop("dependencies", None)
    if isinstance(dependencies, Mapping):
        required = {k: v for k, v in dependencies.items() if isinstance(v, list)}
        schemas = {k: _renamed(v) for k, v in dependencies.items() if not isinstance(v, list)}
        if required:
            out["dependentRequired"] = {**required, **out.get("dependentRequired", {})}
        if schemas:
            out["dependentSchemas"] = {**schemas, **out.get("dependentSchemas", {})}
    elif dependencies is not None:
        out["dependencies"] = dependencies
    return out


_CACHE: OrderedDict[str, CompiledSchema | str] = OrderedDict()
_CACHE_LOCK = Lock()


def compile_schema(schema: Any, *, param: str) -> CompiledSchema:
    """``schema`` compiled (once: later calls with the same schema share it), or the 400 that refuses it,
    naming ``param``. Its size is checked before anything compiles it."""
    if not isinstance(schema, Mapping):
        raise UnsupportedParameterError(f"{param}: the schema must be a JSON object", param=param)
    try:
        key = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        raise UnsupportedParameterError(f"{param}: the schema is not JSON", param=param) from None
    if len(key) > MAX_SCHEMA_CHARS:
        raise InvalidRequestError(
            f"{param}: the schema is {len(key)} characters as compact JSON; at most {MAX_SCHEMA_CHARS} are "
            "accepted",
            param=param,
        )
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
    if found is None:
        try:
            found = _compile(schema)
        except _Refused as exc:
            found = str(exc)
        except RecursionError:
            found = "the schema is nested too deeply"
        with _CACHE_LOCK:
            _CACHE[key] = found
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    if isinstance(found, str):
        raise UnsupportedParameterError(f"{param}: {found}", param=param)
    return found


def clear_cache() -> None:
    """Forget every compiled schema (a benchmark's compile times are of compiles, not of cache hits)."""
    with _CACHE_LOCK:
        _CACHE.clear()
