"""A deploy's declared prompt prefixes (``SNAPLLM_PROMPT_PREFIXES``): chat requests without their last user
turn, read and rendered to the tokens whose state the engine keeps (:mod:`snapllm.engine.prefixes`).

    [{"messages": [{"role": "system", "content": "You are..."}], "tools": [...], "response_format": {...}}]

An entry's ``tools`` and ``response_format`` are compiled before the snapshot and kept: a request that
sends the same ones compiles nothing.

docs/architecture.md ("Declared prompt prefixes") says what an entry holds and where its prefix ends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from snapllm.errors import ConfigurationError

#: ``snapllm:NAME`` names prefixes snapllm ships: ``declared/NAME.json`` beside this module
#: (``snapllm:agent``, the agent function's system prompts: :mod:`snapllm.agent.prompts`).
BUNDLED = "snapllm:"
_BUNDLED_FILES = Path(__file__).parent / "declared"
#: The largest declared-prefixes file read, in bytes.
MAX_PREFIXES_BYTES = 4 * 1024 * 1024
#: The most entries one file may declare: each is a KV state in RAM and in the snapshot.
MAX_PREFIXES = 64
#: The fields an entry may have: what shapes a chat's rendered start, and the schemas compiled with it.
PREFIX_FIELDS = frozenset(
    {"messages", "tools", "tool_choice", "response_format", "reasoning_effort", "chat_template_kwargs"}
)
#: The two user turns appended to an entry: the prefix ends where they first differ.
SENTINELS = ("Hello.", "Goodbye.")


def declared_file(where: str) -> Path | None:
    """The local file a declared-prefixes source names: one snapllm ships (``snapllm:NAME``;
    :class:`ConfigurationError` when it ships none of that name) or an absolute path; None for anything
    else (a key in the model's bucket)."""
    if where.startswith(BUNDLED):
        return _bundled_file(where)
    return Path(where) if where.startswith("/") else None


def _bundled_file(where: str) -> Path:
    name = where.removeprefix(BUNDLED)
    known = sorted(path.stem for path in _BUNDLED_FILES.glob("*.json"))
    if name not in known:
        raise ConfigurationError(
            f"{where} names none of the prefixes snapllm ships ({', '.join(BUNDLED + k for k in known)})"
        )
    return _BUNDLED_FILES / f"{name}.json"


def read_prefixes(data: bytes | str, *, source: str) -> list[dict[str, Any]]:
    """The entries of a declared-prefixes file; a malformed one raises :class:`ConfigurationError`."""
    try:
        entries = json.loads(data)
    except ValueError as exc:
        raise ConfigurationError(f"{source} is not JSON: {exc}") from exc
    if not isinstance(entries, list) or len(entries) > MAX_PREFIXES:
        raise ConfigurationError(f"{source} must be a JSON array of at most {MAX_PREFIXES} chat requests")
    for index, entry in enumerate(entries):
        where = f"{source}[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("messages"), list):
            raise ConfigurationError(f"{where} must be an object with a `messages` array")
        unknown = sorted(set(entry) - PREFIX_FIELDS)
        if unknown:
            raise ConfigurationError(
                f"{where} has {', '.join(unknown)}: an entry holds only {', '.join(sorted(PREFIX_FIELDS))}"
            )
    return entries


def sentinel_bodies(entry: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """The entry as two chat requests, each ending with a different sentinel user turn."""
    return [
        {
            **entry,
            "model": model,
            "max_tokens": 1,
            "messages": [*entry["messages"], {"role": "user", "content": text}],
        }
        for text in SENTINELS
    ]


def common_prefix(first: list[int], second: list[int]) -> list[int]:
    """The tokens both lists start with."""
    common = 0
    while common < min(len(first), len(second)) and first[common] == second[common]:
        common += 1
    return first[:common]
