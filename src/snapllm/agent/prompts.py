"""The agent's system prompts, and the prompt prefixes its runs share.

Every request the agent sends starts with a system message that depends only on the deployment's tools, so
an inference function can evaluate those starts before its snapshot (``SNAPLLM_PROMPT_PREFIXES``).
:func:`declared_prefixes` lists them; ``snapllm:agent`` (``snapllm/protocol/declared/agent.json``) is that
list for the built-in tools, which the template declares by default.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PLAN = "You are a careful assistant. Plan the tool calls that gather what the task needs."
CALL = "You carry out a plan by calling tools, one step at a time."
SUMMARY = "You summarize text in one short sentence."
ANSWER = "You are a concise assistant. Answer in two or three sentences, from the notes."


def plan_system(tools: Iterable[tuple[str, str]]) -> str:
    """The plan's system message: :data:`PLAN` and each tool's ``(name, description)`` as a line."""
    listed = "\n".join(f"- {name}: {description}" for name, description in tools)
    return f"{PLAN}\nTools:\n{listed}"


def declared_prefixes(tools: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The chat starts the agent's requests share, as a declared-prefixes file holds them: the plan's (with
    ``tools``, each ``(name, description)``), the summary tool's and the answer's."""
    return [
        {"messages": [{"role": "system", "content": system}]}
        for system in (plan_system(tools), SUMMARY, ANSWER)
    ]
