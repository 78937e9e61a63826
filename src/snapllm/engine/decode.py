"""Token by token decoding over llama.cpp's C API: the KV cache, the sampler chain and the grammar.

    for token in decoder.tokens(prompt, Sampling(temperature=0.0, top_p=1.0, seed=1), grammar=grammar):
        ...  # stop iterating to stop: the last token yielded is never evaluated

It knows tokens, samplers and grammars, nothing of requests. docs/decoding.md says how it samples, checks
grammars and drafts, and why a token's logits do not depend on the batch that computed it.
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import llama_cpp.llama_cpp as low_level
import numpy as np
from llama_cpp import Llama

from snapllm.engine.constraint import COMPILED_GRAMMARS, Constraint, vocabulary_tokenizer
from snapllm.engine.prefixes import SavedState
from snapllm.engine.types import Sampling, SpanBudget

#: llama_token_data as numpy sees it: the candidates array is filled from the logits without a Python loop.
_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
#: The most candidates a sampling chain may keep for the grammar to check them one by one: past that, one
#: mask costs less than the checks.
_CHECKED_CANDIDATES = 64
#: The most views of llama.cpp's logits buffer a decoder keeps (one per row address it has read).
_LOGITS_VIEWS = 64

# ``llama_get_logits_ith`` returning the row's address: the decoder keeps a numpy view per address, where
# llama-cpp-python's binding returns a ctypes pointer to convert into an array at every token. Right after a
# decode, with the caches cold, that conversion took 60-70 us a token. ``_lib[name]`` makes a function
# object of its own, so llama-cpp-python's binding keeps its types.
_logits_ith = low_level._lib["llama_get_logits_ith"]
_logits_ith.argtypes = (ctypes.c_void_p, ctypes.c_int32)
_logits_ith.restype = ctypes.c_void_p
#: The most biases a greedy pick weighs one by one rather than with numpy over the vocabulary.
_BIASES_WEIGHED_ONE_BY_ONE = 8
#: How many tokens before the limit a constrained answer starts checking whether its shortest valid end
#: still fits (:meth:`Constraint.closing`), and the tokens left beside that end when it is written: one
#: token may open two containers, so the end may grow by two while the tokens left shrink by one.
CLOSING_WINDOW = 64
CLOSING_MARGIN = 2
#: The weight of the latest decode in :attr:`Decoder._decode_seconds`' moving averages.
_DECODE_TIME_WEIGHT = 0.25
#: The rows of a decode's logits sampled from when it had one output: its last.
_LAST_ROW = (-1,)
_FLOAT32 = struct.Struct("f")

GrammarCheck = Literal["lazy", "eager"]
#: Asked before each of a prompt's batches after the first, with the tokens evaluated so far, the tokens to
#: evaluate in all, and the seconds the next batch should take at the last one's pace; raises to stop the
#: evaluation there (a deadline the next batch would pass, a client that has gone).
PromptCheck = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Drafting:
    """Speculative decoding's proposers: the tokens a grammar forces next (``forced``), then what followed
    the latest earlier occurrence of the answer's last ``ngram`` tokens (down to ``min_ngram``) in the
    prompt or the answer so far. Up to ``tokens`` guesses a step, fewer while guesses miss. A match of two
    tokens guessed wrong too often in free text to pay for its batches: three by default."""

    ngram: int = 3
    min_ngram: int = 3
    tokens: int = 8
    forced: bool = True


class _NgramIndex:
    """Where each n-gram of a token sequence last occurred with a token after it (n from ``smallest`` to
    ``largest``), kept as the sequence grows, so a lookup costs the same at any length. An n-gram is entered
    once a token follows it, so the sequence's own tail is never its own match."""

    def __init__(self, tokens: Sequence[int], smallest: int, largest: int) -> None:
        self.tokens: list[int] = []
        self._sizes = range(largest, smallest - 1, -1)
        self._ends: dict[tuple[int, ...], int] = {}
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        end = len(self.tokens)
        for n in self._sizes:
            if end >= n:
                self._ends[tuple(self.tokens[end - n :])] = end
        self.tokens.append(token)

    def following(self, tail: Sequence[int], count: int) -> list[int]:
        """Up to ``count`` tokens that followed the latest occurrence of ``tail``'s longest end that
        occurred."""
        for n in self._sizes:
            if len(tail) >= n:
                end = self._ends.get(tuple(tail[-n:]))
                if end is not None:
                    return self.tokens[end : end + count]
        return []


