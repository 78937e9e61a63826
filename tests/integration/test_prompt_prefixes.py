"""Saved prompt prefixes with the real model: a declared prefix restored answers as the whole prompt
evaluated afresh; two conversations alternating in one engine each keep their prefix; the cache of recent
prefixes stays within its byte bound."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling
from snapllm.errors import ConfigurationError
from snapllm.inference.client import checked_response
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm.protocol.prefixes import read_prefixes
from snapllm.protocol.serving import OpenAIServing
from snapllm_dev.local.durable import LocalAgent, agent_settings
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


def _system(topic: str, rules: int = 25) -> str:
    """A system prompt of about 16 tokens a rule (a few hundred tokens by default), different per topic."""
    text = " ".join(
        f"Rule {i}: when asked about {topic}, answer in one short sentence number {i}." for i in range(rules)
    )
    return f"You are an assistant for questions about {topic}. {text}"


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


#: A question long enough that a short declared prefix's tokens all fall before the prompt's last 64.
LONG_QUESTION = (
    "When is high tide in Brest? " + "Say whether the moon, the sun or the coast matters most. " * 8
)


@pytest.mark.parametrize(
    ("entry", "question"),
    [
        # 682 tokens with the tools: past a batch (512), so the prefix is evaluated in two.
        (
            {"messages": [{"role": "system", "content": _system("tides", rules=10)}], "tools": TOOLS},
            "When is high tide?",
        ),
        # Shorter than a prompt's smallest batch (64 tokens): evaluated padded to one, then cut.
        ({"messages": [{"role": "system", "content": "You answer questions about tides."}]}, LONG_QUESTION),
    ],
    ids=["long", "short"],
)
def test_a_declared_prefix_restored_answers_as_the_whole_prompt_evaluated_afresh(
    load, entry: dict[str, Any], question: str
):
    engine, serving = load()
    [(length, size)] = serving.keep_prefixes([entry])
    assert size > 0
    serving.warm_up([])  # leaves the live sequence on the template's start, as before a snapshot
    question = {**entry, "messages": [*entry["messages"], {"role": "user", "content": question}]}
    restored = _ask(serving, question)
    # The declared state was restored (the live sequence held only the template's start) and all of it
    # but the last batch's tokens reused; a seed makes the engine evaluate the prompt whole.
    assert engine.prefix_stats.restores == 1
    assert _cached(restored) >= min(length, restored["usage"]["prompt_tokens"] - 64) - 3 > 0
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
    # Prefixes of about 170 tokens: past the 64 the engine evaluates again, short enough that the live
    # sequence alone (evaluating every turn whole) stays quick.
    first = [{"role": "system", "content": _system("tides", rules=10)}]
    second = [{"role": "system", "content": _system("volcanoes", rules=10)}]
    # The conversations' own prefixes, up to where a user turn begins.
    prefixes = [len(serving.prefix_tokens({"messages": list(history)})) for history in (first, second)]
    _conversation_step(serving, first, "When is high tide?")
    _conversation_step(serving, second, "Which volcano is tallest?")
    # With the cache, three turns that each return to their conversation; without it, one return shows the
    # eviction (and each turn evaluates its whole conversation).
    questions = [
        (first, "And low tide?"),
        (second, "And the most active one?"),
        (first, "Why are there two a day?"),
    ]
    later = [
        _conversation_step(serving, history, question)
        for history, question in questions[: 3 if cache_mb else 1]
    ]
    if cache_mb:
        # Each turn after the first restores its conversation's state: nothing before the previous
        # answer is evaluated again.
        for response, prefix in zip(later, [*prefixes, prefixes[0]], strict=True):
            assert _cached(response) >= prefix
        assert engine.prefix_stats.restores == 3
    else:  # the live sequence alone: the second conversation evicted the first one's prefix
        assert _cached(later[0]) < prefixes[0] // 4


def test_the_cache_of_recent_prefixes_never_exceeds_its_bound(load):
    engine, _ = load(prefix_cache_mb=8)
    budget = 8 * 1024 * 1024  # room for three or four states of these prompts (23 KB a token)
    greedy = Sampling(temperature=0.0, top_p=1.0, seed=1)
    prompts = [engine.tokenize(f"Story {i}: " + "once upon a time " * 20, add_bos=True) for i in range(8)]
    for prompt in prompts:
        engine.generate(EngineRequest(tuple(prompt), greedy, max_tokens=2))
        assert engine.prefix_cache.recent_bytes <= budget
    recent = engine.prefix_cache.recent
    assert engine.prefix_stats.evictions > 0 and len(recent) >= 3
    # The most recent conversation before the live one is kept (its prompt and the token generated after
    # it), and a prompt that returns to it restores it.
    assert recent[-1].tokens[: len(prompts[-2])] == prompts[-2]
    again = engine.generate(EngineRequest(tuple(prompts[-2]), greedy, max_tokens=2))
    assert again.cached_tokens > 0 and engine.prefix_stats.restores == 1


def test_a_malformed_prefixes_file_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="JSON array"):
        read_prefixes('{"messages": []}', source="prefixes.json")
    with pytest.raises(ConfigurationError, match=r"prefixes.json\[0\] has model"):
        read_prefixes('[{"messages": [], "model": "x"}]', source="prefixes.json")
    with pytest.raises(ConfigurationError, match="not JSON"):
        read_prefixes("[", source="prefixes.json")


def _restored(variables: dict[str, str]) -> InferenceRuntime:
    """The inference runtime set up in this process from ``variables``, as Lambda would, then snapshotted and
    restored (its hooks run)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        runtime = InferenceRuntime.initialize(InferenceSettings.from_env())
    runtime.before_snapshot()
    runtime.after_restore()
    return runtime


