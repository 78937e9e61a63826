"""The engine generating with the real model (in this process, loaded from the packaged GGUF)."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field

import pytest

from snapllm.engine.loaded import TILED_MATMUL_VARIABLE
from snapllm.engine.loader import DownloadStats
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings, ModelSource
from snapllm.engine.types import Deadline, EngineRequest, Sampling, TokenLogprob
from snapllm.errors import ContextLengthExceededError, InvalidRequestError, ToolCallCutShortError
from snapllm.inference.deadline import CALLER_DEADLINE_KEY, invoke_deadline
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm.protocol.completions.objects import render_response
from snapllm.protocol.requests import parse_request
from snapllm.protocol.responses.responses_api import inference_request, parse_invoke
from tests.support.generation import LONG_GENERATION, serving_over

#: A greedy pick, seeded.
GREEDY = Sampling(0.0, 1.0, seed=1)
#: ggml's type id for bf16 (``enum ggml_type``), which llama-cpp-python's bindings do not name.
GGML_TYPE_BF16 = 30

COUNTING = {"prompt": "Count from one to twenty: 1, 2, 3, 4, 5,", "temperature": 0.0}
#: Over 641 tokens of text.
LONG_PROMPT = "The river runs past the old mill, where the miller weighs the grain each morning. " * 40


def test_chat_uses_the_models_template_and_reports_usage_and_timings(serving):
    request = parse_request(
        {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24}
    )
    generation = serving.generate(request)
    assert generation.text.strip()
    assert "<|im_start|>" not in generation.text and "<|im_end|>" not in generation.text
    assert generation.finish_reason in {"stop", "length"}
    assert 0 < generation.completion_tokens <= 24
    # The ChatML template of SmolLM2 wraps the message: the prompt is far longer than the 7 words.
    assert generation.prompt_tokens > 15
    timings = generation.timings
    assert 0 < timings.time_to_first_token_ms <= timings.total_ms
    if generation.completion_tokens > 1:
        assert timings.tokens_per_second > 0


def test_same_seed_same_text_and_no_seed_draws_a_fresh_one(serving):
    request = {"prompt": "A short poem about the sea:", "max_tokens": 16, "temperature": 1.0}
    first = serving.generate(parse_request({**request, "seed": 1234}))
    # An unseeded request leaves the prompt's prefix cached; the seeded one must not depend on that.
    serving.generate(parse_request(request))
    again = serving.generate(parse_request({**request, "seed": 1234}))
    assert first.text == again.text and first.seed == again.seed == 1234
    seeds = {serving.generate(parse_request(request)).seed for _ in range(3)}
    assert len(seeds) == 3


def test_fresh_seeds_do_not_come_from_pythons_random(serving):
    # A snapshot freezes `random`'s state; per-request seeds must not depend on it.
    request = {"prompt": "Hello", "max_tokens": 1}
    random.seed(7)
    first = serving.generate(parse_request(request)).seed
    random.seed(7)
    assert serving.generate(parse_request(request)).seed != first


def test_stop_sequences(serving):
    stopped = serving.generate(parse_request({**COUNTING, "max_tokens": 30, "stop": [", 8"]}))
    assert stopped.finish_reason == "stop"
    assert ", 8" not in stopped.text and stopped.text.startswith(" 6, 7")
    unstopped = serving.generate(parse_request({**COUNTING, "max_tokens": 30}))
    assert ", 8" in unstopped.text


def test_max_tokens_is_capped_by_configuration(serving):
    with pytest.raises(InvalidRequestError, match="at most 256") as caught:
        serving.generate(parse_request({**COUNTING, "max_tokens": 257}))
    assert caught.value.param == "max_tokens"
    generation = serving.generate(parse_request({**COUNTING, "max_tokens": 5}))
    assert generation.completion_tokens == 5 and generation.finish_reason == "length"


def test_context_window_limits(model_path):
    small = serving_over(
        Engine.load(str(model_path), EngineSettings(threads=1, n_ctx=64), model_name="small")
    )
    with pytest.raises(ContextLengthExceededError, match="context window is 64 tokens") as caught:
        small.generate(parse_request({"prompt": "word " * 100}))
    assert caught.value.param == "prompt"
    # A prompt that fits leaves the rest of the window for the completion, whatever max_tokens says.
    generation = small.generate(parse_request({**COUNTING, "max_tokens": 200}))
    assert generation.prompt_tokens + generation.completion_tokens <= 64
    assert generation.finish_reason == "length"
    # A prompt one token short of llama.cpp's own window (256 cells), then one that differs from it in its
    # last token only: that token is evaluated alone after the 254 cached, at the window's edge.
    full = Engine.load(str(model_path), EngineSettings(threads=1, n_ctx=256), model_name="full")
    first = full.tokenize("word " * 400, add_bos=True)[:255]
    second = [*first[:254], full.tokenize(" river", add_bos=False)[0]]
    answers = [full.generate(EngineRequest(tuple(p), GREEDY, max_tokens=4)) for p in (first, second)]
    assert [(a.cached_tokens, a.completion_tokens) for a in answers] == [(0, 1), (254, 1)]


def test_stops_at_the_deadline_with_what_it_has(serving):
    request = parse_request({**LONG_GENERATION, "max_tokens": 256})
    # The prompt once, untimed: on a busy machine a cold first evaluation alone can outlast a short deadline.
    serving.generate(parse_request({**LONG_GENERATION, "max_tokens": 1}))
    started = time.monotonic()
    generation = serving.generate(request, deadline=Deadline.after(0.6))
    elapsed = time.monotonic() - started
    assert generation.deadline_reached
    assert generation.finish_reason == "length"
    assert 0 < generation.completion_tokens < 256
    assert elapsed < 2.5


def test_deadline_from_a_lambda_context():
    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return 10_000

    deadline = invoke_deadline(Context(), margin_ms=1500)
    assert 8.4 < deadline.at - time.monotonic() <= 8.5
    assert invoke_deadline(object(), margin_ms=0) is None

    def with_caller_deadline(seconds_from_now, value=None):
        context = Context()
        value = value if value is not None else int((time.time() + seconds_from_now) * 1000)
        context.client_context = type("ClientContext", (), {"custom": {CALLER_DEADLINE_KEY: value}})()
        return invoke_deadline(context, margin_ms=0)

    # The earlier of the invoke's and the caller's deadline wins; a malformed value is ignored.
    assert 2.8 < with_caller_deadline(3).at - time.monotonic() <= 3.0
    assert 9.8 < with_caller_deadline(60).at - time.monotonic() <= 10.0
    assert 9.8 < with_caller_deadline(0, value="soon").at - time.monotonic() <= 10.0


def test_weights_are_repacked_and_a_file_is_mapped_by_default(engine):
    import llama_cpp.llama_cpp as low_level

    # Repacked for the CPU's kernels, with flash attention over bf16 values and ggml's tiled K-quant kernel
    # off (one kernel for any batch). A file on a filesystem is mapped (its pages are the page cache's); a
    # memfd is read (test_engine_memory).
    assert engine.llama.model_params.use_extra_bufts is True
    assert engine.llama.model_params.load_mode == low_level.LLAMA_LOAD_MODE_MMAP
    assert engine.llama.context_params.flash_attn_type == low_level.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert engine.llama.context_params.type_v == GGML_TYPE_BF16
    assert os.environ[TILED_MATMUL_VARIABLE] == "0"


def _first_answers(engine: Engine, prompt: list[int]) -> list[tuple[TokenLogprob, ...] | None]:
    """The same prompt's first tokens and their log probabilities, answered with the cache in three states."""

    def answer(tokens: list[int], *, reuse_cache: bool = True) -> tuple[TokenLogprob, ...] | None:
        request = EngineRequest(
            tuple(tokens), Sampling(0.0, 1.0, seed=1), max_tokens=4, top_logprobs=3, reuse_cache=reuse_cache
        )
        return engine.generate(request).logprobs

    whole = answer(prompt, reuse_cache=False)
    # The prompt repeats one sentence, so this answer goes on with the prompt's own next tokens: the cache
    # then holds generated positions that the next prompt starts with too.
    answer(prompt[:100], reuse_cache=False)
    after_a_cached_prefix = answer(prompt)  # all but the first 100 tokens evaluated
    sent_again = answer(prompt)  # only its last token evaluated again, alone
    return [whole, after_a_cached_prefix, sent_again]


