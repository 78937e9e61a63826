"""The constraint engine: llguidance's matcher over llama.cpp's vocabulary, with bounded cost.

    tokenizer = vocabulary_tokenizer(llama)      # once per loaded model (before the snapshot)
    constraint = Constraint(tokenizer, grammar)  # per request; ValueError for a grammar it refuses
    constraint.allows(token), constraint.allowed()   # one token; the mask, only when the pick is refused

How it is checked, and what :data:`LIMITS` caps: docs/decoding.md ("The constraint engine", "Bounds").
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import llama_cpp.llama_cpp as low_level
import llguidance
import llguidance.numpy
import numpy as np
from llama_cpp import Llama
from llguidance.llamacpp import lltokenizer_from_vocab

from snapllm.errors import UnsupportedParameterError

#: What one matcher may cost. The fuels are llguidance's units of work (about 50k a millisecond to build
#: a lexer, 14k a millisecond while computing a mask, 20k Earley items a millisecond), so a grammar's lexer
#: builds in 20 ms at most and one mask step does at most about 4 ms of lexer work and 0.5 ms of parsing (a
#: JSON schema's masks take 0.05-1 ms on SmolLM2's 49,152 tokens). A lexer state takes 1-2 kB: 20,000 of
#: them keep a request's lexer under 40 MB. ``verbose_errors`` off: an error names the limit, not the
#: grammar's internals (which hold the request's schema).
LIMITS = llguidance.LLParserLimits(
    max_items_in_row=2_000,
    initial_lexer_fuel=1_000_000,
    step_lexer_fuel=50_000,
    step_max_items=10_000,
    max_lexer_states=20_000,
    max_grammar_size=200_000,
    verbose_errors=False,
)
#: What one mask costs at most. The fuel bounds its work, not its time: the costliest grammars measured (1,500
#: regular expressions alive at once, a lexer whose states multiply with every letter) took 30-55 ms for a
#: mask on a busy 2-core host before running out of fuel, at about a tenth of llguidance's stated rate.
MASK_TIME_BOUND_S = 0.1
#: How many grammars a decoder keeps compiled, for requests to copy. A matcher of the largest real-world
#: schemas holds 5-30 MB of grammar and lexer, which its copies share (about 0.3 MB each); :data:`LIMITS`
#: caps one at about 40 MB of lexer states, so eight hold 320 MB at the very most.
COMPILED_GRAMMARS = 8
#: The tokens tried, in order, to end a structured answer soonest (:meth:`Constraint.closing`): outside a
#: JSON string, closing its containers first, then the comma that ends a value (a number would otherwise
#: grow), then the shortest values; inside one, its closing quote, then a character for a string that must
#: grow. Each is tried where the model's vocabulary has it as one token.
CLOSING_OUTSIDE = ("}", "]", ",", "0", '""', "null", "false", "[]", "{}", '"', "[", "{", ":", " ")
CLOSING_INSIDE = ('"', "a", "0")
#: The stack a grammar compiles on. llguidance walks nested rules recursively: 3,000 nested rules overflow the
#: main thread's 8 MiB and kill the process (SIGSEGV); 256 MiB holds about 100,000, more than a request's
#: size limits let a grammar nest. Only the pages a compile touches are ever backed by memory.
COMPILE_STACK_BYTES = 256 * 1024 * 1024


def vocabulary_tokenizer(llama: Llama) -> llguidance.LLTokenizer:
    """llguidance's view of ``llama``'s vocabulary: every token's bytes (control tokens marked as special),
    and every end-of-generation token as an end the grammar allows once it is complete. The thread grammars
    compile on starts here too, at load."""
    vocab = llama._model.vocab
    n_vocab = int(low_level.llama_vocab_n_tokens(vocab))
    ends = [token for token in range(n_vocab) if low_level.llama_vocab_is_eog(vocab, token)]
    _compiler()  # started at load too, before a snapshot
    with warnings.catch_warnings():
        # It reads each token's attributes through a binding llama-cpp-python marks deprecated: one warning
        # per token otherwise.
        warnings.simplefilter("ignore", DeprecationWarning)
        return lltokenizer_from_vocab(vocab, n_vocab=int(llama.n_vocab()), eos_token=ends or None)


@dataclass
class Compiles:
    """How many grammars were really compiled over a vocabulary in this process (a copy is not one)."""

    count: int = 0


COMPILES = Compiles()


def _compiled(tokenizer: llguidance.LLTokenizer, grammar: str) -> llguidance.LLMatcher:
    """``grammar``'s matcher, compiled on the compile thread (its stack :data:`COMPILE_STACK_BYTES`)."""
    COMPILES.count += 1
    return _compiler().submit(llguidance.LLMatcher, tokenizer, grammar, limits=LIMITS, log_level=0).result()


