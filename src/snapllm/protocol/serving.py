"""Serving the OpenAI API over an engine: the one path of the direct invoke, the stream and the local stack.

    serving = OpenAIServing(engine, max_tokens=512, max_prompt_chars=32_000)
    request = serving.parse(body, required="messages")     # refuses another model's name
    answer, generation = serving.complete(request, deadline=Deadline.after(25.0))

docs/architecture.md ("Packages") says what it does with a request and with the engine's completion.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from snapllm.engine.types import (
    Completion,
    Deadline,
    EngineRequest,
    Sampling,
    SpanBudget,
    TextEngine,
    TokenDelta,
)
from snapllm.errors import (
    ConfigurationError,
    ContextLengthExceededError,
    InvalidRequestError,
    RequestError,
    UnsupportedParameterError,
)
from snapllm.protocol.completions.chat import ChatRenderer, RenderedChat
from snapllm.protocol.completions.constraints import ToolCalls, answer_schema, chat_grammar
from snapllm.protocol.completions.objects import render_response
from snapllm.protocol.completions.sse import StreamEncoder, encoder_for
from snapllm.protocol.constraints.answer_check import check_answer
from snapllm.protocol.constraints.compiled_schema import compile_schema, keeping_compiles
from snapllm.protocol.constraints.lark_grammar import marker_tokens
from snapllm.protocol.constraints.structured import arguments_valid, cut_call_error, tool_arguments
from snapllm.protocol.families.bare_calls import bare_calls, bare_calls_allowed, may_be_bare_call
from snapllm.protocol.families.families import ModelFamily, detect_family
from snapllm.protocol.families.reasoning import ReasoningSplitter, ThinkingState
from snapllm.protocol.families.tool_formats import GENERIC
from snapllm.protocol.limits import Limits
from snapllm.protocol.prefixes import common_prefix, sentinel_bodies
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
    ToolCall,
    check_served_model,
    parse_request,
)
from snapllm.protocol.responses.responses_api import (
    AnyRequest,
    inference_request,
    parse_invoke,
    parse_responses_request,
    responses_fields,
)


@dataclass(frozen=True)
class ReasoningDelta:
    """A streamed piece of a reasoning model's thinking (its answer streams as :class:`TokenDelta`)."""

    text: str


StreamItem = TokenDelta | ReasoningDelta | Generation
#: What a stream yields for a token that has nothing to send (a tool call's text, sent whole at the end;
#: text held in case it opens a call): a point where the consumer may stop generation by closing the stream.
HELD = TokenDelta("")

#: The thinking budget of each ``reasoning_effort``, in tokens (never more than half the answer's
#: ``max_tokens``, so the answer always has room); a request that sends none thinks at "medium".
REASONING_BUDGETS = {"none": 0, "minimal": 64, "low": 256, "medium": 1024, "high": 4096, "xhigh": 8192}
DEFAULT_REASONING_EFFORT = "medium"
#: The share of the time left to a request that its thinking may take before the engine closes it.
THINKING_TIME_SHARE = 0.5
#: The field that tells a route's requests apart: chat completions, text completions, responses.
Required = Literal["messages", "prompt", "input"]

_WARMUP_MESSAGES = [{"role": "user", "content": "Say hello."}]
#: The requests the before-snapshot warm-up runs (``max_tokens`` is the ``warmup_tokens`` setting): every
#: path a request can take through the engine, so none runs for the first time after a restore.
#: The text request goes first: between two chats it would evict their shared prompt from the cache, and the
#: chat after it would evaluate that again (an eighth of a small model's warm-up).
WARMUP_REQUESTS: tuple[dict[str, Any], ...] = (
    {"prompt": "Hello, my name is"},  # text, unseeded, sampled
    {"messages": _WARMUP_MESSAGES, "seed": 0},  # chat, seeded (the prompt re-evaluated), sampled
    {"messages": _WARMUP_MESSAGES, "temperature": 0.0},  # chat, unseeded, greedy, cached prefix
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
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "wave",
                    "description": "Wave at the user.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "tool_choice": "auto",
    },
    # The Responses path (its parsing and rendering); the engine serves it as a chat.
    {"input": "Say hello.", "instructions": "Be brief.", "temperature": 0.0},
)


