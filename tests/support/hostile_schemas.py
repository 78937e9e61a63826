"""Hostile JSON schemas, one per class of cost a schema can cause, each with what must happen to it.

``HOSTILE[name] = (schema, refusal)``: ``refusal`` is None when the schema must be served (a grammar built
within its bound), else words the 400's message must contain (naming the construct). A served schema may
hold constraints a grammar cannot (``uniqueItems``, a lookaround): its answer is validated on them, within
the same bound (:func:`snapllm.protocol.json_grammar.unenforced` lists them).
"""

from __future__ import annotations

from snapllm.protocol.json_grammar import MAX_CHOICES


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
# Each hostile class: served (a grammar llama.cpp accepts) or refused with words naming the construct.
HOSTILE = {
    "dag-defs": (dag(60), None),
    "pattern-(a?){4096}": (
        {"type": "string", "pattern": "^(a?){4096}$"},
        "a repeat of a part that can match nothing",
    ),
    "pattern-((a?){64}){64}": ({"type": "string", "pattern": "((a?){64}){64}"}, "can match nothing"),
    "pattern-(((a?){16}){16}){16}": (
        {"type": "string", "pattern": "^(((a?){16}){16}){16}$"},
        "can match nothing",
    ),
    "pattern-((ab){64}){64}": (
        {"type": "string", "pattern": "^((ab){64}){64}$"},
        "expand to 8192 characters",
    ),
    "pattern-(a*)*": ({"type": "string", "pattern": "^(a*)*$"}, "can match nothing"),
    # Validated on the answer, not generated: the regex module matches them under a time limit, so one that
    # backtracks exponentially on a string that fails it costs that limit, not minutes.
    "pattern-lookahead": ({"type": "string", "pattern": "^(?=a)a$"}, None),
    "pattern-backreference": ({"type": "string", "pattern": "^(a)\\1$"}, None),
    "pattern-lookahead-(a+)+": ({"type": "string", "pattern": "^(?=a)(a+)+$", "maxLength": 64}, None),
    "pattern-inline-flag": ({"type": "string", "pattern": "(?i)^abc$"}, None),
    "all-types": (ALL_TYPES, None),
    "400-properties-maxLength-4096": (WIDE, None),
    "arrays-of-arrays": (_nested_arrays(20), None),
    "choice-dag": (choice_dag(30), f"at most {MAX_CHOICES}"),
    "empty-enum": ({"type": "object", "properties": {"e": {"enum": []}}}, "an empty enum (at properties.e)"),
    "required-but-forbidden": (
        {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False},
        "required 'x'",
    ),
    # Recursion through an array or an object is a tree (one rule reaching itself after a "[" or "{");
    # recursion that reaches itself before any character would never end, and is refused.
    "recursive-ref": ({"$defs": {"n": {"items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}, None),
    "recursive-tree": (TREE, None),
    "recursive-cycle-of-40": (mutual_recursion(40), None),
    "recursive-self-root": ({"type": "array", "items": {"$ref": "#"}, "maxItems": 3}, None),
    "recursive-left": (
        {"$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "$ref": "#/$defs/n"},
        "before any object or array opens",
    ),
    "recursive-left-allOf": (
        {"$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}]}}, "$ref": "#/$defs/n"},
        "refers back to itself",
    ),
    # Digit ranges grow with the number of digits (16 at most), never with the width of the range.
    "integer-range-16-digits": ({"type": "integer", "minimum": -(10**15) + 7, "maximum": 10**15 - 3}, None),
    "integer-range-beyond-16-digits": ({"type": "integer", "minimum": -(10**40), "maximum": 10**40}, None),
    "number-range-open-exclusive": (
        {"type": "number", "exclusiveMinimum": -987654.321, "exclusiveMaximum": 0},
        None,
    ),
    "number-minimum-1e300": ({"type": "number", "minimum": 1e300}, None),
    "multipleOf-97": ({"type": "integer", "multipleOf": 97}, None),
    "multipleOf-1000003": ({"type": "integer", "multipleOf": 1000003, "minimum": 0}, None),
    "multipleOf-1e-300": ({"type": "number", "multipleOf": 1e-300}, None),
    "multipleOf-0": ({"type": "integer", "multipleOf": 0}, "multipleOf 0"),
    "minimum-over-maximum": ({"type": "integer", "minimum": 5, "maximum": 4}, "minimum over maximum"),
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
    "format-iri": ({"type": "string", "format": "iri"}, "format 'iri'"),
    "unknown-keyword": ({"type": "string", "x-check": True}, "x-check"),
}
