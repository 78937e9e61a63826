"""Saved prompt prefixes with the real model: a declared prefix restored answers as the whole prompt
evaluated afresh; two conversations alternating in one engine each keep their prefix; the cache of recent
prefixes stays within its byte bound."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling
from snapllm.errors import ConfigurationError
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm.protocol.prefixes import read_prefixes
from snapllm.protocol.serving import OpenAIServing
from snapllm_dev.local.session import LOCAL_MODEL_BUCKET
from tests.support.generation import TEST_THREADS, serving_over

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Looks up fact number {i} about a city.",
            "parameters": WEATHER,
        },
    }
    for i in range(6)
]


def _system(topic: str) -> str:
    """A system prompt of a few hundred tokens, different per topic."""
    rules = " ".join(
        f"Rule {i}: when asked about {topic}, answer in one short sentence number {i}." for i in range(25)
    )
    return f"You are an assistant for questions about {topic}. {rules}"


@pytest.fixture(scope="module")
def load(model_path) -> Callable[..., tuple[Engine, OpenAIServing]]:
    """An engine of its own over the packaged model (with these engine settings), and the protocol over it."""

    def loaded(**settings: Any) -> tuple[Engine, OpenAIServing]:
        engine = Engine.load(str(model_path), EngineSettings(threads=1, **settings), model_name="smollm2")
        return engine, serving_over(engine, max_tokens=24)

    return loaded


def _ask(serving: OpenAIServing, body: dict[str, Any]) -> dict[str, Any]:
    response, _ = serving.complete(
        serving.parse({**body, "temperature": 0.0, "logprobs": True}), deadline=None
    )
    return response


def _logprobs(response: dict[str, Any]) -> list[tuple[str, float]]:
    return [(item["token"], item["logprob"]) for item in response["choices"][0]["logprobs"]["content"]]


def _cached(response: dict[str, Any]) -> int:
    return response["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_declared_prefix_restored_answers_as_the_whole_prompt_evaluated_afresh(load):
    engine, serving = load()
    entry = {"messages": [{"role": "system", "content": _system("tides")}], "tools": TOOLS}
    [(length, size)] = serving.keep_prefixes([entry])
    assert length > 300 and size > 0
    serving.warm_up([])  # leaves the live sequence on the template's start, as before a snapshot
    question = {
        **entry,
        "messages": [*entry["messages"], {"role": "user", "content": "When is high tide in Brest?"}],
    }
    restored = _ask(serving, question)
    # The declared state was restored (the live sequence held only the template's start) and all of it
    # but the last batch's tokens reused; a seed makes the engine evaluate the prompt whole.
    assert engine.prefix_stats.restores == 1
    assert _cached(restored) >= length - 64
    whole = _ask(serving, {**question, "seed": 7})
    assert _cached(whole) == 0
    assert restored["choices"][0]["message"] == whole["choices"][0]["message"]
    assert _logprobs(restored) == _logprobs(whole)


def _conversation_step(
    serving: OpenAIServing, history: list[dict[str, Any]], question: str
) -> dict[str, Any]:
    # Each turn adds more than the 64 tokens the engine evaluates again whatever the cache holds, so that
    # those fall within the new turn.
    detail = " Think about the moon, the sun, the seasons and the shape of the coast or the crust." * 5
    history.append({"role": "user", "content": question + detail})
    response = _ask(serving, {"messages": list(history)})
    history.append({"role": "assistant", "content": response["choices"][0]["message"]["content"] or ""})
    return response


@pytest.mark.parametrize("cache_mb", [64, 0])
def test_two_alternating_conversations_each_keep_their_prefix(load, cache_mb: int):
    engine, serving = load(prefix_cache_mb=cache_mb)
    first = [{"role": "system", "content": _system("tides")}]
    second = [{"role": "system", "content": _system("volcanoes")}]
    # The conversations' own prefixes, up to where a user turn begins.
    prefixes = [len(serving.prefix_tokens({"messages": list(history)})) for history in (first, second)]
    _conversation_step(serving, first, "When is high tide?")
    _conversation_step(serving, second, "Which volcano is tallest?")
    later = [
        _conversation_step(serving, first, "And low tide?"),
        _conversation_step(serving, second, "And the most active one?"),
        _conversation_step(serving, first, "Why are there two a day?"),
    ]
    if cache_mb:
        # Each turn after the first restores its conversation's state: nothing before the previous
        # answer is evaluated again.
        for response, prefix in zip(later, [*prefixes, prefixes[0]], strict=True):
            assert _cached(response) >= prefix
        assert engine.prefix_stats.restores == 3
    else:  # the live sequence alone: each conversation evicts the other's prefix
        for response, prefix in zip(later, [*prefixes, prefixes[0]], strict=True):
            assert _cached(response) < prefix // 4


def test_the_cache_of_recent_prefixes_never_exceeds_its_bound(load):
    engine, _ = load(prefix_cache_mb=8)
    budget = 8 * 1024 * 1024  # room for three or four states of these prompts (23 KB a token)
    greedy = Sampling(temperature=0.0, top_p=1.0, seed=1)
    prompts = [engine.tokenize(f"Story {i}: " + "once upon a time " * 20, add_bos=True) for i in range(12)]
    for prompt in prompts:
        engine.generate(EngineRequest(tuple(prompt), greedy, max_tokens=2))
        assert engine.prefix_cache.recent_bytes <= budget
    recent = engine.prefix_cache.recent
    assert engine.prefix_stats.evictions > 0 and len(recent) >= 3
    # The most recent conversation before the live one is kept, and a prompt that returns to it restores it.
    assert recent[-1].tokens == prompts[-2][: len(recent[-1].tokens)]
    again = engine.generate(EngineRequest(tuple(prompts[-2]), greedy, max_tokens=2))
    assert again.cached_tokens > 0 and engine.prefix_stats.restores == 1


def test_a_malformed_prefixes_file_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="JSON array"):
        read_prefixes('{"messages": []}', source="prefixes.json")
    with pytest.raises(ConfigurationError, match=r"prefixes.json\[0\] has model"):
        read_prefixes('[{"messages": [], "model": "x"}]', source="prefixes.json")
    with pytest.raises(ConfigurationError, match="not JSON"):
        read_prefixes("[", source="prefixes.json")


def test_the_function_declares_its_prefixes_from_a_key_in_the_model_bucket(deployment):
    """``SNAPLLM_PROMPT_PREFIXES`` as the template passes it: a key in the model bucket, read at init and
    evaluated by the before-snapshot warm-up; a restored environment's first request reuses the prefix."""
    entry = {"messages": [{"role": "system", "content": _system("glaciers")}]}
    deployment.s3.client().put_object(
        Bucket=LOCAL_MODEL_BUCKET, Key="prefixes/glaciers.json", Body=json.dumps([entry]).encode()
    )
    variables = deployment.environment(
        SNAPLLM_THREADS=TEST_THREADS,
        SNAPLLM_PROMPT_PREFIXES="prefixes/glaciers.json",
        SNAPLLM_WARMUP_TOKENS="1",
    )
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        runtime = InferenceRuntime.initialize(InferenceSettings.from_env())
    runtime.before_snapshot()
    runtime.after_restore()
    prefix = runtime.serving.prefix_tokens(entry)
    cache = runtime.serving.engine.prefix_cache
    assert len(cache.pinned) == 1 and cache.pinned[0].tokens == prefix
    question = {
        **entry,
        "messages": [*entry["messages"], {"role": "user", "content": "How do glaciers move?"}],
    }
    answer = runtime.handle({**question, "max_tokens": 4, "temperature": 0.0}, None)
    assert _cached(answer) >= len(prefix) - 64


