"""The OpenAI protocol without a model: chat rendering, the engine request a request becomes, and the
engine's answer read back (tool calls, cut calls, the held-back stream).

The engine here is :class:`ScriptedEngine`, a test double standing in for llama.cpp: one token per
character, and answers the test scripts. That is the point of the protocol/engine split: everything the
protocol decides is checked here in milliseconds; tests/integration/test_engine.py and the replays check
the same path with the real model.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_cpp import Llama

from snapllm.engine.types import Completion, Deadline, EngineRequest, Finish, Timings, TokenDelta
from snapllm.errors import (
    ConfigurationError,
    ContextLengthExceededError,
    InvalidRequestError,
    SchemaValidationFailedError,
    ToolCallCutShortError,
    UnknownModelError,
    UnsupportedParameterError,
)
from snapllm.protocol.completions.chat import MAX_RENDER_SECONDS, ChatRenderer
from snapllm.protocol.completions.chat_templates import GEMMA_TURNS
from snapllm.protocol.requests import Generation, parse_request
from snapllm.protocol.serving import OpenAIServing, fingerprint
from snapllm_dev.packaged_models import smollm2_path
from tests.support.byte_tokenizer import ByteVocabulary
from tests.support.grammar_sampler import GrammarSampler

#: A ChatML template in the style of SmolLM2's (written for this test), with a default system prompt.
CHATML = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe helpful.<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: A template that renders tools and tool calls itself, as Hugging Face templates with tool support do.
NATIVE_TOOLS = (
    "{% if tools %}[tools {{ tools | tojson }}]{% endif %}"
    "{% for m in messages %}[{{ m['role'] }}{% if m.get('tool_calls') %} calls "
    "{{ m['tool_calls'] | tojson }}{% endif %}{% if m.get('tool_call_id') %} for {{ m['tool_call_id'] }}"
    "{% endif %}: {{ m['content'] }}]{% endfor %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
#: llguidance's matcher over a vocabulary of bytes: what a grammar lets an answer be.
TEXT = ByteVocabulary()


@dataclass
class ScriptedEngine:
    """A test double of :class:`snapllm.engine.model.Engine`: tokens are characters; each generation
    answers the next scripted text (cut at ``max_tokens``) and records the request it was given."""

    answers: list[str] = field(default_factory=list)
    template: str | None = CHATML
    n_ctx: int = 4096
    n_vocab: int = 0x110000  # tokens are characters
    model_name: str = "scripted"
    identity: str = "digest|llama-cpp-python x|snapllm y"
    grammar_ok: bool = True
    reuse_reproduces: bool = True
    requests: list[EngineRequest] = field(default_factory=list)
    primed: list[int] | None = None
    deadline_after: int | None = None

    @property
    def metadata(self) -> Mapping[str, str]:
        return {"tokenizer.chat_template": self.template} if self.template else {}

    def special_tokens(self) -> tuple[str, str]:
        return "<s>", "<|im_end|>"

    def control_tokens(self) -> frozenset[str]:
        return frozenset({"<|im_start|>", "<|im_end|>"})

    def user_tokens(self) -> frozenset[str]:
        return frozenset()

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        return ([1] if add_bos else []) + [ord(c) for c in text]

    def accepts_grammar(self, grammar: str) -> bool:
        return self.grammar_ok

    def generate(self, request: EngineRequest, *, deadline: Deadline | None = None) -> Completion:
        *_, completion = self.stream(request, deadline=deadline)
        assert isinstance(completion, Completion)
        return completion

    def stream(
        self, request: EngineRequest, *, deadline: Deadline | None = None
    ) -> Iterator[TokenDelta | Completion]:
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else "Hello."
        limit = min(
            request.max_tokens, self.deadline_after if self.deadline_after is not None else len(answer)
        )
        text = answer[:limit]
        yield from (TokenDelta(c) for c in text)
        finish: Finish = "stop" if len(text) == len(answer) and limit < request.max_tokens else "length"
        timings = Timings(1.0, 1.0, 1.0, 2.0, 100.0)
        yield Completion(
            text,
            finish,
            len(request.tokens),
            len(text),
            0,
            timings,
            deadline_reached=self.deadline_after is not None,
        )

    def prime(self, tokens: list[int]) -> None:
        self.primed = tokens

    @contextlib.contextmanager
    def keeping_grammars(self) -> Iterator[None]:
        yield


def _serving(engine: ScriptedEngine, max_tokens: int = 64) -> OpenAIServing:
    return OpenAIServing(engine, max_tokens=max_tokens, max_prompt_chars=10_000)


def _chat(content: str = "Hi", **fields) -> dict:
    return {"messages": [{"role": "user", "content": content}], **fields}


# --- Chat rendering -------------------------------------------------------------------------------------


def _render(template: str, body: dict) -> str:
    renderer = ChatRenderer(template, bos_token="<s>", eos_token="<|im_end|>", stop="<|im_end|>")
    return renderer.render(parse_request(body)).prompt


def test_a_chat_renders_with_the_models_template_up_to_the_answer():
    prompt = _render(
        CHATML, {"messages": [{"role": "developer", "content": "Be terse."}, *_chat()["messages"]]}
    )
    # developer is the system role to a template; the generation prompt opens the assistant's turn.
    assert (
        prompt
        == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def _tool_conversation(question: str, city: str, *, assistant_content: str | None) -> dict:
    """A chat with tools whose assistant called get_weather(city) as call_1, answered "Sunny"."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city}, ensure_ascii=False)},
    }
    return {
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": assistant_content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        ],
        "tools": [WEATHER],
    }