@pytest.mark.parametrize(
    ("attention", "threads", "length", "same_after_a_prefix", "same_sent_again"),
    [
        # Without flash attention the attention's matrix products take one kernel for a row alone and another
        # for a batch: the last token evaluated again alone (after a prompt of two batches: 641 tokens) gets
        # other logits than in the whole prompt.
        ({"flash_attention": False}, 1, 641, True, False),
        # f16 values: ggml's attention kernel for fewer than 64 rows rounds otherwise than its tiled one, so
        # the generated positions the prompt after the prefix reuses, and the last token sent again, differ.
        ({"cache_type_v": "f16"}, 1, 300, False, False),
        # The default, bf16 values: one attention kernel for any batch, on one thread and on two (ggml
        # splits each batch's rows between the threads).
        ({}, 1, 300, True, True),
        ({}, 2, 300, True, True),
    ],
    ids=["no-flash-attention-1", "flash-f16-1", "default-1", "default-2"],
)
def test_answers_do_not_depend_on_what_the_prompt_cache_held(
    model_path, attention, threads, length, same_after_a_prefix, same_sent_again
):
    # A prompt answered evaluated whole, after a cached 100-token prefix, and sent again. With flash
    # attention over f16 values ggml picks its attention kernel by batch size (one row, a few, many); over
    # bf16 values it runs one kernel, and the answers' log probabilities stay the same. (A prompt over a
    # batch, 512 tokens, evaluated whole and restored: test_prompt_prefixes.py, the long declared prefix.)
    # The live sequence's rule alone: with saved states (the prefix cache) the prompt after the prefix would
    # restore the whole prompt's state, and be the prompt sent again (tests/integration/test_real_weights.py
    # holds restored answers to the prompt's evaluated afresh, in the default attention).
    settings = EngineSettings(threads=threads, prefix_cache_mb=0, **attention)
    engine = Engine.load(str(model_path), settings, model_name="smollm2")
    try:
        prompt = engine.tokenize(LONG_PROMPT, add_bos=True)[:length]
        assert len(prompt) == length
        whole, after_a_prefix, sent_again = _first_answers(engine, prompt)
        assert whole is not None and len(whole) == 4
        assert (after_a_prefix == whole) is same_after_a_prefix
        assert (sent_again == whole) is same_sent_again
    finally:
        engine.close()