_COMPILER: list[ThreadPoolExecutor] = []
_COMPILER_LOCK = threading.Lock()


def _forget_compiler() -> None:
    # A forked process (a restored environment of the local stack) has none of its parent's threads: the
    # executor it inherited would wait forever for its thread. The child starts its own at first use.
    global _COMPILER_LOCK
    _COMPILER.clear()
    _COMPILER_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_compiler)


def start_grammar_thread() -> None:
    """Start the compile thread now, so that no request waits for it."""
    _compiler()


def stop_grammar_thread() -> None:
    """Stop the compile thread (:func:`_compiler` starts it again): a snapshot then holds no thread, and the
    local stack's restore forks a process of one thread."""
    with _COMPILER_LOCK:
        if _COMPILER:
            _COMPILER.pop().shutdown(wait=True)


def _compiler() -> ThreadPoolExecutor:
    """The one thread grammars compile on, started on first use with the deep stack (a thread a request
    would cost 1-10 ms to start)."""
    with _COMPILER_LOCK:
        if not _COMPILER:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-compile")
            # The stack size is the process's setting for the next thread started: the executor starts its
            # thread at the first submit.
            previous = threading.stack_size(COMPILE_STACK_BYTES)
            try:
                executor.submit(int).result()
            finally:
                threading.stack_size(previous)
            _COMPILER.append(executor)
        return _COMPILER[0]


