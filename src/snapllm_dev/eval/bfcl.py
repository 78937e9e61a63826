"""The Berkeley Function Calling Leaderboard (PyPI ``bfcl-eval``): its cases, their tools in OpenAI's format
as BFCL's own OpenAI handler sends them, and its AST checker's verdict on the tool calls an answer makes.

bfcl-eval is installed without its dependencies (``pip install --no-deps``, by ``scripts/setup.sh``): the
modules used here need ``filelock`` and ``tenacity`` only. Two of their imports reach further, and are stood
in for (:func:`_stand_ins`): the checker reads one flag of BFCL's model registry, which imports every
provider's SDK, and the handlers' helpers import the Java and JavaScript call parsers (tree-sitter), which
Python cases never use.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import types
from dataclasses import dataclass
from typing import Any


def _stand_ins() -> None:
    """Stand-ins for the two module imports that would pull BFCL's heavy dependencies."""
    registry = "bfcl_eval.constants.model_config"
    if registry not in sys.modules:
        stand_in = types.ModuleType(registry)
        # The checker asks it whether a function's dots became underscores in the tool's name, as
        # convert_to_tool makes them for OpenAI; BFCL's registry says so for its OpenAI FC models.
        stand_in.MODEL_CONFIG_MAPPING = {CHECKER_MODEL: types.SimpleNamespace(underscore_to_dot=True)}  # type: ignore[attr-defined]
        sys.modules[registry] = stand_in
    if importlib.util.find_spec("tree_sitter") is None:
        for language in ("java", "js"):
            name = f"bfcl_eval.model_handler.parser.{language}_parser"
            parser = types.ModuleType(name)
            setattr(
                parser, f"parse_{'javascript' if language == 'js' else language}_function_call", _no_parser
            )
            sys.modules.setdefault(name, parser)


def _no_parser(*_: object) -> None:
    raise NotImplementedError("BFCL's Java and JavaScript parsers need tree-sitter, which is not installed")


#: The model BFCL's checker is told it checks: one of its OpenAI FC models (dots in names became "_").
CHECKER_MODEL = "gpt-4o-2024-11-20-FC"

_stand_ins()

from bfcl_eval.constants.category_mapping import VERSION_PREFIX  # noqa: E402
from bfcl_eval.constants.enums import Language, ModelStyle  # noqa: E402
from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH, PROMPT_PATH  # noqa: E402
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402
from bfcl_eval.model_handler.utils import convert_to_tool  # noqa: E402
from bfcl_eval.utils import (  # noqa: E402
    add_language_specific_hint_to_function_doc,
    is_empty_output,
    is_function_calling_format_output,
    load_file,
)

#: The categories by the name ``--category`` gives them, and BFCL's own (its data files' names).
CATEGORIES = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
}
#: The outcomes of a case, in the tables' order.
PASSED, NO_CALL, MALFORMED, WRONG_CALL, ERROR = "passed", "no call", "malformed", "wrong call", "errors"
OUTCOMES = (PASSED, NO_CALL, MALFORMED, WRONG_CALL, ERROR)


@dataclass(frozen=True)
class Case:
    """One BFCL case: what is sent (``messages``, ``tools``) and what the checker reads (``functions``, BFCL's
    own documents, and ``answers``, the possible answers; None for irrelevance)."""

    id: str
    category: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    answers: list[dict[str, Any]] | None


