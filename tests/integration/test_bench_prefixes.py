"""``snapllm bench prefixes``' follow-up on the packaged model: what a chat's next turn evaluates again."""

from __future__ import annotations

from snapllm_dev.bench.prefixes import follow_up


def test_a_follow_up_evaluates_what_is_new_and_reuses_the_first_turns_prompt(model_path):
    result = follow_up(str(model_path), 1, rounds=1)

    new, evaluated = result["new_tokens"], result["evaluated_tokens"]["snapllm"]
    # The question is evaluated, and of the answer sent back only what its rendering changes (the tokens
    # generated are reused: a row computes alike in any batch); the first turn's long prompt is not.
    assert 0 < evaluated <= new < result["prompt_tokens"] / 2, result
    assert result["ttft_ms"]["snapllm"] > 0
    assert "llama-server" not in result["ttft_ms"]  # the peer is measured only when asked for
