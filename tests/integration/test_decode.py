"""The engine's decode loop with the real model: the lazy grammar check gives the tokens the full check
gives, on every replay event that uses a grammar and on a few more schemas; and the decoder's own
behaviour (stop strings across tokens, the KV cache, prompt-lookup drafting)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from llama_cpp import Llama
from llguidance import LLMatcher

from snapllm.agent.schemas import plan_schema
from snapllm.engine.constraint import MASK_TIME_BOUND_S, Constraint
from snapllm.engine.decode import Drafting
from snapllm.engine.loaded import attention_params
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling, TokenDelta, TokenLogprob
from snapllm.errors import UnsupportedParameterError
from snapllm.protocol.requests import parse_request
from snapllm.protocol.responses.responses_api import inference_request, parse_invoke
from snapllm.protocol.serving import OpenAIServing
from tests.support.generation import serving_over
from tests.support.paths import REPO


def _lazy_and_eager(engine: Engine, serving: OpenAIServing, body: dict[str, Any]):
    """One request generated under both grammar checks (the same prepared tokens, grammar and seed)."""
    prepared = serving.prepare(_request(body))
    return tuple(
        serving.generation(prepared, engine.generate(prepared.engine_request, grammar_check=check))
        for check in ("lazy", "eager")
    )


def _uses_grammar(body: dict[str, Any]) -> bool:
    text = body.get("text")
    return "response_format" in body or "tools" in body or (isinstance(text, dict) and "format" in text)


def _replay_bodies() -> dict[str, dict[str, Any]]:
    """Every event in events/ whose request is constrained by a grammar (a router event's body too)."""
    bodies = {}
    for path in sorted((REPO / "events").rglob("*.json")):
        if path.name.endswith(".expected.json"):
            continue
        event = json.loads(path.read_text())
        body = event
        if isinstance(event.get("body"), str):
            try:
                body = json.loads(event["body"])
            except ValueError:  # an event of malformed input
                continue
        if isinstance(body, dict) and _uses_grammar(body):
            bodies[str(path.relative_to(REPO / "events"))] = body
    return bodies


REPLAYED = _replay_bodies()
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": CITY}}
    for name, description in (("get_weather", "The weather in a city"), ("get_time", "The time in a city"))
]
PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "color": {"enum": ["red", "green", "blue"]},
        "age": {"type": "integer"},
        "tricks": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2},
    },
    "required": ["name", "color", "age", "tricks"],
    "additionalProperties": False,
}
PLAN = plan_schema(
    [
        ("read_excerpt", {"type": "object", "properties": {"document": {"type": "integer"}}}),
        ("summarize_chunk", {"type": "object", "properties": {"text": {"type": "string", "maxLength": 40}}}),
    ],
    max_steps=2,
)
QUESTION = [{"role": "user", "content": "What is the weather in Paris? Answer in JSON."}]
EXTRA = {
    "pet": {
        "messages": [{"role": "user", "content": "Invent a pet from Rome. Answer in JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET}},
    },
    "plan": {
        "messages": [
            {"role": "user", "content": "Plan tool calls that summarize a document about SnapStart."}
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "plan", "schema": PLAN}},
    },
    "json-object": {"messages": QUESTION, "response_format": {"type": "json_object"}},
    "tools-required": {"messages": QUESTION, "tools": TOOLS, "tool_choice": "required"},
    "tools-auto": {"messages": QUESTION, "tools": TOOLS, "tool_choice": "auto"},
    "tools-parallel": {
        "messages": QUESTION,
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": True,
    },
}


def test_every_replay_event_with_a_grammar_is_compared():
    # The Responses API event that forces a tool call is one; a new constrained event joins automatically.
    assert "inference/responses-function-call.json" in REPLAYED


def _greedy(body: dict[str, Any]) -> dict[str, Any]:
    body = {**body, "temperature": 0}
    if "input" in body:
        return {**body, "max_output_tokens": 80}
    return {**body, "max_tokens": 80}


def _request(body: dict[str, Any]):
    return inference_request(parse_invoke(body))


@pytest.mark.parametrize("name", [*REPLAYED, *EXTRA])
def test_the_lazy_grammar_check_gives_the_tokens_of_the_full_check(engine, serving, name):
    body = _greedy(REPLAYED.get(name) or EXTRA[name])
    rejected_before = engine._decoder.grammar_rejections
    lazy, eager = _lazy_and_eager(engine, serving, body)
    assert lazy.text == eager.text, name
    assert lazy.completion_tokens == eager.completion_tokens and lazy.finish_reason == eager.finish_reason
    assert lazy.tool_calls == () or [c.arguments for c in lazy.tool_calls] == [
        c.arguments for c in eager.tool_calls
    ]
    # The grammar had work to do: somewhere the model's own first choice broke it and the check caught it.
    if name in ("pet", "plan", "tools-required"):
        assert engine._decoder.grammar_rejections > rejected_before, name


@pytest.mark.parametrize("name", ["pet", "tools-required"])
def test_a_seeded_draw_under_a_grammar_is_the_one_the_full_check_gives(engine, serving, name):
    # When sampling, the lazy check covers the candidates the chain keeps (its top 40), so the same seed
    # draws the same token among the same candidates.
    body = {**EXTRA[name], "temperature": 0.8, "seed": 11, "max_tokens": 80}
    lazy, eager = _lazy_and_eager(engine, serving, body)
    assert lazy.text == eager.text


def test_a_stop_string_spanning_tokens_is_never_emitted(engine, serving):
    body = {"prompt": "Count from one to twenty: 1, 2, 3, 4, 5,", "temperature": 0.0, "max_tokens": 30}
    whole = serving.generate(parse_request(body)).text
    stop = whole[whole.index(" 8") - 1 : whole.index(" 8") + 4]  # ", 8, 9" spans several tokens
    assert len(engine.llama.tokenize(stop.encode(), add_bos=False)) > 1
    stopped = serving.generate(parse_request({**body, "stop": [stop]}))
    deltas = [item for item in serving.stream(parse_request({**body, "stop": [stop]}))]
    streamed = "".join(item.text for item in deltas if isinstance(item, TokenDelta))
    assert stopped.finish_reason == "stop" and stopped.text == whole[: whole.index(stop)]
    assert streamed == stopped.text and stop not in streamed


def test_an_answer_continues_from_the_cached_prefix(serving):
    body = {
        "messages": [{"role": "user", "content": "Name a river in Europe."}],
        "max_tokens": 12,
        "temperature": 0,
    }
    first = serving.generate(parse_request(body))
    again = serving.generate(parse_request(body))
    # The whole prompt but its last token is reused (evaluated again for its logits, alone), and the answer
    # does not change.
    assert again.cached_tokens == again.prompt_tokens - 1 and again.text == first.text


def test_drafting_keeps_plain_decodings_tokens_and_leaves_no_wrong_guess_in_the_cache(model_path):
    drafting = Engine.load(str(model_path), EngineSettings(threads=1), model_name="smollm2", draft=Drafting())
    serving = serving_over(drafting)
    document = (Path(REPO) / "events/agent/documents/snapstart.md").read_text()[:600]
    question = [{"role": "user", "content": f"{document}\n\nQuote the first sentence above."}]
    request = {"messages": question, "temperature": 0, "max_tokens": 32, "seed": 5}
    first = serving.generate(parse_request(request))
    # Guesses were confirmed, and others (past the quote) were not.
    assert 0 < drafting._decoder.drafted_accepted < drafting._decoder.drafted
    # The cache holds the prompt and every answer token but the last (never evaluated): the guesses the
    # sampler did not confirm are gone.
    evaluated = first.completion_tokens - (1 if first.finish_reason == "length" else 0)
    assert len(drafting.cached_tokens) == first.prompt_tokens + evaluated
    assert first.timings.draft_n == drafting._decoder.drafted
    again = serving.generate(parse_request(request))
    assert again.text == first.text
    # The same answer as plain decoding, token for token.
    plain = serving.generate(parse_request({**request, "speculative": False}))
    assert plain.text == first.text and plain.timings.draft_n == 0
    streamed = "".join(
        item.text for item in serving.stream(parse_request(request)) if isinstance(item, TokenDelta)
    )
    assert streamed == first.text


def test_a_biased_greedy_pick_leaves_the_models_own_log_probabilities(engine):
    # The biases go into llama.cpp's logits buffer for the pick and come out again before the log
    # probabilities are read from it: a banned token is still reported with the model's own probability.
    prompt = tuple(engine.tokenize("The three primary colours are", add_bos=True))

    def first_token(biases: tuple[tuple[int, float], ...]) -> TokenLogprob:
        sampling = Sampling(0.0, 1.0, seed=1, logit_bias=biases)
        completion = engine.generate(EngineRequest(prompt, sampling, max_tokens=1, top_logprobs=3))
        assert completion.logprobs is not None
        return completion.logprobs[0]

    plain = first_token(())
    favourite = engine.tokenize(plain.token, add_bos=False, special=False)
    assert len(favourite) == 1, plain
    banned = first_token(((favourite[0], float("-inf")),))
    assert banned.token != plain.token
    assert banned.top == plain.top  # the model's distribution, the banned token first in it
    assert banned.logprob == dict((text, logprob) for text, _, logprob in plain.top)[banned.token]


def test_a_greedy_answer_with_biases_is_the_one_llama_cpp_python_gives(engine, model_path):
    # The engine adds the biases to llama.cpp's logits, takes the first highest and removes them;
    # llama-cpp-python runs its own chain over the same model (and the engine's attention kernels). A banned
    # first choice, a boosted rare token and a ban that only matters later must all give the reference's
    # tokens.
    reference = Llama(
        model_path=str(model_path),
        n_ctx=256,
        n_threads=1,
        verbose=False,
        **attention_params(EngineSettings()),
    )
    prompt = engine.tokenize("The three primary colours are", add_bos=True)

    def engine_text(biases: dict[int, float]) -> str:
        sampling = Sampling(0.0, 1.0, seed=1, logit_bias=tuple(biases.items()))
        return engine.generate(EngineRequest(tuple(prompt), sampling, max_tokens=12)).text

    plain = engine.tokenize(engine_text({}), add_bos=False)
    cases = [{plain[0]: float("-inf")}, {plain[0]: -100.0, plain[1]: -100.0}, {plain[2]: -100.0, 1000: 8.0}]
    try:
        for biases in cases:
            expected = reference.create_completion(prompt, max_tokens=12, temperature=0.0, logit_bias=biases)
            assert engine_text(biases) == expected["choices"][0]["text"], biases
    finally:
        reference.close()


# --- The constraint engine (llguidance) at the decoder: lazy check against the mask at every step -----------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}
GRAMMARS = {
    "json-schema": LLMatcher.grammar_from_json_schema(PERSON),
    "json-object": LLMatcher.grammar_from_json_schema({"type": "object"}),
    "lark": LLMatcher.grammar_from_lark('start: "The answer is " NUMBER "."\nNUMBER: /[0-9]{1,3}/'),
}
#: The question each grammar's answers are asked: its own kind of answer, which the model would still
#: rather write as prose.
QUESTIONS = {
    "json-schema": "Describe a person and their pets.",
    "json-object": "Describe a person and their pets.",
    "lark": "What is six times seven?",
}
#: Greedy picks (the argmax, a penalised chain) and seeded draws: top-p (the top-k candidates checked), the
#: defaults (min-p's candidates checked), top-k 5, and the whole vocabulary with top-p (the mask every step).
SETTINGS = {
    "greedy": Sampling(0.0, 1.0, seed=1),
    "greedy-penalised": Sampling(0.0, 1.0, seed=1, repeat_penalty=1.3),
    "seed-1": Sampling(0.8, 0.95, seed=1),
    "seed-4-defaults": Sampling(1.0, 1.0, seed=4),
    "seed-2-top-k-5": Sampling(1.0, 1.0, seed=2, top_k=5),
    "seed-3-whole-vocabulary": Sampling(0.7, 0.9, seed=3, top_k=0),
}


def _chat(engine: Engine, question: str) -> tuple[int, ...]:
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return tuple(engine.tokenize(text, add_bos=False))


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("grammar", GRAMMARS)
def test_the_lazy_check_gives_the_tokens_of_the_mask_at_every_step(engine, grammar, setting):
    decoder = engine._decoder
    rejected, masked = decoder.grammar_rejections, decoder.grammar_fallbacks
    request = EngineRequest(
        _chat(engine, QUESTIONS[grammar]), SETTINGS[setting], max_tokens=40, grammar=GRAMMARS[grammar]
    )
    lazy = engine.generate(request, grammar_check="lazy")
    eager = engine.generate(request, grammar_check="eager")
    assert (lazy.text, lazy.finish) == (eager.text, eager.finish)
    assert lazy.completion_tokens == eager.completion_tokens
    if grammar == "json-schema" and lazy.finish == "stop":
        jsonschema.validate(json.loads(lazy.text), PERSON)
    if grammar == "lark" and lazy.finish == "stop":
        assert re.fullmatch(r"The answer is [0-9]{1,3}\.", lazy.text), lazy.text
    if setting.startswith("greedy"):
        # The model's favourite was refused somewhere (it would rather write prose), and picks the grammar
        # allowed needed no mask: the lazy check did the work.
        assert decoder.grammar_rejections > rejected
        assert decoder.grammar_fallbacks - masked < lazy.completion_tokens


def test_the_end_comes_when_the_grammar_is_complete(engine):
    grammar = LLMatcher.grammar_from_lark('start: "yes" | "no"')
    prompt = _chat(engine, "Is Paris in France?")
    request = EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=20, grammar=grammar)
    answer = engine.generate(request)
    assert answer.text in ("yes", "no") and answer.finish == "stop"


