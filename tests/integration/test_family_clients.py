"""A user's model of another family behind ``snapllm local serve``, called by the official ``openai`` client:
tool calls forced through the family's own format (Qwen3's Hermes ``<tool_call>``, Llama 3's JSON,
gpt-oss's harmony messages) come back as OpenAI ``tool_calls``, whole and streamed, with arguments valid
for the tool; a reasoning model's thinking comes back as ``reasoning_content``.

Each family's test model has random weights and its real tokenizer and template (``snapllm test-models``):
what comes back is what the grammar forced, read back through the family's parser. Where a test scripts
the model (``scripted_bias``: a logit_bias on the tokens of the family's real call), the model writes that
call wherever the grammar lets it, as a trained model of the family would: with the spaces its template
shows, or without them.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from llama_cpp import Llama

from snapllm_dev.testmodels.families import TEST_MODEL_FAMILIES
from tests.support.family_models import family_model, scripted_bias, vocabulary
from tests.support.serve import SERVE_ENV, ServeProcess

CITY = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": CITY},
    }
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


# The text that opens a call in each family's format: under "auto", a logit_bias on its first token makes
# the random weights open a call, and the grammar writes the rest.
OPENERS = {"qwen3": "<tool_call>", "llama3.2": "{", "gpt-oss": " to"}


@pytest.fixture(scope="module", params=["qwen3", "llama3.2", "gpt-oss"])
def family_server(request):
    model = family_model(request.param)
    vocab = Llama(model_path=str(model.path), vocab_only=True, verbose=False)
    opener = vocab.tokenize(OPENERS[request.param].encode(), add_bos=False, special=True)[0]
    env = {**SERVE_ENV, "SNAPLLM_MAX_TOKENS": "256"}
    with ServeProcess.start(env=env, args=["--model", str(model.path)]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        yield request.param, client, client.models.list().data[0].id, opener


def _check(calls) -> None:
    # One call, or several (parallel calls are allowed unless refused), each valid for its tool.
    assert calls
    for call in calls:
        assert call.function.name == "get_weather" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), CITY)


def test_a_forced_call_comes_back_in_tool_calls_whole_and_streamed(family_server):
    _, client, model, _ = family_server
    # Random weights pick among the spaces the grammar allows one token at a time (a gap may be a newline and
    # 32 spaces): Qwen3's call takes 165 tokens at this seed.
    common = {"model": model, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 256, "seed": 3}
    whole = client.chat.completions.create(**common, tool_choice="required")
    assert whole.choices[0].finish_reason == "tool_calls", whole
    _check(whole.choices[0].message.tool_calls)
    named = client.chat.completions.create(
        **common, tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    _check(named.choices[0].message.tool_calls)
    stream = client.chat.completions.create(**common, tool_choice="required", stream=True)
    names, arguments, finish = {}, {}, None
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if call.function.name:
                names[call.index] = call.function.name
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "tool_calls"
    calls = whole.choices[0].message.tool_calls
    assert names == {index: "get_weather" for index in range(len(calls))}
    assert [json.loads(arguments[index]) for index in names] == [
        json.loads(c.function.arguments) for c in calls
    ]


def test_the_thinking_comes_back_apart_from_the_answer(family_server):
    family, client, model, _ = family_server
    if family != "qwen3":
        pytest.skip("the thinking is forced here for Qwen3, whose answers always open with it")
    answer = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
        reasoning_effort="minimal",
        max_tokens=160,
        seed=3,
    )
    message = answer.choices[0].message
    assert message.reasoning_content  # the SDK keeps the field it does not declare
    jsonschema.validate(json.loads(message.content), CITY)
    assert answer.usage.completion_tokens_details.reasoning_tokens >= 64


def test_under_auto_a_call_the_model_opens_comes_back_as_tool_calls(family_server):
    _, client, model, opener = family_server
    common = {
        "model": model,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_tokens": 160,
        "seed": 3,
        # Qwen3's thinking off, so the call is the first thing it writes.
        "reasoning_effort": "none",
        "logit_bias": {str(opener): 100},
    }
    whole = client.chat.completions.create(**common)
    assert whole.choices[0].finish_reason == "tool_calls", whole
    _check(whole.choices[0].message.tool_calls)
    names = {}
    for chunk in client.chat.completions.create(**common, stream=True):
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if call.function.name:
                names[call.index] = call.function.name
    assert names and set(names.values()) == {"get_weather"}


# Each family's real call to get_weather for Paris, as its models write it: with the spaces their templates
# show and without (Qwen3's Hermes call; Llama 3.1-3.3's custom-tool JSON, on the Llama 3.2 model, whose
# template takes tools; gpt-oss's message on the commentary channel).
SPACED = {
    "qwen3": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "llama3.2": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "gpt-oss": '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
}
SCRIPTS = {
    (family, spacing): text if spacing == "spaced" else text.replace(": ", ":").replace(", ", ",")
    for family, text in SPACED.items()
    for spacing in ("spaced", "compact")
}
SCRIPT_OPENERS = {"qwen3": "<tool_call>", "llama3.2": '{"', "gpt-oss": "<|channel|>"}


def _streamed_calls(stream) -> tuple[list[tuple[str, dict]], str | None]:
    names, arguments, finish = {}, {}, None
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if call.function.name:
                names[call.index] = call.function.name
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    return [(names[index], json.loads(arguments[index])) for index in sorted(names)], finish


@pytest.mark.parametrize("spacing", ["spaced", "compact"])
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_the_call_the_model_writes_comes_back_with_or_without_spaces(family_server, tool_choice, spacing):
    family, client, model, _ = family_server
    script = SCRIPTS[family, spacing]
    # Under "auto" the call must win over text at the start; under "required" the model ends its turn after
    # its call, as a trained one does, where the grammar would let a second call follow.
    favoured = SCRIPT_OPENERS[family] if tool_choice == "auto" else TEST_MODEL_FAMILIES[family].end_of_turn
    common = {
        "model": model,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": tool_choice,
        "parallel_tool_calls": tool_choice == "required",
        "max_tokens": 160,
        "temperature": 0,
        "reasoning_effort": "none",
        "logit_bias": scripted_bias(family_model(family), script, favoured=favoured),
    }
    whole = client.chat.completions.create(**common, logprobs=True)
    choice = whole.choices[0]
    written = "".join(token.token for token in choice.logprobs.content)
    # The model wrote its call as scripted: the spacing the grammar used to refuse went through, and the
    # city it meant came back (forced onto compact JSON, Llama 3.1 named another city).
    assert ('"city": "Paris"' in written) == (spacing == "spaced"), written
    assert ('"city":"Paris"' in written) == (spacing == "compact"), written
    assert choice.finish_reason == "tool_calls", (written, choice)
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris"})], written
    assert not choice.message.content
    streamed, finish = _streamed_calls(client.chat.completions.create(**common, stream=True))
    assert (streamed, finish) == (calls, "tool_calls")


def test_a_second_call_cut_by_max_tokens_comes_back_as_far_as_it_went(family_server):
    family, client, model, _ = family_server
    if family != "qwen3":
        pytest.skip("parallel calls are Qwen3's (Hermes); Llama 3 and gpt-oss make one call a turn")
    script = SCRIPTS[family, "spaced"]
    # The opener favoured: after its call the model opens another one, until max_tokens cuts it.
    bias = scripted_bias(family_model(family), script, favoured=SCRIPT_OPENERS[family])
    one = len(vocabulary(family_model(family)).tokenize(script.encode(), add_bos=False, special=True))
    common = {
        "model": model,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": one + 12,  # the first call whole, the second cut inside its arguments
        "temperature": 0,
        "reasoning_effort": "none",
        "logit_bias": bias,
    }
    whole = client.chat.completions.create(**common)
    choice = whole.choices[0]
    assert choice.finish_reason == "length"
    first, second = choice.message.tool_calls
    assert (first.function.name, json.loads(first.function.arguments)) == ("get_weather", {"city": "Paris"})
    # The second call as OpenAI returns a truncated one: its name, its arguments as far as they were written.
    assert second.function.name == "get_weather" and second.id != first.id
    assert second.function.arguments and '{"city": "Paris"}'.startswith(second.function.arguments)
    names, arguments, finish = {}, {}, None
    for chunk in client.chat.completions.create(**common, stream=True):
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if call.function.name:
                names[call.index] = call.function.name
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "length" and names == {0: "get_weather", 1: "get_weather"}
    assert arguments == {0: first.function.arguments, 1: second.function.arguments}
