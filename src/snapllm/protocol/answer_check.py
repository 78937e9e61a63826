"""A complete structured answer checked against the whole schema, with the ``jsonschema`` library.

The grammar holds what a grammar can (:mod:`snapllm.protocol.json_grammar`); the rest of a schema
(``uniqueItems``, ``not``, ``if``/``then``/``else``, a lookaround in a ``pattern``...: the converter lists
each place, :func:`~snapllm.protocol.json_grammar.unenforced`) is checked here, once the answer is whole::

    answer_violations({"type": "array", "uniqueItems": True}, '["a","a"]')
    # ["[$] ['a', 'a'] has non-unique elements"]
    check_answer(schema, text, param="response_format")   # raises SchemaValidationFailedError

An answer that fails is never returned as if it passed: the request fails with
:class:`~snapllm.errors.SchemaValidationFailedError` (422, ``schema_validation_failed``), whose message
says what failed and which constraints were validated rather than enforced.

The check's cost is bounded: the answer is at most ``max_tokens`` long, and a ``pattern`` is matched with
the ``regex`` module under a time limit (:data:`PATTERN_TIMEOUT_S`), so a pattern that backtracks
exponentially (``(a+)+$`` beside a lookaround) fails the check instead of holding the CPU. ``multipleOf``
is checked exactly on the decimal the answer wrote (``0.07`` is a multiple of ``0.01``, which float
division says it is not).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from itertools import islice
from typing import Any

import regex
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from snapllm.errors import SchemaValidationFailedError
from snapllm.protocol.json_grammar import unenforced

#: How long one ``pattern`` may take to match one string of the answer.
PATTERN_TIMEOUT_S = 0.05
#: The violations an error lists (the first ones, in the answer's order).
MAX_VIOLATIONS = 8


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


_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern, "multipleOf": _multiple_of})


# Where a schema holds schemas: maps of them, lists of them, one of them (JSON Schema 2020-12).
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_SCHEMA_ONE += ("unevaluatedItems", "unevaluatedProperties", "additionalItems", "items")


def modern_schema(schema: Any) -> Any:
    """``schema`` with the older tuple form of ``items`` (a list) written as ``prefixItems``, which is what
    the grammar makes of it: the form JSON Schema 2020-12 validates. Values (``enum``, ``const``) are left
    as they are."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[keyword] = {name: modern_schema(sub) for name, sub in value.items()}
        elif keyword in (*_SCHEMA_LISTS, "items") and isinstance(value, list):
            out[keyword] = [modern_schema(sub) for sub in value]
        elif keyword in _SCHEMA_ONE:
            out[keyword] = modern_schema(value)
    if isinstance(out.get("items"), list) and "prefixItems" not in out:
        out["prefixItems"] = out.pop("items")
    return out


def schema_validator(schema: Any) -> Any:
    """A ``jsonschema`` validator of ``schema`` (2020-12, formats checked), whose ``pattern`` is matched under
    :data:`PATTERN_TIMEOUT_S` and whose ``multipleOf`` divides decimals exactly."""
    return _Validator(modern_schema(schema), format_checker=Draft202012Validator.FORMAT_CHECKER)


def _place(error: ValidationError) -> str:
    return "$" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)


def answer_violations(schema: Any, text: str) -> list[str]:
    """What in ``text`` (a complete answer) breaks ``schema``, each as "[$path] message" (at most
    :data:`MAX_VIOLATIONS`); empty when it validates. Formats are checked where ``jsonschema`` has the
    means (its format checker); the grammar spells every served format out anyway."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [f"the answer is not JSON ({exc})"]
    errors = sorted(
        schema_validator(schema).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path]
    )
    return [f"{_place(error)} {error.message[:200]}" for error in islice(errors, MAX_VIOLATIONS)]


def check_answer(schema: Any, text: str, *, param: str) -> None:
    """Raise :class:`SchemaValidationFailedError` when ``text`` does not validate against ``schema``."""
    violations = answer_violations(schema, text)
    if not violations:
        return
    validated = unenforced(schema, param=param)
    held = (
        f"; validated on the answer, not enforced by the grammar: {', '.join(validated)}" if validated else ""
    )
    raise SchemaValidationFailedError(
        f"{param}: the answer does not validate against the schema: {'; '.join(violations)}{held}. "
        f"The answer was {text[:300]!r}; it is not returned as valid (retry, with another seed or prompt)",
        param=param,
    )