def test_tools_in_the_generic_format_for_a_template_without_tools():
    prompt = _render(CHATML, _tool_conversation("Weather in Paris?", "Paris", assistant_content=None))
    # The tools are described in a system message the template did not have; the earlier call is the JSON
    # the model would have generated; the result is a user turn naming the call it answers.
    assert prompt.startswith("<|im_start|>system\nYou can call these functions: [")
    assert '"name": "get_weather"' in prompt
    assert f"<|im_start|>assistant\n{CALL}<|im_end|>" in prompt
    assert "<|im_start|>user\nResult of the call call_1 to get_weather: Sunny<|im_end|>" in prompt


def test_tools_natively_for_a_template_that_renders_them():
    prompt = _render(NATIVE_TOOLS, _tool_conversation("Météo ?", "Nîmes", assistant_content=""))
    tools = json.loads(prompt[len("[tools ") : prompt.index("][user")])
    assert tools == [{"type": "function", "function": WEATHER["function"]}]
    # Arguments reach the template as values, non-ASCII kept as such by tojson.
    assert '"arguments": {"city": "Nîmes"}' in prompt and "[user: Météo ?]" in prompt
    assert "[tool for call_1: Sunny]" in prompt


def test_a_template_that_refuses_the_messages_is_a_400_naming_messages():
    refusal = "{{ raise_exception('Conversation must start with system') }}"
    template = "{% if messages[0]['role'] == 'user' %}" + refusal + "{% endif %}"
    with pytest.raises(InvalidRequestError, match="must start with system") as refused:
        _render(template, _chat())
    assert refused.value.param == "messages"


def test_the_generation_block_renders_its_body():
    template = "{% for m in messages %}{% generation %}<{{ m['content'] }}>{% endgeneration %}{% endfor %}"
    assert _render(template, _chat("x")) == "<x>"


def test_a_model_without_a_template_gets_its_familys_or_none():
    gemma = ChatRenderer.for_model({"general.architecture": "gemma3"}, "<bos>", "<eos>")
    assert gemma is not None
    chat = gemma.render(parse_request(_chat()))
    assert chat.stop == (GEMMA_TURNS.stop,) and "<start_of_turn>user\nHi" in chat.prompt
    assert ChatRenderer.for_model({"general.architecture": "llama"}, "<s>", "</s>") is None


# --- Requests into engine requests ----------------------------------------------------------------------


def test_a_chat_becomes_the_templates_tokens_and_stop_strings():
    engine = ScriptedEngine()
    serving = _serving(engine)
    prepared = serving.prepare(parse_request(_chat(stop=["\n\n"], temperature=0.5, top_p=0.9)))
    request = prepared.engine_request
    # The template writes its own special tokens: no BOS is added to the rendered text.
    assert request.tokens == tuple(engine.tokenize(_render(CHATML, _chat()), add_bos=False))
    assert request.stop == ("\n\n", "<|im_end|>")
    assert (request.sampling.temperature, request.sampling.top_p) == (0.5, 0.9)
    assert request.grammar is None and request.top_logprobs is None and request.reuse_cache
    text = serving.prepare(parse_request({"prompt": "abc"})).engine_request
    assert text.tokens == (1, 97, 98, 99)