@dataclass(frozen=True)
class PreparedRequest:
    """A request turned into the engine's terms, with what it takes to read the answer back."""

    engine_request: EngineRequest
    # "all": the answer must be tool calls; "auto": it is tool calls when it opens a call.
    tool_calls: ToolCalls | None = None
    # The functions the answer may call: the forced ones when tool_choice forces (a cut name is then
    # completed among those only), else every tool; with the schema of each one's arguments.
    tool_names: tuple[str, ...] = ()
    tool_parameters: tuple[tuple[str, dict[str, Any] | None], ...] = ()
    # Where the prompt leaves a reasoning model: inside its thinking, past it, or before it.
    thinking: ThinkingState = "closed"
    # The response_format's schema: a complete answer is validated against it (what the grammar could not
    # hold is checked there; snapllm.protocol.constraints.answer_check).
    answer_schema: Any = None
    # What the grammar leaves to the answer check (each with where it is), said in the answer.
    validated: tuple[str, ...] = ()
    # Whether an answer that is one bare JSON call, without the format's tags, is read as that call
    # (snapllm.protocol.families.bare_calls).
    bare_calls: bool = False
    # Whether the answer may hold several calls (parallel_tool_calls).
    parallel_calls: bool = False
    # The tokens of the thinking's closing written at the end of the prompt because its budget left no room
    # to think: the model's output (its thinking's), not the prompt's, though evaluated with it.
    closed_thinking: int = 0

    @property
    def seed(self) -> int:
        return self.engine_request.sampling.seed

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens, as ``usage.prompt_tokens`` counts them."""
        return len(self.engine_request.tokens) - self.closed_thinking


def fingerprint(identity: str) -> str:
    """OpenAI's ``system_fingerprint``: changes when the model's bytes or the software that runs it do."""
    return "fp_" + hashlib.sha256(identity.encode()).hexdigest()[:12]


class OpenAIServing:
    """The OpenAI API over one engine: parse, prepare, generate or stream, render."""

    def __init__(self, engine: TextEngine, *, max_tokens: int, max_prompt_chars: int) -> None:
        """``max_tokens`` is both the largest a request may ask for and what one that asks for none gets;
        ``max_prompt_chars`` bounds a prompt before it is tokenized."""
        self.engine = engine
        self.limits = Limits(max_tokens=max_tokens, max_prompt_chars=max_prompt_chars)
        self.max_tokens = max_tokens
        self.model_name = engine.model_name
        self.fingerprint = fingerprint(engine.identity)
        self._chat = ChatRenderer.for_model(
            engine.metadata,
            *engine.special_tokens(),
            control_tokens=engine.control_tokens(),
            user_tokens=engine.user_tokens(),
        )
        architecture = str(engine.metadata.get("general.architecture", ""))
        #: What the model's family writes: its thinking and its tool calls.
        self.family: ModelFamily = detect_family(
            self._chat.source if self._chat else "", architecture=architecture
        )
        #: How calls are written: the family's own format when the template writes calls in it (it takes
        #: tools, or shows its calls as DeepSeek-R1's does), else the generic JSON format snapllm describes in
        #: the system message.
        self.tool_format = self.family.tool_calls if self._chat and self._chat.native_calls else GENERIC
        thinking = self.family.thinking
        markers = (thinking.start, thinking.end, thinking.resume, thinking.answer_prefix) if thinking else ()
        #: The special tokens the family's markers are made of (text to id): grammars write them as tokens.
        self.marker_tokens = marker_tokens(
            [*self.tool_format.markers, *markers],
            control=engine.control_tokens(),
            user=engine.user_tokens(),
            tokenize=lambda text: engine.tokenize(text, add_bos=False, special=True),
        )
        #: The warm-up paths the model's template refused (see :meth:`warm_up_bodies`).
        self.warm_up_refusals: list[str] = []
        #: The declared prefixes left out because this model cannot serve them (see :meth:`keep_prefixes`).
        self.prefix_refusals: list[str] = []
        # A render may write this much: the longest prompt, and room for the template's markup and tools.
        self._max_rendered = 4 * max_prompt_chars + 262_144

    @property
    def supports_chat(self) -> bool:
        """Whether the model has a chat template, its own or its family's (without one, only text
        completions are served)."""
        return self._chat is not None

    # --- Requests in ------------------------------------------------------------------------------------

    def check_model(self, requested: str | None) -> None:
        """Refuse a request that names a model other than the loaded one (no name means this one)."""
        check_served_model(requested, self.model_name)

    def parse(self, body: Any, *, required: Required | None = None) -> AnyRequest:
        """A request for this model from a decoded body: the route's kind (``required``), or, for a direct
        invoke (None), whichever kind the body is."""
        if required is None:
            parsed: AnyRequest = parse_invoke(body)
        elif required == "input":
            parsed = parse_responses_request(body)
        else:
            parsed = parse_request(body, required=required)
        self.check_model(parsed.model)
        return parsed

    def prepare(self, request: InferenceRequest, *, deadline: Deadline | None = None) -> PreparedRequest:
        """Tokenize the request and resolve its limits; raises a ``RequestError`` if it cannot run."""
        self.limits.check(request)  # before tokenizing: a prompt over the limit is never tokenized
        stop = list(request.stop or [])
        grammar: str | None = None
        tool_calls: ToolCalls | None = None
        thinking: ThinkingState = "closed"
        span: SpanBudget | None = None
        closed_thinking = 0
        if isinstance(request, ChatCompletionRequest):
            if self._chat is None:
                raise UnsupportedParameterError(
                    f"model {self.model_name} has no chat template; use a text completion ('prompt')",
                    param="messages",
                )
            kwargs = {
                **self.family.template_kwargs(request.reasoning_effort),
                **(request.chat_template_kwargs or {}),
            }
            chat = self._chat.render(request, kwargs, max_chars=self._max_rendered)
            tokens = self._chat_tokens(chat)
            stop += chat.stop
            param = "messages"
            tokens, thinking, span, closed_thinking = self._thinking(request, chat.prompt, tokens, deadline)
            grammar, tool_calls = chat_grammar(
                request,
                tool_format=self.tool_format,
                thinking=self.family.thinking,
                state=thinking,
                specials=self.marker_tokens,
            )
            if grammar is not None and not self.engine.accepts_grammar(grammar):
                # compile_schema refuses, by name, every schema llguidance cannot enforce.
                where = "tools" if tool_calls else "response_format"
                raise UnsupportedParameterError(
                    f"{where}: llguidance refused the grammar snapllm wrote for this request, which is a "
                    "fault in snapllm; please report it",
                    param=where,
                )
        else:
            param = "prompt"
            tokens = request.tokens
            if tokens is None:
                tokens = self.engine.tokenize(request.text or "", add_bos=True)
            else:
                self._check_vocabulary(tokens, param="prompt")
        if not tokens:
            # llama.cpp cannot sample without at least one token of context (an empty prompt for a model
            # that adds no BOS token fails inside sampling).
            raise InvalidRequestError(f"the {param} is empty", param=param)
        n_ctx = self.engine.n_ctx
        if len(tokens) >= n_ctx:
            raise ContextLengthExceededError(
                f"the prompt is {len(tokens)} tokens; this model's context window is {n_ctx} tokens",
                param=param,
            )
        seed = request.seed if request.seed is not None else secrets.randbits(32)
        sampling = Sampling(
            temperature=request.temperature,
            top_p=request.top_p,
            seed=seed,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
            logit_bias=self._token_biases(request),
            **request.sampler_settings,
        )
        forced = getattr(request, "forced_tools", None) or []
        tools = getattr(request, "tools", None) or []
        schema = answer_schema(request) if isinstance(request, ChatCompletionRequest) else None
        functions = forced or [tool.function for tool in tools]
        # A thinking closed in the prompt by its budget is output, charged to max_tokens as the engine's
        # closing of a span is; the answer keeps one token at least, so it always starts.
        answer_tokens = max(1, (request.requested_max_tokens or self.max_tokens) - closed_thinking)
        return PreparedRequest(
            EngineRequest(
                tokens=tuple(tokens),
                sampling=sampling,
                max_tokens=min(answer_tokens, n_ctx - len(tokens)),
                stop=tuple(stop),
                grammar=grammar,
                top_logprobs=request.logprobs_count,
                # A caller-chosen seed must reproduce: the whole prompt evaluated afresh, as the first time,
                # unless the caller asks for the cache (cache_prompt) and reuse computes as afresh.
                reuse_cache=request.seed is None
                or (request.cache_prompt is True and self.engine.reuse_reproduces),
                special_text=self.family.special_text,
                span=span,
                speculative=request.speculative is not False,
                close_at_limit=request.close_at_max_tokens is not False,
            ),
            tool_calls=tool_calls,
            tool_names=tuple(f.name for f in functions),
            tool_parameters=tuple((f.name, f.parameters) for f in functions),
            thinking=thinking,
            answer_schema=schema,
            validated=compile_schema(schema, param="response_format").validated if schema is not None else (),
            bare_calls=bare_calls_allowed(
                tool_calls=tool_calls, answer_schema=schema, opener=self.tool_format.opener
            ),
            parallel_calls=isinstance(request, ChatCompletionRequest) and request.parallel_calls,
            closed_thinking=closed_thinking,
        )

    def _token_biases(self, request: InferenceRequest) -> tuple[tuple[int, float], ...]:
        """``logit_bias`` as (token, bias) pairs, each token in this model's vocabulary (else a 400)."""
        biases = request.token_biases
        self._check_vocabulary([token for token, _ in biases], param="logit_bias")
        return biases

    def _check_vocabulary(self, tokens: list[int], *, param: str) -> None:
        """Refuse token ids the model does not have (the request models refuse negative ones)."""
        n_vocab = self.engine.n_vocab
        outside = next((token for token in tokens if token >= n_vocab), None)
        if outside is not None:
            raise InvalidRequestError(
                f"{param}: token id {outside} is not in this model's vocabulary (ids 0 to {n_vocab - 1})",
                param=param,
            )

    def _chat_tokens(self, chat: RenderedChat) -> list[int]:
        """The rendered chat's tokens: the template's markup with its control tokens, the messages' text as
        text. The template writes its own special tokens (a BOS among them, when the model uses one)."""
        if len(chat.pieces) <= 1:
            return self.engine.tokenize(chat.prompt, add_bos=False)
        tokens: list[int] = []
        for text, markup in chat.pieces:
            tokens += self.engine.tokenize(text, add_bos=False, special=markup)
        return tokens

    def _thinking(
        self, request: ChatCompletionRequest, prompt: str, tokens: list[int], deadline: Deadline | None
    ) -> tuple[list[int], ThinkingState, SpanBudget | None, int]:
        """Where the prompt leaves a reasoning model, and the budget of its thinking: at most its
        ``reasoning_effort``'s tokens (with its markers, half the answer's ``max_tokens`` at most) and a
        share of the time left. Thinking switched off where the template cannot switch it off is closed in
        the prompt, and so is thinking its budget leaves no token: the last value is how many of the prompt's
        tokens are then that closing, which is output (0 for "none", whose closing is the prompt's)."""
        markers = self.family.thinking
        if markers is None:
            return tokens, "closed", None, 0
        state = markers.prompt_state(prompt)
        if state == "closed":
            return tokens, state, None, 0
        answer_tokens = request.requested_max_tokens or self.max_tokens
        effort = request.reasoning_effort or DEFAULT_REASONING_EFFORT
        closing = tuple(self.engine.tokenize(markers.closing_text, add_bos=False))
        opening = "" if state == "open" else markers.start
        # The thinking's markers count against its half: gpt-oss's take six tokens.
        markup = len(closing) + len(self.engine.tokenize(opening, add_bos=False))
        budget = min(REASONING_BUDGETS[effort], max(0, answer_tokens // 2 - markup))
        if budget == 0 and state == "open":
            # The engine closes a span after a token of it: a budget of none is closed before the first.
            return tokens + list(closing), "closed", None, 0 if effort == "none" else len(closing)
        close_by = None
        if deadline is not None:
            now = time.monotonic()
            close_by = now + max(0.0, deadline.at - now) * THINKING_TIME_SHARE
        return tokens, state, SpanBudget(opening, markers.end, closing, budget, close_by), 0

    # --- Generation ---------------------------------------------------------------------------------------

    def generate(self, request: InferenceRequest, *, deadline: Deadline | None = None) -> Generation:
        """Run one request to completion (or to the deadline)."""
        prepared = self.prepare(request, deadline=deadline)
        return self.generation(prepared, self.engine.generate(prepared.engine_request, deadline=deadline))

    def stream(self, request: InferenceRequest, *, deadline: Deadline | None = None) -> Iterator[StreamItem]:
        """Generate token by token: :class:`TokenDelta` items, then one final :class:`Generation`.

        The request is prepared (and refused with a ``RequestError``) before this returns, so a caller can
        answer with an error status before it starts a streamed response. A consumer that stops early must
        ``close()`` the iterator, which releases the engine.
        """
        prepared = self.prepare(request, deadline=deadline)
        return self._stream(prepared, self.engine.stream(prepared.engine_request, deadline=deadline))

    def _stream(self, prepared: PreparedRequest, items: Iterator[Any]) -> Iterator[StreamItem]:
        # A reasoning model's thinking streams as ReasoningDelta items. Tool calls are sent whole at the end
        # (as OpenAI-shaped deltas), so their text is held back: all of the answer when it must call; under
        # "auto", in a format with an opener, whatever may still open a call; in the generic format, the
        # whole answer once its first character shows a call.
        markers = self.family.thinking
        splitter = (
            ReasoningSplitter(markers, state=prepared.thinking)
            if markers and markers.splits(prepared.thinking)
            else None
        )
        calls = prepared.tool_calls
        opener = self.tool_format.opener
        answer = ""  # the answer's text so far (the thinking apart)
        sent = 0  # how much of it went out
        holding = calls is not None
        recorded = 0
        completion: Completion | None = None
        try:
            for item in items:
                if not isinstance(item, TokenDelta):
                    completion = item
                    continue
                pieces = splitter.feed(item.text) if splitter else [("content", item.text)]
                for kind, text in pieces:
                    if kind == "reasoning":
                        yield ReasoningDelta(text)
                    else:
                        answer += text
                # A token with nothing to send yields HELD: the consumer gets control back after every
                # token, so one whose client has gone closes the stream there, which stops generation.
                if holding:
                    if calls == "all" or not answer or (not opener and answer[0] in "{["):
                        yield HELD
                        continue
                    if prepared.bare_calls and may_be_bare_call(answer):
                        yield HELD
                        continue
                    if opener:
                        end = self.tool_format.text_end(answer)
                        if end > sent:
                            yield TokenDelta(answer[sent:end])
                            sent = end
                        else:
                            yield HELD
                        continue
                    holding = False
                if sent == len(answer) and not item.logprobs:
                    yield HELD
                    continue
                if item.logprobs is not None:
                    recorded += len(item.logprobs)
                yield TokenDelta(answer[sent:], item.logprobs)
                sent = len(answer)
        finally:
            items.close()  # type: ignore[attr-defined]
        assert completion is not None
        for kind, text in splitter.flush() if splitter else []:
            if kind == "reasoning":
                yield ReasoningDelta(text)
            else:
                answer += text
        generation = self.generation(prepared, completion)
        # What is left of the answer: held back but no call (text, or an answer that opened with JSON under
        # "auto": a response_format's JSON answer), or text held in case it was a marker. A call cut short is
        # calls (see generation()), never text.
        rest = generation.text[sent:] if generation.text.startswith(answer[:sent]) else ""
        if rest and not (generation.tool_calls and not opener):
            yield TokenDelta(rest)
        elif generation.logprobs is not None and len(generation.logprobs) > recorded:
            yield TokenDelta("", generation.logprobs[recorded:])
        yield generation

    def generation(self, prepared: PreparedRequest, completion: Completion) -> Generation:
        """The :class:`Generation` of the engine's completion: a reasoning model's thinking apart from its
        answer, and a tool-call answer as its calls.

        A call is a call only when the grammar's call branch can have written it: it is in the family's
        format and its arguments are valid for its function (under "auto", JSON of the same shape from the
        answer's branch stays text). A tool-call answer cut short (by ``max_tokens`` or the deadline) is still
        calls, never text: the calls as far as they were generated, with ``finish_reason`` "length" (OpenAI's
        shape of a truncated call); :func:`~snapllm.protocol.constraints.structured.cut_call_error` if the cut
        came before a call's name was decided.
        """
        text = completion.text
        reasoning: str | None = None
        markers = self.family.thinking
        if markers is not None and markers.splits(prepared.thinking):
            reasoning, text = markers.split(text, state=prepared.thinking)
        finish_reason: FinishReason = completion.finish
        calls: tuple[ToolCall, ...] = ()
        if prepared.tool_calls is not None:
            tool_format = self.tool_format
            prose, call_text = tool_format.split(text)
            names = prepared.tool_names
            if finish_reason == "stop":
                parsed: list[tuple[str | None, str]] | None = None
                if call_text:
                    whole = tool_format.parse(call_text, names)
                    if whole is not None and (prepared.tool_calls == "all" or self._valid(prepared, whole)):
                        parsed = list(whole)
                elif prepared.bare_calls:
                    parsed = self._bare_calls(prepared, text)
                    prose = "" if parsed else prose
            else:
                parsed = tool_format.parse_cut(call_text, names) if call_text else None
                if parsed is None and prepared.bare_calls:
                    # Bare calls written whole before the cut came (before their fence closed, say).
                    parsed = self._bare_calls(prepared, text)
                    prose = "" if parsed else prose
                # An answer that must call but was cut before its first token has no call either.
                nothing = parsed is None and prepared.tool_calls == "all" and not text.strip()
                if nothing or (parsed is not None and any(name is None for name, _ in parsed)):
                    raise cut_call_error(
                        deadline=completion.deadline_reached,
                        max_tokens=prepared.engine_request.max_tokens,
                        text=text,
                    )
            calls = tuple(
                ToolCall(id=f"call_{secrets.token_hex(12)}", name=name or "", arguments=arguments)
                for name, arguments in parsed or []
            )
            if calls:
                text = prose
                if finish_reason == "stop":
                    finish_reason = "tool_calls"
            if finish_reason == "tool_calls" and prepared.tool_calls == "all":
                # Forced calls come from the call branch alone; what its grammar cannot hold is checked here.
                parameters = dict(prepared.tool_parameters)
                for call in calls:
                    tool_arguments(parameters.get(call.name)).check_answer(call.arguments, param="tools")
        if prepared.answer_schema is not None and not calls and finish_reason == "stop":
            check_answer(prepared.answer_schema, text, param="response_format")
        reasoning_tokens = completion.span_tokens if reasoning is not None else 0
        if prepared.closed_thinking:  # an empty thinking, closed in the prompt: its closing is output
            reasoning, reasoning_tokens = "", prepared.closed_thinking
        prompt_tokens = completion.prompt_tokens - prepared.closed_thinking
        return Generation(
            system_fingerprint=self.fingerprint,
            logprobs=completion.logprobs,
            text=text,
            finish_reason=finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion.completion_tokens + prepared.closed_thinking,
            timings=completion.timings,
            seed=prepared.seed,
            deadline_reached=completion.deadline_reached,
            tool_calls=calls,
            cached_tokens=min(completion.cached_tokens, prompt_tokens),
            reasoning=reasoning,
            reasoning_tokens=reasoning_tokens,
            validated=prepared.validated if not calls else (),
        )

    def _bare_calls(self, prepared: PreparedRequest, text: str) -> list[tuple[str | None, str]] | None:
        calls = bare_calls(
            text,
            prepared.tool_parameters,
            arguments_key=self.tool_format.arguments_key,
            parallel=prepared.parallel_calls,
        )
        return calls or None

    @staticmethod
    def _valid(prepared: PreparedRequest, calls: list[tuple[str, str]]) -> bool:
        parameters = dict(prepared.tool_parameters)
        return all(arguments_valid(arguments, parameters.get(name)) for name, arguments in calls)

    # --- Whole requests, in and out -------------------------------------------------------------------------

    def complete(
        self, request: AnyRequest, *, deadline: Deadline | None
    ) -> tuple[dict[str, Any], Generation]:
        """Answer a parsed request whole: the OpenAI object, and the generation it renders."""
        with responses_fields(request):
            generation = self.generate(inference_request(request), deadline=deadline)
        return render_response(request, generation, model=self.model_name), generation

    def open_stream(
        self, request: AnyRequest, *, deadline: Deadline | None
    ) -> tuple[Iterator[StreamItem], StreamEncoder]:
        """Start streaming a parsed request: its items (prepared, so a refusal is raised here, before any
        byte is sent) and the encoder of its events."""
        with responses_fields(request):
            items = self.stream(inference_request(request), deadline=deadline)
        return items, encoder_for(request, model=self.model_name)

    # --- Warm-up ------------------------------------------------------------------------------------------

    def warm_up_bodies(self, max_tokens: int) -> list[dict[str, Any]]:
        """The warm-up requests as bodies for this model, generating ``max_tokens`` each: every path the
        model serves. A path the model's own template refuses (Hermes 3's tool-use template refuses a chat
        without tools...) is left out and named in :attr:`warm_up_refusals`: requests that take it get the
        same 400, and the rest of the model is served."""
        bodies = []
        self.warm_up_refusals.clear()
        for body in WARMUP_REQUESTS:
            if not self.supports_chat and "prompt" not in body:  # a base model serves text only
                continue
            sized = {
                **body,
                "model": self.model_name,
                "max_output_tokens" if "input" in body else "max_tokens": max_tokens,
            }
            try:
                self.prepare(inference_request(self.parse(sized)))
            except RequestError as exc:
                path = (
                    ", ".join(field for field in body if field not in ("messages", "input", "prompt"))
                    or "chat"
                )
                self.warm_up_refusals.append(f"{path}: {exc.message}")
                continue
            bodies.append(sized)
        return bodies

    def prefix_tokens(self, entry: dict[str, Any]) -> list[int]:
        """A declared prefix's tokens (:mod:`snapllm.protocol.prefixes`): what the prompts of every request
        that continues ``entry`` with a user turn start with, prepared as a request is."""
        first, second = (
            list(self.prepare(inference_request(self.parse(body))).engine_request.tokens)
            for body in sentinel_bodies(entry, self.model_name)
        )
        return common_prefix(first, second)

    def keep_prefixes(
        self, entries: list[dict[str, Any]], *, refused_ok: bool = False
    ) -> list[tuple[int, int]]:
        """Evaluate each declared prefix and keep its state: (tokens, bytes) of each. An entry this model
        cannot serve (a template without a system role, a model without one) raises a
        :class:`ConfigurationError` naming it; with ``refused_ok`` (prefixes snapllm ships, declared by
        default) it is left out and named in :attr:`prefix_refusals`."""
        kept = []
        self.prefix_refusals.clear()
        for index, entry in enumerate(entries):
            try:
                # An entry's response_format and tools are compiled as its requests' are, and kept.
                with keeping_compiles(), self.engine.keeping_grammars():
                    tokens = self.prefix_tokens(entry)
            except RequestError as exc:
                refusal = f"declared prompt prefix {index} is refused: {exc.message}"
                if not refused_ok:
                    raise ConfigurationError(refusal) from exc
                self.prefix_refusals.append(refusal)
                continue
            kept.append((len(tokens), self.engine.keep_prefix(tokens)))
        return kept

    def warm_up(
        self,
        bodies: list[dict[str, Any]],
        *,
        prefixes: list[dict[str, Any]] | None = None,
        prefixes_refused_ok: bool = False,
        whole: bool = True,
        streamed: bool = True,
    ) -> None:
        """Generate each body whole and streamed (the paths not ``whole`` or not ``streamed`` left out: a
        path a function never serves, or one its handler has run already), so compute buffers, the sampler,
        the chat template and every path are primed; then evaluate and keep the declared ``prefixes``
        (:meth:`keep_prefixes`, ``refused_ok`` as ``prefixes_refused_ok``), and leave the chat template's
        common prefix evaluated.

        The KV cache then holds only what every chat without its own system message starts with (for many
        templates, a default system prompt): the first request after a restore reuses it as a warm one
        would, and no request inherits a warm-up's own tokens.
        """
        for body in bodies:
            request = inference_request(self.parse(body))
            if whole:
                self.generate(request)
            if streamed:
                for _ in self.stream(request):
                    pass
        self.keep_prefixes(prefixes or [], refused_ok=prefixes_refused_ok)
        self.engine.prime(self.chat_prefix())

    def chat_prefix(self) -> list[int]:
        """The tokens every single-user-message chat begins with, as this model's template formats it."""
        if self._chat is None:
            return []
        try:
            return self._common_chat_prefix()
        except RequestError:  # a template that refuses a lone user message serves no chat to prime for
            return []

    def _common_chat_prefix(self) -> list[int]:
        assert self._chat is not None
        first, second = (
            self.engine.tokenize(
                self._chat.render(ChatCompletionRequest(messages=[{"role": "user", "content": text}])).prompt,
                add_bos=False,
            )
            for text in ("Hello.", "Goodbye.")
        )
        common = 0
        while common < min(len(first), len(second)) and first[common] == second[common]:
            common += 1
        return first[:common]
