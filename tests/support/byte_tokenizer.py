"""A byte-level vocabulary with special tokens, for checking llguidance grammars without a model.

Every byte is a token, and each special token (``<tool_call>``, ``<|channel|>``...) is one more, marked
special as llguidance's tokenizer over llama.cpp's vocabulary marks a control token::

    vocab = ByteVocabulary(["<tool_call>", "</tool_call>"])
    vocab.allows(grammar, "<tool_call>\\n{...}\\n</tool_call>")   # the specials' texts become their tokens
    vocab.specials                                               # {"<tool_call>": 256, ...}: for the grammar

A text is written with the fewest tokens llguidance may see it in: its special tokens as tokens, every
other character byte by byte, so a grammar that allows the text allows every tokenization of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance


class _Vocabulary:
    """What ``llguidance.TokenizerWrapper`` reads: each token's bytes, the end token, a tokenize function."""

    def __init__(self, specials: Sequence[str]) -> None:
        self.tokens = (
            [bytes([b]) for b in range(256)] + [b"\xff" + s.encode() for s in specials] + [b"\xff<eos>"]
        )
        self.eos_token_id = len(self.tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = list(range(256, len(self.tokens)))

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


class ByteVocabulary:
    def __init__(self, specials: Sequence[str] = ()) -> None:
        self._vocabulary = _Vocabulary(specials)
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(self._vocabulary))
        #: The special tokens by text, with their ids (what a grammar is given).
        self.specials = {text: 256 + index for index, text in enumerate(specials)}
        self.eos = self._vocabulary.eos_token_id

    def ids(self, text: str) -> list[int]:
        """``text``'s tokens: each special token's text as that token, the rest byte by byte."""
        ids: list[int] = []
        at = 0
        ordered = sorted(self.specials, key=len, reverse=True)
        while at < len(text):
            special = next((s for s in ordered if text.startswith(s, at)), None)
            if special is not None:
                ids.append(self.specials[special])
                at += len(special)
            else:
                ids.extend(text[at].encode())
                at += 1
        return ids

    def matcher(self, grammar: str) -> llguidance.LLMatcher:
        """A matcher of ``grammar`` (a llguidance grammar string); AssertionError if it does not compile."""
        error = llguidance.LLMatcher.validate_grammar(grammar, self.tokenizer)
        assert not error, error
        return llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)

    def allows(self, grammar: str, text: str) -> bool:
        """Whether the grammar lets a model write exactly ``text`` and then end."""
        matcher = self.matcher(grammar)
        return matcher.consume_tokens(self.ids(text)) and matcher.is_accepting()

    def allows_prefix(self, grammar: str, text: str) -> bool:
        """Whether the grammar lets a model write ``text`` (and maybe more)."""
        return self.matcher(grammar).consume_tokens(self.ids(text))