def test_a_grammar_llguidance_refuses_is_a_value_error_and_the_engine_serves_on(engine):
    prompt = _chat(engine, "Name a colour.")
    refused = "start: colour"  # a rule that is never defined
    assert engine.accepts_grammar(GRAMMARS["json-object"]) and not engine.accepts_grammar(refused)
    assert not engine.accepts_grammar('root ::= "red"')  # GBNF: llama.cpp's grammars are not the engine's
    with pytest.raises(ValueError, match="does not compile"):
        engine.generate(EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=8, grammar=refused))
    answer = engine.generate(EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=8))
    assert answer.completion_tokens == 8


#: Grammars whose masks cost the most per token: 1,500 regular expressions alive at once, a lexer whose
#: states multiply with every letter, deep nesting of optional rules.
HOSTILE = {
    "lexemes": "start: (" + " | ".join(f"/[a-z]*q{i}/" for i in range(1500)) + ")+",
    "states": 'start: /[a-z]*a[a-z]{14}/ "!"',
    "nesting": "start: r0\n" + "\n".join(f'r{i}: "(" r{i + 1}? ")"' for i in range(1500)) + '\nr1500: "x"',
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_grammars_masks_stay_within_the_bound_or_stop_the_request(engine, name):
    # Random tokens among the allowed ones drive the matcher where a model might; each mask either stays
    # within MASK_TIME_BOUND_S or its fuel runs out first and the request stops with a 400.
    constraint = Constraint(engine._decoder._tokenizer, LLMatcher.grammar_from_lark(HOSTILE[name]))
    rng = np.random.default_rng(7)
    try:
        for _ in range(40):
            allowed = np.flatnonzero(constraint.allowed())
            constraint.accept(int(rng.choice(allowed)))
    except UnsupportedParameterError as exc:
        assert "within its bounds" in exc.message and exc.status_code == 400
    assert constraint.masks >= 1 and constraint.longest_mask_s <= MASK_TIME_BOUND_S, name


def test_a_constraint_that_runs_out_of_fuel_stops_the_request_and_the_engine_serves_on(engine):
    prompt = _chat(engine, "Write a word.")
    before = engine.generate(EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=8))
    # 3,000 regular expressions alive at once: the first mask runs out of lexer fuel (the model's first
    # pick, a capital letter, is refused, so a mask is computed).
    lexemes = " | ".join(f"/[a-z]*q{i}/" for i in range(3000))
    grammar = LLMatcher.grammar_from_lark(f"start: ({lexemes})+")
    with pytest.raises(UnsupportedParameterError, match="within its bounds"):
        engine.generate(EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=8, grammar=grammar))
    after = engine.generate(EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=8))
    assert after.text == before.text


