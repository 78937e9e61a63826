"""How each model family writes a tool call, as a grammar to force it and a parser to read it back.

    fmt = HERMES                       # Qwen2.5, Qwen3, Hermes, SmolLM3: <tool_call>{...}</tool_call>
    rules = fmt.grammar(functions, parallel=True, specials={})    # Lark rules: "calls" (and "calls_opened")
    fmt.parse('<tool_call>{"name": "f", "arguments": {}}</tool_call>', {"f"})   # [("f", "{}")]

docs/models.md says how openers, text before calls and spacing are taken. Pure: no llama.cpp.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

from snapllm.protocol.constraints.lark_grammar import SPACE, SPACE_RULES, Specials, spelled, string
from snapllm.protocol.constraints.structured import (
    MAX_PARALLEL_TOOL_CALLS,
    CutCall,
    generic_tool_instructions,
    listed_functions,
    parse_cut_tool_calls,
    parse_tool_calls,
    tool_arguments,
)
from snapllm.protocol.families.reasoning import held_length

Call = tuple[str, str]
Functions = Sequence[Mapping[str, Any]]


def _repeated(one: str, separator: str, *, parallel: bool) -> str:
    """Lark for one to :data:`MAX_PARALLEL_TOOL_CALLS` of ``one`` (a single one without ``parallel``),
    ``separator`` between two."""
    if not parallel:
        return one
    return f"{one} ({separator} {one}){{0,{MAX_PARALLEL_TOOL_CALLS - 1}}}"


def _arguments(functions: Functions) -> str:
    """Lark rules ``args_<i>``: each function's arguments, JSON valid against its ``parameters``."""
    rules = []
    for index, function in enumerate(functions):
        compiled = tool_arguments(function.get("parameters"))
        rules.append(f"args_{index}: {compiled.lark()}\n")
    return "".join(rules)


def _json_calls(functions: Functions, arguments_key: str) -> str:
    """Lark rules: ``call``, one JSON call ``{"name": <name>, <arguments_key>: <arguments>}`` to one of
    ``functions`` with its arguments (spacing allowed between the tokens), and what it uses."""
    choices = []
    for index, function in enumerate(functions):
        name = string(json.dumps(str(function["name"]), ensure_ascii=False))
        key = string(json.dumps(arguments_key))
        choices.append(
            f'call_{index}: "{{" {SPACE} "\\"name\\"" {SPACE} ":" {SPACE} {name} {SPACE} "," {SPACE} {key} '
            f'{SPACE} ":" {SPACE} args_{index} {SPACE} "}}"\n'
        )
    alternatives = " | ".join(f"call_{index}" for index in range(len(functions)))
    return f"call: {alternatives}\n" + "".join(choices) + _arguments(functions) + SPACE_RULES


def _json_list(*, parallel: bool) -> str:
    """Lark for a JSON list of calls (``call``): one to :data:`MAX_PARALLEL_TOOL_CALLS`, one without
    ``parallel``."""
    calls = _repeated("call", f'{SPACE} "," {SPACE}', parallel=parallel)
    return f'"[" {SPACE} {calls} {SPACE} "]"'


def _opener_split(text: str, openers: Sequence[str]) -> tuple[str, str]:
    """An answer's text before its calls, and the calls' text from the first of ``openers`` (an answer cut
    inside an opener is all calls)."""
    found = [at for at in (text.find(opener) for opener in openers) if at >= 0]
    if found:
        at = min(found)
        return text[:at].rstrip(), text[at:]
    stripped = text.strip()
    if stripped and any(opener.startswith(stripped) for opener in openers):
        return "", stripped
    return text, ""