def test_a_caller_seed_is_kept_and_evaluates_afresh_and_no_seed_draws_one():
    serving = _serving(ScriptedEngine())
    seeded = serving.prepare(parse_request(_chat(seed=42))).engine_request
    assert seeded.sampling.seed == 42 and not seeded.reuse_cache
    drawn = {serving.prepare(parse_request(_chat())).engine_request.sampling.seed for _ in range(4)}
    assert len(drawn) == 4


def test_a_seeded_request_reuses_the_cache_when_it_asks_and_reuse_reproduces():
    asked = parse_request(_chat(seed=42, cache_prompt=True))
    assert _serving(ScriptedEngine()).prepare(asked).engine_request.reuse_cache
    # Where a reused prefix may round otherwise (flash attention off), the seed still evaluates afresh.
    assert not _serving(ScriptedEngine(reuse_reproduces=False)).prepare(asked).engine_request.reuse_cache
    declined = parse_request(_chat(seed=42, cache_prompt=False))
    assert not _serving(ScriptedEngine()).prepare(declined).engine_request.reuse_cache


def test_the_window_bounds_the_prompt_and_what_is_left_bounds_the_answer():
    serving = _serving(ScriptedEngine(n_ctx=200), max_tokens=150)
    prompt_tokens = len(serving.prepare(parse_request(_chat())).engine_request.tokens)
    assert serving.prepare(parse_request(_chat())).engine_request.max_tokens == 200 - prompt_tokens
    with pytest.raises(ContextLengthExceededError, match="context window is 200 tokens") as over:
        serving.prepare(parse_request(_chat("x" * 300)))
    assert over.value.param == "messages"
    with pytest.raises(InvalidRequestError, match="at most 150") as asked:
        serving.prepare(parse_request(_chat(max_tokens=151)))
    assert asked.value.param == "max_tokens"


def test_an_empty_prompt_and_another_models_name_are_refused():
    engine = ScriptedEngine()
    engine.tokenize = lambda text, *, add_bos: []  # type: ignore[method-assign]  # a model that adds no BOS
    serving = _serving(engine)
    with pytest.raises(InvalidRequestError, match="the prompt is empty"):
        serving.prepare(parse_request({"prompt": ""}))
    with pytest.raises(UnknownModelError) as unknown:
        serving.parse({**_chat(), "model": "gpt-4o"}, required="messages")
    assert unknown.value.param == "model"


def test_structured_output_and_tools_become_a_grammar():
    serving = _serving(ScriptedEngine())
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    form = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    answer = serving.prepare(parse_request(_chat(response_format=form)))
    assert answer.tool_calls is None
    assert TEXT.allows(answer.engine_request.grammar, '{"a": 1}')
    assert not TEXT.allows(answer.engine_request.grammar, '{"a": "1"}')
    required = serving.prepare(parse_request(_chat(tools=[WEATHER], tool_choice="required")))
    assert required.tool_calls == "all" and required.tool_names == ("get_weather",)
    assert TEXT.allows(required.engine_request.grammar, CALL)
    assert not TEXT.allows(required.engine_request.grammar, "It is sunny in Paris.")
    auto = serving.prepare(parse_request(_chat(tools=[WEATHER])))
    assert auto.tool_calls == "auto"
    assert TEXT.allows(auto.engine_request.grammar, CALL)
    assert TEXT.allows(auto.engine_request.grammar, "It is sunny in Paris.")
    assert not TEXT.allows(auto.engine_request.grammar, '{"name": "get_time", "arguments": {}}')


def test_a_grammar_the_engine_refuses_is_a_named_fault_not_a_crash():
    serving = _serving(ScriptedEngine(grammar_ok=False))
    with pytest.raises(UnsupportedParameterError, match="please report it") as refused:
        serving.prepare(parse_request(_chat(response_format={"type": "json_object"})))
    assert refused.value.param == "response_format"


