"""Texts drawn from a grammar by llama.cpp's own grammar sampler, over a real model's vocabulary.

No model is evaluated: each step gives every token a random logit, lets llama.cpp's grammar sampler
reject the tokens the grammar forbids, and picks one of the rest (the end of generation as soon as the
grammar allows it; tokens that close a string, an object or an array more often than others). What comes
out is what the grammar lets a model generate, so checking it checks the grammar::

    for text in GrammarSampler(llama).texts(grammar, count=5, seed=1):
        jsonschema.validate(json.loads(text), schema)

and :meth:`GrammarSampler.allows` forces one given text through the grammar, token by token, as a model
that wanted to write exactly it would: whether llama.cpp lets the whole text out and then the end.
"""

from __future__ import annotations

import codecs
import ctypes
from collections.abc import Iterator

import llama_cpp.llama_cpp as low
import numpy as np
from llama_cpp import Llama

_CLOSING = ('"', "}", "]", ",")


class GrammarSampler:
    def __init__(self, llama: Llama) -> None:
        self._llama = llama
        self._vocab = llama._model.vocab
        self._size = int(low.llama_vocab_n_tokens(self._vocab))
        self._eos = int(llama.token_eos())
        self._bytes = [llama.detokenize([token]) for token in range(self._size)]
        pieces = [data.decode("utf-8", errors="replace") for data in self._bytes]
        self._bias = np.array(
            [2.0 if any(c in p for c in _CLOSING) else 0.0 for p in pieces], dtype=np.float32
        )
        self._short = np.array([-0.3 * len(p) for p in pieces], dtype=np.float32)

    def accepts(self, grammar: str) -> bool:
        """Whether llama.cpp parses ``grammar`` (rule ``root``)."""
        sampler = low.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
        if not sampler:
            return False
        low.llama_sampler_free(sampler)
        return True

    def allows(self, grammar: str, text: str) -> bool:
        """Whether the grammar lets a model generate exactly ``text`` (each of its tokens, then the end)."""
        sampler = low.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
        assert sampler, "llama.cpp refused the grammar"
        one = (low.llama_token_data * 1)()
        try:
            for token in [*self._llama.tokenize(text.encode(), add_bos=False, special=False), self._eos]:
                one[0].id, one[0].logit, one[0].p = token, 0.0, 0.0
                candidates = low.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
                low.llama_sampler_apply(sampler, ctypes.byref(candidates))
                if not np.isfinite(one[0].logit):
                    return False
                if token != self._eos:
                    low.llama_sampler_accept(sampler, token)
            return True
        finally:
            low.llama_sampler_free(sampler)

    def texts(self, grammar: str, *, count: int, seed: int, max_tokens: int = 200) -> Iterator[str]:
        """Up to ``count`` complete texts of ``grammar`` (a draw that reaches ``max_tokens`` is dropped)."""
        rng = np.random.default_rng(seed)
        for _ in range(count):
            text = self._draw(grammar, rng, max_tokens)
            if text is not None:
                yield text

    def _draw(self, grammar: str, rng: np.random.Generator, max_tokens: int) -> str | None:
        sampler = low.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
        assert sampler, "llama.cpp refused the grammar"
        data = (low.llama_token_data * self._size)()
        view = np.frombuffer(
            data, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        )
        pieces: list[int] = []
        # Strict, as a JSON reader reads the text the model writes.
        utf8 = codecs.getincrementaldecoder("utf-8")()
        try:
            for _ in range(max_tokens):
                view["id"] = np.arange(self._size, dtype=np.int32)
                view["logit"] = rng.normal(size=self._size).astype(np.float32) + self._bias + self._short
                view["p"] = 0.0
                candidates = low.llama_token_data_array(data=data, size=self._size, selected=-1, sorted=False)
                low.llama_sampler_apply(sampler, ctypes.byref(candidates))
                allowed = np.isfinite(view["logit"][: candidates.size])
                ids = view["id"][: candidates.size][allowed]
                if self._eos in ids:
                    return self._llama.detokenize(pieces).decode("utf-8")
                if len(ids) == 0:
                    raise AssertionError("the grammar allows no token and no end")
                logits = view["logit"][: candidates.size][allowed]
                token = self._pick(ids, logits, utf8)
                low.llama_sampler_accept(sampler, token)
                pieces.append(token)
            return None
        finally:
            low.llama_sampler_free(sampler)

    def _pick(self, ids: np.ndarray, logits: np.ndarray, utf8: codecs.IncrementalDecoder) -> int:
        """The allowed token with the highest logit whose bytes keep the text valid UTF-8. llama.cpp's
        grammar checks a character's length and continuation bytes, not overlong forms or surrogates
        (``E0 80 80``, ``ED A0 80``), which a random draw over byte tokens can reach and a model does not
        write."""
        best = int(np.argmax(logits))
        for index in (best, *(int(i) for i in np.argsort(-logits, kind="stable") if i != best)):
            token = int(ids[index])
            state = utf8.getstate()
            try:
                utf8.decode(self._bytes[token])
                return token
            except UnicodeDecodeError:
                utf8.setstate(state)
        raise AssertionError("every token the grammar allows breaks UTF-8")
