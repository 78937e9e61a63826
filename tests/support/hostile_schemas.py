"""Hostile JSON schemas, one per class of cost a schema can cause, each with what must happen to it.

``HOSTILE[name] = (schema, refusal)``: ``refusal`` is None when the schema must be served (compiled within
its bound, each token's mask within its bound), else words the 400's message must contain (naming why).
A served schema may hold constraints llguidance does not enforce (``uniqueItems``, a lookaround, a
``multipleOf`` too costly to track): its answer is validated on them, within the same bound
(:attr:`snapllm.protocol.constraints.compiled_schema.CompiledSchema.validated` lists them).
"""

from __future__ import annotations


def dag(depth: int) -> dict:
    """$defs where each definition refers to the next one twice: 2**depth paths, depth + 1 definitions."""
    defs = {
        f"d{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}},
        }
        for i in range(depth)
    }
    return {"$ref": "#/$defs/d0", "$defs": {**defs, f"d{depth}": {"type": "string", "maxLength": 4}}}


def _nested_arrays(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "maxItems": 3}
    return schema


def choice_dag(depth: int) -> dict:
    """Each level a choice of two objects that both hold the next level: the choices multiply."""
    defs = {
        f"d{i}": {
            "anyOf": [
                {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}},
                {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}, "y": {"type": "null"}}},
            ]
        }
        for i in range(depth)
    }
    return {"$ref": "#/$defs/d0", "$defs": {**defs, f"d{depth}": {"type": "null"}}}


def mutual_recursion(depth: int) -> dict:
    """``depth`` definitions, each an array of the next, the last an array of the first: one cycle."""
    defs = {
        f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{(i + 1) % depth}"}} for i in range(depth)
    }
    return {"$ref": "#/$defs/d0", "$defs": defs}


TREE = {
    "$ref": "#/$defs/Tree",
    "$defs": {
        "Tree": {
            "type": "object",
            "properties": {
                "value": {"type": "integer", "minimum": 0, "maximum": 9},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}, "maxItems": 2},
            },
            "required": ["value", "children"],
            "additionalProperties": False,
        }
    },
}
FORMAT_NAMES = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri")
ALL_TYPES = {"type": ["string", "number", "integer", "boolean", "null", "object", "array"]}
WIDE = {
    "type": "object",
    # No "type" (maxLength implies a string): the schema then fits the deployment's 16,000-character limit.
    "properties": {f"p{i}": {"maxLength": 4096} for i in range(400)},
    "required": [f"p{i}" for i in range(400)],
    "additionalProperties": False,
}
# Each hostile class: served (compiled by llguidance within its limits) or refused with words naming why.
HOSTILE = {
    "dag-defs": (dag(60), None),
    # Patterns compile to one lexer automaton, whatever their repeats: served, each token's mask bounded by
    # llguidance's lexer fuel.
    "pattern-(a?){4096}": ({"type": "string", "pattern": "^(a?){4096}$"}, None),
    "pattern-((a?){64}){64}": ({"type": "string", "pattern": "((a?){64}){64}"}, None),
    "pattern-(((a?){16}){16}){16}": ({"type": "string", "pattern": "^(((a?){16}){16}){16}$"}, None),
    "pattern-((ab){64}){64}": ({"type": "string", "pattern": "^((ab){64}){64}$"}, None),
    "pattern-(a*)*": ({"type": "string", "pattern": "^(a*)*$"}, None),
    # Validated on the answer, not generated: the regex module matches them under a time limit, so one that
    # backtracks exponentially on a string that fails it costs that limit, not minutes.
    "pattern-lookahead": ({"type": "string", "pattern": "^(?=a)a$"}, None),
    "pattern-backreference": ({"type": "string", "pattern": "^(a)\\1$"}, None),
    "pattern-lookahead-(a+)+": ({"type": "string", "pattern": "^(?=a)(a+)+$", "maxLength": 64}, None),
    "pattern-inline-flag": ({"type": "string", "pattern": "(?i)^abc$"}, None),
    "all-types": (ALL_TYPES, None),
    "400-properties-maxLength-4096": (WIDE, None),
    "arrays-of-arrays": (_nested_arrays(20), None),
    "choice-dag": (choice_dag(30), None),
    "empty-enum": ({"type": "object", "properties": {"e": {"enum": []}}}, None),
    "empty-enum-required": (
        {"type": "object", "properties": {"e": {"enum": []}}, "required": ["e"]},
        "Unsatisfiable schema",
    ),
    "required-but-forbidden": (
        {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False},
        "required property 'x' is unsatisfiable",
    ),
    # Recursion through an array or an object is a tree; recursion that reaches itself before any
    # property or item would never end (its validation neither): refused.
    "recursive-ref": ({"$defs": {"n": {"items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}, None),
    "recursive-tree": (TREE, None),
    "recursive-cycle-of-40": (mutual_recursion(40), None),
    "recursive-self-root": ({"type": "array", "items": {"$ref": "#"}, "maxItems": 3}, None),
    "recursive-left": (
        {"$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "$ref": "#/$defs/n"},
        "refers to itself at '#/$defs/n' before any property or item",
    ),
    "recursive-left-allOf": (
        {"$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}]}}, "$ref": "#/$defs/n"},
        "refers to itself at '#/$defs/n' before any property or item",
    ),
    # Bounds are spelled out digit by digit: beyond 10**15 they are validated instead.
    "integer-range-16-digits": ({"type": "integer", "minimum": -(10**15) + 7, "maximum": 10**15 - 3}, None),
    "integer-range-beyond-16-digits": ({"type": "integer", "minimum": -(10**40), "maximum": 10**40}, None),
    "number-range-open-exclusive": (
        {"type": "number", "exclusiveMinimum": -987654.321, "exclusiveMaximum": 0},
        None,
    ),
    "number-minimum-1e300": ({"type": "number", "minimum": 1e300}, None),
    # A remainder is tracked digit by digit: a step over 1,000 (or with more than 12 decimals) is validated.
    "multipleOf-97": ({"type": "integer", "multipleOf": 97}, None),
    "multipleOf-1000003": ({"type": "integer", "multipleOf": 1000003, "minimum": 0}, None),
    "multipleOf-1e-300": ({"type": "number", "multipleOf": 1e-300}, None),
    "multipleOf-0": ({"type": "integer", "multipleOf": 0}, "0 is less than or equal to the minimum of 0"),
    "minimum-over-maximum": ({"type": "integer", "minimum": 5, "maximum": 4}, "minimum (5) is greater than"),
    "every-format": (
        {
            "type": "object",
            "properties": {name: {"type": "string", "format": name} for name in FORMAT_NAMES},
            "required": ["uuid"],
        },
        None,
    ),
    "uniqueItems-not-if-then-else": (
        {
            "type": "array",
            "items": {"type": "integer", "not": {"const": 3}, "if": {"minimum": 5}, "then": {"maximum": 7}},
            "uniqueItems": True,
            "maxItems": 64,
        },
        None,
    ),
    "format-iri": ({"type": "string", "format": "iri"}, None),
    "unknown-keyword": ({"type": "string", "x-check": True}, None),
    "external-ref": ({"$ref": "https://example.test/schema.json"}, "https://example.test/schema.json"),
}