def test_a_model_without_a_chat_format_serves_text_only():
    serving = _serving(ScriptedEngine(template=None))
    assert not serving.supports_chat
    with pytest.raises(UnsupportedParameterError, match="no chat template") as refused:
        serving.prepare(parse_request(_chat()))
    assert refused.value.param == "messages"
    assert [b for b in serving.warm_up_bodies(2) if "prompt" not in b] == []
    # A chat prefix it cannot render: a deploy's own declared one fails the init, naming it; the ones
    # snapllm ships and declares by default (the agent's) are left out, named.
    entries = [{"messages": [{"role": "system", "content": "You plan."}]}]
    with pytest.raises(ConfigurationError, match=r"declared prompt prefix 0 is refused: .*no chat template"):
        serving.keep_prefixes(entries)
    assert serving.keep_prefixes(entries, refused_ok=True) == []
    [refusal] = serving.prefix_refusals
    assert refusal.startswith("declared prompt prefix 0 is refused") and "no chat template" in refusal


# --- Answers read back ----------------------------------------------------------------------------------


def test_a_tool_call_answer_becomes_calls_with_ids_and_the_fingerprint():
    engine = ScriptedEngine(answers=[CALL])
    serving = _serving(engine)
    generation = serving.generate(parse_request(_chat(tools=[WEATHER], tool_choice="required")))
    [call] = generation.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("call_") and len(call.id) == 29
    assert generation.finish_reason == "tool_calls"
    assert generation.system_fingerprint == fingerprint(
        engine.identity
    ) and generation.system_fingerprint.startswith("fp_")


def test_a_call_cut_by_max_tokens_is_a_call_and_one_cut_before_its_name_is_an_error():
    cut = _serving(ScriptedEngine(answers=[CALL]))
    generation = cut.generate(parse_request(_chat(tools=[WEATHER], tool_choice="required", max_tokens=40)))
    [call] = generation.tool_calls
    assert generation.finish_reason == "length" and call.name == "get_weather"
    assert CALL[:40].endswith(call.arguments)  # the arguments as far as they were generated
    # With two functions, '{"name": "get' has not decided which one.
    early = _serving(ScriptedEngine(answers=[CALL]))
    with pytest.raises(ToolCallCutShortError) as raised:
        early.generate(parse_request(_chat(tools=[WEATHER, TIME], tool_choice="required", max_tokens=14)))
    assert raised.value.status_code == 400 and raised.value.param == "max_tokens"
    late = _serving(ScriptedEngine(answers=[CALL], deadline_after=3))
    with pytest.raises(ToolCallCutShortError) as raised:
        late.generate(parse_request(_chat(tools=[WEATHER, TIME], tool_choice="required")))
    assert raised.value.status_code == 504


def test_a_bare_call_cut_after_its_object_is_the_call():
    # Written whole, then cut (by max_tokens here, the deadline alike) before its block's fence closed; in a
    # format whose calls open with a marker (Hermes' <tool_call>), so that a bare call is read at all.
    bare = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    hermes = CHATML + FAMILY_MARKS["hermes"]
    serving = _serving(ScriptedEngine(answers=[bare], template=hermes), max_tokens=128)
    generation = serving.generate(parse_request(_chat(tools=[WEATHER], max_tokens=len(bare) - 2)))
    assert generation.finish_reason == "length" and generation.text == ""
    assert [(call.name, call.arguments) for call in generation.tool_calls] == [
        ("get_weather", '{"city": "Paris"}')
    ]
    # Several calls in one block, as a model writes the calls it means: all of them, unless parallel calls
    # are refused.
    both = bare[:-4] + '\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n```'
    serving = _serving(ScriptedEngine(answers=[both, both], template=hermes), max_tokens=256)
    calls = serving.generate(parse_request(_chat(tools=[WEATHER]))).tool_calls
    assert [call.arguments for call in calls] == ['{"city": "Paris"}', '{"city": "Rome"}']
    alone = serving.generate(parse_request(_chat(tools=[WEATHER], parallel_tool_calls=False)))
    assert alone.tool_calls == () and alone.text == both
    # Cut inside its object, it is text.
    serving = _serving(ScriptedEngine(answers=[bare], template=hermes))
    generation = serving.generate(parse_request(_chat(tools=[WEATHER], max_tokens=30)))
    assert generation.tool_calls == () and generation.text == bare[:30]


def _streamed(serving: OpenAIServing, body: dict) -> tuple[list[str], Generation]:
    *deltas, final = serving.stream(parse_request(body))
    assert isinstance(final, Generation) and all(isinstance(d, TokenDelta) for d in deltas)
    return [d.text for d in deltas], final


