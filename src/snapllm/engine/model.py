"""The engine: one llama.cpp model that generates for one request at a time.

    engine = Engine.load(model.path, EngineSettings(), model_name="smollm2")
    completion = engine.generate(EngineRequest(tokens, Sampling(0.0, 1.0, seed=1), max_tokens=16))

It takes tokens, sampling settings, stop strings and a grammar, and knows no OpenAI request (that is
:mod:`snapllm.protocol.serving`'s). docs/decoding.md says how it stops: at a deadline, a stop, a limit.
"""

from __future__ import annotations

import codecs
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import llama_cpp.llama_cpp as low_level
from llama_cpp import Llama

from snapllm.engine.decode import Decoder, Drafting, GrammarCheck, Sampled, SpanTracker
from snapllm.engine.loaded import LoadedModel, attention_params, maps_weights, model_params
from snapllm.engine.prefixes import MIN_SAVED_TOKENS, PrefixCache, PrefixStats
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import (
    Completion,
    Deadline,
    EngineRequest,
    EngineStreamItem,
    Finish,
    Timings,
    TokenDelta,
    TokenLogprob,
)
from snapllm.errors import (
    ContextLengthExceededError,
    DeadlineExceededError,
    InvalidRequestError,
    ModelLoadError,
)
from snapllm.system import available_cpus, function_memory_mb


class _LogprobRecorder:
    """Turns the decoder's log probabilities of each sampled token (the model's raw distribution, before
    sampling settings or a grammar narrow it) into :class:`TokenLogprob` records with the tokens' text."""

    def __init__(self, llama: Llama, top: int) -> None:
        self._llama = llama
        self.top = top
        self.tokens: list[TokenLogprob] = []

    def record(self, sampled: Sampled) -> TokenLogprob:
        assert sampled.logprob is not None
        top = tuple((*self._piece(token), logprob) for token, logprob in sampled.top)
        text, data = self._piece(sampled.token)
        return TokenLogprob(text, data, sampled.logprob, top)

    def _piece(self, token: int) -> tuple[str, tuple[int, ...]]:
        data = self._llama.detokenize([token])
        return data.decode("utf-8", errors="replace"), tuple(data)


class _Completion:
    """One request's tokens turned into text: iterating yields the text as it becomes final (no stop
    sequence can still begin in it, and no UTF-8 character is split), with its tokens' log probabilities;
    afterwards ``text``, ``finish`` and ``completion_tokens`` describe the whole answer.

    The decoder's generator is closed as soon as the answer ends (a stop sequence, ``max_tokens``, the
    deadline), so the token that ended it is never evaluated.
    """

    def __init__(
        self,
        tokens: Iterator[Sampled],
        piece: Any,
        *,
        stop: list[str],
        max_tokens: int,
        progress: _GenerationProgress,
        span: SpanTracker | None = None,
    ) -> None:
        self._tokens = tokens
        self.span = span
        self._piece = piece
        self._stop = [s for s in stop if s]
        self._max_tokens = max_tokens
        self._progress = progress
        self.text = ""
        self.finish: Finish = "length"
        self.completion_tokens = 0

    def _held(self, text: str, released: int) -> int:
        """How many characters at the end of ``text`` could be the start of a stop sequence."""
        longest = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(text) - released), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest

    def __iter__(self) -> Iterator[TokenDelta]:
        recorder = self._progress.logprobs
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        text = ""
        released = 0
        # Each token's log probabilities, with where its text starts: a token goes out with the delta
        # that releases its first character.
        pending: list[tuple[int, TokenLogprob]] = []
        cut: int | None = None
        try:
            for sampled in self._tokens:
                self._progress.token_sampled()
                if sampled.end_of_generation:
                    self.finish = "stop"
                    break
                self.completion_tokens += 1
                start = len(text)
                text += utf8.decode(self._piece(sampled.token))
                if recorder is not None:
                    pending.append((start, recorder.record(sampled)))
                # Each check is skipped where it has nothing to check: right after a decode even a call that
                # returns at once costs microseconds.
                if self._stop:
                    hits = [i for i in (text.find(stop, released) for stop in self._stop) if i >= 0]
                    if hits:
                        cut = min(hits)
                        self.finish = "stop"
                        break
                if self.completion_tokens >= self._max_tokens or (
                    self._progress.deadline is not None and self._progress.expired()
                ):
                    break
                end = len(text) - self._held(text, released) if self._stop else len(text)
                if end > released:
                    yield self._delta(text[released:end], pending, end)
                    released = end
        finally:
            self._tokens.close()
        # Without a stop sequence every token belongs to the answer, even one with no text of its own (an
        # unfinished character, a special token).
        if cut is None:
            text += utf8.decode(b"", final=True)
            cut = len(text)
            ending = None
        else:
            ending = cut
        self.text = text[:cut]
        if cut > released or pending:
            yield self._delta(text[released:cut], pending, ending)

    def _delta(self, text: str, pending: list[tuple[int, TokenLogprob]], end: int | None) -> TokenDelta:
        recorder = self._progress.logprobs
        if recorder is None:
            return TokenDelta(text)
        going = [token for start, token in pending if end is None or start < end]
        del pending[: len(going)]
        recorder.tokens.extend(going)
        return TokenDelta(text, tuple(going))