class ToolCallFormat:
    """The generic format: the call as JSON ``{"name": ..., "arguments": {...}}``, or a list of such calls,
    from the answer's first character (what :mod:`snapllm.protocol.constraints.structured` describes to a
    model whose template takes no tools)."""

    name: ClassVar[str] = "json"
    #: The text every answer that calls opens its calls with; "" when the calls are JSON from the start.
    opener: ClassVar[str] = ""
    arguments_key: ClassVar[str] = "arguments"
    #: Whether an answer may write text before its calls (else the calls are a message of their own).
    text_before_calls: ClassVar[bool] = True

    @property
    def markers(self) -> tuple[str, ...]:
        """The texts of the envelope, which may be special tokens of the model."""
        return (self.opener,) if self.opener else ()

    @property
    def openers(self) -> tuple[str, ...]:
        """Every text that starts the calls (the opener; a format may have several)."""
        return (self.opener,) if self.opener else ()

    def grammar(self, functions: Functions, *, parallel: bool, specials: Specials) -> str:
        """Lark rules of the calls to ``functions``, arguments valid: ``calls`` (from the opener), and in a
        format with an opener ``calls_opened`` (the same after the first opener)."""
        calls = f"call | {_json_list(parallel=True)}" if parallel else "call"
        return f"calls: {calls}\n" + _json_calls(functions, self.arguments_key)

    def instructions(self, functions: Functions, *, parallel: bool) -> str:
        """The system-message text that describes ``functions`` where the template describes no tools."""
        return generic_tool_instructions(functions, parallel=parallel)

    def split(self, text: str) -> tuple[str, str]:
        """An answer's text before its calls, and the calls' text (from the opener; the whole answer in a
        format without one, and an answer cut inside the opener)."""
        if not self.openers:
            return "", text
        return _opener_split(text, self.openers)

    def text_end(self, answer: str) -> int:
        """How much of a streamed answer is text for sure: up to an opener, or up to what may still become
        one."""
        found = [at for at in (answer.find(opener) for opener in self.openers) if at >= 0]
        if found:
            return min(found)
        return len(answer) - max((held_length(answer, opener) for opener in self.openers), default=0)

    def parse(self, text: str, names: Collection[str]) -> list[Call] | None:
        """The (name, JSON arguments) of the calls a finished answer's call text holds, or None."""
        return parse_tool_calls(text, names, arguments_key=self.arguments_key)

    def parse_cut(self, text: str, names: Collection[str]) -> list[CutCall] | None:
        """The calls of a call text cut short, as far as they go (see ``parse_cut_tool_calls``)."""
        return parse_cut_tool_calls(text, names, arguments_key=self.arguments_key)

    def _opened(self, text: str) -> bool:
        """Whether ``text`` (stripped) starts with an opener, or is cut inside one."""
        return bool(text) and any(text.startswith(o) or o.startswith(text) for o in self.openers)


class LlamaJSONToolCalls(ToolCallFormat):
    """Llama 3.1-3.3's custom tools: one ``{"name": ..., "parameters": {...}}`` from the first character, the
    format its template asks for (it describes no list of calls, so a turn makes one call)."""

    name = "llama3-json"
    arguments_key = "parameters"

    def grammar(self, functions: Functions, *, parallel: bool, specials: Specials) -> str:
        return super().grammar(functions, parallel=False, specials=specials)


class WrappedJSONToolCalls(ToolCallFormat):
    """Calls in the generic JSON shape between an opener and a closer: each call in its own pair (Hermes'
    ``<tool_call>\\n...\\n</tool_call>``), or all of them as one JSON list after one opener (Mistral's
    ``[TOOL_CALLS][...]``, Phi-4-mini's ``<|tool_call|>[...]<|/tool_call|>``). Spacing may stand inside the
    opener and the closer, and between two calls."""

    def __init__(self, name: str, *, opener: str, closer: str = "", each: bool = False) -> None:
        self.name = name  # type: ignore[misc]
        self.opener = opener  # type: ignore[misc]
        self.closer = closer
        self.each = each

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.opener, self.closer) if self.closer else (self.opener,)

    def grammar(self, functions: Functions, *, parallel: bool, specials: Specials) -> str:
        opener = spelled(self.opener, specials)
        closer = f" {SPACE} {spelled(self.closer, specials)}" if self.closer else ""
        if self.each:
            rest = f"{SPACE} call{closer}"
            more = f"({SPACE} {opener} {rest}){{0,{MAX_PARALLEL_TOOL_CALLS - 1}}}" if parallel else ""
            rules = f"calls: {opener} calls_opened\ncalls_opened: {rest} {more}\n"
        else:
            listed = _json_list(parallel=parallel)
            rules = f"calls: {opener} calls_opened\ncalls_opened: {SPACE} {listed}{closer}\n"
        return rules + _json_calls(functions, self.arguments_key)

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
        if not self._opened(stripped):
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


