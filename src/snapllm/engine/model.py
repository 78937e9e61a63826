"""The generation engine: one llama.cpp model, one request at a time.

    engine = Engine.load(model.path, EngineSettings(), model_name="smollm2")
    generation = engine.generate(parse_request(body), deadline=Deadline.after(25.0))
    generation.text, generation.finish_reason, generation.timings

The engine formats chats with the model's own template, checks a request against the context window
and the configured limits before generating, seeds every request (from ``secrets`` when the caller
gives no seed, so environments restored from one snapshot do not answer alike) and stops before a
deadline with what it has instead of letting the invoke time out.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import llama_cpp.llama_cpp as low_level
from llama_cpp import Llama
from llama_cpp import __version__ as llama_cpp_version
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from snapllm import __version__ as snapllm_version
from snapllm.engine.decode import Decoder, GrammarCheck, PromptLookup, Sampled, Sampling
from snapllm.engine.settings import EngineSettings
from snapllm.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    ModelLoadError,
    UnknownModelError,
    UnsupportedParameterError,
)
from snapllm.protocol.chat_templates import family_template
from snapllm.protocol.constraints import chat_grammar
from snapllm.protocol.limits import Limits
from snapllm.protocol.requests import (
    CALLER_DEADLINE_KEY,
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
    Timings,
    TokenLogprob,
    ToolCall,
)
from snapllm.protocol.structured import (
    cut_call_error,
    generic_tool_call_text,
    generic_tool_instructions,
    parse_cut_tool_calls,
    parse_tool_calls,
)
from snapllm.system import available_cpus

_WARMUP_MESSAGES = [{"role": "user", "content": "Say hello."}]
#: The requests the before-snapshot warm-up runs (``max_tokens`` is the ``warmup_tokens`` setting): every
#: path a request can take through the engine, so none runs for the first time after a restore.
WARMUP_REQUESTS: tuple[dict[str, Any], ...] = (
    {"messages": _WARMUP_MESSAGES, "seed": 0},  # chat, seeded (the prompt re-evaluated), sampled
    {"messages": _WARMUP_MESSAGES, "temperature": 0.0},  # chat, unseeded, greedy, cached prefix
    {"prompt": "Hello, my name is"},  # text, unseeded, sampled
    {"messages": _WARMUP_MESSAGES, "logprobs": True, "top_logprobs": 2},
    {"messages": _WARMUP_MESSAGES, "response_format": {"type": "json_object"}},
    {
        "messages": _WARMUP_MESSAGES,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "greeting",
                "schema": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            },
        },
    },
    {
        "messages": _WARMUP_MESSAGES,
        "tools": [{"type": "function", "function": {"name": "wave", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
    },
)


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock by which generation must have stopped.

    Example::

        Deadline.from_lambda_context(context, margin_ms=1500)
    """

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    @classmethod
    def from_lambda_context(cls, context: Any, *, margin_ms: int) -> Deadline | None:
        """The invoke's deadline, or the caller's if that is earlier, less ``margin_ms`` for the response.

        None when the context has no deadline at all.
        """
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if remaining is None:
            return None
        remaining_ms = float(remaining())
        custom = getattr(getattr(context, "client_context", None), "custom", None) or {}
        caller = custom.get(CALLER_DEADLINE_KEY) if isinstance(custom, dict) else None
        if isinstance(caller, int | float) and not isinstance(caller, bool):
            remaining_ms = min(remaining_ms, caller - time.time() * 1000.0)
        return cls(time.monotonic() + (remaining_ms - margin_ms) / 1000.0)

    def expired(self) -> bool:
        return time.monotonic() >= self.at


@dataclass(frozen=True)
class PreparedPrompt:
    """A request turned into tokens and the limits that apply to it."""

    tokens: list[int]
    stop: list[str]
    max_tokens: int
    seed: int
    grammar: str | None = None
    # "all": the answer must be tool calls; "auto": it is tool calls when it opens with JSON.
    tool_calls: Literal["all", "auto"] | None = None
    tool_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class TokenDelta:
    """One piece of streamed text (usually one token; may be empty for a special token), with the
    log probabilities of its tokens when the request asked for them."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


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

    def finish(self, text: str, finish_reason: str) -> tuple[TokenLogprob, ...]:
        """The log probabilities of the tokens that make up the answer's text."""
        return tuple(self.tokens)

    def _piece(self, token: int) -> tuple[str, tuple[int, ...]]:
        data = self._llama.detokenize([token])
        return data.decode("utf-8", errors="replace"), tuple(data)


