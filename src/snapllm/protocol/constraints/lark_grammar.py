"""Pieces of the Lark grammars llguidance enforces: literal text, the model's special tokens, spacing.

    specials = marker_tokens(markers, control=..., user=..., tokenize=...)   # {"<|channel|>": 200005}
    spelled("<|channel|>final", specials)        # '<[200005]> "final"'
    spelled("<tool_call>", {})                   # '"<tool_call>"'

docs/models.md says why a marker is spelled as its special token. Pure: no llama.cpp.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping

#: Special tokens by text, with their ids: the model's tokens that llguidance matches only as tokens.
Specials = Mapping[str, int]

#: What may stand around a call's envelope and between the keys of its JSON: nothing, a space or a tab, or
#: a newline and an indentation of the envelope's own depth (4 at most; the JSON inside has
#: :data:`snapllm.protocol.constraints.compiled_schema.WHITESPACE`), so ``{"name": "f"}``, ``{"name":"f"}``
#: and an indented object are all reachable, and a weak model cannot spend its tokens on spaces.
SPACE_RULES = "WS: /[ \\t]|\\r?\\n[ \\t]{0,4}/\n"
#: Where spacing may stand: one optional gap.
SPACE = "WS?"

_REGEX_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$/])")


def string(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def regex_text(text: str) -> str:
    """``text`` as literal text inside a Lark ``/regex/`` (Rust's syntax: only its operators escaped)."""
    escaped = _REGEX_SPECIAL.sub(r"\\\1", text)
    return escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def marker_tokens(
    markers: Iterable[str],
    *,
    control: Collection[str],
    user: Collection[str],
    tokenize: Callable[[str], list[int]],
) -> dict[str, int]:
    """The model's special tokens (text to id) that occur in ``markers``: its ``control`` tokens, and its
    ``user``-defined ones written as ``<...>``, which llguidance's tokenizer over llama.cpp's vocabulary
    (``llguidance.llamacpp``) marks special as well. ``tokenize`` gives a text's ids, special tokens
    parsed."""
    texts = [marker for marker in markers if marker]
    found: dict[str, int] = {}
    for token in [*control, *(t for t in user if t.startswith("<") and t.endswith(">"))]:
        if token and any(token in text for text in texts):
            ids = tokenize(token)
            if len(ids) == 1:
                found[token] = ids[0]
    return found


def spelled(text: str, specials: Specials) -> str:
    """``text`` as a Lark sequence: each special token in it as the token (``<[id]>``), the rest as text."""
    if not text:
        return '""'
    found = sorted((token for token in specials if token in text), key=len, reverse=True)
    if not found:
        return string(text)
    pattern = re.compile("|".join(re.escape(token) for token in found))
    parts, at = [], 0
    for match in pattern.finditer(text):
        if match.start() > at:
            parts.append(string(text[at : match.start()]))
        parts.append(f"<[{specials[match.group()]}]>")
        at = match.end()
    if at < len(text):
        parts.append(string(text[at:]))
    return " ".join(parts)


def is_token(text: str, specials: Specials) -> bool:
    """Whether ``text`` is one special token of the model (text written freely can never contain it)."""
    return text in specials


def text_until(marker: str, specials: Specials, terminal: str) -> tuple[str, str]:
    """Any text up to and with the first ``marker``: a Lark expression, and the terminal ``terminal`` it
    uses. Where the marker is a special token, text cannot hold it: any text, then the token."""
    if is_token(marker, specials):
        return f"{terminal}? {spelled(marker, specials)}", f"{terminal}: /(.|\\n)+/\n"
    body = regex_text(marker)
    return terminal, f"{terminal}: /(.|\\n)*{body}/ & ~/(.|\\n)*{body}(.|\\n)+/\n"


def text_without(markers: Collection[str], specials: Specials, terminal: str, *, first: str = "") -> str:
    """A Lark terminal ``terminal``: any text (at least one character) that holds none of ``markers`` and,
    with ``first``, does not start with one of its characters (so its first byte tells it from a branch
    that starts with them: llguidance's lexer does not go back)."""
    texts = [regex_text(m) for m in markers if m and not is_token(m, specials)]
    start = f"[^{regex_text(''.join(sorted(set(first))))}]" if first else "(.|\\n)"
    any_text = f"/{start}(.|\\n)*/"
    if not texts:
        return f"{terminal}: {any_text}\n"
    return f"{terminal}: {any_text} & ~/(.|\\n)*({'|'.join(texts)})(.|\\n)*/\n"