@dataclass(frozen=True)
class Reply:
    """An endpoint's answer to a case: its text, its tool calls (name, arguments as sent), or an error."""

    content: str | None = None
    calls: tuple[tuple[str, str], ...] = ()
    finish_reason: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A case's verdict (one of :data:`OUTCOMES`), why (BFCL's error type and messages, or the error), and
    whether text without a call names one of the case's tools (a call the server may have left in it)."""

    kind: str
    detail: str = ""
    call_in_text: bool = False


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's function documents as the ``tools`` of a chat completion, as BFCL's OpenAI handler converts
    them (``convert_to_tool``: dots in names to "_", BFCL's types to JSON schema's)."""
    return convert_to_tool(copy.deepcopy(functions), GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)


def spread(count: int, total: int) -> list[int]:
    """``count`` indexes spread evenly over ``range(total)`` (all of them when ``count >= total``)."""
    if count >= total:
        return list(range(total))
    return [index * total // count for index in range(count)]


def load_cases(category: str, count: int) -> list[Case]:
    """``count`` cases of ``category`` (a key of :data:`CATEGORIES`), spread evenly over its file in BFCL's
    order, so that a run picks the same ones."""
    name = CATEGORIES[category]
    entries = load_file(PROMPT_PATH / f"{VERSION_PREFIX}_{name}.json", use_lock=False)
    answers = (
        None
        if category == "irrelevance"
        else load_file(POSSIBLE_ANSWER_PATH / f"{VERSION_PREFIX}_{name}.json", use_lock=False)
    )
    cases = []
    for index in spread(count, len(entries)):
        entry = entries[index]
        # What is sent carries the hint BFCL's generation adds ("...in Python 3 syntax"); the checker reads
        # the documents without it, as BFCL's evaluation does.
        sent = add_language_specific_hint_to_function_doc([copy.deepcopy(entry)])[0]
        answer = answers[index] if answers is not None else None
        if answer is not None and answer["id"] != entry["id"]:
            raise ValueError(f"BFCL's {name} answers are not in its cases' order ({answer['id']})")
        cases.append(
            Case(
                id=entry["id"],
                category=category,
                messages=entry["question"][0],
                tools=openai_tools(sent["function"]),
                functions=entry["function"],
                answers=answer["ground_truth"] if answer is not None else None,
            )
        )
    return cases


def reply_of(answer: dict[str, Any]) -> Reply:
    """A chat completion's first choice as a :class:`Reply`."""
    choice = (answer.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = tuple(
        (str(call["function"].get("name", "")), _arguments_text(call["function"].get("arguments")))
        for call in message.get("tool_calls") or []
        if isinstance(call, dict) and isinstance(call.get("function"), dict)
    )
    return Reply(content=message.get("content"), calls=calls, finish_reason=choice.get("finish_reason"))


def _arguments_text(arguments: object) -> str:
    """The arguments as the API sent them (a JSON string); an object some servers send instead as JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def decoded_calls(reply: Reply) -> list[dict[str, Any]]:
    """The calls as BFCL's checker reads them, ``[{name: arguments}]``, decoded as BFCL's OpenAI handler
    decodes function-calling answers (``json.loads`` of each call's arguments); raises on one it cannot."""
    return [{name: json.loads(arguments)} for name, arguments in reply.calls]


def names_a_tool(case: Case, text: str | None) -> bool:
    """Whether ``text`` names one of the case's tools: a call written that did not come back as one."""
    return bool(text) and any(tool["function"]["name"] in (text or "") for tool in case.tools)


def score(case: Case, reply: Reply) -> Outcome:
    """The case's outcome: BFCL's verdict (its AST checker, or for irrelevance its "no call made"), with
    each failure put in one kind: no call, a call whose arguments are not a JSON object, or a wrong call."""
    if reply.error is not None:
        return Outcome(ERROR, reply.error)
    try:
        calls = decoded_calls(reply)
        well_formed = is_function_calling_format_output(calls)
    except (ValueError, TypeError) as exc:
        calls, well_formed, reason = [], False, f"arguments are not JSON: {exc}"
    else:
        reason = "arguments are not a JSON object"
    if case.answers is None:  # irrelevance: passed unless the answer decodes to a call (BFCL's rule)
        if not reply.calls or not well_formed or is_empty_output(calls):
            return Outcome(PASSED)
        return Outcome(WRONG_CALL, "irrelevance_error:decoder_success: a call where no function fits")
    if not reply.calls:
        return Outcome(NO_CALL, f"finish_reason {reply.finish_reason}", names_a_tool(case, reply.content))
    if not well_formed:
        return Outcome(MALFORMED, reason)
    checked = ast_checker(
        case.functions, calls, case.answers, Language.PYTHON, CATEGORIES[case.category], CHECKER_MODEL
    )
    if checked["valid"]:
        return Outcome(PASSED)
    return Outcome(WRONG_CALL, f"{checked['error_type']}: {'; '.join(map(str, checked['error']))}")