class NamedArgsToolCalls(ToolCallFormat):
    """Mistral's tokenizer v11 and later (Mistral Small 3.2, Devstral, Ministral 3): each call opens with
    ``[TOOL_CALLS]``, names its function in the clear and gives its arguments after ``[ARGS]``
    (``[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}``); Mistral Small 3.2's template puts the call's id
    between them (``[CALL_ID]a1b2c3d4e``), which a model may write too. Spacing may stand after
    ``[ARGS]`` and between two calls."""

    name = "mistral-args"
    opener = "[TOOL_CALLS]"
    _ID = "[CALL_ID]"
    _ARGS = "[ARGS]"
    _CALL = re.compile(r"([^\[\s]+)\s*(?:\[CALL_ID\][A-Za-z0-9]*)?\[ARGS\](.*)", re.S)

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.opener, self._ID, self._ARGS)

    def grammar(self, functions: Functions, *, parallel: bool, specials: Specials) -> str:
        call_id = f"({spelled(self._ID, specials)} /[A-Za-z0-9]{{9}}/)?"
        arguments = spelled(self._ARGS, specials)
        choices = [
            f"{string(str(function['name']))} {call_id} {arguments} {SPACE} args_{index}"
            for index, function in enumerate(functions)
        ]
        one = " | ".join(f"({choice})" for choice in choices)
        opener = spelled(self.opener, specials)
        calls = _repeated("one", f"{SPACE} {opener}", parallel=parallel)
        rules = f"calls: {opener} calls_opened\ncalls_opened: {calls}\none: {one}\n"
        return rules + _arguments(functions) + SPACE_RULES

    def _parts(self, text: str) -> list[str]:
        return [part.strip() for part in text.split(self.opener)[1:]] if text.startswith(self.opener) else []

    def _call(self, part: str, names: Collection[str]) -> Call | None:
        found = self._CALL.fullmatch(part)
        if found is None or found.group(1) not in names:
            return None
        try:
            value = json.loads(found.group(2))
        except ValueError:
            return None
        return found.group(1), json.dumps(value, ensure_ascii=False)

    def parse(self, text: str, names: Collection[str]) -> list[Call] | None:
        calls = [self._call(part, names) for part in self._parts(text.strip())]
        if not calls or None in calls:
            return None
        return [call for call in calls if call is not None]

    def parse_cut(self, text: str, names: Collection[str]) -> list[CutCall] | None:
        stripped = text.strip()
        if not self._opened(stripped):
            return None
        parts = self._parts(stripped)
        calls: list[CutCall] = [call for call in (self._call(p, names) for p in parts[:-1]) if call]
        last = parts[-1] if parts else ""
        whole = self._call(last, names)
        if whole is not None:
            calls.append(whole)
        else:
            name, named, rest = last.partition(self._ARGS)
            name = name.split(self._ID, 1)[0].strip()
            # Before [ARGS] the name may still be cut short; after it, it is whole.
            matches = [n for n in names if (n == name if named else n.startswith(name))]
            calls.append((matches[0] if len(matches) == 1 else None, rest.lstrip()))
        return calls


