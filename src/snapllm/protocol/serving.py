"""Serving the OpenAI API over an engine: the one path of the direct invoke, the stream and the local stack.

    serving = OpenAIServing(engine, max_tokens=512, max_prompt_chars=32_000)
    request = serving.parse(body, required="messages")     # refuses another model's name
    answer, generation = serving.complete(request, deadline=Deadline.after(25.0))
    items, encoder = serving.open_stream(request, deadline=...)   # TokenDelta items, then a Generation

A request becomes an :class:`~snapllm.engine.types.EngineRequest` here: the chat rendered by the model's
template (:mod:`snapllm.protocol.chat`) and tokenized, its limits checked against the context window, its
``response_format`` and tools turned into one grammar (:mod:`snapllm.protocol.constraints`), a seed chosen
when the caller gives none (from ``secrets``, so environments restored from one snapshot do not answer
alike). The engine's completion comes back as a :class:`Generation`: a tool-call answer parsed into calls
with ``call_`` ids, and the ``system_fingerprint`` of what generated it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from snapllm.engine.types import Completion, Deadline, EngineRequest, Sampling, TextEngine, TokenDelta
from snapllm.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    UnknownModelError,
    UnsupportedParameterError,
)
from snapllm.protocol.answer_check import check_answer
from snapllm.protocol.chat import ChatRenderer
from snapllm.protocol.constraints import ToolCalls, answer_schema, chat_grammar
from snapllm.protocol.limits import Limits
from snapllm.protocol.objects import render_response
from snapllm.protocol.requests import (
    ChatCompletionRequest,
    FinishReason,
    Generation,
    InferenceRequest,
    ToolCall,
    parse_request,
)
from snapllm.protocol.responses_api import (
    AnyRequest,
    inference_request,
    parse_invoke,
    parse_responses_request,
    responses_fields,
)
from snapllm.protocol.sse import StreamEncoder, encoder_for
from snapllm.protocol.structured import cut_call_error, parse_cut_tool_calls, parse_tool_calls

StreamItem = TokenDelta | Generation
#: The field that tells a route's requests apart: chat completions, text completions, responses.
Required = Literal["messages", "prompt", "input"]

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
    # The Responses path (its parsing and rendering); the engine serves it as a chat.
    {"input": "Say hello.", "instructions": "Be brief.", "temperature": 0.0},
)


@dataclass(frozen=True)
class PreparedRequest:
    """A request turned into the engine's terms, with what it takes to read the answer back."""

    engine_request: EngineRequest
    # "all": the answer must be tool calls; "auto": it is tool calls when it opens with JSON.
    tool_calls: ToolCalls | None = None
    # The functions the answer may call: the forced ones when tool_choice forces (a cut name is then
    # completed among those only), else every tool.
    tool_names: tuple[str, ...] = ()
    # The response_format's schema: a complete answer is validated against it (what the grammar could not
    # hold is checked there; snapllm.protocol.answer_check).
    answer_schema: Any = None

    @property
    def seed(self) -> int:
        return self.engine_request.sampling.seed


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
        self._chat = ChatRenderer.for_model(engine.metadata, *engine.special_tokens())

    @property
    def supports_chat(self) -> bool:
        """Whether the model has a chat template, its own or its family's (without one, only text
        completions are served)."""
        return self._chat is not None

    # --- Requests in ------------------------------------------------------------------------------------

    def check_model(self, requested: str | None) -> None:
        """Refuse a request that names a model other than the loaded one (no name means this one)."""
        if requested is not None and requested != self.model_name:
            raise UnknownModelError(
                f"the model {requested!r} does not exist; available: {self.model_name}", param="model"
            )

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

    def prepare(self, request: InferenceRequest) -> PreparedRequest:
        """Tokenize the request and resolve its limits; raises a ``RequestError`` if it cannot run."""
        self.limits.check(request)  # before tokenizing: a prompt over the limit is never tokenized
        stop = list(request.stop or [])
        grammar: str | None = None
        tool_calls: ToolCalls | None = None
        if isinstance(request, ChatCompletionRequest):
            if self._chat is None:
                raise UnsupportedParameterError(
                    f"model {self.model_name} has no chat template; use a text completion ('prompt')",
                    param="messages",
                )
            chat = self._chat.render(request)
            # The template writes its own special tokens (a BOS among them, when the model uses one).
            tokens = self.engine.tokenize(chat.prompt, add_bos=False)
            stop += chat.stop
            param = "messages"
            grammar, tool_calls = chat_grammar(request)
            if grammar is not None and not self.engine.accepts_grammar(grammar):
                # snapllm.protocol.json_grammar refuses, by name, every schema it cannot write a grammar for.
                where = "tools" if tool_calls else "response_format"
                raise UnsupportedParameterError(
                    f"{where}: llama.cpp refused the grammar snapllm wrote for this schema, which is a "
                    "fault in snapllm (llama.cpp logs its reason when SNAPLLM_LLAMA_VERBOSE=true); "
                    "please report it",
                    param=where,
                )
        else:
            tokens = self.engine.tokenize(request.text, add_bos=True)
            param = "prompt"
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
        )
        forced = getattr(request, "forced_tools", None) or []
        tools = getattr(request, "tools", None) or []
        return PreparedRequest(
            EngineRequest(
                tokens=tuple(tokens),
                sampling=sampling,
                max_tokens=min(request.requested_max_tokens or self.max_tokens, n_ctx - len(tokens)),
                stop=tuple(stop),
                grammar=grammar,
                top_logprobs=request.logprobs_count,
                # A caller-chosen seed must reproduce: the whole prompt evaluated afresh, as the first time.
                reuse_cache=request.seed is None,
            ),
            tool_calls=tool_calls,
            tool_names=tuple(f.name for f in forced) or tuple(t.function.name for t in tools),
            answer_schema=answer_schema(request) if isinstance(request, ChatCompletionRequest) else None,
        )

    # --- Generation ---------------------------------------------------------------------------------------

    def generate(self, request: InferenceRequest, *, deadline: Deadline | None = None) -> Generation:
        """Run one request to completion (or to the deadline)."""
        prepared = self.prepare(request)
        return self.generation(prepared, self.engine.generate(prepared.engine_request, deadline=deadline))

    def stream(self, request: InferenceRequest, *, deadline: Deadline | None = None) -> Iterator[StreamItem]:
        """Generate token by token: :class:`TokenDelta` items, then one final :class:`Generation`.

        The request is prepared (and refused with a ``RequestError``) before this returns, so a caller can
        answer with an error status before it starts a streamed response. A consumer that stops early must
        ``close()`` the iterator, which releases the engine.
        """
        prepared = self.prepare(request)
        return self._stream(prepared, self.engine.stream(prepared.engine_request, deadline=deadline))

    def _stream(self, prepared: PreparedRequest, items: Iterator[Any]) -> Iterator[StreamItem]:
        # Tool calls are sent whole at the end (as OpenAI-shaped deltas), so their text is held back: all
        # of it when the answer must call, and under "auto" until the first character shows a call.
        holding = prepared.tool_calls is not None
        pieces: list[str] = []
        recorded = 0
        completion: Completion | None = None
        try:
            for item in items:
                if not isinstance(item, TokenDelta):
                    completion = item
                    continue
                pieces.append(item.text)
                if holding:
                    started = "".join(pieces)
                    if prepared.tool_calls == "all" or not started or started[0] in "{[":
                        continue
                    holding = False
                    yield TokenDelta(started)
                    continue
                if item.logprobs is not None:
                    recorded += len(item.logprobs)
                yield item
        finally:
            items.close()  # type: ignore[attr-defined]
        assert completion is not None
        generation = self.generation(prepared, completion)
        if holding and not generation.tool_calls and generation.text:
            # Held back but no call: an answer that opened with JSON under "auto" (a response_format's JSON
            # answer), which is text. A call cut short is calls (see generation()), never text.
            yield TokenDelta(generation.text)
        elif generation.logprobs is not None and len(generation.logprobs) > recorded:
            yield TokenDelta("", generation.logprobs[recorded:])
        yield generation

    def generation(self, prepared: PreparedRequest, completion: Completion) -> Generation:
        """The :class:`Generation` of the engine's completion; a tool-call answer becomes its calls.

        A tool-call answer cut short (by ``max_tokens`` or the deadline) is still calls, never text: the
        calls as far as they were generated, with ``finish_reason`` "length" (OpenAI's shape of a truncated
        call: the name, and the arguments generated so far);
        :func:`~snapllm.protocol.structured.cut_call_error` if the cut came before a call's name was decided.
        """
        text = completion.text
        finish_reason: FinishReason = completion.finish
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
                        deadline=completion.deadline_reached,
                        max_tokens=prepared.engine_request.max_tokens,
                        text=text,
                    )
            calls = tuple(
                ToolCall(id=f"call_{secrets.token_hex(12)}", name=name or "", arguments=arguments)
                for name, arguments in parsed or []
            )
            if calls and finish_reason == "stop":
                finish_reason = "tool_calls"
        if prepared.answer_schema is not None and not calls and finish_reason == "stop":
            check_answer(prepared.answer_schema, text, param="response_format")
        return Generation(
            system_fingerprint=self.fingerprint,
            logprobs=completion.logprobs,
            text=text,
            finish_reason=finish_reason,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            timings=completion.timings,
            seed=prepared.seed,
            deadline_reached=completion.deadline_reached,
            tool_calls=calls,
            cached_tokens=completion.cached_tokens,
        )

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
        """The warm-up requests as bodies for this model, generating ``max_tokens`` each."""
        return [
            {
                **body,
                "model": self.model_name,
                "max_output_tokens" if "input" in body else "max_tokens": max_tokens,
            }
            for body in WARMUP_REQUESTS
            if self.supports_chat or "prompt" in body  # a base model serves text only
        ]

    def warm_up(self, bodies: list[dict[str, Any]]) -> None:
        """Generate and stream each body, so compute buffers, the sampler, the chat template and every path
        are primed; then leave the chat template's common prefix evaluated.

        The KV cache then holds only what every chat without its own system message starts with (for many
        templates, a default system prompt): the first request after a restore reuses it as a warm one
        would, and no request inherits a warm-up's own tokens.
        """
        for body in bodies:
            request = inference_request(self.parse(body))
            self.generate(request)
            for _ in self.stream(request):
                pass
        self.engine.prime(self.chat_prefix())

    def chat_prefix(self) -> list[int]:
        """The tokens every single-user-message chat begins with, as this model's template formats it."""
        if self._chat is None:
            return []
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