StreamItem = TokenDelta | Generation


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
    ) -> None:
        self._tokens = tokens
        self._piece = piece
        self._stop = [s for s in stop if s]
        self._max_tokens = max_tokens
        self._progress = progress
        self.text = ""
        self.finish: FinishReason = "length"
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
                hits = [i for i in (text.find(stop, released) for stop in self._stop) if i >= 0]
                if hits:
                    cut = min(hits)
                    self.finish = "stop"
                    break
                if self.completion_tokens >= self._max_tokens or self._progress.expired():
                    break
                end = len(text) - self._held(text, released)
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

    def token_sampled(self) -> None:
        self.sampled += 1
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()

    def expired(self) -> bool:
        if self.deadline is not None and self.deadline.expired():
            self.deadline_reached = True
        return self.deadline_reached

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
        return Timings(
            prompt_ms=prompt_ms,
            time_to_first_token_ms=prompt_ms,
            generation_ms=generation_ms,
            total_ms=(finished - self.started) * 1000.0,
            tokens_per_second=rate,
        )


@contextlib.contextmanager
def _model_params(*, use_extra_bufts: bool) -> Iterator[None]:
    """Set model parameters that ``Llama()`` has no argument for, for the duration of one construction.

    ``use_extra_bufts`` lets llama.cpp repack some quant types into a second, CPU-specific copy of the
    weights. The model already sits in RAM in its memfd, so repacking would keep two copies resident (and
    snapshot both).
    """
    original = low_level.llama_model_default_params

    def patched() -> Any:
        params = original()
        params.use_extra_bufts = use_extra_bufts
        return params

    low_level.llama_model_default_params = patched
    try:
        yield
    finally:
        low_level.llama_model_default_params = original