class _Draft:
    """One request's drafting: its proposers over the prompt and the answer so far, and how many guesses to
    offer next. That number doubles after a run kept whole and falls to one past the guesses kept after a
    miss; after a batch that did not pay for itself (fewer tokens than its time would have decoded one by
    one), drafting pauses, twice as long each time up to 64 tokens, so a proposer that keeps missing stops
    costing time."""

    def __init__(self, drafting: Drafting, prompt: Sequence[int]) -> None:
        self.drafting = drafting
        self.index = _NgramIndex(prompt, drafting.min_ngram, drafting.ngram)
        self.length = drafting.tokens
        self._pause = 0
        self._paused = 0

    def room(self) -> int:
        """How many guesses to offer now (0 while paused)."""
        if self._paused:
            self._paused -= 1
            return 0
        return self.length

    def guesses(self, constraint: Constraint | None, room: int) -> list[int]:
        """Up to ``room`` guesses of the next tokens: those the grammar forces, then what followed the
        answer's last n-gram (through the forced tokens) where it occurred before."""
        forced = constraint.forced()[:room] if constraint is not None and self.drafting.forced else []
        tail = [*self.index.tokens[-self.drafting.ngram :], *forced]
        return [*forced, *self.index.following(tail, room - len(forced))] if len(forced) < room else forced

    def record(self, offered: int, kept: int, *, paid_off: bool) -> None:
        """After a batch of ``offered`` guesses of which the first ``kept`` were confirmed; ``paid_off``:
        whether its tokens (``kept`` + 1) came sooner than one by one would have given them."""
        if kept == offered:
            self.length = min(self.drafting.tokens, self.length * 2)
        else:
            self.length = max(1, kept + 1)
        if paid_off:
            self._pause = 0
        else:
            self._pause = min(64, max(1, self._pause * 2))
            self._paused = self._pause


@dataclass(frozen=True)
class Sampled:
    """One token the sampler picked, with the model's own log probability of it and of the ``top`` most
    likely tokens (``(token, logprob)``, best first) when they were asked for."""

    token: int
    end_of_generation: bool
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


class SpanTracker:
    """Follows one request's :class:`SpanBudget` through the generated text, and says when to close it.

    The text is read with control tokens written out (a span may be marked by them); ``tokens`` counts the
    tokens inside the span, the closing ones included."""

    def __init__(self, budget: SpanBudget, piece: Callable[[int], bytes]) -> None:
        self.budget = budget
        self._piece = piece
        self._opening = budget.opening.encode()
        self._closing = budget.closing.strip().encode()
        self._phase = "before" if self._opening else "inside"
        self._text = b""
        self.tokens = 0

    def closing_due(self, token: int) -> tuple[int, ...]:
        """Read ``token``; the tokens to write now to close the span (none while it may go on)."""
        if self._phase == "after":
            return ()
        self._text += self._piece(token)
        if self._phase == "before":
            started = self._text.lstrip()
            if started.startswith(self._opening):
                self._phase, self._text = "inside", started[len(self._opening) :]
            elif not self._opening.startswith(started):
                self._phase = "after"
            return ()
        self.tokens += 1
        if self._closing in self._text:
            self._phase = "after"
            return ()
        self._text = self._text[-len(self._closing) :]
        late = self.budget.close_by is not None and time.monotonic() >= self.budget.close_by
        if self.tokens >= self.budget.max_tokens or late:
            self._phase = "after"
            self.tokens += len(self.budget.closing_tokens)
            return self.budget.closing_tokens
        return ()


class LogitBiases:
    """A request's logit biases, added as llama.cpp's logit-bias sampler adds them: each entry in turn (a
    repeated token's add up), in float32."""

    def __init__(self, pairs: Sequence[tuple[int, float]]) -> None:
        self.ids = np.array([token for token, _ in pairs], dtype=np.intc)
        self.values = np.array([bias for _, bias in pairs], dtype=np.single)
        #: The same by token, as Python numbers (each a float32), in the order they are added.
        self.by_token: dict[int, tuple[float, ...]] = {}
        for token, bias in zip(self.ids.tolist(), self.values.tolist(), strict=True):
            self.by_token[token] = (*self.by_token.get(token, ()), bias)

    def argmax(self, logits: np.ndarray) -> int:
        """The first highest logit once the biases are added (``logits`` is left as it was).

        Right after a decode the caches hold llama.cpp's weights, not numpy's code, and each numpy call
        costs 20-30 us instead of 1-4. So the unbiased argmax comes first; a few biased tokens (a banned
        end of generation, a nudged word) are then weighed one by one in Python, since only a biased token
        can change the pick, unless the pick itself was biased down. Otherwise the biases go into llama.cpp's
        buffer and come out again: a copy of the whole vocabulary (49k-262k floats) cost more than the pick
        itself."""
        best = int(logits.argmax())
        by_token = self.by_token
        if not by_token:
            return best
        value = _biased(logits.item(best), by_token.get(best, ()))
        if len(by_token) <= _BIASES_WEIGHED_ONE_BY_ONE and value >= logits.item(best):
            for token, added in by_token.items():
                biased = _biased(logits.item(token), added)
                if biased > value or (biased == value and token < best):
                    best, value = token, biased
            return best
        kept = logits[self.ids]
        with np.errstate(over="ignore"):  # past float32's range is infinity, as in llama.cpp
            np.add.at(logits, self.ids, self.values)
        try:
            return int(logits.argmax())
        finally:
            logits[self.ids] = kept