@pytest.mark.parametrize(
    "attention",
    [{}, {"flash_attention": False}, {"repack_weights": False}],
    ids=["default", "no-flash-attention", "not-repacked"],
)
def test_what_a_prompt_takes_from_the_prompt_cache(model_path, attention):
    # The live sequence's rule alone: every cached position a prompt starts with is reused, the prompt's own
    # and those computed while generating (a row is computed alike in any batch), but the prompt's last.
    settings = EngineSettings(threads=1, prefix_cache_mb=0, **attention)
    engine = Engine.load(str(model_path), settings, model_name="smollm2")
    try:
        prompt = engine.tokenize(LONG_PROMPT, add_bos=True)[:300]

        def reused(tokens: list[int], *, max_tokens: int = 1) -> int:
            request = EngineRequest(tuple(tokens), Sampling(0.0, 1.0, seed=1), max_tokens=max_tokens)
            return engine.generate(request).cached_tokens

        reused(prompt[:200])
        follow_up = reused(prompt[:220])
        reused(prompt[:100], max_tokens=9)
        answered = list(engine.cached_tokens)  # the prompt, and the 8 answer tokens evaluated after it
        assert len(answered) == 108
        sent_back = reused(answered + prompt[:100])
        assert (follow_up, sent_back) == (200, 108)
    finally:
        engine.close()


def test_repacking_and_flash_attention_can_be_turned_off(model_path):
    import llama_cpp.llama_cpp as low_level

    plain = Engine.load(
        str(model_path),
        EngineSettings(threads=1, repack_weights=False, flash_attention=False),
        model_name="plain",
    )
    assert plain.llama.model_params.use_extra_bufts is False
    assert (
        plain.llama.model_params.load_mode == low_level.LLAMA_LOAD_MODE_MMAP
    )  # the memfd's pages are the weights
    assert plain.llama.context_params.flash_attn_type == low_level.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert serving_over(plain).generate(parse_request({**COUNTING, "max_tokens": 3})).completion_tokens == 3
    plain.close()