class Constraint:
    """One request's matcher: which tokens the grammar allows next, and the tokens it has taken."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str) -> None:
        self._tokenizer = tokenizer
        self._matcher = _compiled(tokenizer, grammar)
        if self._matcher.is_error():
            raise ValueError(f"the grammar does not compile: {self._matcher.get_error()}")
        self._closers = (
            _single_tokens(tokenizer, CLOSING_OUTSIDE),
            _single_tokens(tokenizer, CLOSING_INSIDE),
        )
        self._start()

    def _start(self) -> None:
        self._bitmask = llguidance.numpy.allocate_token_bitmask(1, self._tokenizer.vocab_size)
        self._n_vocab = self._tokenizer.vocab_size
        self._ends = frozenset(self._tokenizer.eos_tokens)
        #: The tokens taken, and whether the text of the first ``_scanned`` of them ends inside a JSON string
        #: (and after a backslash in it): read only when an end is asked for (:meth:`closing`).
        self._taken: list[int] = []
        self._scanned = 0
        self._in_string = self._escaped = False
        #: Masks computed (a token the pick broke the grammar with, or every step when checking eagerly).
        self.masks = 0
        #: The longest mask took this long (seconds).
        self.longest_mask_s = 0.0
        #: Seconds spent in this matcher: its checks, its masks and the tokens it took.
        self.seconds = 0.0

    def fresh(self) -> Constraint:
        """A matcher of the same grammar at its start, without compiling it again (a copy of this one's
        parser, which shares the compiled grammar and lexer: 0.02-4 ms against 1-200 ms for a compile)."""
        copy = object.__new__(Constraint)
        copy._tokenizer = self._tokenizer
        copy._matcher = self._matcher.deep_copy()
        copy._closers = self._closers
        copy._start()
        return copy

    def allows(self, token: int) -> bool:
        """Whether the grammar allows ``token`` next (an end of generation once it is complete)."""
        started = time.perf_counter()
        # The matcher validates text tokens only; its mask allows an end when complete. Where the grammar
        # forces what comes next (a JSON key), its mask allows the forced tokens alone, though the same
        # bytes in other tokens validate ("a" then "ge" for "age"): the mask's answer is the one kept.
        if token in self._ends:
            allowed = self._matcher.is_accepting()
        else:
            allowed = self._matcher.validate_tokens([token]) == 1
            if allowed:
                forced = self._matcher.compute_ff_tokens()
                allowed = not forced or forced[0] == token
        self.seconds += time.perf_counter() - started
        return allowed

    def allows_all(self, tokens: Sequence[int]) -> bool:
        """Whether the grammar allows each of ``tokens`` next."""
        return all(self.allows(token) for token in tokens)

    def forced(self) -> list[int]:
        """The tokens the grammar allows alone next, one after the other (llguidance's fast-forward):
        guesses a draft offers, which the model's own picks confirm."""
        started = time.perf_counter()
        tokens = list(self._matcher.compute_ff_tokens())
        self.seconds += time.perf_counter() - started
        return tokens

    def accept(self, token: int) -> None:
        """Advance past ``token`` (one :meth:`allows` said yes to)."""
        started = time.perf_counter()
        taken = self._matcher.consume_token(token)
        self._taken.append(token)
        self.seconds += time.perf_counter() - started
        if not taken:
            self._fail()

    def closing(self, most: int) -> list[int] | None:
        """The tokens that end the answer soonest from here, the grammar complete after them: ``[]`` where it
        is complete already, None where that takes more than ``most`` tokens (or no way is found). Greedy:
        the tokens the grammar forces, else the first of :data:`CLOSING_OUTSIDE` (or, in a JSON string,
        :data:`CLOSING_INSIDE`) it allows, else the first token its mask allows. The matcher is left as it
        was."""
        started = time.perf_counter()
        matcher = self._matcher
        for token in self._taken[self._scanned :]:
            self._in_string, self._escaped = self._scan(token, self._in_string, self._escaped)
        self._scanned = len(self._taken)
        taken: list[int] = []
        in_string, escaped = self._in_string, self._escaped
        try:
            while not matcher.is_accepting():
                if len(taken) >= most:
                    return None
                token = next(iter(matcher.compute_ff_tokens()), None)
                if token is None:
                    token = self._closer(in_string)
                if token is None or not matcher.consume_token(token):
                    return None
                taken.append(token)
                in_string, escaped = self._scan(token, in_string, escaped)
            return taken
        finally:
            if taken:
                matcher.rollback(len(taken))
            self.seconds += time.perf_counter() - started

    def _closer(self, in_string: bool) -> int | None:
        for token in self._closers[1 if in_string else 0]:
            if self._matcher.validate_tokens([token]) == 1:
                return token
        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._bitmask)
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little", count=self._n_vocab)
        return next((int(token) for token in np.flatnonzero(bits) if int(token) not in self._ends), None)

    def _scan(self, token: int, in_string: bool, escaped: bool) -> tuple[bool, bool]:
        """Where the text is after ``token``: inside a JSON string or not, and after a backslash in it. A
        control token (a tool call's marker) is outside any string."""
        if self._tokenizer.is_special_token(token):
            return False, False
        for byte in self._tokenizer.decode_bytes([token]):
            if escaped:
                escaped = False
            elif in_string and byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = not in_string
        return in_string, escaped

    def allowed(self) -> np.ndarray:
        """Which tokens the grammar allows next, as a boolean array over the vocabulary."""
        started = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._bitmask)
        took = time.perf_counter() - started
        self.masks += 1
        self.longest_mask_s = max(self.longest_mask_s, took)
        if self._matcher.is_error():
            self._fail()
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little", count=self._n_vocab)
        self.seconds += time.perf_counter() - started
        return bits.view(np.bool_)

    def _fail(self) -> None:
        raise UnsupportedParameterError(
            f"the output constraint could not be enforced within its bounds: {self._matcher.get_error()}; "
            "simplify the schema or grammar"
        )


def _single_tokens(tokenizer: llguidance.LLTokenizer, texts: Sequence[str]) -> tuple[int, ...]:
    """The tokens of those of ``texts`` that the vocabulary has as one token, in order."""
    found = (tokenizer.tokenize_str(text) for text in texts)
    return tuple(tokens[0] for tokens in found if len(tokens) == 1)
