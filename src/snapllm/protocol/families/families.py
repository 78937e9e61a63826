"""Model families: what a family's chat template, thinking and native tool calls look like.

    family = detect_family(template, architecture="qwen3")   # by the template; the architecture without one
    family.thinking, family.tool_calls                        # ThinkingMarkers("<think>", ...), HERMES

Everything that differs by family is declared here, one class per family in :data:`FAMILIES`: the serving
code asks the family and never branches on its name. docs/models.md lists the families. Pure: no llama.cpp.
"""

from __future__ import annotations

from typing import Any, ClassVar

from snapllm.protocol.families.reasoning import ThinkingMarkers
from snapllm.protocol.families.tool_formats import (
    DEEPSEEK,
    GENERIC,
    GRANITE,
    HARMONY,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    MISTRAL_ARGS,
    PHI4,
    ToolCallFormat,
)

THINK_TAGS = ThinkingMarkers("<think>", "</think>")
#: Qwen3's thinking: when it is on, every answer opens with it.
QWEN3_THINKING = ThinkingMarkers("<think>", "</think>", always=True)


class ModelFamily:
    """A family with no thinking and the generic JSON tool-call format (any template not matched below)."""

    name: ClassVar[str] = "generic"
    #: Text the template carries that marks the family (any one of them).
    markers: ClassVar[tuple[str, ...]] = ()
    #: Text that marks a template as another family's, though it holds this one's markers too (Qwen3's
    #: templates hold Hermes' ``<tool_call>``): each template is claimed by one family at most.
    excludes: ClassVar[tuple[str, ...]] = ()
    #: ``general.architecture`` values of the family (for a model whose GGUF has no template).
    architectures: ClassVar[tuple[str, ...]] = ()
    thinking: ClassVar[ThinkingMarkers | None] = None
    tool_calls: ClassVar[ToolCallFormat] = GENERIC
    #: Whether the model's control tokens must appear in the generated text (its output format is written
    #: in them, as gpt-oss's channels are).
    special_text: ClassVar[bool] = False
    #: Text by which a template that takes no ``tools`` shows it writes earlier calls in the family's own
    #: format ("" for none): DeepSeek-R1's templates describe no tools but write calls and results in
    #: DeepSeek's markup, so its calls are served in that format (see :meth:`writes_calls`).
    calls_shown_by: ClassVar[str] = ""

    def __init__(self, template: str = "") -> None:
        #: Whether the template switches the thinking on and off (``enable_thinking``, as Qwen3's does).
        self.thinking_switch = self.thinking is not None and "enable_thinking" in template

    @classmethod
    def matches(cls, template: str, architecture: str) -> bool:
        if template:
            return any(marker in template for marker in cls.markers) and not any(
                text in template for text in cls.excludes
            )
        return architecture in cls.architectures

    def writes_calls(self, template: str) -> bool:
        """Whether ``template`` writes earlier tool calls and their results itself, in the family's format:
        it takes ``tools``, or shows the family's call markup though it describes no tools."""
        return "tools" in template or bool(self.calls_shown_by and self.calls_shown_by in template)

    def template_kwargs(self, effort: str | None) -> dict[str, Any]:
        """Template variables that carry the request's ``reasoning_effort``: a template with a thinking
        switch gets it on unless the effort is "none" (as llama-server sets it: some templates leave the
        thinking off when the variable is missing)."""
        return {"enable_thinking": effort != "none"} if self.thinking_switch else {}

    def template_tool(self, function: dict[str, Any]) -> dict[str, Any]:
        """A tool's function (``name``, ``description``, ``parameters``, as the request gives them) as the
        family's template reads it: as it is, unless the template needs a field OpenAI leaves optional."""
        return function

    def describe(self) -> dict[str, str]:
        """What was detected, for people (``snapllm preflight --model``)."""
        return {
            "family": self.name,
            "thinking": f"{self.thinking.start}...{self.thinking.end}" if self.thinking else "none",
            "tool_calls": self.tool_calls.name,
        }


class Qwen3(ModelFamily):
    """Qwen3, SmolLM3: ``<think>`` first (switched off through ``enable_thinking``), Hermes tool calls."""

    name = "qwen3"
    markers = ("enable_thinking",)
    excludes = ("<｜Assistant｜>",)  # DeepSeek's templates switch their thinking too
    architectures = ("qwen3", "qwen3moe", "smollm3")
    thinking = QWEN3_THINKING
    tool_calls = HERMES

    @classmethod
    def matches(cls, template: str, architecture: str) -> bool:
        return super().matches(template, architecture) and (not template or "<think>" in template)