class DeepSeekToolCalls(ToolCallFormat):
    """DeepSeek-R1 and V3: each call between the model's call markers, the function's name in the clear and
    its arguments as a fenced JSON block (``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```); spacing
    may stand around the fence's JSON and between the calls."""

    name = "deepseek"
    opener = "<｜tool▁calls▁begin｜>"
    _BEGIN = "<｜tool▁call▁begin｜>"
    _SEP = "<｜tool▁sep｜>"
    _END = "<｜tool▁call▁end｜>"
    _CLOSER = "<｜tool▁calls▁end｜>"
    _CALL = re.compile(
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>([^\\n`<]*?)\\s*```json\\s*(.*?)\\s*```\\s*<｜tool▁call▁end｜>",
        re.S,
    )

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.opener, self._BEGIN, self._SEP, self._END, self._CLOSER)

    def instructions(self, functions: Functions, *, parallel: bool) -> str:
        # The markers are control tokens, which a message's text never becomes: the format is named, not
        # shown (the family's templates write it in earlier turns, and the grammar forces it).
        several = " (several calls in one block)" if parallel else ""
        return (
            f"{listed_functions(functions)}\n"
            f"To call a function, write a tool-calls block{several}: each call's function name, then its "
            "arguments as a JSON object in a ```json fence."
        )

    def grammar(self, functions: Functions, *, parallel: bool, specials: Specials) -> str:
        choices = []
        for index, function in enumerate(functions):
            head = spelled(f"{self._BEGIN}function{self._SEP}{function['name']}\n```json", specials)
            end = spelled(f"```{self._END}", specials)
            choices.append(f"{head} {SPACE} args_{index} {SPACE} {end}")
        one = " | ".join(f"({choice})" for choice in choices)
        calls = _repeated("one", SPACE, parallel=parallel)
        return (
            f"calls: {spelled(self.opener, specials)} calls_opened\n"
            f"calls_opened: {SPACE} {calls} {SPACE} {spelled(self._CLOSER, specials)}\n"
            f"one: {one}\n{_arguments(functions)}{SPACE_RULES}"
        )

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
        if not self._opened(stripped):
            return None
        calls: list[CutCall] = list(self._calls(stripped, names) or [])
        head = f"{self._BEGIN}function{self._SEP}"
        last = stripped.rfind(self._BEGIN)
        tail = stripped[last:] if last >= 0 else ""
        if last >= 0 and self._END not in tail:
            named = tail[len(head) :] if tail.startswith(head) else ""
            name, newline, rest = named.partition("\n")
            name = name.strip()
            matches = (
                [n for n in names if n.startswith(name)] if not newline else [n for n in names if n == name]
            )
            arguments = rest.lstrip().removeprefix("```json").lstrip()
            calls.append((matches[0] if len(matches) == 1 else None, arguments))
        if not calls:
            calls.append((next(iter(names)) if len(names) == 1 else None, ""))
        return calls


class HarmonyToolCalls(ToolCallFormat):
    """gpt-oss's harmony format: a call is a message of its own to ``functions.NAME`` on the commentary
    channel, one per turn (its ``<|call|>`` ends generation). Models write the recipient after the channel
    (``<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}``); the template
    writes it before (``<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>``):
    both are allowed and read back."""

    name = "harmony"
    text_before_calls = False
    opener = "<|channel|>commentary to=functions."
    _RECIPIENT_FIRST = " to=functions."
    _CALL = re.compile(
        r"to=functions\.([A-Za-z0-9_.-]+)[^<]*(?:<\|channel\|>[^<]*)?(?:<\|constrain\|>[^<]*)?<\|message\|>(.*)",
        re.S,
    )

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.opener, "<|constrain|>", "<|message|>")

    @property
    def openers(self) -> tuple[str, ...]:
        return (self.opener, self._RECIPIENT_FIRST.lstrip(), self._RECIPIENT_FIRST)

    def grammar(self, functions: Functions, *, parallel: bool, specials: Specials) -> str:
        channel, message = spelled("<|channel|>", specials), spelled("<|message|>", specials)
        constrain = spelled("<|constrain|>", specials)
        choices = []
        for index, function in enumerate(functions):
            name = str(function["name"])
            after = f'{channel} {string("commentary to=functions." + name)} (" "? {constrain} "json")?'
            before = f'{string(" to=functions." + name)} {channel} "commentary" " json"?'
            choices.append(f"(({after}) | ({before})) {message} {SPACE} args_{index}")
        one = " | ".join(f"({choice})" for choice in choices)
        return f"calls: {one}\n{_arguments(functions)}{SPACE_RULES}"

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
        if not self._opened(stripped):
            return None
        found = self._match(stripped, names)
        if found is not None:
            whole = self.parse(stripped, names)
            return list(whole) if whole else [found]
        at = stripped.find("to=functions.")
        partial = stripped[at + len("to=functions.") :].split("<", 1)[0].strip() if at >= 0 else ""
        matches = [name for name in names if name.startswith(partial)]
        return [(matches[0] if len(matches) == 1 else None, "")]


GENERIC = ToolCallFormat()
LLAMA3_JSON = LlamaJSONToolCalls()
HERMES = WrappedJSONToolCalls("hermes", opener="<tool_call>", closer="</tool_call>", each=True)
MISTRAL = WrappedJSONToolCalls("mistral", opener="[TOOL_CALLS]")
MISTRAL_ARGS = NamedArgsToolCalls()
PHI4 = WrappedJSONToolCalls("phi4", opener="<|tool_call|>", closer="<|/tool_call|>")
GRANITE = WrappedJSONToolCalls("granite", opener="<|tool_call|>")
DEEPSEEK = DeepSeekToolCalls()
HARMONY = HarmonyToolCalls()