def test_warm_up_leaves_only_the_chat_templates_common_prefix_behind(engine, serving):
    serving.warm_up(serving.warm_up_bodies(2))
    cached = engine.cached_tokens
    first = serving.prepare(
        parse_request({"messages": [{"role": "user", "content": "Why is the sky blue?"}]})
    )
    second = serving.prepare(parse_request({"messages": [{"role": "user", "content": "Name a river."}]}))
    # SmolLM2's template starts every chat without a system message with its default system prompt: that
    # much is evaluated before the snapshot, and nothing of the warm-up's own messages.
    assert len(cached) > 10
    first, second = first.engine_request.tokens, second.engine_request.tokens
    assert first[: len(cached)] == cached == second[: len(cached)]
    assert first[len(cached)] != second[len(cached)]


def test_after_restore_reseeds_and_renews_identity(engine):
    runtime = InferenceRuntime(
        engine,
        InferenceSettings(model=ModelSource(bucket="b", key="k")),
        download=DownloadStats(bytes=1, seconds=1, parts=1, concurrency=1, retries=0, verified=False),
    )
    random.seed(99)
    frozen = random.random()
    random.seed(99)  # the state a snapshot would hand to every restored environment
    identity = runtime.environment_id
    runtime.after_restore()
    assert random.random() != frozen
    assert runtime.environment_id != identity
    assert runtime.restores == 1


@dataclass(frozen=True)
class _DeadlineAfterTokens(Deadline):
    """A deadline that passes once ``tokens`` tokens are sampled: the clock made deterministic (the engine
    asks it once per sampled token), so the cut falls at the same place on every machine."""

    tokens: int = 0
    asked: list[int] = field(default_factory=list)

    def expired(self) -> bool:
        self.asked.append(1)
        return len(self.asked) > self.tokens


def _weather_tools(*names: str) -> list[dict]:
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return [{"type": "function", "name": name, "parameters": city} for name in names]


def test_a_tool_call_cut_by_the_deadline_is_a_call_and_says_the_deadline_cut_it(serving):
    request = parse_invoke(
        {
            "input": "What is the weather in Paris?",
            "tools": _weather_tools("get_weather"),
            "tool_choice": "required",
            "max_output_tokens": 64,
            "temperature": 0,
        }
    )
    generation = serving.generate(inference_request(request), deadline=_DeadlineAfterTokens(at=0, tokens=12))
    assert generation.deadline_reached and generation.finish_reason == "length", generation
    [call] = generation.tool_calls
    assert call.name == "get_weather" and generation.completion_tokens < 64
    response = render_response(request, generation, model="smollm2")
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "deadline"}
    [item] = response["output"]
    assert (item["type"], item["status"], item["name"]) == ("function_call", "incomplete", "get_weather")
    chat = render_response(request.chat, generation, model="smollm2")
    choice = chat["choices"][0]
    assert choice["finish_reason"] == "length" and chat["deadline_reached"] is True
    assert choice["message"]["content"] is None and choice["message"]["tool_calls"][0]["function"]["name"]


def test_a_deadline_before_the_calls_name_is_decided_is_a_504_not_text(serving):
    request = parse_invoke(
        {
            "input": "What is the weather in Paris?",
            "tools": _weather_tools("get_weather", "get_time"),
            "tool_choice": "required",
            "temperature": 0,
        }
    )
    for tokens in (0, 4):  # before the first token, and inside '[{"name": "get'
        with pytest.raises(ToolCallCutShortError) as raised:
            serving.generate(inference_request(request), deadline=_DeadlineAfterTokens(at=0, tokens=tokens))
        assert raised.value.status_code == 504 and "time limit" in raised.value.message
        with pytest.raises(ToolCallCutShortError):
            deadline = _DeadlineAfterTokens(at=0, tokens=tokens)
            list(serving.stream(inference_request(request), deadline=deadline))
