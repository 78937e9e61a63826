"""How each model family writes a tool call, as a grammar to force it and a parser to read it back.

    fmt = HERMES                       # Qwen2.5, Qwen3, Hermes, SmolLM3: <tool_call>{...}</tool_call>
    rules = fmt.grammar(functions, parallel=True, prefix="call-")    # GBNF, root rule "call-root"
    fmt.parse('<tool_call>\\n{"name":"f","arguments":{}}\\n</tool_call>', {"f"})   # [("f", "{}")]

A format with an ``opener`` (``<tool_call>``, ``[TOOL_CALLS]``...) lets an answer write text before its
calls, and that opener alone tells a call from text. A format without one (the generic JSON format, Llama
3's) is JSON from the answer's first character. Each format's calls carry their arguments as JSON valid
against the function's ``parameters``, which the grammar enforces. Pure: no llama.cpp.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

from snapllm.protocol.json_grammar import literal, schema_grammar
from snapllm.protocol.structured import (
    MAX_PARALLEL_TOOL_CALLS,
    CutCall,
    arguments_schema,
    parse_cut_tool_calls,
    parse_tool_calls,
    tool_call_schema,
)

Call = tuple[str, str]
Functions = Sequence[Mapping[str, Any]]


def _repeated(one: str, separator: str, *, parallel: bool) -> str:
    """GBNF for one to :data:`MAX_PARALLEL_TOOL_CALLS` of ``one`` (a single one without ``parallel``)."""
    if not parallel:
        return one
    more = ""
    for _ in range(MAX_PARALLEL_TOOL_CALLS - 1):
        more = f"( {literal(separator)} {one} {more} )?" if more else f"( {literal(separator)} {one} )?"
    return f"{one} {more}"


def _named_arguments(functions: Functions, prefix: str, head: Callable[[str], str]) -> tuple[str, str]:
    """For formats that write a function's name in the clear: the GBNF choice among ``head(name)`` then that
    function's arguments, and the rules of each function's arguments."""
    rules, choices = [], []
    for index, function in enumerate(functions):
        schema = arguments_schema(function.get("parameters"))
        rules.append(schema_grammar(schema, param="tools", prefix=f"{prefix}f{index}-"))
        choices.append(f"{literal(head(str(function['name'])))} {prefix}f{index}-root")
    return " | ".join(choices), "".join(rules)


class ToolCallFormat:
    """The generic format: the call as JSON ``{"name": ..., "arguments": {...}}``, or a list of such calls,
    from the answer's first character (what :mod:`snapllm.protocol.structured` describes to a model whose
    template takes no tools)."""

    name: ClassVar[str] = "json"
    #: The text every answer that calls opens its calls with; "" when the calls are JSON from the start.
    opener: ClassVar[str] = ""
    arguments_key: ClassVar[str] = "arguments"

    def grammar(self, functions: Functions, *, parallel: bool, prefix: str) -> str:
        """GBNF rules (root ``{prefix}root``) of the calls to ``functions``, arguments valid."""
        schema = tool_call_schema(functions, parallel=parallel, arguments_key=self.arguments_key)
        return schema_grammar(schema, param="tools", prefix=prefix)

    def parse(self, text: str, names: Collection[str]) -> list[Call] | None:
        """The (name, JSON arguments) of the calls a finished answer's call text holds, or None."""
        return parse_tool_calls(text, names, arguments_key=self.arguments_key)

    def parse_cut(self, text: str, names: Collection[str]) -> list[CutCall] | None:
        """The calls of a call text cut short, as far as they go (see ``parse_cut_tool_calls``)."""
        return parse_cut_tool_calls(text, names, arguments_key=self.arguments_key)


class LlamaJSONToolCalls(ToolCallFormat):
    """Llama 3.1-3.3's custom tools: one ``{"name": ..., "parameters": {...}}`` from the first character, the
    format its template asks for (it describes no list of calls, so a turn makes one call)."""

    name = "llama3-json"
    arguments_key = "parameters"

    def grammar(self, functions: Functions, *, parallel: bool, prefix: str) -> str:
        return super().grammar(functions, parallel=False, prefix=prefix)


