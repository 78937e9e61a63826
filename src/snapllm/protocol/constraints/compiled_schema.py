"""A request's JSON schema compiled once: the constraint llguidance enforces, and the rest validated.

    compiled = compile_schema({"type": "string", "maxLength": 8}, param="response_format")
    compiled.grammar, compiled.lark()   # a whole llguidance grammar; '%json {...}' inside a larger one
    compiled.check_answer(text, param="response_format")   # 422 when the finished answer breaks it

docs/structured-output.md says who asks for it, what is enforced, validated or refused, and the bounds.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import islice
from threading import Lock
from typing import Any, ClassVar
from urllib.parse import unquote

import jsonschema_rs
import llguidance
import regex
from jsonschema import (
    Draft3Validator,
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    validators,
)
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema_specifications import REGISTRY as METASCHEMAS

from snapllm.errors import InvalidRequestError, SchemaValidationFailedError, UnsupportedParameterError
from snapllm.protocol.constraints.formats import FORMAT_CHECKER

#: The longest a request waits for its schema to compile, in seconds: a schema's cost is bounded by time, as
#: the rest of a request's work is, and by llguidance's limits (:data:`PARSER_LIMITS`), not by its size. A
#: compile past it is refused; it runs on to its end (those limits bound it) and its result is kept, so the
#: same schema sent again is served at once.
COMPILE_TIMEOUT_S = 2.0
#: A schema's size as compact JSON, in characters, above which it is refused before anything compiles it:
#: a backstop for what the timeout does not stop (a compile past it runs on), far above real schemas
#: (Kubernetes and JSON Schema Store ones run to 150 kB; the largest in JSONSchemaBench's sample, 960 kB,
#: fits). A deployment may set a lower limit (:class:`snapllm.protocol.limits.Limits`).
MAX_SCHEMA_CHARS = 1_048_576
#: The longest indentation after a newline between two JSON tokens (``indent=2`` sixteen levels deep:
#: real-world instances nest eleven and twelve deep).  A gap is one or two tokens whatever its length.
MAX_INDENT = 32
#: What may stand between two JSON tokens: nothing, one space or tab, or a newline and an indentation.
WHITESPACE = rf"[ \t]?|\r?\n[ \t]{{0,{MAX_INDENT}}}"
#: The JSON compiler's options, inside every compiled schema (``x-guidance``; a request's own
#: ``x-guidance`` is replaced). ``lenient``: a keyword llguidance does not implement leaves the constraint
#: wider, and the answer is validated on it.
OPTIONS: dict[str, Any] = {"whitespace_pattern": WHITESPACE, "lenient": True, "coerce_one_of": True}
#: llguidance's limits on one constraint: those the engine's matcher runs under
#: (:data:`snapllm.engine.constraint.LIMITS`, which this pure module cannot import: it loads llama.cpp), so
#: a schema compiled here also compiles there. Lexer fuel bounds the compile (~50k/ms) and each token's
#: mask (~14k/ms), the Earley items each step, the lexer's states its memory (1-2 kB each), the grammar's
#: size its symbols.
PARSER_LIMITS: dict[str, int] = {
    "max_items_in_row": 2_000,
    "initial_lexer_fuel": 1_000_000,
    "step_lexer_fuel": 50_000,
    "step_max_items": 10_000,
    "max_lexer_states": 20_000,
    "max_grammar_size": 200_000,
}
#: The stack a schema compiles on: llguidance walks nested rules recursively, and 3,000 nested ``$ref``s
#: overflow a thread's usual 8 MiB (the process dies); 256 MiB holds far more than the size limit allows.
COMPILE_STACK_BYTES = 256 * 1024 * 1024
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
    return llguidance.LLParserLimits(**PARSER_LIMITS, verbose_errors=False)


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


def _flat(node: Any) -> Any:
    """A 2020-12 vocabulary's metaschema with ``$dynamicRef: "#meta"`` as a plain ``$ref`` to the root."""
    if isinstance(node, list):
        return [_flat(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    if node.get("$dynamicRef") == "#meta":
        return {"$ref": "#"}
    return {
        k: _flat(v) for k, v in node.items() if k not in ("$id", "$schema", "$dynamicAnchor", "$vocabulary")
    }


def _flat_2020_12() -> Any:
    """The 2020-12 metaschema as one schema without dynamic references: the same checks, at a fraction
    of the cost (``jsonschema`` resolves ``$dynamicRef`` at every level; 250 ms for a 60-``$defs`` schema,
    under 10 here)."""
    root = METASCHEMAS.contents("https://json-schema.org/draft/2020-12/schema")
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for part in root["allOf"]:
        vocabulary = METASCHEMAS.contents(f"https://json-schema.org/draft/2020-12/{part['$ref']}")
        properties.update(_flat(vocabulary.get("properties", {})))
        defs.update(_flat(vocabulary.get("$defs", {})))
    properties.update(_flat(root.get("properties", {})))
    return {"type": ["object", "boolean"], "properties": properties, "$defs": defs}


_METASCHEMA_2020_12 = Draft202012Validator(_flat_2020_12(), format_checker=FORMAT_CHECKER)


#: The metaschemas jsonschema-rs holds, by the ids a ``$schema`` names them with (with or without the
#: trailing ``#``). It fetches any other over the network: a schema naming another is never given to it.
_BUNDLED_DRAFTS = (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)
_BUNDLED_METASCHEMAS = frozenset(
    spelling
    for draft in _BUNDLED_DRAFTS
    for spelling in (
        draft.ID_OF(draft.META_SCHEMA).rstrip("#"),
        draft.ID_OF(draft.META_SCHEMA).rstrip("#") + "#",
    )
)


def _is_regex(pattern: str) -> bool:
    """What jsonschema's ``regex`` format asks of a ``pattern``: Python's ``re`` reads it."""
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return False
    return True


def _check_schema(draft: Any, schema: Any) -> None:
    """Raise ``SchemaError`` when ``schema`` is not valid in ``draft``. jsonschema-rs answers first (about
    100 times faster: a 60 kB schema's check took 60-350 ms in Python); what it refuses, or cannot read, is
    judged by jsonschema, whose error the refusal names, and which is the reference where the two differ
    (a ``pattern`` in a syntax only one of them reads)."""
    declared = schema.get("$schema", "https://json-schema.org/draft/2020-12/schema")
    if isinstance(declared, str) and declared in _BUNDLED_METASCHEMAS:
        try:
            # It leaves formats unchecked, as 2020-12 allows: jsonschema checks the metaschemas' "regex".
            if jsonschema_rs.meta.is_valid(schema) and all(map(_is_regex, _patterns(schema))):
                return
        except (jsonschema_rs.ReferencingError, ValueError, TypeError, OverflowError):
            pass  # not a document it reads (a number beyond 64 bits): jsonschema judges it
    if draft is not Draft202012Validator:
        draft.check_schema(schema)
        return
    error = best_match(_METASCHEMA_2020_12.iter_errors(schema))
    if error is not None:
        raise SchemaError.create_from(error)


# Where a schema holds schemas: maps of them, lists of them, one of them.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_SCHEMA_ONE += ("unevaluatedItems", "unevaluatedProperties", "additionalItems", "items")


def subschemas(schema: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
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


# What makes an object take keys besides its properties, or name keys elsewhere: such an object is
# generated as written under ``listed_keys_only``.
_KEYS_BESIDE_PROPERTIES = (
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
)
# What stays beside a $ref in the drafts that ignore its siblings.
_BESIDE_REF = frozenset({"$ref", "definitions", "$defs", "$id", "id", "$schema"})
_REF_ALONE_DRAFTS = (Draft3Validator, Draft4Validator, Draft6Validator, Draft7Validator)


def _modern(
    schema: Any,
    *,
    draft4: bool,
    ref_alone: bool = False,
    listed_keys_only: bool = False,
    branch: bool = False,
) -> Any:
    """``schema`` as llguidance reads it (2020-12's spelling): a tuple ``items`` (a list) becomes
    ``prefixItems`` with ``additionalItems`` as ``items``; under draft-04 a boolean ``exclusiveMaximum``
    moves ``maximum`` (and the same below). Values (``enum``, ``const``) are left as they are.
    ``listed_keys_only``: each object that lists its ``properties`` and says nothing of other keys takes only
    those (:func:`compile_schema`); ``branch``: this one is an ``allOf`` branch, which names only some."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    nested = {"draft4": draft4, "ref_alone": ref_alone, "listed_keys_only": listed_keys_only}
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {name: _modern(sub, **nested) for name, sub in value.items()}
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [_modern(sub, **nested, branch=keyword == "allOf") for sub in value]
        elif keyword in _SCHEMA_ONE:
            out[keyword] = _modern(value, **nested)
    listed = schema.get("properties")
    closable = listed_keys_only and not branch and isinstance(listed, Mapping)
    # A required key the properties do not list must stay writable.
    required = schema.get("required")
    if closable and isinstance(required, list) and not set(map(str, required)) <= set(listed):
        closable = False
    if closable and not any(keyword in schema for keyword in _KEYS_BESIDE_PROPERTIES):
        out["additionalProperties"] = False
    if ref_alone and "$ref" in out:
        # Up to draft-07 a $ref's siblings are ignored (llguidance refuses them in a cycle): only what
        # the reference and the definitions need stays.
        return {k: v for k, v in out.items() if k in _BESIDE_REF}
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
    for keyword in _NUMBER_BOUNDS:
        if keyword in out and not _moderate(out[keyword]):
            del out[keyword]
    if "multipleOf" in out and not _cheap_step(out["multipleOf"]):
        del out["multipleOf"]
    # llguidance counts properties only where every listed one is required, and otherwise refuses objects
    # that hold (an optional property beside minProperties: 1): counts are validated instead.
    out.pop("minProperties", None)
    out.pop("maxProperties", None)
    out.pop("x-guidance", None)  # the project's options, never the request's
    return out


_NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
#: A bound llguidance spells out digit by digit: beyond this size it is left to validation.
MAX_BOUND = 10**15
#: A ``multipleOf`` llguidance enforces: its digits (``0.07`` is 7, ``97`` is 97) are the states of the
#: remainder it tracks, so a larger step is left to validation (1000003 took 37 s to compile).
MAX_STEP_DIGITS = 1000


def _moderate(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= MAX_BOUND


def _cheap_step(value: Any) -> bool:
    if not _moderate(value) or value <= 0:
        return False
    try:
        step = Decimal(repr(value)).normalize().as_tuple()
    except InvalidOperation:
        return False
    # Its decimals too: 1e-300 would be tracked over 300 of them.
    return int("".join(map(str, step.digits))) <= MAX_STEP_DIGITS and -12 <= int(step.exponent) <= 12


def _dropped_numbers(schema: Any, enforced: Any, path: str = "") -> Iterator[str]:
    """Each number keyword of ``schema`` that :func:`_modern` left out of ``enforced``, with its place."""
    if not isinstance(schema, Mapping) or not isinstance(enforced, Mapping):
        return
    for keyword in (*_NUMBER_BOUNDS, "multipleOf", "minProperties", "maxProperties"):
        value = schema.get(keyword)
        if keyword in schema and keyword not in enforced and not isinstance(value, bool):
            yield f"{keyword} {value!r} (at {path or 'the root'})"
    kept = dict(subschemas(enforced))
    for where, sub in subschemas(schema):
        yield from _dropped_numbers(sub, kept.get(where), f"{path}.{where}".lstrip("."))


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
    for _, sub in subschemas(schema):
        yield from _patterns(sub)


def _places(schema: Any, keyword: str, path: str = "") -> Iterator[str]:
    """Where ``keyword`` is used in ``schema``, as ``properties.city`` (``the root``)."""
    if not isinstance(schema, Mapping):
        return
    if keyword in schema:
        yield path or "the root"
    for where, sub in subschemas(schema):
        yield from _places(sub, keyword, f"{path}.{where}".lstrip("."))


def _format_places(schema: Any, name: str, path: str = "") -> Iterator[str]:
    if not isinstance(schema, Mapping):
        return
    if schema.get("format") == name:
        yield path or "the root"
    for where, sub in subschemas(schema):
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
        return json_grammar(self.enforced)

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
        try:
            errors = sorted(
                islice(self.validator.iter_errors(value), 64), key=lambda e: [str(p) for p in e.absolute_path]
            )
        except RecursionError:
            return ["the answer nests too deeply to be validated"]
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


class _Bytes:
    """A vocabulary of the 256 bytes and an end token: a constraint checked one byte at a time."""

    eos_token_id = 256
    bos_token_id = None
    tokens: ClassVar[list[bytes]] = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids: ClassVar[list[int]] = [256]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


_BYTE_TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def byte_tokenizer() -> llguidance.LLTokenizer:
    """An llguidance tokenizer whose tokens are single bytes (and an end token, 256)."""
    return _BYTE_TOKENIZER


def json_grammar(enforced: Mapping[str, Any]) -> str:
    """A whole llguidance grammar whose answer is JSON that ``enforced`` allows, under :data:`OPTIONS`: what
    ``LLMatcher.grammar_from_json_schema`` writes, written by ``json`` (4 to 5 times faster on large
    schemas, and an integer beyond 64 bits is carried as written)."""
    schema = {**enforced, "x-guidance": OPTIONS}
    return json.dumps({"grammars": [{"name": "json_schema", "json_schema": schema}]}, ensure_ascii=False)


def _llguidance(enforced: Mapping[str, Any]) -> tuple[bool, list[str]]:
    grammar = json_grammar(enforced)
    # One compile, by a matcher over bytes: its error, its warnings (what it leaves unenforced), and its
    # first mask, which shows what only a matcher shows (a reference that loops before any character).
    matcher = llguidance.LLMatcher(_BYTE_TOKENIZER, grammar, limits=parser_limits(), log_level=0)
    if matcher.is_error():
        return True, [matcher.get_error()]
    warnings = list(matcher.get_grammar_warnings())
    matcher.compute_bitmask()
    if matcher.is_error():
        return True, [f"no JSON value can be generated: {matcher.get_error()}"]
    return False, warnings


#: How many parts of one schema may be loosened (:func:`_loosened`) before it is refused.
MAX_LOOSENINGS = 16
_CYCLE = re.compile(r"circular references with sibling keys are not supported: \S*?#(\S*)")
_OVERLAP = re.compile(r"patternProperty regexes /(.*)/ and /(.*)/ are not disjoint")


def _loosened(enforced: Mapping[str, Any], message: str) -> tuple[Any, str] | None:
    """``enforced`` with the part llguidance refuses (``message``) made looser, and what is now left to
    validation; None when the refusal is not one that loosening cures. A cycle through a ``$ref`` with
    sibling keys: the definition it names is generated as any JSON value. Overlapping
    ``patternProperties``: the object that holds them allows any extra property while generating. The
    answer is validated against the whole schema either way."""
    if found := _CYCLE.search(message):
        pointer = found.group(1)
        if not pointer.strip("/"):
            return {}, "the whole schema (a cycle through a $ref with sibling keys)"
        steps = _pointer_steps("#/" + pointer.strip("/")) or []
        out = _replaced(enforced, steps)
        if out is None:
            return None
        return out, f"{'.'.join(steps)} (a cycle through a $ref with sibling keys)"
    if found := _OVERLAP.search(message):
        pair = {found.group(1), found.group(2)}
        places: list[str] = []
        out = _without_overlap(enforced, pair, "", places)
        if not places:
            return None
        return out, f"patternProperties (at {', '.join(places[:3])}: overlapping names)"
    return None


def _replaced(node: Any, steps: list[str]) -> Any:
    """``node`` with the subschema at ``steps`` replaced by ``{}`` (any value); None when not there."""
    if not steps:
        return {}
    if isinstance(node, Mapping) and steps[0] in node:
        inner = _replaced(node[steps[0]], steps[1:])
        return None if inner is None else {**node, steps[0]: inner}
    if isinstance(node, list) and steps[0].isdigit() and int(steps[0]) < len(node):
        inner = _replaced(node[int(steps[0])], steps[1:])
        if inner is None:
            return None
        return [*node[: int(steps[0])], inner, *node[int(steps[0]) + 1 :]]
    return None


def _without_overlap(schema: Any, pair: set[str], path: str, places: list[str]) -> Any:
    """``schema`` without the ``patternProperties`` (and ``additionalProperties``) of each object whose
    pattern names include both of ``pair``; where, in ``places``."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {
                name: _without_overlap(sub, pair, f"{path}.{keyword}.{name}".lstrip("."), places)
                for name, sub in value.items()
            }
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [
                _without_overlap(sub, pair, f"{path}.{keyword}[{i}]".lstrip("."), places)
                for i, sub in enumerate(value)
            ]
        elif keyword in _SCHEMA_ONE:
            out[keyword] = _without_overlap(value, pair, f"{path}.{keyword}".lstrip("."), places)
    names = schema.get("patternProperties")
    if isinstance(names, Mapping) and pair <= set(names):
        del out["patternProperties"]
        out.pop("additionalProperties", None)
        places.append(path or "the root")
    return out


# The keywords that apply a schema to the same value (not to a property or an item of it).
_IN_PLACE_LISTS = ("anyOf", "oneOf", "allOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")


def _pointer_steps(ref: str) -> list[str] | None:
    """The steps of a ``$ref`` to a place in the same schema (``#/$defs/n``); None for any other."""
    if ref == "#":
        return []
    if not ref.startswith("#/"):
        return None
    return [unquote(s).replace("~1", "/").replace("~0", "~") for s in ref[2:].split("/")]


def _pointed(schema: Any, steps: list[str]) -> Any:
    """What ``steps`` (:func:`_pointer_steps`) reach in ``schema``; None when nothing is there."""
    node = schema
    for step in steps:
        if isinstance(node, Mapping) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return None
    return node


def _local_refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` string anywhere in ``node`` that points into the same schema (data included), in the
    order they are written."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                yield ref
            stack.extend(reversed(node.values()))
        elif isinstance(node, list):
            stack.extend(reversed(node))


def _leading_refs(node: Any) -> Iterator[str]:
    """The ``$ref``s ``node`` applies in place, before any property or item: its own, and those of the
    schemas it combines (``anyOf``, ``not``, ``if``, ``dependentSchemas``...)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for keyword in _IN_PLACE_LISTS:
            if isinstance(node.get(keyword), list):
                stack.extend(node[keyword])
        stack.extend(node[keyword] for keyword in _IN_PLACE_ONE if keyword in node)
        for keyword in ("dependentSchemas", "dependencies"):
            if isinstance(node.get(keyword), Mapping):
                stack.extend(node[keyword].values())


def _left_recursion(schema: Any) -> str | None:
    """Where ``schema`` reaches itself through ``$ref`` without a property or an item between (``n`` is
    ``anyOf: [n, null]``), or None. Its validation would never end: it is refused. Schemas applied in place
    form a tree, so such a loop passes through a ``$ref``: the walk is over the places ``$ref``s point to."""
    following: dict[str, list[str]] = {}

    def after(ref: str) -> list[str]:
        if ref not in following:
            steps = _pointer_steps(ref)
            target = _pointed(schema, steps) if steps is not None else None
            following[ref] = [r for r in _leading_refs(target) if r.startswith("#")]
        return following[ref]

    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    for start in dict.fromkeys(_local_refs(schema)):
        if start in state:
            continue
        stack = [(start, iter(after(start)))]
        state[start] = 1
        while stack:
            ref, rest = stack[-1]
            step = next((r for r in rest if state.get(r) != 2), None)
            if step is None:
                state[ref] = 2
                stack.pop()
            elif state.get(step) == 1:
                return step
            else:
                state[step] = 1
                stack.append((step, iter(after(step))))
    return None


def _compile(schema: Mapping[str, Any], listed_keys_only: bool) -> CompiledSchema:
    started = time.perf_counter()
    if not isinstance(schema.get("$schema", ""), str):
        raise _Refused("the schema is not valid JSON Schema: $schema must be a string (the draft's URI)")
    # The draft the schema declares ($schema) judges the schema and, later, the answer.
    draft = validators.validator_for(schema, default=Draft202012Validator)
    cls = _validator_class(draft)
    judged = _validation_schema(schema)
    try:
        _check_schema(draft, judged)
    except SchemaError as exc:
        place = ".".join(str(p) for p in exc.path) or "the root"
        raise _Refused(f"the schema is not valid JSON Schema: {exc.message[:200]} (at {place})") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise _Refused(f"the schema could not be read ({type(exc).__name__})") from None
    cycle = _left_recursion(schema)
    if cycle is not None:
        raise _Refused(
            f"the schema refers to itself at {cycle!r} before any property or item (left recursion): no "
            "answer could be validated against it"
        )
    enforced = _modern(
        schema,
        draft4=draft in (Draft3Validator, Draft4Validator),
        ref_alone=draft in _REF_ALONE_DRAFTS,
        listed_keys_only=listed_keys_only,
    )
    validated: list[str] = list(_dropped_numbers(schema, enforced))
    failed, messages = _llguidance(enforced)
    if failed and "regex" in messages[0]:
        broken = _check_patterns(enforced)
        if broken:
            enforced = _without_patterns(enforced, broken)
            validated.extend(f"pattern {p[:40]!r}" for p in sorted(broken))
            failed, messages = _llguidance(enforced)
    for _ in range(MAX_LOOSENINGS):
        loosened = _loosened(enforced, messages[0]) if failed else None
        if loosened is None:
            break
        enforced, what = loosened
        validated.append(what)
        failed, messages = _llguidance(enforced)
    if failed:
        raise _Refused(f"the schema cannot be enforced: {messages[0].splitlines()[0][:300]}")
    for message in messages:
        if found := _UNIMPLEMENTED.search(message):
            for keyword in json.loads(f"[{found.group(1)}]"):
                places = list(islice(dict.fromkeys(_places(schema, keyword)), 3))
                validated.append(f"{keyword} (at {', '.join(places)})" if places else keyword)
        elif found := _UNKNOWN_FORMAT.search(message):
            name = found.group(1).strip()
            places = list(islice(dict.fromkeys(_format_places(schema, name)), 3))
            validated.append(f"format {name!r} (at {', '.join(places)})" if places else f"format {name!r}")
    # Every format snapllm checks is checked whatever the draft (a draft-04 schema's "iri" too): a
    # format names one meaning in every draft that has it.
    validator = cls(judged, format_checker=FORMAT_CHECKER)
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


def _compile_or_refuse(schema: Mapping[str, Any], listed_keys_only: bool) -> CompiledSchema | str:
    try:
        return _compile(schema, listed_keys_only)
    except _Refused as exc:
        return str(exc)
    except RecursionError:
        return "the schema is nested too deeply"


_COMPILER: list[ThreadPoolExecutor] = []
_COMPILER_LOCK = Lock()


def start_schema_thread() -> None:
    """Start the compile thread now, so that no request waits for it."""
    _compiler()


def stop_schema_thread() -> None:
    """Stop the compile thread once its compiles are done (:func:`_compiler` starts it again): a snapshot
    then holds no thread, and the local stack's restore forks a process of one thread."""
    with _COMPILER_LOCK:
        if _COMPILER:
            _COMPILER.pop().shutdown(wait=True)


def _compiler() -> ThreadPoolExecutor:
    """The thread schemas compile on, started on first use with a :data:`COMPILE_STACK_BYTES` stack."""
    with _COMPILER_LOCK:
        if not _COMPILER:
            previous = threading.stack_size(COMPILE_STACK_BYTES)
            try:
                pool = ThreadPoolExecutor(1, thread_name_prefix="schema-compile")
                pool.submit(int).result()  # the thread starts now, with that stack
            finally:
                threading.stack_size(previous)
            _COMPILER.append(pool)
        return _COMPILER[0]


def _forget_compiler() -> None:
    # A process forked from one that compiled (the local stack restores a snapshot by forking) has no
    # compile thread: it starts its own, rather than wait on one that is not there, and forgets the compiles
    # that were running on its parent's.
    global _COMPILER_LOCK, _CACHE_LOCK
    _COMPILER.clear()
    _COMPILER_LOCK = Lock()
    _CACHE_LOCK = Lock()
    for key in [key for key, compiling in _CACHE.items() if not compiling.done()]:
        del _CACHE[key]


os.register_at_fork(after_in_child=_forget_compiler)

#: Each schema's compile, by its compact JSON: done (the compiled schema, or why it is refused) or running.
_CACHE: OrderedDict[str, Future[CompiledSchema | str]] = OrderedDict()
_CACHE_LOCK = Lock()
#: The compiles kept for good, never evicted: a deploy's declared schemas, compiled before the snapshot.
_KEPT: set[str] = set()
#: Whether the compiles asked for now are kept (:func:`keeping_compiles`).
_KEEPING = ContextVar("keeping_compiles", default=False)


@contextmanager
def keeping_compiles() -> Iterator[None]:
    """Keep for good every schema compiled (or found compiled) inside: a request with one of them never
    compiles it again, however many others pass through the cache."""
    token = _KEEPING.set(True)
    try:
        yield
    finally:
        _KEEPING.reset(token)


def compile_schema(schema: Any, *, param: str, listed_keys_only: bool = False) -> CompiledSchema:
    """``schema`` compiled (once: later calls with the same schema share it), or the 400 that refuses it,
    naming ``param``: not JSON Schema, not enforceable, over llguidance's limits, or not compiled within
    :data:`COMPILE_TIMEOUT_S`. Its size is checked (:data:`MAX_SCHEMA_CHARS`) before anything compiles it.

    ``listed_keys_only`` (a tool's arguments): each object that lists its ``properties`` and says nothing
    of other keys (nor combines schemas that might) is generated with those keys only, as llama.cpp's
    converter generates it; an answer is still validated against the schema as written."""
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
    if listed_keys_only:
        key = f"listed keys only:{key}"
    with _CACHE_LOCK:
        compiling = _CACHE.get(key)
        if compiling is None:
            compiling = _CACHE[key] = _compiler().submit(_compile_or_refuse, schema, listed_keys_only)
            _evict()
        else:
            _CACHE.move_to_end(key)
        if _KEEPING.get():
            _KEPT.add(key)
    try:
        found = compiling.result(timeout=COMPILE_TIMEOUT_S)
    except TimeoutError:
        raise InvalidRequestError(
            f"{param}: the schema did not compile within {COMPILE_TIMEOUT_S:g} s, the bound on a schema's "
            "cost: fewer alternatives, definitions or patterns compile sooner",
            param=param,
        ) from None
    if isinstance(found, str):
        raise UnsupportedParameterError(f"{param}: {found}", param=param)
    return found


def _evict() -> None:
    """Drop the least recently used compiles past :data:`CACHE_SIZE`, the kept ones aside. The caller holds
    the cache's lock."""
    for key in [key for key in _CACHE if key not in _KEPT][: max(0, len(_CACHE) - len(_KEPT) - CACHE_SIZE)]:
        del _CACHE[key]


def clear_cache() -> None:
    """Forget every compiled schema (a benchmark's compile times are of compiles, not of cache hits)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _KEPT.clear()