class _GenerationProgress:
    """Times the first token and tells when the deadline has passed (checked between tokens)."""

    def __init__(self, deadline: Deadline | None, logprobs: _LogprobRecorder | None = None) -> None:
        self.deadline = deadline
        self.logprobs = logprobs
        self.started = time.perf_counter()
        self.first_token_at: float | None = None
        self.sampled = 0
        self.deadline_reached = False
        #: The decoder's (drafted, kept) counts when the request started, and it, once it has.
        self._drafts: tuple[Decoder, int, int] | None = None

    def drafting_from(self, decoder: Decoder) -> None:
        self._drafts = (decoder, decoder.drafted, decoder.drafted_accepted)

    def token_sampled(self) -> None:
        self.sampled += 1
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()

    def expired(self) -> bool:
        if self.deadline is not None and self.deadline.expired():
            self.deadline_reached = True
        return self.deadline_reached

    def check_prompt(self, evaluated: int, total: int, next_batch_s: float) -> None:
        """Stop the prompt's evaluation (between two of its batches) once the deadline is cancelled, or when
        the next batch would end past it: with no token yet there is nothing to answer with."""
        deadline = self.deadline
        if deadline is None:
            return
        elapsed = time.perf_counter() - self.started
        done = f"{evaluated} of its {total} tokens were evaluated in {elapsed:.1f} s"
        if deadline.cancelled:
            raise DeadlineExceededError(f"the request was cancelled while its prompt was evaluated ({done})")
        if deadline.remaining() < next_batch_s:
            self.deadline_reached = True
            raise DeadlineExceededError(
                f"the prompt could not be evaluated within the time limit ({done}; the next "
                f"{next_batch_s:.1f} s would pass it): there is no answer to return; send a shorter prompt"
            )

    def timings(self, completion_tokens: int) -> Timings:
        finished = time.perf_counter()
        first = self.first_token_at or finished
        prompt_ms = (first - self.started) * 1000.0
        generation_ms = (finished - first) * 1000.0
        # The first token is sampled at the end of prompt processing; the rate counts the ones after it.
        rate = (
            (completion_tokens - 1) / (generation_ms / 1000.0)
            if completion_tokens > 1 and generation_ms
            else 0.0
        )
        drafted = kept = 0
        if self._drafts is not None:
            decoder, drafted_before, kept_before = self._drafts
            drafted, kept = decoder.drafted - drafted_before, decoder.drafted_accepted - kept_before
        return Timings(
            prompt_ms=prompt_ms,
            time_to_first_token_ms=prompt_ms,
            generation_ms=generation_ms,
            total_ms=(finished - self.started) * 1000.0,
            tokens_per_second=rate,
            draft_n=drafted,
            draft_n_accepted=kept,
        )