def test_a_missing_prefixes_file_fails_the_init(deployment):
    variables = deployment.environment(
        SNAPLLM_THREADS=TEST_THREADS, SNAPLLM_PROMPT_PREFIXES="/nonexistent/prefixes.json"
    )
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        with pytest.raises(ConfigurationError, match=r"SNAPLLM_PROMPT_PREFIXES: /nonexistent/prefixes\.json"):
            InferenceRuntime.initialize(InferenceSettings.from_env())


def test_a_seeded_request_between_two_turns_leaves_the_conversation_its_prefix(load):
    engine, _ = load(prefix_cache_mb=64)
    greedy = Sampling(temperature=0.0, top_p=1.0, seed=1)
    first = engine.tokenize("Chapter one. " + "The tide came in over the sand. " * 30, add_bos=True)
    engine.generate(EngineRequest(tuple(first), greedy, max_tokens=2))
    # A request that evaluates afresh (a caller's seed) takes the context over...
    other = engine.tokenize("A different text. " * 40, add_bos=True)
    engine.generate(EngineRequest(tuple(other), greedy, max_tokens=2, reuse_cache=False))
    # ...and the conversation's next turn still starts from its saved prefix.
    follow_up = [*first, *engine.tokenize(" Then the tide went out again." * 12, add_bos=False)]
    again = engine.generate(EngineRequest(tuple(follow_up), greedy, max_tokens=2))
    assert again.cached_tokens >= len(first) - 4 and engine.prefix_stats.restores == 1
