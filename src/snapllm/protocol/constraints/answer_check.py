"""A finished structured answer checked against its whole schema, in the draft the schema declares: what
llguidance did not enforce while generating (:attr:`CompiledSchema.validated
<snapllm.protocol.constraints.compiled_schema.CompiledSchema.validated>`) is checked here::

    answer_violations({"type": "array", "uniqueItems": True}, '["a","a"]')
    # ["$ ['a', 'a'] has non-unique elements"]
    check_answer(schema, text, param="response_format")   # raises SchemaValidationFailedError (422)

The check's bounds (a pattern's time limit, exact ``multipleOf``) are in docs/structured-output.md.
"""

from __future__ import annotations

from typing import Any

from snapllm.protocol.constraints.compiled_schema import MAX_VIOLATIONS, PATTERN_TIMEOUT_S, compile_schema

__all__ = ["MAX_VIOLATIONS", "PATTERN_TIMEOUT_S", "answer_violations", "check_answer"]


def answer_violations(schema: Any, text: str) -> list[str]:
    """What in ``text`` (a complete answer) breaks ``schema``, each as "[$path] message" (at most
    :data:`MAX_VIOLATIONS`); empty when it validates."""
    return compile_schema(schema, param="schema").violations(text)


def check_answer(schema: Any, text: str, *, param: str) -> None:
    """Raise :class:`~snapllm.errors.SchemaValidationFailedError` when ``text`` does not validate against
    ``schema`` (compiled when the request was read: a cache hit)."""
    compile_schema(schema, param=param).check_answer(text, param=param)