def test_the_function_declares_its_prefixes_from_a_key_in_the_model_bucket(deployment):
    """``SNAPLLM_PROMPT_PREFIXES`` as the template passes it: a key in the model bucket, read at init and
    evaluated by the before-snapshot warm-up; a restored environment's first request reuses the prefix."""
    entry = {"messages": [{"role": "system", "content": _system("glaciers", rules=10)}]}
    deployment.s3.client().put_object(
        Bucket=LOCAL_MODEL_BUCKET, Key="prefixes/glaciers.json", Body=json.dumps([entry]).encode()
    )
    runtime = _restored(
        deployment.environment(
            SNAPLLM_THREADS=TEST_THREADS,
            SNAPLLM_PROMPT_PREFIXES="prefixes/glaciers.json",
            SNAPLLM_WARMUP_TOKENS="1",
        )
    )
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


class _InThisProcess:
    """The agent's inference client over a runtime in this process, as the restored function answers."""

    def __init__(self, runtime: InferenceRuntime) -> None:
        self.runtime = runtime

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        return checked_response(self.runtime.handle(payload, None))


def test_the_agents_model_calls_restore_the_prefixes_the_template_declares(deployment, caplog):
    """With the template's defaults the inference function declares the agent's own prompts
    (``snapllm:agent``): the plan, the document summary and the answer each restore their system message's
    state, evaluated before the snapshot, and the agent's log shows the cached tokens."""
    function = deployment.function(
        "InferenceFunction", SNAPLLM_THREADS=TEST_THREADS, SNAPLLM_WARMUP_TOKENS="1"
    )
    assert function.environment["SNAPLLM_PROMPT_PREFIXES"] == "snapllm:agent"
    runtime = _restored(function.environment)
    plan, summary, answer = (runtime.serving.prefix_tokens(entry) for entry in runtime.prefix_entries)
    assert [state.tokens for state in runtime.serving.engine.prefix_cache.pinned] == [plan, summary, answer]

    # One tool call: the plan and the answer are the prompts checked here, and a second call adds only its
    # own prompt and summary.
    settings = agent_settings(deployment.template, SNAPLLM_AGENT_MAX_TOOL_CALLS="1")
    agent = LocalAgent(deployment, settings, _InThisProcess(runtime))
    key = f"{agent.settings.artifacts_prefix}documents/glaciers.md"
    text = "Glaciers move because ice deforms under its own weight and slides on meltwater. " * 20
    deployment.s3.client().put_object(Bucket=agent.settings.artifacts_bucket, Key=key, Body=text.encode())
    event = {
        "task": "Explain in one sentence how glaciers move.",
        "documents": [f"s3://{agent.settings.artifacts_bucket}/{key}"],
        "approval": {"required": False},
    }
    with caplog.at_level(logging.INFO, logger="snapllm.agent"):
        run = agent.run(event, execution_name="declared-prefixes")
    assert run.status == "SUCCEEDED", run.error
    logged = {record.model_call: record for record in caplog.records if hasattr(record, "model_call")}
    # Each reuses its declared state whole, but for the prompt's last 64 tokens (the engine evaluates them
    # again whatever the cache holds) and the rounding to a group of 4: the plan is the environment's first
    # request, and the answer follows a tool call whose prompt shares only the template's first tokens.
    for what, prefix in (("plan", plan), ("answer", answer)):
        record = logged[what]
        assert record.cached_tokens >= min(len(prefix), record.prompt_tokens - 64) - 3 > 8, what
    assert f"plan: {logged['plan'].prompt_tokens} prompt tokens ({logged['plan'].cached_tokens} cached)" in (
        logged["plan"].getMessage()
    )


def test_a_seeded_request_that_asks_for_the_cache_answers_as_one_evaluated_afresh(load):
    """``cache_prompt`` with a seed reuses the conversation's cached turns, and samples the same answer, token
    for token and with the same log probabilities, as the seed alone (the prompt evaluated afresh)."""
    _, serving = load()
    history = [{"role": "system", "content": _system("volcanoes", rules=10)}]
    _conversation_step(serving, history, "Why do volcanoes erupt?")
    history.append({"role": "user", "content": "And which one erupts most often?" + " Say why." * 30})

    def sampled(**fields: Any) -> dict[str, Any]:
        body = {"messages": history, "temperature": 0.9, "seed": 11, "logprobs": True, **fields}
        response, _ = serving.complete(serving.parse(body), deadline=None)
        return response

    reused = sampled(cache_prompt=True)
    afresh = sampled()
    assert _cached(reused) > 250 and _cached(afresh) == 0
    assert reused["choices"][0]["message"] == afresh["choices"][0]["message"]
    assert _logprobs(reused) == _logprobs(afresh)
