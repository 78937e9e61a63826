"""A Hugging Face ``tokenizer.json`` as the vocabulary llama.cpp reads from a GGUF file.

It writes what llama.cpp's converter (``convert_hf_to_gguf.py``) writes for the same tokenizer, byte-level
BPE (``"gpt2"``) or SentencePiece-style BPE (``"llama"``): docs/testing.md has the token types and scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf


@dataclass(frozen=True)
class Vocabulary:
    """Every token's text and type by id, with the merges (BPE) or scores (SentencePiece)."""

    model: str
    tokens: list[str]
    types: list[int]
    merges: list[str]
    scores: list[float]

    def id_of(self, text: str) -> int:
        """The id of the token whose text is ``text``."""
        return self.tokens.index(text)


def _looks_special(text: str) -> bool:
    # What the converter's does_token_look_special() counts as a control token beyond the `special` flag.
    return (
        (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<｜") and text.endswith("｜>"))
        or (text.startswith("<unused") and text.endswith(">"))
        or text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
    )


def _merge_text(merge: Any) -> str:
    # tokenizer.json writes a merge as "a b" (older) or ["a", "b"] (newer); GGUF stores "a b".
    return merge if isinstance(merge, str) else " ".join(merge)


def read_vocabulary(tokenizer_json: Path, model: str) -> Vocabulary:
    """The vocabulary of ``tokenizer_json`` for a GGUF tokenizer ``model`` (``"gpt2"`` or ``"llama"``)."""
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    bpe = spec["model"]
    if bpe["type"] != "BPE":
        raise ValueError(f"{tokenizer_json}: a {bpe['type']} tokenizer, not BPE")
    by_id: dict[int, str] = {index: text for text, index in bpe["vocab"].items()}
    added = {entry["id"]: entry for entry in spec["added_tokens"]}
    for index, entry in added.items():
        by_id[index] = entry["content"]
    size = max(by_id) + 1
    tokens: list[str] = []
    types: list[int] = []
    for index in range(size):
        text = by_id.get(index)
        if text is None:
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        entry = added.get(index)
        if entry is not None and (entry["special"] or _looks_special(text)):
            kind = gguf.TokenType.CONTROL
        elif entry is not None:
            # As the converter does: a user-defined token's "▁" is the space it stands for.
            text = text.replace("\u2581", " ")
            kind = gguf.TokenType.USER_DEFINED
        elif model == "llama" and text == bpe.get("unk_token"):
            kind = gguf.TokenType.UNKNOWN
        elif model == "llama" and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            kind = gguf.TokenType.BYTE
        else:
            kind = gguf.TokenType.NORMAL
        tokens.append(text)
        types.append(kind)
    merges = [_merge_text(m) for m in bpe["merges"]]
    if model == "gpt2":
        return Vocabulary(model, tokens, [int(t) for t in types], merges, [])
    # SentencePiece: a piece scores minus the rank of the first merge that makes it; unmerged pieces 0.
    rank: dict[str, int] = {}
    for position, merge in enumerate(bpe["merges"]):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        rank.setdefault(left + right, position)
    # Added tokens score -1000, as the converter gives them (they are matched whole, never merged into).
    scores = [
        -1000.0 if index in added else -float(rank[text] + 1) if text in rank else 0.0
        for index, text in enumerate(tokens)
    ]
    return Vocabulary(model, tokens, [int(t) for t in types], [], scores)


def write_vocabulary(writer: gguf.GGUFWriter, vocabulary: Vocabulary, pre: str | None) -> None:
    """The vocabulary's GGUF keys (the special ids and chat template are the caller's)."""
    writer.add_tokenizer_model(vocabulary.model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(vocabulary.tokens)
    writer.add_token_types(vocabulary.types)
    if vocabulary.merges:
        writer.add_token_merges(vocabulary.merges)
    if vocabulary.scores:
        writer.add_token_scores(vocabulary.scores)
