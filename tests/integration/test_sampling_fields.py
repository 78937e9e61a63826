"""The sampling fields of llama-server and vLLM (``top_k``, ``min_p``, ``typical_p``, ``repeat_penalty`` or
``repetition_penalty``, ``repeat_last_n``, ``logit_bias``), applied by the engine's decode loop to the real
model: each changes the answer as it says, and sending the defaults is the same as sending nothing."""

from __future__ import annotations

from typing import Any

import pytest

from snapllm.errors import InvalidRequestError
from snapllm.protocol.requests import parse_request

PROMPT = {"prompt": "The three primary colours are", "max_tokens": 8}
# Greedy decoding of this prompt repeats itself: a repetition penalty has something to change.
REPETITIVE = {"prompt": "one one one one one one one one", "max_tokens": 8, "temperature": 0.0}
SAMPLED = {**PROMPT, "temperature": 1.5, "seed": 11}
DEFAULTS = {"top_k": 40, "min_p": 0.05, "typical_p": 1.0, "repeat_penalty": 1.0, "repeat_last_n": 64}


def _answer(serving, body: dict[str, Any]):
    return serving.generate(parse_request(body))


def test_sending_the_defaults_gives_the_answer_of_sending_nothing(serving):
    assert _answer(serving, {**SAMPLED, **DEFAULTS}).text == _answer(serving, SAMPLED).text
    vllm = {**DEFAULTS, "repetition_penalty": DEFAULTS["repeat_penalty"], "top_k": -1}
    vllm.pop("repeat_penalty")
    # top_k -1 (vLLM's "all tokens") widens the draw: at this temperature the answer may change, never fail.
    assert _answer(serving, {**SAMPLED, **vllm}).completion_tokens == SAMPLED["max_tokens"]


@pytest.mark.parametrize("narrowing", [{"top_k": 1}, {"min_p": 1.0}])
def test_keeping_only_the_best_token_samples_the_greedy_answer(serving, narrowing):
    greedy = _answer(serving, {**PROMPT, "temperature": 0.0}).text
    sampled = {
        _answer(serving, {**PROMPT, "temperature": 2.0, "seed": seed, **narrowing}).text for seed in (1, 2)
    }
    assert sampled == {greedy}
    # Without the narrowing, the same draws wander off.
    assert {_answer(serving, {**PROMPT, "temperature": 2.0, "seed": seed}).text for seed in (1, 2)} != {
        greedy
    }


def test_logit_bias_bans_and_forces_tokens(serving):
    engine = serving.engine
    greedy = _answer(serving, {**PROMPT, "temperature": 0.0, "max_tokens": 1}).text
    (first,) = engine.tokenize(greedy, add_bos=False)
    banned = _answer(
        serving, {**PROMPT, "temperature": 0.0, "max_tokens": 1, "logit_bias": {str(first): -100}}
    )
    assert banned.text and banned.text != greedy
    (forced,) = engine.tokenize(" purple", add_bos=False)
    both = {str(first): -100, str(forced): 100}
    assert _answer(serving, {**PROMPT, "temperature": 0.9, "seed": 4, "logit_bias": both}).text.startswith(
        " purple"
    )


def test_repeat_penalty_changes_a_repetitive_answer_within_its_window(serving):
    plain = _answer(serving, REPETITIVE).text
    assert _answer(serving, {**REPETITIVE, "repeat_penalty": 2.0}).text != plain
    assert _answer(serving, {**REPETITIVE, "repetition_penalty": 2.0}).text != plain
    # A window of no tokens penalises nothing; -1 is the whole context, as llama-server has it.
    assert _answer(serving, {**REPETITIVE, "repeat_penalty": 2.0, "repeat_last_n": 0}).text == plain
    assert _answer(serving, {**REPETITIVE, "repeat_penalty": 2.0, "repeat_last_n": -1}).text != plain


def test_typical_sampling_runs_and_a_tiny_mass_keeps_one_token(serving):
    assert _answer(serving, {**SAMPLED, "typical_p": 0.5}).completion_tokens == SAMPLED["max_tokens"]
    # typical_p 0 keeps only the token closest to the distribution's entropy: one token, whatever the seed.
    assert len({_answer(serving, {**SAMPLED, "typical_p": 0.0, "seed": s}).text for s in (1, 2, 3)}) == 1


def test_a_biased_token_outside_the_vocabulary_is_a_400_naming_logit_bias(serving):
    outside = serving.engine.n_vocab
    with pytest.raises(InvalidRequestError) as refused:
        _answer(serving, {**PROMPT, "logit_bias": {str(outside): 5}})
    assert refused.value.param == "logit_bias" and str(outside) in refused.value.message
    assert _answer(serving, {**PROMPT, "logit_bias": {str(outside - 1): 5}}).completion_tokens >= 1


@pytest.mark.parametrize(
    "fields",
    [{"top_k": 5, "min_p": 0.0}, {"top_k": 0, "typical_p": 0.9}, {"top_k": 300, "repeat_penalty": 1.5}],
)
def test_the_lazy_grammar_check_gives_the_full_checks_tokens_under_every_setting(serving, fields):
    engine = serving.engine
    (brace,) = engine.tokenize("{", add_bos=False)
    body = {
        "messages": [{"role": "user", "content": "Describe a cat in JSON."}],
        "response_format": {"type": "json_object"},
        "max_tokens": 12,
        "temperature": 0.8,
        "seed": 3,
        # The most likely opening is banned: the grammar must look past the chain's first pick.
        "logit_bias": {str(brace): -100},
        **fields,
    }
    prepared = serving.prepare(parse_request(body))
    lazy, eager = (
        engine.generate(prepared.engine_request, grammar_check=check) for check in ("lazy", "eager")
    )
    assert lazy.text == eager.text and lazy.text
