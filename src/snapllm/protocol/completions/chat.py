"""A chat as the prompt text its model reads: the model's Jinja chat template over the messages and tools.

    renderer = ChatRenderer.for_model(engine.metadata, *engine.special_tokens())
    chat = renderer.render(request)   # chat.prompt: text with the template's special tokens; chat.stop

docs/models.md ("Templates within bounds") says which template runs, what it is given and its bounds.
"""

from __future__ import annotations

import functools
import json
import operator
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from snapllm.errors import InvalidRequestError
from snapllm.protocol.completions.chat_templates import family_template
from snapllm.protocol.constraints.structured import generic_tool_call_text
from snapllm.protocol.families.families import ModelFamily, detect_family
from snapllm.protocol.families.tool_formats import GENERIC
from snapllm.protocol.http.edge import is_unicode
from snapllm.protocol.requests import ChatCompletionRequest

#: What one render may cost: output characters, loop iterations through ``range`` and seconds. A template
#: comes with the model, not the request; these keep a faulty or hostile one from holding the function.
MAX_RENDERED_CHARS = 2_000_000
MAX_RANGE_STEPS = 1_000_000
MAX_RENDER_SECONDS = 2.0
# Stands in for a message's content in a second render that shows where the template put each content.
_CONTENT_MARK = re.compile("\ue000(\\d+)\ue001")


@dataclass(frozen=True)
class RenderedChat:
    """The prompt text (its special tokens written out, and no BOS added, as the template writes its own)
    and the strings that end the answer.

    ``pieces`` cut the prompt into the template's markup (tokenized with control tokens parsed) and the
    messages' own text (tokenized as text: ``<|im_start|>`` written in a message stays text, so no message
    can open a turn of its own). A prompt none of whose messages hold a control token's text is one piece of
    markup."""

    prompt: str
    stop: tuple[str, ...]
    pieces: tuple[tuple[str, bool], ...] = ()


class TemplateBudget:
    """One render's allowance: ``range`` steps and time, checked as the template runs."""

    def __init__(self) -> None:
        self.steps = 0
        self.until = time.monotonic() + MAX_RENDER_SECONDS

    def check(self) -> None:
        if time.monotonic() > self.until:
            raise _TemplateTooCostly(f"it ran longer than {MAX_RENDER_SECONDS:g} s")

    def range(self, *args: int) -> Iterator[int]:
        for value in range(*args):
            self.steps += 1
            if self.steps > MAX_RANGE_STEPS:
                raise _TemplateTooCostly(f"it looped more than {MAX_RANGE_STEPS} times")
            if not self.steps % 4096:
                self.check()
            yield value


