"""Hostile JSON schemas, one per class of cost a schema can cause, each with what must happen to it.

``HOSTILE[name] = (schema, refusal)``: ``refusal`` is None when the schema must be served (a grammar built
within its bound), else words the 400's message must contain (naming the construct).
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
    "pattern-lookahead": ({"type": "string", "pattern": "^(?=a)a$"}, "lookaround"),
    "pattern-backreference": ({"type": "string", "pattern": "^(a)\\1$"}, "back-references"),
    "all-types": (ALL_TYPES, None),
    "400-properties-maxLength-4096": (WIDE, None),
    "arrays-of-arrays": (_nested_arrays(20), None),
    "choice-dag": (choice_dag(30), f"at most {MAX_CHOICES}"),
    "empty-enum": ({"type": "object", "properties": {"e": {"enum": []}}}, "an empty enum (at properties.e)"),
    "required-but-forbidden": (
        {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False},
        "required 'x'",
    ),
    "recursive-ref": ({"$defs": {"n": {"items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}, "recursive"),
}