class GptOss(ModelFamily):
    """gpt-oss (harmony): thinking on the analysis channel, the answer on the final channel, calls as
    messages to ``functions.NAME``; the channels are control tokens, so they are written into the text.
    ``reasoning_effort`` goes to the template, which writes it into the system message."""

    name = "gpt-oss"
    markers = ("<|channel|>",)
    architectures = ("gpt-oss",)
    thinking = ThinkingMarkers(
        "<|channel|>analysis<|message|>",
        "<|end|>",
        close="<|end|><|start|>assistant",
        answer_headers=(
            "<|start|>assistant<|channel|>final<|message|>",
            "<|channel|>final<|message|>",
            "<|start|>assistant",
        ),
        resume="<|start|>assistant",
        answer_prefix="<|channel|>final<|message|>",
    )
    tool_calls = HARMONY
    special_text = True

    def template_tool(self, function: dict[str, Any]) -> dict[str, Any]:
        # The template writes "// " + description above each tool, and fails on a tool without one, which
        # OpenAI accepts: such a tool gets an empty description.
        return {"description": "", **function}

    def template_kwargs(self, effort: str | None) -> dict[str, Any]:
        # The template knows low, medium and high; the others are the nearest of those.
        levels = {"none": "low", "minimal": "low", "xhigh": "high"}
        return {} if effort is None else {"reasoning_effort": levels.get(effort, effort)}


class DeepSeekR1(ModelFamily):
    """DeepSeek-R1 and its distills: ``<think>`` (often opened by the template), DeepSeek's call markers."""

    name = "deepseek-r1"
    markers = ("<｜Assistant｜>",)
    thinking = THINK_TAGS
    tool_calls = DEEPSEEK
    special_text = True
    # R1's fenced arguments (V3.1's templates write calls without the fence, in a format of their own).
    calls_shown_by = "```json"


class Hermes(ModelFamily):
    """Qwen2.5, Hermes 2/3 and other ChatML templates with ``<tool_call>`` calls; thinking where the
    template writes ``<think>``."""

    name = "hermes"
    markers = ("<tool_call>",)
    excludes = ("<think>",)  # a template that thinks is Qwen3's or a thinking ChatML one
    architectures = ("qwen2",)
    tool_calls = HERMES


class ThinkingChatML(Hermes):
    """A ``<tool_call>`` template that also thinks in ``<think>`` (QwQ, Qwen3 variants without a switch)."""

    name = "hermes-thinking"
    thinking = THINK_TAGS

    @classmethod
    def matches(cls, template: str, architecture: str) -> bool:
        # Qwen3's templates switch the thinking (enable_thinking); these do not.
        return (
            "<tool_call>" in template and "<think>" in template and not Qwen3.matches(template, architecture)
        )


class Llama3(ModelFamily):
    """Llama 3.1-3.3: custom tools as ``{"name": ..., "parameters": ...}`` JSON."""

    name = "llama3"
    markers = ("<|start_header_id|>",)
    architectures = ("llama",)
    tool_calls = LLAMA3_JSON


class Mistral(ModelFamily):
    """Mistral 7B v0.3 and Nemo: ``[TOOL_CALLS]`` then the calls as one JSON list."""

    name = "mistral"
    markers = ("[TOOL_CALLS]",)
    excludes = ("[ARGS]",)
    tool_calls = MISTRAL


class MistralArgs(ModelFamily):
    """Mistral's tokenizer v11 and later (Mistral Small 3.2, Devstral, Ministral 3):
    ``[TOOL_CALLS]NAME[ARGS]{...}``."""

    name = "mistral-args"
    markers = ("[ARGS]",)
    tool_calls = MISTRAL_ARGS


class Phi4Mini(ModelFamily):
    name = "phi4-mini"
    markers = ("<|/tool_call|>",)
    tool_calls = PHI4


class Granite(ModelFamily):
    name = "granite"
    markers = ("<|start_of_role|>",)
    excludes = ("<tool_call>",)  # Granite 4's templates call tools as Hermes does
    architectures = ("granite",)
    tool_calls = GRANITE


class Gemma(ModelFamily):
    """Gemma 2 and 3: turns without a system role or native tools (the generic format)."""

    name = "gemma"
    markers = ("<start_of_turn>",)
    architectures = ("gemma", "gemma2", "gemma3")


#: Every family. A template is claimed by one of them at most (:attr:`ModelFamily.excludes`;
#: ``tests/integration/test_family_templates.py`` checks llama.cpp's whole template corpus), so their order
#: does not decide; a template none claims is the generic family's.
FAMILIES: tuple[type[ModelFamily], ...] = (
    GptOss,
    DeepSeekR1,
    Qwen3,
    ThinkingChatML,
    Hermes,
    Phi4Mini,
    Granite,
    MistralArgs,
    Mistral,
    Llama3,
    Gemma,
)


def detect_family(template: str, *, architecture: str = "") -> ModelFamily:
    """The family of a model with this chat template (``""`` for none) and ``general.architecture``."""
    architecture = architecture.lower()
    for family in FAMILIES:
        if family.matches(template, architecture):
            return family(template)
    return ModelFamily(template)