class Engine(LoadedModel):
    """A loaded model that generates for one request at a time (llama.cpp contexts are not thread-safe)."""

    def __init__(
        self,
        llama: Llama,
        settings: EngineSettings,
        *,
        model_name: str,
        model_digest: str | None = None,
        draft: Drafting | Literal["auto"] | None = "auto",
    ) -> None:
        super().__init__(llama, model_name=model_name, model_digest=model_digest, settings=settings)
        self._decoder = Decoder(llama, row_group=settings.row_group)
        self._draft = default_drafting(settings) if draft == "auto" else draft
        self._token_texts_by_attribute: dict[int, frozenset[str]] = {}
        self._settings = settings
        #: Saved prompt prefixes: the declared ones (pinned) and recent conversations' (least recently used).
        self._prefixes = PrefixCache(settings.prefix_cache_bytes(function_memory_mb()))

    @property
    def reuse_reproduces(self) -> bool:
        """Whether a prompt that reuses the cache computes as the same prompt evaluated whole, so that reuse
        never changes an answer: with flash attention over bf16 values (attention's one kernel for any
        batch; the decoder keeps the weight kernels' row groups apart)."""
        return self._settings.batch_invariant_attention

    @property
    def drafting(self) -> Drafting | None:
        """The speculative decoding requests get unless they turn it off (None: none)."""
        return self._draft

    @classmethod
    def load(
        cls,
        model_path: str,
        settings: EngineSettings,
        *,
        model_name: str,
        source: str | None = None,
        model_digest: str | None = None,
        draft: Drafting | Literal["auto"] | None = "auto",
    ) -> Engine:
        """Load a GGUF file (``/proc/self/fd/N`` for a memfd) with llama.cpp: memory-mapped, or, for a memfd
        while ``settings.repack_weights`` is on, read into llama.cpp's own (repacked) buffers, after which
        the caller closes the memfd so that one copy of the weights remains (:func:`maps_weights`).

        ``source`` names where the bytes came from (``s3://...``) in the :class:`ModelLoadError` raised
        when llama.cpp refuses them: a memfd's path alone says nothing about which model it was.
        ``draft``: the speculative decoding requests get ("auto": :func:`default_drafting`; None: none).
        """
        threads = settings.threads or available_cpus()
        try:
            with model_params(settings):
                llama = Llama(
                    model_path=model_path,
                    n_ctx=settings.n_ctx,
                    n_batch=settings.n_batch,
                    n_threads=threads,
                    n_threads_batch=threads,
                    use_mmap=maps_weights(model_path, settings),
                    **attention_params(settings),
                    verbose=settings.verbose,
                )
        except ValueError as exc:
            # llama-cpp-python reports every refusal (architecture, tensor type, layout) as a ValueError.
            raise ModelLoadError(
                f"llama.cpp could not load the model {model_name!r} from {source or model_path}: {exc} "
                "(set SNAPLLM_LLAMA_VERBOSE=true to see llama.cpp's reason)"
            ) from exc
        return cls(llama, settings, model_name=model_name, model_digest=model_digest, draft=draft)

    # --- What the model is ----------------------------------------------------------------------------------

    @property
    def llama(self) -> Llama:
        return self._llama

    @property
    def n_ctx(self) -> int:
        # llama.cpp pads its context (to a multiple of 256), but llama-cpp-python sizes its token buffer
        # to the configured value: the configured value is the real limit.
        return min(int(self._llama.n_ctx()), self._settings.n_ctx)

    @property
    def n_vocab(self) -> int:
        """How many tokens the vocabulary has: a token id is at least 0 and below this."""
        return self._decoder.n_vocab

    @property
    def cached_tokens(self) -> tuple[int, ...]:
        """The tokens the KV cache holds (a request that starts with them evaluates only the rest)."""
        return tuple(self._decoder.cached)

    @property
    def prefix_cache(self) -> PrefixCache:
        """The saved prompt prefixes (:mod:`snapllm.engine.prefixes`)."""
        return self._prefixes

    @property
    def prefix_stats(self) -> PrefixStats:
        return self._prefixes.stats

    @property
    def grammar_seconds(self) -> float:
        """Seconds generation has spent in grammars' matchers (checks, masks, tokens taken), in all."""
        return self._decoder.grammar_seconds

    def special_tokens(self) -> tuple[str, str]:
        """The text of the beginning- and end-of-sequence tokens ("" for a model without one)."""
        vocab = self._llama._model
        bos, eos = self._llama.token_bos(), self._llama.token_eos()
        return (
            vocab.token_get_text(bos) if bos != -1 else "",
            vocab.token_get_text(eos) if eos != -1 else "",
        )

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        """``text`` as tokens; with ``special``, control tokens written in it (``<|im_start|>``) are parsed
        as such, else they are text like any other."""
        return self._llama.tokenize(text.encode(), add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """The bytes ``tokens`` stand for, control tokens written as their text; each id must be below
        :attr:`n_vocab` (llama.cpp reads past its vocabulary otherwise)."""
        return self._llama.detokenize(list(tokens), special=True)

    def control_tokens(self) -> frozenset[str]:
        """The text of every control token: text that must never turn into one (read once)."""
        return self._token_texts(low_level.LLAMA_TOKEN_ATTR_CONTROL)

    def user_tokens(self) -> frozenset[str]:
        """The text of every user-defined token: llama.cpp turns such text into the token wherever it is
        written, parsing special tokens or not (Qwen's ``<tool_call>``, gpt-oss's ``<|channel|>``)."""
        return self._token_texts(low_level.LLAMA_TOKEN_ATTR_USER_DEFINED)

    def _token_texts(self, attribute: int) -> frozenset[str]:
        if not self._token_texts_by_attribute:
            # One pass over the vocabulary for both kinds (at init: the protocol asks before the snapshot).
            vocab = self._llama._model.vocab
            kinds = (low_level.LLAMA_TOKEN_ATTR_CONTROL, low_level.LLAMA_TOKEN_ATTR_USER_DEFINED)
            found: dict[int, set[str]] = {kind: set() for kind in kinds}
            for token in range(self._decoder.n_vocab):
                attributes = low_level.llama_vocab_get_attr(vocab, token)
                for kind in kinds:
                    if attributes & kind:
                        text = low_level.llama_vocab_get_text(vocab, token).decode("utf-8", errors="replace")
                        if text:
                            found[kind].add(text)
            self._token_texts_by_attribute = {kind: frozenset(texts) for kind, texts in found.items()}
        return self._token_texts_by_attribute[attribute]

    def accepts_grammar(self, grammar: str) -> bool:
        """Whether llguidance compiles ``grammar`` within its bounds (the next request with it reuses the
        compiled matcher). Not under the engine's lock: a request being prepared never waits for one that is
        generating (the matcher is compared by its grammar when taken, so a race costs a compile only)."""
        try:
            self._decoder.constraint(grammar)
        except ValueError:
            return False
        return True

    @contextlib.contextmanager
    def keeping_grammars(self) -> Iterator[None]:
        """Keep for good every grammar compiled (or found compiled) inside: a deploy's declared ones, compiled
        before the snapshot, which no number of other grammars evicts."""
        self._decoder.keeping = True
        try:
            yield
        finally:
            self._decoder.keeping = False

    # --- Generation -----------------------------------------------------------------------------------------

    def generate(
        self,
        request: EngineRequest,
        *,
        deadline: Deadline | None = None,
        grammar_check: GrammarCheck = "lazy",
    ) -> Completion:
        """Run one request to completion (or to the deadline).

        ``grammar_check="eager"`` applies a grammar to every token of the vocabulary at every step (what
        llama-cpp-python does): the same tokens, slower; it exists to show that they are the same.
        """
        self._check(request)
        with self._running():
            progress = _GenerationProgress(deadline, self._logprob_recorder(request))
            self._load_prefix(request)
            cached = self._cached_prefix(request)
            completion = self._completion(request, progress, grammar_check=grammar_check)
            for _ in completion:
                pass
        return _result(request, progress, completion, cached)

    def stream(
        self, request: EngineRequest, *, deadline: Deadline | None = None
    ) -> Iterator[EngineStreamItem]:
        """Generate token by token: :class:`TokenDelta` items, then one final :class:`Completion`.

        The request is checked (and refused with a ``RequestError``) before this returns. The engine's lock
        is taken at the first ``next()`` and held until the last token; a consumer that stops early must
        ``close()`` the iterator (garbage collection does too) to release it.
        """
        self._check(request)
        return self._stream(request, deadline)

    def _stream(self, request: EngineRequest, deadline: Deadline | None) -> Iterator[EngineStreamItem]:
        with self._running():
            progress = _GenerationProgress(deadline, self._logprob_recorder(request))
            self._load_prefix(request)
            cached = self._cached_prefix(request)
            completion = self._completion(request, progress)
            deltas = iter(completion)
            try:
                yield from deltas
            finally:
                # Closing the decoder's generator here, under the lock, stops llama.cpp before another
                # request may use the context.
                deltas.close()
        yield _result(request, progress, completion, cached)

    def keep_prefix(self, tokens: list[int]) -> int:
        """Evaluate ``tokens`` as a prompt's start and keep their state for good (a declared prefix,
        before the snapshot): a request whose prompt starts with them restores it and evaluates only the
        rest. Returns the state's bytes (0: nothing kept, a prefix too short for any prompt to reuse)."""
        with self._running():
            self._decoder.reset()
            self._decoder.evaluate(tokens)
            keep = len(tokens)
            if not keep:
                return 0
            state = self._decoder.save(keep)
            self._prefixes.add(state, pinned=True)
            return state.size

    def prime(self, tokens: list[int]) -> None:
        """Leave exactly ``tokens`` evaluated in the KV cache (after a warm-up: the prefix every chat
        starts with, so the first request after a restore reuses it as a warm one would)."""
        with self._running():
            if self._draft is not None:
                # llama.cpp's logits buffer grows to a drafted batch's rows now, before the snapshot, rather
                # than in the first request after a restore (whose pages the prefault has not touched).
                self._decoder.reserve_outputs(1 + self._draft.tokens)
            self._decoder.reset()
            self._decoder.evaluate(tokens)
            self._prefixes.forget_recent()

    def _check(self, request: EngineRequest) -> None:
        """Refuse what llama.cpp cannot run: no token to start from, a token or a biased token outside the
        vocabulary, or no room left in the context."""
        if not request.tokens:
            # llama.cpp cannot sample without at least one token of context.
            raise InvalidRequestError("the prompt is empty")
        n_vocab = self.n_vocab
        biased = (token for token, _ in request.sampling.logit_bias)
        outside = next((t for t in (*request.tokens, *biased) if not 0 <= t < n_vocab), None)
        if outside is not None:
            raise InvalidRequestError(
                f"token id {outside} is outside this model's vocabulary (ids 0 to {n_vocab - 1})"
            )
        if len(request.tokens) >= self.n_ctx:
            raise ContextLengthExceededError(
                f"the prompt is {len(request.tokens)} tokens; "
                f"this model's context window is {self.n_ctx} tokens"
            )

    def _logprob_recorder(self, request: EngineRequest) -> _LogprobRecorder | None:
        count = request.top_logprobs
        return None if count is None else _LogprobRecorder(self._llama, count)

    def _cached_prefix(self, request: EngineRequest) -> int:
        """How many prompt tokens llama.cpp will reuse from the KV cache (the common prefix with the last
        request, less the one token it evaluates again); none when the request evaluates afresh."""
        if not request.reuse_cache:
            return 0
        cached = self._decoder.reused(list(request.tokens))
        stats = self._prefixes.stats
        stats.hits += cached > 0
        stats.misses += cached == 0
        stats.cached_tokens += cached
        return cached

    def _load_prefix(self, request: EngineRequest) -> None:
        """Restore the saved state the prompt reuses most of, when that is more than the live sequence
        gives; the live sequence's reusable part is saved first whenever the request would overwrite it.
        The caller holds the lock."""
        decoder, prefixes = self._decoder, self._prefixes
        prompt = list(request.tokens)
        # A request that evaluates afresh (a seed) reuses nothing, but still evaluates over the live sequence.
        live = decoder.reused(prompt) if request.reuse_cache else 0
        keep = len(decoder.cached)
        if keep > max(live, MIN_SAVED_TOKENS - 1) and not prefixes.holds(decoder.cached[:keep]):
            # The request would evaluate over what this conversation may reuse next turn.
            prefixes.add(decoder.save(keep))
        if not request.reuse_cache:
            return
        state, most = prefixes.best(lambda saved: decoder.reused_from(saved, prompt))
        if state is not None and most > live:
            decoder.restore(state)
            prefixes.stats.restores += 1

    def _completion(
        self,
        request: EngineRequest,
        progress: _GenerationProgress,
        *,
        grammar_check: GrammarCheck = "lazy",
    ) -> _Completion:
        """The request's answer, generated as it is iterated; the caller holds the lock."""
        if not request.reuse_cache:
            self._decoder.reset()
        recorder = progress.logprobs
        progress.drafting_from(self._decoder)
        max_tokens = min(request.max_tokens, self.n_ctx - len(request.tokens))
        piece = self._decoder.special_piece if request.special_text else self._decoder.piece
        span = SpanTracker(request.span, self._decoder.special_piece) if request.span else None
        tokens = self._decoder.tokens(
            list(request.tokens),
            request.sampling,
            grammar=request.grammar,
            grammar_check=grammar_check,
            logprobs=None if recorder is None else recorder.top,
            limit=max_tokens,
            draft=self._draft if request.speculative else None,
            span=span,
            check=progress.check_prompt if progress.deadline is not None else None,
            close_at_limit=request.close_at_limit,
        )
        return _Completion(
            tokens, piece, stop=list(request.stop), max_tokens=max_tokens, progress=progress, span=span
        )


def default_drafting(settings: EngineSettings) -> Drafting | None:
    """Speculative decoding where it is asked for (``settings.speculative``) and exact: attention over bf16
    values, which computes a row alike in any batch (the weight kernels do in snapllm's build of llama.cpp:
    docs/decoding.md)."""
    return Drafting() if settings.speculative and settings.batch_invariant_attention else None


def _result(
    request: EngineRequest, progress: _GenerationProgress, completion: _Completion, cached: int
) -> Completion:
    recorder = progress.logprobs
    return Completion(
        text=completion.text,
        finish="length" if progress.deadline_reached else completion.finish,
        prompt_tokens=len(request.tokens),
        completion_tokens=completion.completion_tokens,
        cached_tokens=cached,
        timings=progress.timings(completion.completion_tokens),
        deadline_reached=progress.deadline_reached,
        logprobs=None if recorder is None else tuple(recorder.tokens)[: completion.completion_tokens],
        span_tokens=completion.span.tokens if completion.span else 0,
    )
