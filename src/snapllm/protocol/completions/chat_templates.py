"""Chat templates for models whose GGUF file carries none, chosen by the model's family.

    template = family_template({"general.architecture": "gemma3"})
    template.name, template.stop      # "gemma-turns", "<end_of_turn>"

docs/openai-surface.md ("Models without a chat template") says which families have one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ChatTemplate:
    """A named chat template, and the text that ends a turn (the answer's stop string)."""

    name: str
    source: str
    stop: str


# Gemma's turns: "<start_of_turn>user" or "<start_of_turn>model", a newline, the text, "<end_of_turn>".
# Gemma has no system role: system (and developer) text goes at the start of the next user turn, and
# system text with no user turn after it becomes a user turn of its own before the answer.
GEMMA_TURNS = ChatTemplate(
    name="gemma-turns",
    stop="<end_of_turn>",
    source=r"""{{- bos_token -}}
{%- set pending = namespace(system="") -%}
{%- for message in messages -%}
  {%- if message["role"] in ("system", "developer") -%}
    {%- set pending.system = pending.system + (message["content"] | trim) + "\n\n" -%}
  {%- elif message["role"] == "assistant" -%}
    {{- "<start_of_turn>model\n" + (message["content"] | trim) + "<end_of_turn>\n" -}}
  {%- else -%}
    {{- "<start_of_turn>user\n" + pending.system + (message["content"] | trim) + "<end_of_turn>\n" -}}
    {%- set pending.system = "" -%}
  {%- endif -%}
{%- endfor -%}
{%- if pending.system -%}
  {{- "<start_of_turn>user\n" + (pending.system | trim) + "<end_of_turn>\n" -}}
{%- endif -%}
{%- if add_generation_prompt -%}
  {{- "<start_of_turn>model\n" -}}
{%- endif -%}""",
)

#: Each family's template by ``general.architecture``, for a GGUF without its own.
FAMILY_TEMPLATES: dict[str, ChatTemplate] = {
    "gemma": GEMMA_TURNS,
    "gemma2": GEMMA_TURNS,
    "gemma3": GEMMA_TURNS,
}


def family_template(metadata: Mapping[str, str]) -> ChatTemplate | None:
    """The template of the model's family (``general.architecture``), or None for a family without one
    here: such a model serves text completions only."""
    return FAMILY_TEMPLATES.get(str(metadata.get("general.architecture", "")).lower())