class _Samplers:
    """One request's samplers: the logit biases and penalties (applied to every candidate), the rest of the
    chain and the grammar (each freed on close)."""

    def __init__(self, n_vocab: int, n_ctx: int, sampling: Sampling, constraint: Constraint | None) -> None:
        # Both run on the whole vocabulary before the chain picks: a chain step sees the biased, penalised
        # logits, and so does the grammar's shortlist of the best candidates.
        self.adjustments = low_level.llama_sampler_chain_init(low_level.llama_sampler_chain_default_params())
        if sampling.logit_bias:
            biases = (low_level.llama_logit_bias * len(sampling.logit_bias))(*sampling.logit_bias)
            low_level.llama_sampler_chain_add(
                self.adjustments, low_level.llama_sampler_init_logit_bias(n_vocab, len(biases), biases)
            )
        # The window is at most the context (-1: all of it): no token before it could be repeated.
        last_n = n_ctx if sampling.penalty_last_n < 0 else min(sampling.penalty_last_n, n_ctx)
        low_level.llama_sampler_chain_add(
            self.adjustments,
            low_level.llama_sampler_init_penalties(
                n_vocab,
                last_n,
                sampling.repeat_penalty,
                sampling.frequency_penalty,
                sampling.presence_penalty,
            ),
        )
        self.greedy = sampling.temperature == 0.0
        # Greedy without penalties (or with ones llama.cpp skips as disabled) is the first highest logit
        # once the biases are added: the chain's choice, without copying the vocabulary into a candidates
        # array and passing it through two samplers (98 µs against 15 µs a token with a 49k vocabulary).
        penalised = last_n != 0 and (
            sampling.repeat_penalty != 1.0 or sampling.frequency_penalty or sampling.presence_penalty
        )
        self.argmax = self.greedy and not penalised
        # Only the penalties remember the tokens accepted: accepting into anything else does nothing.
        self.penalised = penalised
        self.biases = LogitBiases(sampling.logit_bias)
        # The chain in two parts when sampling: the steps that narrow the candidates, then the draw among
        # them (temperature and the seeded draw), applied one after the other.
        self.chain = low_level.llama_sampler_chain_init(low_level.llama_sampler_chain_default_params())
        self.draw = None
        # top-k 0 keeps every token, as llama.cpp's top-k does for k <= 0.
        top_k = n_vocab if sampling.top_k <= 0 else min(sampling.top_k, n_vocab)
        if self.greedy:
            steps = [low_level.llama_sampler_init_greedy()]
        else:
            steps = [
                low_level.llama_sampler_init_top_k(top_k),
                low_level.llama_sampler_init_typical(sampling.typical_p, 1),
                low_level.llama_sampler_init_top_p(sampling.top_p, 1),
                low_level.llama_sampler_init_min_p(sampling.min_p, 1),
            ]
            self.draw = low_level.llama_sampler_chain_init(low_level.llama_sampler_chain_default_params())
            for step in (
                low_level.llama_sampler_init_temp(sampling.temperature),
                low_level.llama_sampler_init_dist(sampling.seed),
            ):
                low_level.llama_sampler_chain_add(self.draw, step)
        for step in steps:
            low_level.llama_sampler_chain_add(self.chain, step)
        # What the grammar checks when sampling, so that the draw is the one the mask gives. With min-p the
        # only cut after top-k (top-p and typical off: their cuts depend on every candidate top-k kept),
        # the candidates left are those within a ratio of the best: when the grammar allows each, the mask
        # would leave the same ones (3 or 4 where the model is sure). Otherwise the top-k candidates: when
        # the grammar allows each, they are the top-k of the masked vocabulary too.
        self.relative_cut = not self.greedy and sampling.top_p >= 1.0 and sampling.typical_p >= 1.0
        self.shortlist = None
        if not self.greedy and not self.relative_cut and top_k <= _CHECKED_CANDIDATES:
            self.shortlist = low_level.llama_sampler_init_top_k(top_k)
        self.constraint = constraint

    def accept(self, token: int) -> None:
        # The chain's samplers (greedy, top-k... dist) keep nothing of the tokens accepted; nor do the
        # biases or penalties that are off. Each call skipped is one less trip into C per token.
        if self.penalised:
            low_level.llama_sampler_accept(self.adjustments, token)
        if self.constraint is not None:
            self.constraint.accept(token)

    def close(self) -> None:
        for sampler in (self.adjustments, self.chain, self.draw, self.shortlist):
            if sampler:
                low_level.llama_sampler_free(sampler)
        self.adjustments = self.chain = self.draw = self.shortlist = None
        self.constraint = None


