"""Grammars and schemas still compile in a forked process, as in a restored environment of the local stack
(``snapllm_dev.local.host`` forks the initialised function): the threads they compile on, started before the
fork, do not exist in the child, which starts its own.
"""

from __future__ import annotations

import os
import signal

import llguidance
import pytest
from llama_cpp import Llama

from snapllm.engine.constraint import Constraint, vocabulary_tokenizer
from snapllm.protocol.constraints.compiled_schema import compile_schema
from snapllm_dev.packaged_models import smollm2_path

# A compile takes milliseconds; a child that inherited a dead thread waited forever.
CHILD_BOUND_S = 20


def _in_child(work) -> int:
    """Run ``work`` in a forked child, stopped after :data:`CHILD_BOUND_S`; its exit status (0: it ran)."""
    pid = os.fork()
    if pid == 0:  # the child
        signal.alarm(CHILD_BOUND_S)
        try:
            work()
        except BaseException:
            os._exit(2)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() in a process with threads
def test_a_schema_compiles_in_a_forked_process():
    compile_schema({"type": "object", "properties": {"a": {"type": "integer"}}}, param="response_format")
    fresh = {"type": "object", "properties": {"b": {"type": "string", "maxLength": 7}}}
    assert _in_child(lambda: compile_schema(fresh, param="response_format")) == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_grammar_compiles_in_a_forked_process():
    llama = Llama(model_path=str(smollm2_path()), vocab_only=True, verbose=False)
    tokenizer = vocabulary_tokenizer(llama)
    Constraint(tokenizer, llguidance.LLMatcher.grammar_from_lark('start: "yes" | "no"'))
    grammar = llguidance.LLMatcher.grammar_from_lark('start: "maybe"')
    assert _in_child(lambda: Constraint(tokenizer, grammar)) == 0