class Engine:
    """A loaded model that generates for one request at a time (llama.cpp contexts are not thread-safe)."""

    def __init__(
        self,
        llama: Llama,
        settings: EngineSettings,
        *,
        model_name: str,
        model_digest: str | None = None,
        draft: PromptLookup | None = None,
    ) -> None:
        self._llama = llama
        self._decoder = Decoder(llama)
        self._draft = draft
        # OpenAI's system_fingerprint: changes when the model's bytes or the software that runs it change.
        build = f"{model_digest or model_name}|llama-cpp-python {llama_cpp_version}|snapllm {snapllm_version}"
        self.fingerprint = "fp_" + hashlib.sha256(build.encode()).hexdigest()[:12]
        self._settings = settings
        self._lock = threading.Lock()
        self.model_name = model_name
        self.limits = Limits(max_tokens=settings.max_tokens, max_prompt_chars=settings.max_prompt_chars)
        self._formatter = self._chat_formatter(llama)
        template = llama.metadata.get("tokenizer.chat_template") or ""
        self._template_has_tools = "tools" in template

    @classmethod
    def load(
        cls,
        model_path: str,
        settings: EngineSettings,
        *,
        model_name: str,
        source: str | None = None,
        model_digest: str | None = None,
        draft: PromptLookup | None = None,
    ) -> Engine:
        """Load a GGUF file (``/proc/self/fd/N`` for a memfd) with llama.cpp, memory-mapped.

        ``source`` names where the bytes came from (``s3://...``) in the :class:`ModelLoadError` raised
        when llama.cpp refuses them: a memfd's path alone says nothing about which model it was.
        """
        threads = settings.threads or available_cpus()
        try:
            with _model_params(use_extra_bufts=settings.repack_weights):
                llama = Llama(
                    model_path=model_path,
                    n_ctx=settings.n_ctx,
                    n_batch=settings.n_batch,
                    n_threads=threads,
                    n_threads_batch=threads,
                    use_mmap=True,
                    verbose=settings.verbose,
                )
        except ValueError as exc:
            # llama-cpp-python reports every refusal (architecture, tensor type, layout) as a ValueError.
            raise ModelLoadError(
                f"llama.cpp could not load the model {model_name!r} from {source or model_path}: {exc} "
                "(set SNAPLLM_LLAMA_VERBOSE=true to see llama.cpp's reason)"
            ) from exc
        return cls(llama, settings, model_name=model_name, model_digest=model_digest, draft=draft)

    @property
    def llama(self) -> Llama:
        return self._llama

    @property
    def cached_tokens(self) -> tuple[int, ...]:
        """The tokens the KV cache holds (a request that starts with them evaluates only the rest)."""
        return tuple(self._decoder.cached)

    def check_model(self, requested: str | None) -> None:
        """Refuse a request that names a model other than the loaded one (no name means this one)."""
        if requested is not None and requested != self.model_name:
            raise UnknownModelError(
                f"the model {requested!r} does not exist; available: {self.model_name}", param="model"
            )

    @property
    def supports_chat(self) -> bool:
        """Whether the model has a chat template, its own or its family's (without one, only text
        completions are served)."""
        return self._formatter is not None

    @property
    def threads(self) -> int:
        return int(self._llama.n_threads)

    @property
    def n_ctx(self) -> int:
        # llama.cpp pads its context (to a multiple of 256), but llama-cpp-python sizes its token buffer
        # to the configured value: the configured value is the real limit.
        return min(int(self._llama.n_ctx()), self._settings.n_ctx)

    @staticmethod
    def _chat_formatter(llama: Llama) -> Any:
        """The model's own chat template, else its family's (:mod:`snapllm.protocol.chat_templates`: the
        packaged
        Gemma 3 has none in its GGUF), else None (text completions only)."""
        template = llama.metadata.get("tokenizer.chat_template")
        eos_id, bos_id = llama.token_eos(), llama.token_bos()
        vocab = llama._model
        eos = vocab.token_get_text(eos_id) if eos_id != -1 else ""
        if not template:
            fallback = family_template(llama.metadata)
            if fallback is None:
                return None
            # The formatter's end-of-sequence text is the answer's stop string: the family's end of turn.
            template, eos = fallback.source, fallback.stop
        return Jinja2ChatFormatter(
            template=template,
            eos_token=eos,
            bos_token=vocab.token_get_text(bos_id) if bos_id != -1 else "",
            stop_token_ids=[eos_id],
        )

    def prepare(self, request: InferenceRequest) -> PreparedPrompt:
        """Tokenize the request and resolve its limits; raises a RequestError if it cannot run."""
        self.limits.check(request)  # before tokenizing: a prompt over the limit is never tokenized
        llama = self._llama
        stop = list(request.stop or [])
        grammar: str | None = None
        tool_calls: Literal["all", "auto"] | None = None
        if isinstance(request, ChatCompletionRequest):
            if self._formatter is None:
                raise UnsupportedParameterError(
                    f"model {self.model_name} has no chat template; use a text completion ('prompt')",
                    param="messages",
                )
            tokens, template_stops = self._chat_tokens(request)
            stop += template_stops
            param = "messages"
            grammar, tool_calls = chat_grammar(request)
            if grammar is not None:
                self._check_grammar(grammar, param="tools" if tool_calls else "response_format")
        else:
            tokens = llama.tokenize(request.text.encode(), add_bos=True, special=True)
            param = "prompt"

        if not tokens:
            # llama.cpp cannot sample without at least one token of context (an empty prompt for a model
            # that adds no BOS token fails inside sampling).
            raise InvalidRequestError(f"the {param} is empty", param=param)
        n_ctx = self.n_ctx
        if len(tokens) >= n_ctx:
            raise ContextLengthExceededError(
                f"the prompt is {len(tokens)} tokens; this model's context window is {n_ctx} tokens",
                param=param,
            )
        requested = request.requested_max_tokens
        max_tokens = min(requested or self._settings.max_tokens, n_ctx - len(tokens))
        seed = request.seed if request.seed is not None else secrets.randbits(32)
        return PreparedPrompt(
            tokens=tokens,
            stop=stop,
            max_tokens=max_tokens,
            seed=seed,
            grammar=grammar,
            tool_calls=tool_calls,
            # The functions the answer may call: the forced ones when tool_choice forces (a cut name is then
            # completed among those only), else every tool.
            tool_names=tuple(f.name for f in getattr(request, "forced_tools", None) or [])
            or tuple(t.function.name for t in getattr(request, "tools", None) or []),
        )

    # --- Chats with tools and structured output ------------------------------------------------------------

    def _format_chat(self, request: ChatCompletionRequest) -> Any:
        """The chat as the model's template renders it, tools included.

        A template that mentions ``tools`` gets them (and earlier tool calls and results) the way Hugging
        Face templates expect. Any other template gets the generic format of
        :mod:`snapllm.protocol.structured`: the tools described in the system message, earlier calls as the
        JSON
        the model would have generated, and each result as a user turn naming the call it answers.
        """
        native = self._template_has_tools
        names = {call.id: call.function.name for m in request.messages for call in m.tool_calls or []}
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            role = "system" if m.role == "developer" else m.role
            if m.tool_calls and native:
                calls = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": _json_or_text(call.function.arguments),
                        },
                    }
                    for call in m.tool_calls
                ]
                messages.append({"role": role, "content": m.text(), "tool_calls": calls})
            elif m.tool_calls:
                text = generic_tool_call_text([(c.function.name, c.function.arguments) for c in m.tool_calls])
                messages.append({"role": role, "content": (m.text() + "\n" + text).lstrip("\n")})
            elif m.role == "tool" and native:
                messages.append({"role": "tool", "content": m.text(), "tool_call_id": m.tool_call_id})
            elif m.role == "tool":
                name = names.get(m.tool_call_id or "", "a function")
                content = f"Result of the call {m.tool_call_id} to {name}: {m.text()}"
                messages.append({"role": "user", "content": content})
            else:
                messages.append({"role": role, "content": m.text()})
        if not request.calls_tools:
            return self._formatter(messages=messages)
        functions = [tool.function.model_dump(exclude_none=True) for tool in request.tools or []]
        if native:
            tools = [{"type": "function", "function": f} for f in functions]
            return self._formatter(messages=messages, tools=tools)
        instructions = generic_tool_instructions(functions, parallel=request.parallel_calls)
        if messages[0]["role"] == "system":
            messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{instructions}"}
        else:
            messages.insert(0, {"role": "system", "content": instructions})
        return self._formatter(messages=messages)

    def _check_grammar(self, grammar: str, *, param: str) -> None:
        """Parse the grammar with llama.cpp once: a grammar it refuses would otherwise reach the sampler
        chain as a null sampler, which crashes the process.

        :mod:`snapllm.protocol.json_grammar` refuses, by name, every schema it cannot write a grammar for;
        a grammar
        it wrote that llama.cpp still refuses is a fault of that module, reported as such."""
        sampler = low_level.llama_sampler_init_grammar(self._llama._model.vocab, grammar.encode(), b"root")
        if not sampler:
            raise UnsupportedParameterError(
                f"{param}: llama.cpp refused the grammar snapllm wrote for this schema, which is a fault in "
                "snapllm (llama.cpp logs its reason when SNAPLLM_LLAMA_VERBOSE=true); please report it",
                param=param,
            )
        low_level.llama_sampler_free(sampler)

    def generate(
        self,
        request: InferenceRequest,
        *,
        deadline: Deadline | None = None,
        grammar_check: GrammarCheck = "lazy",
    ) -> Generation:
        """Run one request to completion (or to the deadline) and return the text with usage and timings.

        ``grammar_check="eager"`` applies a grammar to every token of the vocabulary at every step (what
        llama-cpp-python does): the same tokens, slower; it exists to show that they are the same.
        """
        return self.generate_prepared(
            request, self.prepare(request), deadline=deadline, grammar_check=grammar_check
        )

    def generate_prepared(
        self,
        request: InferenceRequest,
        prepared: PreparedPrompt,
        *,
        deadline: Deadline | None = None,
        grammar_check: GrammarCheck = "lazy",
    ) -> Generation:
        """:meth:`generate` for a request :meth:`prepare` has already turned into tokens (and that a caller
        may have adjusted: a benchmark gives a text completion the grammar a chat would get)."""
        with self._lock:
            progress = _GenerationProgress(deadline, self._logprob_recorder(request))
            cached = self._cached_prefix(request, prepared)
            completion = self._completion(request, prepared, progress, grammar_check=grammar_check)
            for _ in completion:
                pass
        return _generation(
            prepared,
            progress,
            text=completion.text,
            finish=completion.finish,
            completion_tokens=completion.completion_tokens,
            cached_tokens=cached,
            fingerprint=self.fingerprint,
        )

    def prepare_grammar(self, request: ChatCompletionRequest) -> str | None:
        """The grammar that constrains a chat request's answer (None: the answer is free)."""
        return chat_grammar(request)[0]

    def stream(self, request: InferenceRequest, *, deadline: Deadline | None = None) -> Iterator[StreamItem]:
        """Generate token by token: :class:`TokenDelta` items, then one final :class:`Generation`.

        The request is prepared (and rejected with a ``RequestError``) before this returns, so a caller
        can answer with an error status before it starts a streamed response::

            for item in engine.stream(request):
                if isinstance(item, TokenDelta):
                    send(item.text)
                else:
                    finish(item.finish_reason, item.usage(), item.timings)

        The engine's lock is taken at the first ``next()`` and held until the last token; a consumer
        that stops early must ``close()`` the iterator (garbage collection does too) to release it.
        """
        prepared = self.prepare(request)
        return self._stream(request, prepared, deadline)

    def _stream(
        self, request: InferenceRequest, prepared: PreparedPrompt, deadline: Deadline | None
    ) -> Iterator[StreamItem]:
        pieces: list[str] = []
        # Tool calls are sent whole at the end (as OpenAI-shaped deltas), so their text is held back: all
        # of it when the answer must call, and under "auto" until the first character shows a call.
        holding = prepared.tool_calls is not None
        with self._lock:
            progress = _GenerationProgress(deadline, self._logprob_recorder(request))
            recorded = 0
            cached = self._cached_prefix(request, prepared)
            completion = self._completion(request, prepared, progress)
            deltas = iter(completion)
            try:
                for delta in deltas:
                    pieces.append(delta.text)
                    if holding:
                        started = "".join(pieces)
                        if prepared.tool_calls == "all" or not started or started[0] in "{[":
                            continue
                        holding = False
                        yield TokenDelta(started)
                        continue
                    if delta.logprobs is not None:
                        recorded += len(delta.logprobs)
                    yield delta
            finally:
                # Closing the decoder's generator here, under the lock, stops llama.cpp before another
                # request may use the context.
                deltas.close()
        generation = _generation(
            prepared,
            progress,
            text=completion.text,
            finish=completion.finish,
            completion_tokens=completion.completion_tokens,
            cached_tokens=cached,
            fingerprint=self.fingerprint,
        )
        if holding and not generation.tool_calls and generation.text:
            # Held back but no call: an answer that opened with JSON under "auto" (a response_format's JSON
            # answer), which is text. A call cut short is calls (see _generation), never text.
            yield TokenDelta(generation.text)
        elif generation.logprobs is not None and len(generation.logprobs) > recorded:
            yield TokenDelta("", generation.logprobs[recorded:])
        yield generation

    def warm_up(self, requests: Iterable[InferenceRequest]) -> None:
        """Generate and stream a few tokens of each request, so compute buffers, the sampler, the chat
        template and every code path are primed; then leave the chat template's common prefix evaluated.

        The KV cache then holds only what every chat without its own system message starts with (for many
        templates, a default system prompt): the first request after a restore reuses it as a warm one
        would, and no request inherits a warm-up's own tokens.
        """
        for request in requests:
            self.generate(request)
            for _ in self.stream(request):
                pass
        with self._lock:
            self._decoder.reset()
            self._decoder.evaluate(self._chat_prefix())

    def _chat_tokens(self, request: ChatCompletionRequest) -> tuple[list[int], list[str]]:
        """The chat formatted by the model's template (:meth:`_format_chat`) and tokenized, and the
        template's stop strings."""
        try:
            formatted = self._format_chat(request)
        except Exception as exc:  # templates raise their own errors, e.g. on an unsupported role order
            raise InvalidRequestError(
                f"the model's chat template rejected the messages: {exc}", param="messages"
            ) from None
        tokens = self._llama.tokenize(
            formatted.prompt.encode(), add_bos=not formatted.added_special, special=True
        )
        stops = [formatted.stop] if isinstance(formatted.stop, str) else formatted.stop or []
        return tokens, [stop for stop in stops if stop]

    def _chat_prefix(self) -> list[int]:
        """The tokens every single-user-message chat begins with, as this model's template formats it."""
        if self._formatter is None:
            return []
        first, second = (
            self._chat_tokens(ChatCompletionRequest(messages=[{"role": "user", "content": text}]))[0]
            for text in ("Hello.", "Goodbye.")
        )
        common = 0
        while common < min(len(first), len(second)) and first[common] == second[common]:
            common += 1
        return first[:common]

    def _logprob_recorder(self, request: InferenceRequest) -> _LogprobRecorder | None:
        count = request.logprobs_count
        return None if count is None else _LogprobRecorder(self._llama, count)

    def _cached_prefix(self, request: InferenceRequest, prepared: PreparedPrompt) -> int:
        """How many prompt tokens llama.cpp will reuse from the KV cache (the common prefix with the last
        request, less the one token it evaluates again); none when a seed makes it start afresh."""
        if request.seed is not None:
            return 0
        return self._decoder.reused(prepared.tokens)

    def _completion(
        self,
        request: InferenceRequest,
        prepared: PreparedPrompt,
        progress: _GenerationProgress,
        *,
        grammar_check: GrammarCheck = "lazy",
    ) -> _Completion:
        """The request's answer, generated as it is iterated; the caller holds the lock."""
        if request.seed is not None:
            # A cached prompt prefix leaves the last prompt token to be evaluated alone, which can round
            # differently from evaluating it with the whole prompt; a caller-chosen seed must reproduce.
            self._decoder.reset()
        sampling = Sampling(
            temperature=request.temperature,
            top_p=request.top_p,
            seed=prepared.seed,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
        )
        recorder = progress.logprobs
        tokens = self._decoder.tokens(
            prepared.tokens,
            sampling,
            grammar=prepared.grammar,
            grammar_check=grammar_check,
            logprobs=None if recorder is None else recorder.top,
            limit=prepared.max_tokens,
            draft=self._draft,
        )
        return _Completion(
            tokens,
            self._decoder.piece,
            stop=prepared.stop,
            max_tokens=prepared.max_tokens,
            progress=progress,
        )


