"""What the engine takes and gives back: tokens in, text and token records out. No llama.cpp, no OpenAI.

The protocol (:mod:`snapllm.protocol.serving`) builds an :class:`EngineRequest` from an OpenAI request and
renders the :class:`Completion` (or the streamed :class:`TokenDelta` items before it) back::

    request = EngineRequest(tokens=[1, 2, 3], sampling=Sampling(temperature=0.0, top_p=1.0, seed=7),
                            max_tokens=64, stop=("\\n\\n",), grammar=None, top_logprobs=None)
    completion = engine.generate(request, deadline=Deadline.after(25.0))
    completion.text, completion.finish, completion.timings
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Literal, Protocol


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock by which generation must have stopped (checked between a prompt's
    batches and between tokens); one made :meth:`cancellable` also passes at once when :meth:`cancel` is
    called, from any thread (the client closed its connection: nobody waits for the answer any more)."""

    at: float
    cancel_event: threading.Event | None = field(default=None, compare=False, repr=False)

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def cancellable(self) -> Deadline:
        """This deadline, with an event of its own that :meth:`cancel` sets."""
        return replace(self, cancel_event=threading.Event())

    def cancel(self) -> None:
        """Let the deadline pass now (a deadline that is not :meth:`cancellable` ignores this)."""
        if self.cancel_event is not None:
            self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event is not None and self.cancel_event.is_set()

    def expired(self) -> bool:
        return self.cancelled or time.monotonic() >= self.at

    def remaining(self) -> float:
        """Seconds left (0 once cancelled; negative once passed)."""
        return 0.0 if self.cancelled else self.at - time.monotonic()


@dataclass(frozen=True)
class Sampling:
    """How a token is picked from the model's distribution (temperature 0: the most likely one).

    The defaults are llama.cpp's sampler chain as llama-cpp-python's ``create_completion`` runs it: the 40
    best tokens, typical sampling off (1.0), min-p 0.05, no repetition penalty (1.0) over the last 64 tokens.
    ``top_k`` 0 (or less) keeps the whole vocabulary; ``penalty_last_n`` 0 turns the penalties off, and -1
    (or more than the context window) makes them look at the whole context. ``logit_bias``
    pairs (token id, bias) are added to those tokens' logits before anything else, at temperature 0 too.
    """

    temperature: float
    top_p: float
    seed: int
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    penalty_last_n: int = 64
    logit_bias: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class SpanBudget:
    """A part of the answer, from ``opening`` (from the first token when it is "") to ``closing``, that may
    take at most ``max_tokens`` tokens and must close by ``close_by`` (a ``time.monotonic()`` value): past
    either, the engine writes ``closing_tokens`` (the tokens of ``closing``) itself and generation goes on
    after them. A reasoning model's thinking is one such part."""

    opening: str
    closing: str
    closing_tokens: tuple[int, ...]
    max_tokens: int
    close_by: float | None = None


@dataclass(frozen=True)
class EngineRequest:
    """One generation: the prompt's tokens and how to continue them.

    ``grammar`` (a llguidance grammar string: what ``LLMatcher.grammar_from_lark`` returns) constrains every
    token; ``top_logprobs`` asks for each token's log probability and that many alternatives (None: none).
    ``reuse_cache`` false evaluates the whole prompt afresh instead of reusing the KV cache's common prefix: a
    prefix evaluated earlier can round differently from the whole prompt evaluated at once, so a caller that
    must reproduce an answer turns it off.
    """

    tokens: tuple[int, ...]
    sampling: Sampling
    max_tokens: int
    stop: tuple[str, ...] = ()
    grammar: str | None = None
    top_logprobs: int | None = None
    reuse_cache: bool = True
    #: Whether control tokens (``<|channel|>``) are written into the text, for a model whose output format
    #: is made of them; otherwise they stand for nothing.
    special_text: bool = False
    span: SpanBudget | None = None
    #: Whether speculative decoding may draft for it (the tokens are the same either way).
    speculative: bool = True
    #: Whether a constrained answer cut by ``max_tokens`` ends the shortest valid way in its last tokens
    #: (the JSON closed), rather than where the limit falls.
    close_at_limit: bool = True


@dataclass(frozen=True)
class Timings:
    """Where the time of one generation went. ``prompt_ms`` includes sampling the first token."""

    prompt_ms: float
    time_to_first_token_ms: float
    generation_ms: float
    total_ms: float
    tokens_per_second: float
    #: Guesses evaluated beside the sampled tokens (speculative decoding), and how many of them were kept:
    #: llama-server's ``draft_n`` and ``draft_n_accepted``.
    draft_n: int = 0
    draft_n_accepted: int = 0

    def as_dict(self) -> dict[str, float]:
        return {item.name: round(getattr(self, item.name), 2) for item in fields(self)}


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability and, best first, the ``top`` alternatives (token, logprob).

    The probabilities are the model's own, before sampling settings and any grammar narrow the choice."""

    token: str
    token_bytes: tuple[int, ...]
    logprob: float
    top: tuple[tuple[str, tuple[int, ...], float], ...] = ()


#: Why generation ended: an end-of-generation token or a stop string ("stop"), else ``max_tokens`` or the
#: deadline ("length"; :attr:`Completion.deadline_reached` tells which).
Finish = Literal["stop", "length"]


@dataclass(frozen=True)
class Completion:
    """What the engine generated for one :class:`EngineRequest`."""

    text: str
    finish: Finish
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    timings: Timings
    deadline_reached: bool = False
    logprobs: tuple[TokenLogprob, ...] | None = None
    #: Tokens generated inside the request's span (the ones the engine wrote to close it included).
    span_tokens: int = 0


@dataclass(frozen=True)
class TokenDelta:
    """One piece of streamed text (usually one token; may be empty for a special token), with the
    log probabilities of its tokens when the request asked for them."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


EngineStreamItem = TokenDelta | Completion


class TextEngine(Protocol):
    """What the protocol needs of a loaded model (:class:`snapllm.engine.model.Engine` is one)."""

    @property
    def model_name(self) -> str: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_vocab(self) -> int: ...

    @property
    def metadata(self) -> Mapping[str, str]: ...

    @property
    def identity(self) -> str: ...

    @property
    def reuse_reproduces(self) -> bool: ...

    def special_tokens(self) -> tuple[str, str]: ...

    def control_tokens(self) -> frozenset[str]: ...

    def user_tokens(self) -> frozenset[str]: ...

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]: ...

    def accepts_grammar(self, grammar: str) -> bool: ...

    def generate(self, request: EngineRequest, *, deadline: Deadline | None = None) -> Completion: ...

    def stream(
        self, request: EngineRequest, *, deadline: Deadline | None = None
    ) -> Iterator[EngineStreamItem]: ...

    def keep_prefix(self, tokens: list[int]) -> int: ...

    def prime(self, tokens: list[int]) -> None: ...
