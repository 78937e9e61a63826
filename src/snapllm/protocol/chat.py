"""A chat as the prompt text its model reads: the model's chat template (Jinja) over the messages and tools.

    renderer = ChatRenderer.for_model(engine.metadata, *engine.special_tokens())
    chat = renderer.render(request)   # chat.prompt: text with the template's special tokens; chat.stop

The template is the GGUF file's own (``tokenizer.chat_template``), else the model family's
(:mod:`snapllm.protocol.chat_templates`); a model with neither serves text completions only. Templates run
in Jinja's immutable sandbox, with what Hugging Face chat templates expect: ``bos_token``, ``eos_token``,
``raise_exception``, ``strftime_now``, ``add_generation_prompt``, a ``tojson`` filter that keeps non-ASCII
text, and the ``{% generation %}`` block (rendered as its body).

A template that mentions ``tools`` gets them, and earlier tool calls and results, the way Hugging Face
templates expect. Any other gets the generic format of :mod:`snapllm.protocol.structured`: the tools
described in the system message, earlier calls as the JSON the model would have generated, and each result
as a user turn naming the call it answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from snapllm.errors import InvalidRequestError
from snapllm.protocol.chat_templates import family_template
from snapllm.protocol.requests import ChatCompletionRequest
from snapllm.protocol.structured import generic_tool_call_text, generic_tool_instructions


@dataclass(frozen=True)
class RenderedChat:
    """The prompt text (its special tokens written out: tokenize it with them parsed, and no BOS added, as
    the template writes its own) and the strings that end the answer."""

    prompt: str
    stop: tuple[str, ...]


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

    def __init__(self, template: str, *, bos_token: str, eos_token: str, stop: str) -> None:
        environment = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
        )
        environment.filters["tojson"] = _tojson
        self._template = environment.from_string(template)
        self._bos_token = bos_token
        self._eos_token = eos_token
        self._stop = stop
        self.native_tools = "tools" in template

    @classmethod
    def for_model(cls, metadata: Mapping[str, str], bos_token: str, eos_token: str) -> ChatRenderer | None:
        """The model's own template, else its family's, else None (the model has no chat format)."""
        template = metadata.get("tokenizer.chat_template")
        if template:
            return cls(template, bos_token=bos_token, eos_token=eos_token, stop=eos_token)
        fallback = family_template(metadata)
        if fallback is None:
            return None
        # The family's end of turn is both the template's end-of-sequence text and the answer's stop string.
        return cls(fallback.source, bos_token=bos_token, eos_token=fallback.stop, stop=fallback.stop)

    def render(self, request: ChatCompletionRequest) -> RenderedChat:
        """The chat as the template writes it, up to where the assistant's answer begins."""
        messages = self._messages(request)
        tools = None
        if request.calls_tools:
            functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []]
            if self.native_tools:
                tools = [{"type": "function", "function": f} for f in functions]
            else:
                instructions = generic_tool_instructions(functions, parallel=request.parallel_calls)
                if messages[0]["role"] == "system":
                    messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{instructions}"}
                else:
                    messages.insert(0, {"role": "system", "content": instructions})
        try:
            prompt = self._template.render(
                messages=messages,
                tools=tools,
                tool_choice=None,
                functions=None,
                function_call=None,
                bos_token=self._bos_token,
                eos_token=self._eos_token,
                add_generation_prompt=True,
                raise_exception=_raise_exception,
                strftime_now=_strftime_now,
            )
        except Exception as exc:  # templates raise their own errors, e.g. on an unsupported role order
            raise InvalidRequestError(
                f"the model's chat template rejected the messages: {exc}", param="messages"
            ) from None
        return RenderedChat(prompt, (self._stop,) if self._stop else ())

    def _messages(self, request: ChatCompletionRequest) -> list[dict[str, Any]]:
        """The messages as templates read them: plain text content, and tool turns as the template (or the
        generic format) expects them."""
        native = self.native_tools
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
                messages.append({"role": role, "content": m.text(), "tool_calls": calls})
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
                messages.append({"role": role, "content": m.text()})
        return messages