def _json_or_text(text: str) -> Any:
    """Tool-call arguments as the value they encode (what chat templates expect), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _generation(
    prepared: PreparedPrompt,
    progress: _GenerationProgress,
    *,
    text: str,
    finish: str,
    completion_tokens: int,
    cached_tokens: int,
    fingerprint: str | None = None,
) -> Generation:
    """The :class:`Generation` of a finished completion; a tool-call answer becomes its calls.

    A tool-call answer cut short (by ``max_tokens`` or the deadline) is still calls, never text: the
    calls as far as they were generated, with ``finish_reason`` "length" (OpenAI's shape of a truncated
    call: the name, and the arguments generated so far);
    :func:`~snapllm.protocol.structured.cut_call_error` if the
    cut came before a call's name was decided."""
    finish_reason: FinishReason = "length" if progress.deadline_reached or finish == "length" else "stop"
    calls: tuple[ToolCall, ...] = ()
    if prepared.tool_calls is not None:
        if finish_reason == "stop":
            parsed: list[tuple[str | None, str]] | None = parse_tool_calls(text, prepared.tool_names)
        else:
            parsed = parse_cut_tool_calls(text, prepared.tool_names)
            # An answer that must call but was cut before its first token has no call either.
            nothing = parsed is None and prepared.tool_calls == "all" and not text.strip()
            if nothing or (parsed is not None and any(name is None for name, _ in parsed)):
                raise cut_call_error(
                    deadline=progress.deadline_reached, max_tokens=prepared.max_tokens, text=text
                )
        calls = tuple(
            ToolCall(id=f"call_{secrets.token_hex(12)}", name=name or "", arguments=arguments)
            for name, arguments in parsed or []
        )
        if calls and finish_reason == "stop":
            finish_reason = "tool_calls"
    logprobs = None
    if progress.logprobs is not None:
        logprobs = progress.logprobs.finish(text, finish)[:completion_tokens]
    return Generation(
        system_fingerprint=fingerprint,
        logprobs=logprobs,
        text=text,
        finish_reason=finish_reason,
        prompt_tokens=len(prepared.tokens),
        completion_tokens=completion_tokens,
        timings=progress.timings(completion_tokens),
        seed=prepared.seed,
        deadline_reached=progress.deadline_reached,
        tool_calls=calls,
        cached_tokens=cached_tokens,
    )