def test_the_stream_holds_a_calls_text_back_and_lets_free_text_through():
    texts, final = _streamed(_serving(ScriptedEngine(answers=[CALL])), _chat(tools=[WEATHER]))
    # The call goes out whole, at the end; each of its tokens is an empty delta, where a consumer may stop.
    assert texts == [""] * len(CALL) and final.tool_calls[0].name == "get_weather"
    texts, final = _streamed(_serving(ScriptedEngine(answers=["Sunny."])), _chat(tools=[WEATHER]))
    assert texts == list("Sunny.") and final.tool_calls == () and final.finish_reason == "stop"
    # JSON under "auto" that is not a call (a response_format's answer) is held, then sent as text.
    texts, final = _streamed(_serving(ScriptedEngine(answers=['{"a": 1}'])), _chat(tools=[WEATHER]))
    assert [t for t in texts if t] == ['{"a": 1}'] and final.tool_calls == ()


def test_warm_up_runs_every_path_and_primes_the_common_chat_prefix():
    engine = ScriptedEngine()
    serving = _serving(engine)
    bodies = serving.warm_up_bodies(2)
    serving.warm_up(bodies)
    assert len(engine.requests) == 2 * len(bodies)  # each body generated and streamed
    assert {r.max_tokens for r in engine.requests} == {2}
    default_prompt = "<|im_start|>system\nBe helpful.<|im_end|>\n<|im_start|>user\n"
    assert engine.primed == engine.tokenize(default_prompt, add_bos=False)


@pytest.mark.parametrize(
    ("whole", "streamed", "runs"),
    [(False, True, 1), (True, False, 1), (False, False, 0)],
    ids=["streamed-only", "whole-only", "neither"],
)
def test_a_warm_up_leaves_out_the_paths_its_function_has_run_or_never_serves(whole, streamed, runs):
    # InferenceFunction's handler generates each body whole and it never streams; the streaming function
    # streams too. Either way the chat prefix is primed.
    engine = ScriptedEngine()
    serving = _serving(engine)
    bodies = serving.warm_up_bodies(2)
    serving.warm_up(bodies, whole=whole, streamed=streamed)
    assert len(engine.requests) == runs * len(bodies)
    assert engine.primed


# Chat templates that a model file could carry, each trying to hold the function: every one is refused with
# a 400 naming the messages, within the render's bounds (MAX_RENDER_SECONDS), and the serving still works.
HOSTILE_TEMPLATES = {
    "raises": "{{ raise_exception('Conversation roles must alternate') }}",
    "loops": "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
    "repeats a string": "{{ 'x' * 1000000000 }}",
    "raises to a power": "{{ 10 ** 100000000 }}",
    "recurses": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "writes a huge prompt": (
        "{% for m in messages %}{% for i in range(100000) %}{{ m.content }}{% endfor %}{% endfor %}"
    ),
    "reads outside the sandbox": "{{ messages.__class__.__mro__[1].__subclasses__() }}",
}


@pytest.mark.parametrize("name", list(HOSTILE_TEMPLATES))
def test_a_hostile_chat_template_costs_a_bounded_render_and_a_400(name):
    serving = _serving(ScriptedEngine(template=HOSTILE_TEMPLATES[name]))
    started = time.perf_counter()
    with pytest.raises(InvalidRequestError) as refused:
        serving.prepare(parse_request(_chat("Hello there, " * 50)))
    assert time.perf_counter() - started < MAX_RENDER_SECONDS + 1.5
    assert refused.value.param == "messages" and "chat template" in refused.value.message
    assert refused.value.to_http().status_code == 400
    text = serving.prepare(parse_request({"prompt": "Still serving."}))
    assert text.engine_request.tokens


FLAG = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
# Templates whose text names a family (as a real template's markup does): the family's call format is used.
FAMILY_MARKS = {
    "json": "",
    "hermes": "{# tools <tool_call> #}",
    "llama3-json": "{# tools <|start_header_id|> #}",
    "deepseek": "{# tools <｜Assistant｜> <｜tool▁calls▁begin｜> #}",
    "harmony": "{# tools <|channel|> #}",
}


@pytest.fixture(scope="module")
def sampler() -> GrammarSampler:
    return GrammarSampler(Llama(model_path=str(smollm2_path()), vocab_only=True, verbose=False))