def test_deeply_nested_rules_compile_without_overflowing_the_stack(model_path):
    # llguidance compiles nested rules recursively: 3,000 levels overflow an 8 MiB stack and kill the
    # process, so the check runs in a child process; the engine compiles on a thread with a deep stack.
    code = (
        "import sys; from llama_cpp import Llama; from llguidance import LLMatcher\n"
        "from snapllm.engine.constraint import Constraint, vocabulary_tokenizer\n"
        f"llama = Llama(model_path={str(model_path)!r}, vocab_only=True, verbose=False)\n"
        "rules = '\\n'.join(f'r{i}: \"a\" r{i + 1}?' for i in range(3000))\n"
        "grammar = LLMatcher.grammar_from_lark('start: r0\\n' + rules + '\\nr3000: \"z\"')\n"
        "print(int(Constraint(vocabulary_tokenizer(llama), grammar).allowed().sum()))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[-1]) >= 1  # tokens of "a"s may start


def test_a_grammar_is_checked_while_another_request_generates(engine):
    # The serving layer checks a request's grammar as it prepares it; a stream holding the engine (its
    # consumer reads slowly, on the same event loop perhaps) must not hold that check up.
    prompt = _chat(engine, "Count to ten.")
    stream = engine.stream(EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=8))
    first = next(stream)  # the stream holds the engine's lock from here
    checked: list[bool] = []
    thread = threading.Thread(target=lambda: checked.append(engine.accepts_grammar(GRAMMARS["lark"])))
    thread.start()
    thread.join(timeout=20)
    waited = thread.is_alive()
    stream.close()
    thread.join()
    assert isinstance(first, TokenDelta) and not waited and checked == [True]
    # The compiled matcher is taken by the request with that grammar.
    answer = engine.generate(
        EngineRequest(prompt, Sampling(0.0, 1.0, seed=1), max_tokens=12, grammar=GRAMMARS["lark"])
    )
    assert answer.text.startswith("The answer is ")