class Decoder:
    """Generation over one llama.cpp context, which it owns: it remembers which tokens the KV cache holds,
    so a prompt that starts like the last one evaluates only what differs. Not thread-safe."""

    def __init__(self, llama: Llama, *, row_group: int = 1) -> None:
        self._llama = llama
        self._ctx = llama.ctx
        self._vocab = llama._model.vocab
        self._memory = low_level.llama_get_memory(self._ctx)
        self.n_vocab = int(llama.n_vocab())
        self._n_batch = int(llama.n_batch)
        #: What one llama_decode computes at once: a batch larger than that is split into this many.
        self._n_ubatch = int(low_level.llama_n_ubatch(self._ctx))
        self._n_ctx = int(llama.n_ctx())
        self._batch = low_level.llama_batch_init(self._n_batch, 0, 1)
        # Every token of every batch is in sequence 0 alone: written once (llama_decode only reads a batch).
        for i in range(self._n_batch):
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = 0
        # The batch's arrays as numpy views, to write a prompt's batch at once rather than token by token.
        self._batch_tokens = np.ctypeslib.as_array(self._batch.token, shape=(self._n_batch,))
        self._batch_positions = np.ctypeslib.as_array(self._batch.pos, shape=(self._n_batch,))
        self._batch_outputs = np.ctypeslib.as_array(self._batch.logits, shape=(self._n_batch,))
        self._buffer = (low_level.llama_token_data * self.n_vocab)()
        self._candidates = np.frombuffer(self._buffer, dtype=_TOKEN_DATA)
        #: Views of llama.cpp's logits rows, by address (the buffer moves only when llama.cpp grows it).
        self._logits_views: dict[int, np.ndarray] = {}
        #: The candidates before the logits go in: every token once, in id order.
        self._fresh = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
        self._fresh["id"] = np.arange(self.n_vocab, dtype=np.intc)
        self._array = low_level.llama_token_data_array(
            data=ctypes.cast(self._buffer, low_level.llama_token_data_p),
            size=self.n_vocab,
            selected=-1,
            sorted=False,
        )
        #: llguidance's view of the vocabulary, for every grammar's matcher (about 1 s to build: at load).
        self._tokenizer = vocabulary_tokenizer(llama)
        #: The grammars compiled lately, each as a matcher at its start that requests take copies of.
        self._compiled: OrderedDict[str, Constraint] = OrderedDict()
        #: The grammars kept compiled for good (a deploy's declared ones, before the snapshot), and whether
        #: the grammars compiled now are (:meth:`snapllm.engine.model.Engine.keeping_grammars`).
        self._kept: set[str] = set()
        self.keeping = False
        self._compiled_lock = threading.Lock()
        #: The tokens whose keys and values the context holds, in order.
        self.cached: list[int] = []
        #: How many rows the weight kernels multiply at once (4 over repacked weights): a draft's batch holds
        #: whole groups of them, as a row outside a group reads every weight again, alone.
        self.row_group = row_group
        #: What a generating decode of so many rows has taken lately, in seconds (a moving average): whether
        #: a draft's batch paid for itself, on this machine, model and context.
        self._decode_seconds: dict[int, float] = {}
        # Whether the context's last logits are those after ``cached[-1]`` (a prompt equal to ``cached`` can
        # then be sampled from without evaluating anything).
        self._logits_current = False
        # Counters for tests and benchmarks: picks the grammar refused, steps that computed the grammar's
        # whole mask while checking lazily, and guesses drafted and confirmed.
        self.grammar_rejections = 0
        self.grammar_fallbacks = 0
        self.drafted = 0
        self.drafted_accepted = 0
        #: Seconds generation spent in grammars' matchers (:attr:`Constraint.seconds`), all requests together.
        self.grammar_seconds = 0.0
        #: Whether a token ends generation, asked of llama.cpp once per token id.
        self._end_of_generation: dict[int, bool] = {}
        self._pieces: dict[int, bytes] = {}
        self._special_pieces: dict[int, bytes] = {}
        self._piece_buffer = ctypes.create_string_buffer(256)

    def __del__(self) -> None:
        batch = getattr(self, "_batch", None)
        if batch is not None:
            low_level.llama_batch_free(batch)
            self._batch = None

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (control tokens stand for nothing)."""
        return self._cached_piece(token, self._pieces, special=False)

    def special_piece(self, token: int) -> bytes:
        """The bytes of a token with control tokens written out (``<|end|>``)."""
        return self._cached_piece(token, self._special_pieces, special=True)

    def _cached_piece(self, token: int, cache: dict[int, bytes], *, special: bool) -> bytes:
        data = cache.get(token)
        if data is None:
            size = low_level.llama_token_to_piece(self._vocab, token, self._piece_buffer, 256, 0, special)
            data = cache[token] = self._piece_buffer.raw[: max(0, size)]
        return data

    def constraint(self, grammar: str) -> Constraint:
        """``grammar``'s matcher at its start (ValueError: a grammar llguidance refuses), compiled once for
        the last :data:`COMPILED_GRAMMARS` grammars: a request takes a copy (:meth:`Constraint.fresh`), so a
        conversation or an agent that sends the same schema or tools every turn compiles them once. Safe
        beside a generating request (compiles run on their own thread; the cache is locked)."""
        with self._compiled_lock:
            found = self._compiled.get(grammar)
            if found is not None:
                self._compiled.move_to_end(grammar)
                if self.keeping:
                    self._kept.add(grammar)
                return found
        compiled = Constraint(self._tokenizer, grammar)
        with self._compiled_lock:
            self._compiled[grammar] = compiled
            if self.keeping:
                self._kept.add(grammar)
            loose = [key for key in self._compiled if key not in self._kept]
            for key in loose[: max(0, len(loose) - COMPILED_GRAMMARS)]:
                del self._compiled[key]
        return compiled

    def _take_constraint(self, grammar: str | None) -> Constraint | None:
        return None if grammar is None else self.constraint(grammar).fresh()

    # --- The KV cache ---------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every cached token."""
        # The cells' bookkeeping only, as llama-server does: a cell's stale keys and values are masked out
        # until a decode writes it again. Zeroing the buffers too took 1 ms a request, and wrote every page
        # of the cache, which after a restore faulted in all of it at the first request.
        low_level.llama_memory_clear(self._memory, False)
        self.cached = []
        self._logits_current = False

    # --- Saved states (snapllm.engine.prefixes) ------------------------------------------------------------

    def save(self, length: int) -> SavedState:
        """The KV state of the first ``length`` cached positions (the cache keeps only those afterwards)."""
        self._truncate(length)
        size = low_level.llama_state_seq_get_size(self._ctx, 0)
        data = (ctypes.c_uint8 * size)()
        written = low_level.llama_state_seq_get_data(self._ctx, data, size, 0)
        if written != size:
            raise RuntimeError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
        return SavedState(list(self.cached), data)

    def restore(self, state: SavedState) -> None:
        """Make the cache hold ``state`` (and nothing else), as when its tokens were evaluated."""
        self.reset()
        if not low_level.llama_state_seq_set_data(self._ctx, state.data, state.size, 0):
            self.reset()
            raise RuntimeError("llama.cpp refused a saved sequence state")
        self.cached = list(state.tokens)

    def reused_from(self, state: SavedState, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens :meth:`reused` would give after :meth:`restore` of ``state``."""
        return _reusable(state.tokens, prompt)

    def reused(self, prompt: Sequence[int]) -> int:
        """How many of ``prompt``'s tokens :meth:`tokens` will take from the cache instead of evaluating."""
        return _reusable(self.cached, prompt)

    def reserve_outputs(self, rows: int) -> None:
        """Make llama.cpp's logits buffer hold ``rows`` rows (a decode with that many outputs; the cache is
        left empty)."""
        self.reset()
        rows = min(rows, self._n_batch, self._n_ctx)
        self._decode([0] * rows, outputs=rows)
        self.reset()

    def evaluate(self, tokens: Sequence[int], check: PromptCheck | None = None) -> None:
        """Evaluate ``tokens`` after the cached ones, in batches of ``n_batch`` at most (the logits of the
        last). ``check`` is asked before each batch after the first (:data:`PromptCheck`); what it raises
        stops the evaluation there, the batches evaluated staying in the cache."""
        last = (0.0, 1)  # the last batch's seconds and tokens: the pace the next one is expected at
        largest = min(self._n_batch, self._n_ubatch)
        for start in range(0, len(tokens), largest):
            end = min(start + largest, len(tokens))
            if check is not None and start:
                check(start, len(tokens), last[0] * (end - start) / last[1])
            began = time.perf_counter()
            self._decode(tokens[start:end], outputs=1)
            last = (time.perf_counter() - began, end - start)

    def _truncate(self, length: int) -> None:
        if length < len(self.cached):
            if not low_level.llama_memory_seq_rm(self._memory, 0, length, -1):
                self.reset()
                return
            del self.cached[length:]
            self._logits_current = False

    def _load(self, prompt: Sequence[int], check: PromptCheck | None) -> None:
        if self._logits_current and self.cached == list(prompt):
            return
        self._truncate(self.reused(prompt))
        self.evaluate(prompt[len(self.cached) :], check)

    def _decode(self, tokens: Sequence[int], *, outputs: int) -> None:
        """One llama_decode of ``tokens`` (at most ``n_batch``), with logits for the last ``outputs``."""
        batch = self._batch
        n = len(tokens)
        past = len(self.cached)
        if n == 1:  # a generated token: three writes cost less than three numpy slices
            batch.token[0], batch.pos[0], batch.logits[0] = tokens[0], past, outputs > 0
        else:
            self._batch_tokens[:n] = tokens
            self._batch_positions[:n] = np.arange(past, past + n, dtype=np.int32)
            self._batch_outputs[:n] = 0
            self._batch_outputs[n - outputs : n] = 1
        batch.n_tokens = n
        code = low_level.llama_decode(self._ctx, batch)
        if code != 0:
            self._logits_current = False
            raise RuntimeError(f"llama_decode returned {code}")
        self.cached.extend(tokens)
        self._logits_current = True

    # --- Generation -------------------------------------------------------------------------------------

    def tokens(
        self,
        prompt: Sequence[int],
        sampling: Sampling,
        *,
        grammar: str | None = None,
        grammar_check: GrammarCheck = "lazy",
        logprobs: int | None = None,
        limit: int | None = None,
        draft: Drafting | None = None,
        span: SpanTracker | None = None,
        check: PromptCheck | None = None,
        close_at_limit: bool = False,
    ) -> Iterator[Sampled]:
        """Sample after ``prompt`` until the caller stops iterating, ``limit`` tokens are out, or an
        end-of-generation token (yielded, flagged, and never evaluated) comes.

        A token is evaluated only when the next one is asked for, so the context never holds a token past
        the last one the caller took. ``logprobs``: how many of the most likely alternatives each token
        reports (0: only its own log probability; None: nothing). ``check`` is asked between the prompt's
        batches (:meth:`evaluate`): what it raises comes out of the first ``next()``. ``draft``: guesses
        evaluated beside each sampled token in one batch, each row of which computes what it would
        alone, so the tokens are those plain decoding picks.
        ``close_at_limit``: a constrained answer whose shortest valid end only just fits the tokens left
        before ``limit`` ends that way (:meth:`Constraint.closing`), so an answer cut by the limit is
        still complete.
        """
        constraint = self._take_constraint(grammar)
        self._load(prompt, check)
        samplers = _Samplers(self.n_vocab, self._n_ctx, sampling, constraint)
        history = list(prompt)
        drafter = _Draft(draft, prompt) if draft is not None else None
        produced = 0
        accepted_length = len(self.cached)
        try:
            # Each round: the logits at output indices ``rows`` of the last decode, then the guesses they
            # are checked against (row i predicts guess i).
            rows: Sequence[int] = _LAST_ROW
            guesses: list[int] = []
            kept = batch_rows = 0
            while True:
                for i, row in enumerate(rows):
                    picked = self._sample(samplers, row, grammar_check, logprobs)
                    samplers.accept(picked.token)
                    yield picked
                    if picked.end_of_generation:
                        return
                    produced += 1
                    history.append(picked.token)
                    if drafter is not None:
                        drafter.index.append(picked.token)
                    if limit is not None and produced >= limit:
                        return
                    if close_at_limit and samplers.constraint is not None and limit is not None:
                        end = _closing_due(samplers.constraint, limit - produced)
                        if end:
                            for token in end:
                                samplers.accept(token)
                                yield Sampled(token, False, None if logprobs is None else 0.0)
                            return
                    closing = span.closing_due(picked.token) if span is not None else ()
                    if closing:
                        for token in closing:
                            if constraint is not None and not constraint.allows(token):
                                break
                            samplers.accept(token)
                            yield Sampled(token, False, None if logprobs is None else 0.0)
                            produced += 1
                            history.append(token)
                            if drafter is not None:
                                drafter.index.append(token)
                            if limit is not None and produced >= limit:
                                return
                        break  # the guesses after the closing are not the span's continuation
                    if i < len(guesses) and guesses[i] == picked.token:
                        # The guess is in the cache already, and the next row holds the logits after it.
                        accepted_length += 1
                        kept += 1
                        continue
                    break
                if guesses:
                    assert drafter is not None
                    drafter.record(len(guesses), kept, paid_off=self._paid_off(batch_rows, kept + 1))
                    self.drafted_accepted += kept
                    guesses = []
                # The cache holds the accepted tokens; anything after them was a wrong guess.
                if accepted_length < len(self.cached):
                    self._truncate(accepted_length)
                pending = history[len(self.cached) :]  # the last token picked, and any closing written
                kept = 0
                if drafter is not None:
                    room = drafter.room()
                    if room:  # at least the guesses that complete the pending tokens' row group
                        room = max(room, -len(pending) % self.row_group)
                    room = min(room, self._n_batch - len(pending))
                    if limit is not None:
                        room = min(room, limit - produced - 1)
                    if room > 0:
                        guesses = drafter.guesses(samplers.constraint, room)
                        spare = (len(pending) + len(guesses)) % self.row_group
                        del guesses[max(0, len(guesses) - spare) :]
                if not guesses:  # one token at a time: the next row is the only one
                    self._timed_decode(pending, outputs=1)
                    accepted_length = len(self.cached)
                    rows = _LAST_ROW
                    continue
                self.drafted += len(guesses)
                batch_rows = len(pending) + len(guesses)
                self._timed_decode([*pending, *guesses], outputs=1 + len(guesses))
                accepted_length = len(self.cached) - len(guesses)
                # Batch rows: the last pending token's (its logits predict guess 0), then each guess's.
                rows = list(range(len(pending) - 1, len(pending) + len(guesses)))
        finally:
            if samplers.constraint is not None:
                self.grammar_seconds += samplers.constraint.seconds
            samplers.close()
            self._truncate(accepted_length)

    def _timed_decode(self, tokens: Sequence[int], *, outputs: int) -> None:
        """A generating decode, its time kept in :attr:`_decode_seconds` by its number of rows."""
        started = time.perf_counter()
        self._decode(tokens, outputs=outputs)
        took = time.perf_counter() - started
        last = self._decode_seconds.get(len(tokens))
        self._decode_seconds[len(tokens)] = (
            took if last is None else last + _DECODE_TIME_WEIGHT * (took - last)
        )

    def _paid_off(self, rows: int, tokens: int) -> bool:
        """Whether a batch of ``rows`` that gave ``tokens`` took less than as many one-row decodes (at first,
        before either is timed: whether it gave more than one)."""
        batch, one = self._decode_seconds.get(rows), self._decode_seconds.get(1)
        if batch is None or one is None:
            return tokens > 1
        return batch < tokens * one

    def _sample(
        self, samplers: _Samplers, row: int, grammar_check: GrammarCheck, logprobs: int | None
    ) -> Sampled:
        logits = self._logits(row)
        token = self._pick(samplers, logits, grammar_check)
        eog = self._end_of_generation.get(token)
        if eog is None:
            eog = self._end_of_generation[token] = bool(low_level.llama_vocab_is_eog(self._vocab, token))
        if logprobs is None:
            return Sampled(token, eog)
        # The model's own distribution: before penalties, temperature or the grammar narrow it.
        shifted = logits.astype(np.float64) - float(np.max(logits))
        distribution = shifted - np.log(np.exp(shifted).sum())
        top: tuple[tuple[int, float], ...] = ()
        if logprobs:
            best = np.argpartition(-distribution, logprobs)[:logprobs]
            best = best[np.argsort(-distribution[best], kind="stable")]
            top = tuple((int(i), float(distribution[i])) for i in best)
        return Sampled(token, eog, float(distribution[token]), top)

    def _logits(self, row: int) -> np.ndarray:
        """The logits of output ``row`` of the last decode (-1: the last output): a view of llama.cpp's
        buffer, valid until the next decode."""
        address = _logits_ith(self._ctx, row)
        if not address:
            raise RuntimeError(f"llama.cpp has no logits for output {row}")
        view = self._logits_views.get(address)
        if view is None:
            if len(self._logits_views) >= _LOGITS_VIEWS:
                self._logits_views.clear()
            row_type = ctypes.c_float * self.n_vocab
            view = self._logits_views[address] = np.frombuffer(
                row_type.from_address(address), dtype=np.single
            )
        return view

    def _fill(self, logits: np.ndarray, samplers: _Samplers) -> None:
        # One copy of the (id, 0, 0) rows, then the logits: cheaper than writing each field apart.
        np.copyto(self._candidates, self._fresh)
        self._candidates["logit"] = logits
        self._array.size = self.n_vocab
        self._array.selected = -1
        self._array.sorted = False
        low_level.llama_sampler_apply(samplers.adjustments, ctypes.byref(self._array))

    def _apply(self, sampler: Any) -> None:
        low_level.llama_sampler_apply(sampler, ctypes.byref(self._array))

    def _selected(self) -> int:
        return int(self._candidates["id"][self._array.selected])

    def _choose(self, samplers: _Samplers) -> int:
        """The chain's choice among the candidates: its narrowing steps, then the draw."""
        self._apply(samplers.chain)
        if samplers.draw is not None:
            self._apply(samplers.draw)
        return self._selected()

    def _pick(self, samplers: _Samplers, logits: np.ndarray, grammar_check: GrammarCheck) -> int:
        constraint = samplers.constraint
        if constraint is None:
            if samplers.argmax:
                return samplers.biases.argmax(logits)
            self._fill(logits, samplers)
            return self._choose(samplers)
        if grammar_check == "lazy":
            token = self._lazy_pick(samplers, constraint, logits)
            if token is not None:
                return token
            self.grammar_fallbacks += 1
        if samplers.argmax:
            # The first highest allowed logit, in a masked copy: llama.cpp's buffer is read again for the
            # log probabilities.
            return samplers.biases.argmax(np.where(constraint.allowed(), logits, np.single(-np.inf)))
        self._fill(logits, samplers)  # the candidates in id order, as the mask is
        self._candidates["logit"][~constraint.allowed()] = -np.inf
        return self._choose(samplers)

    def _lazy_pick(self, samplers: _Samplers, constraint: Constraint, logits: np.ndarray) -> int | None:
        """The chain's pick when the grammar allows it and every candidate it chose among; None when the
        pick needs the grammar's mask."""
        if samplers.argmax:
            token = samplers.biases.argmax(logits)
        else:
            self._fill(logits, samplers)
            if samplers.greedy:
                self._apply(samplers.chain)
                token = self._selected()
            else:
                checked = samplers.chain if samplers.relative_cut else samplers.shortlist
                if checked is None:  # the chain keeps more candidates than checking each is worth
                    return None
                self._apply(checked)
                if self._array.size > _CHECKED_CANDIDATES:
                    return None
                if not constraint.allows_all(self._candidates["id"][: self._array.size].tolist()):
                    self.grammar_rejections += 1
                    return None
                if checked is samplers.shortlist:
                    self._apply(samplers.chain)
                self._apply(samplers.draw)
                return self._selected()
        if constraint.allows(token):
            return token
        self.grammar_rejections += 1
        return None


def _biased(logit: float, biases: tuple[float, ...]) -> float:
    """``logit`` with ``biases`` added in turn, each sum rounded as llama.cpp's float32 addition rounds it
    (a float64 sum of two float32 numbers, rounded once to float32, is their float32 sum)."""
    for bias in biases:
        total = logit + bias
        try:
            logit = _FLOAT32.unpack(_FLOAT32.pack(total))[0]
        except OverflowError:  # beyond float32's range: float32 addition gives the infinity
            logit = math.copysign(math.inf, total)
    return logit


def _closing_due(constraint: Constraint, left: int) -> list[int]:
    """The shortest valid end of a constrained answer when it is time to write it (it and
    :data:`CLOSING_MARGIN` fill the ``left`` tokens), else nothing."""
    if left > CLOSING_WINDOW:
        return []
    end = constraint.closing(left)
    return end if end and len(end) + CLOSING_MARGIN >= left else []


def _reusable(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many of ``prompt``'s tokens a cache holding ``cached`` gives: their common prefix, less the last
    prompt token, which is evaluated again for its logits (every position computes alike in any batch)."""
    return max(0, min(_common_prefix(cached, prompt), len(prompt) - 1))


def _common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    common = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        common += 1
    return common