class _TemplateTooCostly(Exception):
    pass


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with repetition (``"x" * n``, ``n ** m``) bounded in size."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, op: str, left: Any, right: Any) -> Any:
        if op == "**" and isinstance(right, int) and abs(right) > 64:
            raise _TemplateTooCostly("it raised a number to a power over 64")
        if op == "*":
            for sequence, count in ((left, right), (right, left)):
                repeated = isinstance(sequence, str | list | tuple) and isinstance(count, int)
                if repeated and len(sequence) * count > MAX_RENDERED_CHARS:
                    raise _TemplateTooCostly(f"it repeated a value past {MAX_RENDERED_CHARS} items")
        return (operator.mul if op == "*" else operator.pow)(left, right)


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (marks the assistant's part for training): its body."""

    tags = frozenset({"generation"})

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _TemplateFailed(Exception):
    """A render that failed: the template refused the request, or failed on it (``error``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _TemplateMissing(jinja2.UndefinedError):
    """A template used a value the request does not hold: ``name`` (a key or an index) read from ``obj``."""

    def __init__(self, message: str, *, obj: Any, name: Any) -> None:
        super().__init__(message)
        self.obj = obj
        self.name = name


class _MissingValue(jinja2.Undefined):
    """Jinja's undefined value (the same behaviour), whose error keeps what was read and from where, so that
    a refusal names the request's field (a tool's ``description``) rather than ``'dict object'``."""

    __slots__ = ()

    def __init__(
        self, hint: str | None = None, obj: Any = jinja2.utils.missing, name: Any = None, exc: Any = None
    ) -> None:
        super().__init__(hint, obj, name, functools.partial(_TemplateMissing, obj=obj, name=name))


def _raise_exception(message: str) -> None:
    raise ValueError(message)


def _strftime_now(pattern: str) -> str:
    return datetime.now().strftime(pattern)


def _json_or_text(text: str) -> Any:
    """Tool-call arguments as the value they encode (what chat templates expect), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class ChatRenderer:
    """One chat template, compiled once, rendering requests into prompt text."""

    def __init__(
        self,
        template: str,
        *,
        bos_token: str,
        eos_token: str,
        stop: str,
        control_tokens: frozenset[str] = frozenset(),
        user_tokens: frozenset[str] = frozenset(),
    ) -> None:
        environment = _BoundedSandbox(
            loader=jinja2.BaseLoader(),
            undefined=_MissingValue,
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
        )
        environment.filters["tojson"] = _tojson
        self._template = environment.from_string(template)
        self.source = template
        # The tokens a message's text must not become: the control tokens, and the user-defined tokens that
        # are markup: those the template writes, and those shaped like control tokens (gpt-oss's harmony
        # tokens are user-defined in llama.cpp). llama.cpp turns their text into them even as plain text, so
        # a message that holds one is tokenized in pieces that cut it. Longest first, so a token that begins
        # another is not matched in its place.
        markup = control_tokens | {t for t in user_tokens if t in template or _marker_shaped(t)}
        texts = sorted(markup, key=len, reverse=True)
        self._control = re.compile("|".join(map(re.escape, texts))) if texts else None
        self._bos_token = bos_token
        self._eos_token = eos_token
        self._stop = stop
        self.native_tools = "tools" in template
        #: The template's family: what its template needs of a request beyond what OpenAI requires.
        self.family: ModelFamily = detect_family(template)
        #: Whether the template writes earlier calls and results itself, in its family's format (else they
        #: are written in the generic format); it may do so without taking tools, as DeepSeek-R1's does.
        self.native_calls = self.family.writes_calls(template)

    @classmethod
    def for_model(
        cls,
        metadata: Mapping[str, str],
        bos_token: str,
        eos_token: str,
        control_tokens: frozenset[str] = frozenset(),
        user_tokens: frozenset[str] = frozenset(),
    ) -> ChatRenderer | None:
        """The model's own template, else its family's, else None (the model has no chat format)."""
        template = metadata.get("tokenizer.chat_template")
        if template:
            return cls(
                template,
                bos_token=bos_token,
                eos_token=eos_token,
                stop=eos_token,
                control_tokens=control_tokens,
                user_tokens=user_tokens,
            )
        fallback = family_template(metadata)
        if fallback is None:
            return None
        # The family's end of turn is both the template's end-of-sequence text and the answer's stop string.
        return cls(
            fallback.source,
            bos_token=bos_token,
            eos_token=fallback.stop,
            stop=fallback.stop,
            control_tokens=control_tokens,
            user_tokens=user_tokens,
        )

    def render(
        self,
        request: ChatCompletionRequest,
        template_kwargs: Mapping[str, Any] | None = None,
        *,
        max_chars: int = MAX_RENDERED_CHARS,
    ) -> RenderedChat:
        """The chat as the template writes it, up to where the assistant's answer begins.

        ``template_kwargs`` are further template variables (the family's reasoning switch, then the request's
        ``chat_template_kwargs``); a render longer than ``max_chars`` is refused."""
        messages = self._messages(request)
        tools = None
        if request.calls_tools:
            functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []]
            if self.native_tools:
                tools = [{"type": "function", "function": self.family.template_tool(f)} for f in functions]
            else:
                # The calls' format: the family's where the template writes its calls, else the generic one.
                calls = self.family.tool_calls if self.native_calls else GENERIC
                instructions = calls.instructions(functions, parallel=request.parallel_calls)
                if messages[0]["role"] == "system":
                    messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{instructions}"}
                else:
                    messages.insert(0, {"role": "system", "content": instructions})
        variables = {**(template_kwargs or {}), "tools": tools}
        stop = (self._stop,) if self._stop else ()
        self._check_plain(variables, messages)
        try:
            prompt = self._render(messages, variables, max_chars)
            held = [i for i, m in enumerate(messages) if self._holds_control(m.get("content"))]
            if not held:
                return RenderedChat(prompt, stop, ((prompt, True),))
            marked = [
                {**m, "content": f"\ue000{i}\ue001"} if i in held else m for i, m in enumerate(messages)
            ]
            layout = self._render(marked, variables, max_chars)
        except _TemplateFailed as failed:
            raise self._refusal(failed.error, request, messages, variables, max_chars) from None
        pieces: list[tuple[str, bool]] = []
        for text, markup in _pieces(prompt, layout, messages):
            pieces += [(text, True)] if markup else self._as_text(text)
        return RenderedChat(prompt, stop, tuple(pieces))

    def _as_text(self, text: str) -> list[tuple[str, bool]]:
        """A message's text in pieces that no token's text spans whole: each marker written in it is cut
        after its first character, so no tokenizer reads it as the token."""
        assert self._control is not None
        pieces: list[tuple[str, bool]] = []
        at = 0
        for found in self._control.finditer(text):
            pieces += [(text[at : found.start() + 1], False)]
            at = found.start() + 1
        return [*pieces, (text[at:], False)]

    def _render(self, messages: list[dict[str, Any]], variables: dict[str, Any], max_chars: int) -> str:
        budget = TemplateBudget()
        out: list[str] = []
        size = 0
        # One mapping, not keywords: a variable's name never meets a parameter of Jinja's own methods.
        context = {
            **variables,
            "messages": messages,
            "tool_choice": None,
            "functions": None,
            "function_call": None,
            "bos_token": self._bos_token,
            "eos_token": self._eos_token,
            "add_generation_prompt": True,
            "raise_exception": _raise_exception,
            "strftime_now": _strftime_now,
            "range": budget.range,
        }
        try:
            for chunk in self._template.generate(context):
                size += len(chunk)
                if size > max_chars:
                    raise _TemplateTooCostly(f"it wrote more than {max_chars} characters")
                budget.check()
                out.append(chunk)
        except _TemplateTooCostly as exc:
            raise InvalidRequestError(
                f"the model's chat template cannot render this request within its limits: {exc}",
                param="messages",
            ) from None
        except Exception as exc:  # templates raise their own errors, e.g. on an unsupported role order
            raise _TemplateFailed(exc) from None
        prompt = "".join(out)
        if not is_unicode(prompt):
            # Every text of the request is Unicode (the request models check it, decoded arguments included);
            # a template can still write a surrogate of its own ("\ud83d" ~ "\ude00"), which no tokenizer
            # reads.
            raise InvalidRequestError(
                "the model's chat template wrote text that is not valid Unicode (an unpaired surrogate, "
                "\\ud800-\\udfff) for these messages",
                param="messages",
            )
        return prompt

    def _refusal(
        self,
        error: Exception,
        request: ChatCompletionRequest,
        messages: list[dict[str, Any]],
        variables: dict[str, Any],
        max_chars: int,
    ) -> InvalidRequestError:
        """The 400 of a render that failed, naming what of the request the template could not take: a field
        of a tool that the template requires (OpenAI's API leaves it optional), the request's
        ``chat_template_kwargs`` (when the template renders without them), else the messages."""
        if isinstance(error, _TemplateMissing) and isinstance(error.name, str):
            for index, tool in enumerate(variables.get("tools") or []):
                if error.obj is tool or error.obj is tool["function"]:
                    where = "" if error.obj is tool else ".function"
                    param = f"tools.{index}{where}.{error.name}"
                    return InvalidRequestError(
                        f"{param} is missing, and the model's chat template requires it in every tool",
                        param=param,
                    )
        own = set(request.chat_template_kwargs or {})
        if own:
            try:  # once more without them: a value the template cannot use (a number for a text...)
                self._render(messages, {k: v for k, v in variables.items() if k not in own}, max_chars)
            except (_TemplateFailed, InvalidRequestError):
                pass
            else:
                names = ", ".join(repr(name) for name in sorted(own))
                values = "value" if len(own) == 1 else "values"
                return InvalidRequestError(
                    f"chat_template_kwargs: the model's chat template cannot render with the {values} of "
                    f"{names} (the template failed: {error})",
                    param="chat_template_kwargs",
                )
        return InvalidRequestError(
            f"the model's chat template rejected the messages: {error}", param="messages"
        )

    def _holds_control(self, value: Any) -> bool:
        return (
            self._control is not None and isinstance(value, str) and self._control.search(value) is not None
        )

    def _check_plain(self, variables: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """Refuse a control token's text where the template writes it without a content of its own: in
        tools, tool calls and template variables (only a message's content is tokenized apart)."""
        if self._control is None:
            return
        others = [variables, [{k: v for k, v in m.items() if k != "content"} for m in messages]]
        found = self._control.search(json.dumps(others, ensure_ascii=False, default=str))
        if found:
            raise InvalidRequestError(
                f"the request writes the model's control token {found.group()!r} outside a message's content "
                "(in tools, tool calls or chat_template_kwargs), where it would be read as the token",
                param="messages",
            )

    def _messages(self, request: ChatCompletionRequest) -> list[dict[str, Any]]:
        """The messages as templates read them: plain text content, and tool turns as the template (or the
        generic format) expects them."""
        native = self.native_calls
        names = {call.id: call.function.name for m in request.messages for call in m.tool_calls or []}
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            role = "system" if m.role == "developer" else m.role
            if m.tool_calls and native:
                calls = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": _json_or_text(call.function.arguments),
                        },
                    }
                    for call in m.tool_calls
                ]
                messages.append({"role": role, "content": m.text(), "tool_calls": calls, **_thought(m)})
            elif m.tool_calls:
                text = generic_tool_call_text([(c.function.name, c.function.arguments) for c in m.tool_calls])
                messages.append({"role": role, "content": (m.text() + "\n" + text).lstrip("\n")})
            elif m.role == "tool" and native:
                messages.append({"role": "tool", "content": m.text(), "tool_call_id": m.tool_call_id})
            elif m.role == "tool":
                name = names.get(m.tool_call_id or "", "a function")
                content = f"Result of the call {m.tool_call_id} to {name}: {m.text()}"
                messages.append({"role": "user", "content": content})
            else:
                messages.append({"role": role, "content": m.text(), **_thought(m)})
        return messages


