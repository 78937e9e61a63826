"""Texts drawn from a grammar by the engine's own constraint (llguidance's matcher), over a real model's
vocabulary.

No model is evaluated: each step gives every token a random logit, lets the matcher's mask reject the tokens
the grammar forbids, and picks one of the rest (the end of generation as soon as the grammar allows it;
tokens that close a string, an object or an array more often than others). What comes out is what the
grammar lets a model generate, so checking it checks the grammar::

    for text in GrammarSampler(llama).texts(grammar, count=5, seed=1):
        jsonschema.validate(json.loads(text), schema)

and :meth:`GrammarSampler.allows` forces one given text through the grammar, token by token, as a model
that wanted to write exactly it would: whether the matcher lets the whole text out and then the end.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator

import numpy as np
from llama_cpp import Llama

from snapllm.engine.constraint import Constraint, vocabulary_tokenizer

_CLOSING = ('"', "}", "]", ",")


class GrammarSampler:
    def __init__(self, llama: Llama) -> None:
        self._llama = llama
        self._tokenizer = vocabulary_tokenizer(llama)
        self._size = int(llama.n_vocab())
        self._eos = int(llama.token_eos())
        self._bytes = [llama.detokenize([token]) for token in range(self._size)]
        pieces = [data.decode("utf-8", errors="replace") for data in self._bytes]
        self._bias = np.array(
            [2.0 if any(c in p for c in _CLOSING) else 0.0 for p in pieces], dtype=np.float32
        )
        self._short = np.array([-0.3 * len(p) for p in pieces], dtype=np.float32)

    def accepts(self, grammar: str) -> bool:
        """Whether the engine compiles ``grammar`` within its bounds."""
        try:
            Constraint(self._tokenizer, grammar)
        except ValueError:
            return False
        return True

    def allows(self, grammar: str, text: str) -> bool:
        """Whether the grammar lets a model generate exactly ``text`` (each of its tokens, then the end)."""
        constraint = Constraint(self._tokenizer, grammar)
        for token in [*self._llama.tokenize(text.encode(), add_bos=False, special=False), self._eos]:
            if not constraint.allows(token):
                return False
            if token != self._eos:
                constraint.accept(token)
        return True

    def texts(self, grammar: str, *, count: int, seed: int, max_tokens: int = 200) -> Iterator[str]:
        """Up to ``count`` complete texts of ``grammar`` (a draw that reaches ``max_tokens`` is dropped)."""
        rng = np.random.default_rng(seed)
        for _ in range(count):
            text = self._draw(grammar, rng, max_tokens)
            if text is not None:
                yield text

    def _draw(self, grammar: str, rng: np.random.Generator, max_tokens: int) -> str | None:
        constraint = Constraint(self._tokenizer, grammar)
        pieces: list[int] = []
        # Strict, as a JSON reader reads the text the model writes.
        utf8 = codecs.getincrementaldecoder("utf-8")()
        for _ in range(max_tokens):
            allowed = constraint.allowed()
            if allowed[self._eos]:
                return self._llama.detokenize(pieces).decode("utf-8")
            ids = np.flatnonzero(allowed)
            if len(ids) == 0:
                raise AssertionError("the grammar allows no token and no end")
            logits = (rng.normal(size=self._size).astype(np.float32) + self._bias + self._short)[ids]
            token = self._pick(ids, logits, utf8)
            constraint.accept(token)
            pieces.append(token)
        return None

    def _pick(self, ids: np.ndarray, logits: np.ndarray, utf8: codecs.IncrementalDecoder) -> int:
        """The allowed token with the highest logit whose bytes keep the text valid UTF-8 (a token may end
        inside a character: the matcher allows it when a later token can complete it)."""
        best = int(np.argmax(logits))
        if self._keeps_utf8(int(ids[best]), utf8):
            return int(ids[best])
        # Rarely reached: the rest in order, sorted only now (a sort of the whole vocabulary each step
        # cost more than the matcher's masks).
        for index in np.argsort(-logits, kind="stable"):
            if index != best and self._keeps_utf8(int(ids[index]), utf8):
                return int(ids[index])
        raise AssertionError("every token the grammar allows breaks UTF-8")

    def _keeps_utf8(self, token: int, utf8: codecs.IncrementalDecoder) -> bool:
        """Whether ``token``'s bytes keep the text valid UTF-8; if so, ``utf8`` has taken them."""
        state = utf8.getstate()
        try:
            utf8.decode(self._bytes[token])
        except UnicodeDecodeError:
            utf8.setstate(state)
            return False
        return True