def test_a_json_answer_shaped_like_a_call_stays_an_answer():
    # The answer branch of tools + "auto" + json_object may write the shape of a call; its arguments break
    # the tool's schema (no "city", an unknown "town"), so the call branch cannot have written it.
    shaped = '{"name": "get_weather", "arguments": {"town": "Paris"}}'
    serving = _serving(ScriptedEngine(answers=[shaped]))
    request = parse_request(
        _chat(tools=[WEATHER], tool_choice="auto", response_format={"type": "json_object"})
    )
    answer = serving.generate(request)
    assert answer.tool_calls == () and answer.text == shaped and answer.finish_reason == "stop"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    family=st.sampled_from(sorted(FAMILY_MARKS)),
    tools=st.sampled_from([[WEATHER], [WEATHER, TIME]]),
    choice=st.sampled_from(["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]),
    form=st.sampled_from(
        [None, {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "f", "schema": FLAG}}]
    ),
    seed=st.integers(0, 1000),
)
def test_a_call_is_a_call_only_when_the_call_branch_made_it(family, tools, choice, form, seed, sampler):
    engine = ScriptedEngine(template=CHATML + FAMILY_MARKS[family])
    serving = _serving(engine, max_tokens=400)
    assert serving.tool_format.name == family
    fields = {"tools": tools, "tool_choice": choice, **({"response_format": form} if form else {})}
    request = parse_request(_chat(**fields))
    grammar = serving.prepare(request).engine_request.grammar
    assert grammar is not None
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    for text in sampler.texts(grammar, count=3, seed=seed, max_tokens=150):
        engine.answers = [text]
        answer = serving.generate(request)
        if answer.tool_calls:
            for call in answer.tool_calls:
                jsonschema.validate(json.loads(call.arguments), schemas[call.name])
            assert answer.finish_reason == "tool_calls"
            continue
        # Not calls: only where the model may answer, and then in the response_format's shape.
        assert choice == "auto", text
        if form is not None:
            value = json.loads(answer.text)
            jsonschema.validate(value, FLAG if form["type"] == "json_schema" else {"type": "object"})


# --- What the grammar could not hold is checked on the complete answer (ScriptedEngine writes it) ----------

UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}


def test_an_answer_that_breaks_a_validated_keyword_is_a_422_whole_and_streamed():
    form = {"type": "json_schema", "json_schema": {"name": "n", "schema": UNIQUE}}
    request = parse_request(_chat(response_format=form))
    with pytest.raises(SchemaValidationFailedError) as caught:
        _serving(ScriptedEngine(answers=["[1,1]"])).generate(request)
    assert caught.value.status_code == 422 and caught.value.param == "response_format"
    assert "uniqueItems (at the root)" in caught.value.message
    items = _serving(ScriptedEngine(answers=["[1,1]"])).stream(request)
    with pytest.raises(SchemaValidationFailedError):
        list(items)  # the text went out token by token; the end is the error, never a finish
    assert _serving(ScriptedEngine(answers=["[1,2]"])).generate(request).text == "[1,2]"


def test_forced_call_arguments_that_break_a_validated_keyword_are_a_422_naming_tools():
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"t": UNIQUE}}},
    }
    request = parse_request(_chat(tools=[tool], tool_choice="required"))
    with pytest.raises(SchemaValidationFailedError) as caught:
        _serving(ScriptedEngine(answers=['{"name": "f", "arguments": {"t": [3, 3]}}'])).generate(request)
    assert caught.value.param == "tools" and "non-unique" in caught.value.message
    [call] = (
        _serving(ScriptedEngine(answers=['{"name": "f", "arguments": {"t": [3, 4]}}']))
        .generate(request)
        .tool_calls
    )
    assert json.loads(call.arguments) == {"t": [3, 4]}


def test_the_answer_says_what_was_validated_rather_than_enforced():
    tags = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    schema = {
        "type": "object",
        "properties": {"tags": tags},
        "required": ["tags"],
        "additionalProperties": False,
    }
    form = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}
    serving = _serving(ScriptedEngine(answers=['{"tags":["a","b"]}', '{"a":1}']))
    body, _ = serving.complete(serving.parse(_chat(response_format=form)), deadline=None)
    assert body["choices"][0]["message"]["content"] == '{"tags":["a","b"]}'
    assert body["validated"] == ["uniqueItems (at properties.tags)"]
    # A schema the grammar holds whole says nothing of the kind.
    plain = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    body, _ = serving.complete(serving.parse(_chat(response_format=plain)), deadline=None)
    assert "validated" not in body