def _marker_shaped(text: str) -> bool:
    """Whether a token's text is written like a control token (``<|constrain|>``, ``<｜User｜>``)."""
    return (text.startswith("<|") and text.endswith("|>")) or (
        text.startswith("<｜") and text.endswith("｜>")
    )


def _thought(message: Any) -> dict[str, str]:
    """An earlier answer's thinking, sent back, under the names templates read it by (Qwen3's
    ``reasoning_content``, gpt-oss's ``thinking``)."""
    thought = getattr(message, "reasoning_content", None)
    return {"reasoning_content": thought, "thinking": thought} if isinstance(thought, str) else {}


def _pieces(prompt: str, layout: str, messages: list[dict[str, Any]]) -> tuple[tuple[str, bool], ...]:
    """The prompt cut into markup and message text, from a render (``layout``) with marks in place of the
    messages that hold a control token's text: each mark is that message's content as the template wrote it
    (as is, or trimmed)."""
    parts = _CONTENT_MARK.split(layout)
    pieces: list[tuple[str, bool]] = []
    at = 0
    for index in range(0, len(parts), 2):
        markup = parts[index]
        if not prompt.startswith(markup, at):
            break
        pieces.append((markup, True))
        at += len(markup)
        if index + 1 == len(parts):
            if at == len(prompt):
                return tuple(piece for piece in pieces if piece[0])
            break
        content = str(messages[int(parts[index + 1])]["content"])
        following = parts[index + 2]
        forms = (content, content.strip(), content.lstrip(), content.rstrip())
        written = next((f for f in forms if prompt.startswith(f + following, at)), None)
        if written is None:
            break
        pieces.append((written, False))
        at += len(written)
    raise InvalidRequestError(
        "a message holds the text of one of the model's control tokens, and the chat template transforms "
        "that message in a way that keeps its text from being told apart from the template's markup",
        param="messages",
    )
