"""The model's speed from a benchmark's JSON: ``snapllm bench coldstart --json`` or ``bench aws --json``."""

from __future__ import annotations

from typing import Any

from snapllm_dev.cost.model import Speed


class NoSpeedError(ValueError):
    """The JSON carries no speed this calculator can use (an older or a different benchmark's output)."""


def speed_from_bench(result: dict[str, Any]) -> Speed:
    if "speed" in result:  # snapllm bench aws --json
        speed = result["speed"]
        if not speed:
            raise NoSpeedError("the `snapllm bench aws` run measured no warm invoke (--warm 0?)")
        return Speed(
            tokens_per_s=float(speed["tokens_per_s"]),
            ttft_s=float(speed["ttft_ms"]) / 1000,
            ttft_prompt_tokens=speed.get("prompt_tokens"),
            cold_extra_s=float(speed.get("cold_extra_ms", 0.0)) / 1000,
        )
    life = result.get("lifecycle", {})
    if "warm_tokens_per_s" not in life:
        raise NoSpeedError(
            "the benchmark JSON has no speed (expected `snapllm bench coldstart --json` with "
            "lifecycle.warm_tokens_per_s, or `snapllm bench aws --json` with speed)"
        )
    return Speed(
        tokens_per_s=float(life["warm_tokens_per_s"]),
        ttft_s=float(life["warm_first_token_ms"]) / 1000,
        ttft_prompt_tokens=int(life["prompt_tokens"]),
        # A cold start bills the restore and the first invoke's extra time over a warm one.
        cold_extra_s=max(0.0, float(life["restore_s"]) + life["first_invoke_s"] - life["warm_invoke_s"]),
    )
