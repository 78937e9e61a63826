"""A finished structured answer checked against its whole schema, in the draft the schema declares.

The constraint holds what llguidance enforces while generating; the rest of a schema (``uniqueItems``,
``not``, ``if``/``then``/``else``, ``dependencies``, a lookaround in a ``pattern``, a format without a
grammar...: :attr:`~snapllm.protocol.constraints.compiled_schema.CompiledSchema.validated` lists each) is
checked here, once the answer is whole, by the request's
:class:`~snapllm.protocol.constraints.compiled_schema.CompiledSchema`::

    answer_violations({"type": "array", "uniqueItems": True}, '["a","a"]')
    # ["$ ['a', 'a'] has non-unique elements"]
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