class WrappedJSONToolCalls(ToolCallFormat):
    """Calls in the generic JSON shape between an opener and a closer: each call in its own pair (Hermes'
    ``<tool_call>...</tool_call>``), or all of them as one JSON list after one opener (Mistral's
    ``[TOOL_CALLS][...]``, Phi-4-mini's ``<|tool_call|>[...]<|/tool_call|>``)."""

    def __init__(
        self, name: str, *, opener: str, closer: str = "", each: bool = False, pad: str = ""
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.opener = opener  # type: ignore[misc]
        self.closer = closer
        self.each = each
        # What the model writes inside the opener and the closer, around the JSON (Hermes: newlines).
        self.pad = pad

    def grammar(self, functions: Functions, *, parallel: bool, prefix: str) -> str:
        if self.each:
            json_rules = super().grammar(functions, parallel=False, prefix=f"{prefix}json-")
            one = f"{literal(self.opener + self.pad)} {prefix}json-root {literal(self.pad + self.closer)}"
            return f"{prefix}root ::= {_repeated(one, chr(10), parallel=parallel)}\n{json_rules}"
        schema = tool_call_schema(functions, parallel=True, arguments_key=self.arguments_key)
        if not parallel:
            schema = {**schema, "maxItems": 1}
        json_rules = schema_grammar(schema, param="tools", prefix=f"{prefix}json-")
        closer = f" {literal(self.closer)}" if self.closer else ""
        return f"{prefix}root ::= {literal(self.opener)} {prefix}json-root{closer}\n{json_rules}"

    def _bodies(self, text: str) -> tuple[list[str], str | None]:
        """The JSON of each closed call (or of the one list), and the text of an unclosed last one."""
        if not text.startswith(self.opener):
            return [], None
        if not self.each:
            body = text[len(self.opener) :]
            if self.closer and self.closer in body:
                return [body.split(self.closer, 1)[0]], None
            return ([body], None) if not self.closer else ([], body)
        bodies, rest = [], text
        while rest.startswith(self.opener):
            body, closed, rest = rest[len(self.opener) :].partition(self.closer)
            if not closed:
                return bodies, body
            bodies.append(body)
            rest = rest.lstrip()
        return bodies, None

    def parse(self, text: str, names: Collection[str]) -> list[Call] | None:
        bodies, unclosed = self._bodies(text.strip())
        if unclosed is not None or not bodies:
            return None
        calls: list[Call] = []
        for body in bodies:
            found = parse_tool_calls(body, names, arguments_key=self.arguments_key)
            if found is None:
                return None
            calls.extend(found)
        return calls

    def parse_cut(self, text: str, names: Collection[str]) -> list[CutCall] | None:
        stripped = text.strip()
        if not stripped or not (stripped.startswith(self.opener) or self.opener.startswith(stripped)):
            return None
        bodies, unclosed = self._bodies(stripped)
        calls: list[CutCall] = []
        for body in bodies:
            calls.extend(parse_tool_calls(body, names, arguments_key=self.arguments_key) or [])
        if unclosed is not None:
            calls.extend(parse_cut_tool_calls(unclosed, names, arguments_key=self.arguments_key) or [])
        if not calls:
            # Cut inside the opener or before the first name: a call, but of no function yet.
            calls.append((next(iter(names)) if len(names) == 1 else None, ""))
        return calls


class DeepSeekToolCalls(ToolCallFormat):
    """DeepSeek-R1 and V3: each call between the model's call markers, the function's name in the clear and
    its arguments as a fenced JSON block."""

    name = "deepseek"
    opener = "<｜tool▁calls▁begin｜>"
    _BEGIN = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
    _END = "\n```<｜tool▁call▁end｜>"
    _CLOSER = "<｜tool▁calls▁end｜>"
    _CALL = re.compile(
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>([^\\n]*)\\n```json\\n(.*?)\\n```<｜tool▁call▁end｜>",
        re.S,
    )

    def grammar(self, functions: Functions, *, parallel: bool, prefix: str) -> str:
        choice, rules = _named_arguments(functions, prefix, lambda name: f"{name}\n```json\n")
        one = f"{literal(self._BEGIN)} ( {choice} ) {literal(self._END)}"
        calls = _repeated(f"{prefix}one", "\n", parallel=parallel)
        root = f"{prefix}root ::= {literal(self.opener)} {calls} {literal(self._CLOSER)}\n"
        return f"{root}{prefix}one ::= {one}\n{rules}"

    def _calls(self, text: str, names: Collection[str]) -> list[Call] | None:
        calls = []
        for name, arguments in self._CALL.findall(text):
            if name not in names:
                return None
            try:
                value = json.loads(arguments)
            except ValueError:
                return None
            calls.append((name, json.dumps(value, ensure_ascii=False)))
        return calls

    def parse(self, text: str, names: Collection[str]) -> list[Call] | None:
        stripped = text.strip()
        if not stripped.startswith(self.opener) or not stripped.endswith(self._CLOSER):
            return None
        return self._calls(stripped, names) or None

    def parse_cut(self, text: str, names: Collection[str]) -> list[CutCall] | None:
        stripped = text.strip()
        if not stripped or not (stripped.startswith(self.opener) or self.opener.startswith(stripped)):
            return None
        calls: list[CutCall] = list(self._calls(stripped, names) or [])
        last = stripped.rfind(self._BEGIN)
        tail = stripped[last + len(self._BEGIN) :] if last >= 0 else ""
        if last >= 0 and "<｜tool▁call▁end｜>" not in tail:
            name, newline, rest = tail.partition("\n")
            matches = (
                [n for n in names if n.startswith(name)] if not newline else [n for n in names if n == name]
            )
            arguments = rest.removeprefix("```json").lstrip("\n")
            calls.append((matches[0] if len(matches) == 1 else None, arguments))
        if not calls:
            calls.append((next(iter(names)) if len(names) == 1 else None, ""))
        return calls


class HarmonyToolCalls(ToolCallFormat):
    """gpt-oss's harmony format: a call is a message of its own to ``functions.NAME`` on the commentary
    channel (``<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{...}``), one
    per turn (its ``<|call|>`` ends generation). Both orders models write, the recipient before or after the
    channel, are read back."""

    name = "harmony"
    opener = "to=functions."
    _CALL = re.compile(
        r"to=functions\.([A-Za-z0-9_.-]+)[^<]*(?:<\|channel\|>[^<]*)?(?:<\|constrain\|>[^<]*)?<\|message\|>(.*)",
        re.S,
    )

    def grammar(self, functions: Functions, *, parallel: bool, prefix: str) -> str:
        choice, rules = _named_arguments(
            functions, prefix, lambda name: f"{name}<|channel|>commentary json<|message|>"
        )
        return f"{prefix}root ::= {literal(' ' + self.opener)} ( {choice} )\n{rules}"

    def _match(self, text: str, names: Collection[str]) -> tuple[str, str] | None:
        found = self._CALL.search(text)
        if found is None or found.group(1) not in names:
            return None
        return found.group(1), found.group(2).strip()

    def parse(self, text: str, names: Collection[str]) -> list[Call] | None:
        found = self._match(text, names)
        if found is None:
            return None
        try:
            value = json.loads(found[1])
        except ValueError:
            return None
        return [(found[0], json.dumps(value, ensure_ascii=False))]

    def parse_cut(self, text: str, names: Collection[str]) -> list[CutCall] | None:
        stripped = text.strip()
        if not stripped or not (stripped.startswith(self.opener) or self.opener.startswith(stripped)):
            return None
        found = self._match(stripped, names)
        if found is not None:
            return [found]
        partial = stripped[len(self.opener) :].split("<", 1)[0].strip()
        matches = [name for name in names if name.startswith(partial)]
        return [(matches[0] if len(matches) == 1 else None, "")]


GENERIC = ToolCallFormat()
LLAMA3_JSON = LlamaJSONToolCalls()
HERMES = WrappedJSONToolCalls("hermes", opener="<tool_call>", closer="</tool_call>", each=True, pad="\n")
MISTRAL = WrappedJSONToolCalls("mistral", opener="[TOOL_CALLS]")
PHI4 = WrappedJSONToolCalls("phi4", opener="<|tool_call|>", closer="<|/tool_call|>")
GRANITE = WrappedJSONToolCalls("granite", opener="<|tool_call|>")
DEEPSEEK = DeepSeekToolCalls()
HARMONY = HarmonyToolCalls()
