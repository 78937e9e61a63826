"""JSON schemas the agent asks the model to fill: tool parameters, and the plan.

    enforceable(ChunkInput.model_json_schema())   # rewritten into what the inference grammar keeps
    plan_schema([spec, ...], max_steps=4)   # {"steps": [{"tool": "read_excerpt", "arguments": {...}}]}

What :func:`enforceable` rewrites, and why nothing is lost: docs/agents.md ("Tools from MCP servers").
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from snapllm.protocol.constraints.structured import (
    ANNOTATION_KEYWORDS,
    ENFORCED_FORMATS,
    ENFORCED_KEYWORDS,
    map_subschemas,
    named_arguments_schema,
)

# An integer range up to this many values is turned into an enum, so the grammar keeps it.
MAX_ENUM_RANGE = 16
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def enforceable(schema: dict[str, Any], *, string_limit: int | None = None) -> dict[str, Any]:
    """A copy of ``schema`` that the inference function's grammar enforces in full (see the module).

    ``string_limit`` bounds every free string (one with no ``maxLength``, ``enum``, ``const``, ``pattern``
    or ``format``): a small model may otherwise go on writing one until ``max_tokens`` cuts the JSON.
    """
    rewritten = _rewrite(copy.deepcopy(schema), string_limit)
    combined = any(key in rewritten for key in ("allOf", "anyOf", "oneOf"))
    if (
        isinstance(rewritten.get("properties"), dict)
        and "additionalProperties" not in rewritten
        and not combined
    ):
        # Only the arguments the tool declares: a small model otherwise goes on inventing keys of its own
        # (SmolLM2 filled a plan's 320 tokens with them), and tools refuse arguments they do not know. The
        # arguments object only: closing an object that an allOf combines would refuse its other branches'.
        rewritten["additionalProperties"] = False
    return rewritten


def _rewrite(node: Any, string_limit: int | None = None) -> Any:
    if not isinstance(node, dict):
        return node
    free = not any(key in node for key in ("maxLength", "enum", "const", "pattern", "format"))
    if string_limit is not None and node.get("type") == "string" and free:
        node["maxLength"] = string_limit
    bounds = {key: node[key] for key in _BOUNDS if key in node}
    if node.get("type") == "integer" and "enum" not in node and _small_range(bounds):
        low = int(bounds.get("minimum", bounds.get("exclusiveMinimum", -1) + 1))
        high = int(bounds.get("maximum", bounds.get("exclusiveMaximum", 0) - 1))
        node["enum"] = list(range(low, high + 1))
    if node.get("format") is not None and node["format"] not in ENFORCED_FORMATS:
        del node["format"]
    if "pattern" in node or "format" in node:
        # The grammar keeps a pattern or a format, not one together with a length.
        node.pop("minLength", None)
        node.pop("maxLength", None)
        if "pattern" in node:
            node.pop("format", None)
    for key in list(node):
        if key not in ENFORCED_KEYWORDS and key not in ANNOTATION_KEYWORDS:
            del node[key]
    return map_subschemas(node, lambda sub: _rewrite(sub, string_limit))


def _small_range(bounds: dict[str, Any]) -> bool:
    low = bounds.get("minimum", None if "exclusiveMinimum" not in bounds else bounds["exclusiveMinimum"] + 1)
    high = bounds.get("maximum", None if "exclusiveMaximum" not in bounds else bounds["exclusiveMaximum"] - 1)
    if not all(isinstance(v, int | float) for v in (low, high)):
        return False
    return 0 <= high - low < MAX_ENUM_RANGE and float(low).is_integer() and float(high).is_integer()


def with_documents(parameters: dict[str, Any], documents: Sequence[str]) -> dict[str, Any]:
    """``parameters`` with its ``uri`` property limited to the run's documents (an ``enum``)."""
    constrained = copy.deepcopy(parameters)
    uri = constrained.get("properties", {}).get("uri")
    if isinstance(uri, dict):
        uri.pop("pattern", None)
        uri.pop("maxLength", None)
        uri["enum"] = list(documents)
    return constrained


def plan_schema(tools: Sequence[tuple[str, dict[str, Any]]], *, max_steps: int) -> dict[str, Any]:
    """The plan's schema: 1 to ``max_steps`` steps, each naming one of ``tools`` (name, parameters) and
    arguments valid for it (:func:`snapllm.protocol.constraints.structured.named_arguments_schema`: each
    tool's parameters are a ``$defs`` entry of their own, so their own ``$defs`` and ``$ref``s stay apart)."""
    step, defs = named_arguments_schema(dict(tools), name_key="tool")
    return {
        "type": "object",
        "properties": {"steps": {"type": "array", "items": step, "minItems": 1, "maxItems": max_steps}},
        "required": ["steps"],
        "additionalProperties": False,
        "$defs": defs,
    }
