"""``snapllm bench grammar``: what constraining generation to a JSON schema costs, as a ratio.

    snapllm bench grammar --rounds 5 --tokens 64

The same chat prompt runs with and without ``response_format: json_schema``, alternating in one process
on one loaded model (so both sides see the same machine state), with a fixed seed and temperature 0.
Both sides generate about ``--tokens`` (the schema's string has a minimum length longer than that,
and the prompt asks for a long answer); the table shows each side's token count. The rate is the
engine's own decode rate (tokens after the first per second of generation) and, separately, the whole
request's time per token, which includes building the grammar.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from snapllm.config import EngineSettings
from snapllm.contract import parse_request
from snapllm.engine import Engine
from snapllm.errors import SnapllmError
from snapllm.local.report import table
from snapllm.models import default_model_path

PROMPT = "Write a long description of a city you like, as JSON with a key 'description'."
SCHEMA = {
    "type": "object",
    # The bound keeps the constrained run generating as long as the free one (a run that stops early
    # would compare prompt time, not decoding).
    "properties": {"description": {"type": "string", "minLength": 400}},
    "required": ["description"],
    "additionalProperties": False,
}


def _body(tokens: int, *, constrained: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "seed": 1,
    }
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}
    return body


def measure(engine: Engine, *, rounds: int, tokens: int) -> dict[str, Any]:
    """Median decode rate and request time per token of each side, and their ratios."""
    sides: dict[str, dict[str, list[float]]] = {
        name: {"decode_tps": [], "request_ms_per_token": [], "tokens": []} for name in ("free", "json_schema")
    }
    for round_number in range(rounds + 1):
        for name in sides:
            request = parse_request(_body(tokens, constrained=name == "json_schema"))
            started = time.perf_counter()
            generation = engine.generate(request)
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            if round_number == 0:
                continue  # warm-up
            sides[name]["decode_tps"].append(generation.timings.tokens_per_second)
            sides[name]["request_ms_per_token"].append(elapsed_ms / max(1, generation.completion_tokens))
            sides[name]["tokens"].append(generation.completion_tokens)
    medians = {name: {k: statistics.median(v) for k, v in values.items()} for name, values in sides.items()}
    free, constrained = medians["free"], medians["json_schema"]
    return {
        "rounds": rounds,
        "free": medians["free"],
        "json_schema": medians["json_schema"],
        "decode_rate_ratio": constrained["decode_tps"] / free["decode_tps"] if free["decode_tps"] else None,
        "request_time_ratio": constrained["request_ms_per_token"] / free["request_ms_per_token"],
    }


def run(args: argparse.Namespace) -> int:
    try:
        settings = EngineSettings(threads=args.threads, max_tokens=max(args.tokens, 16))
        model = args.model or default_model_path()
        engine = Engine.load(str(model), settings, model_name=Path(model).stem)
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm bench grammar: {exc}", file=sys.stderr)
        return 2
    result = measure(engine, rounds=args.rounds, tokens=args.tokens)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    rows = []
    for name in ("free", "json_schema"):
        side = result[name]
        rows.append(
            (
                name,
                f"{side['decode_tps']:.1f} tokens/s decode, {side['request_ms_per_token']:.2f} ms/token "
                f"per request ({side['tokens']:.0f} tokens)",
            )
        )
    rows.append(
        (
            "json_schema / free",
            f"decode rate x{result['decode_rate_ratio']:.3f}, "
            f"request time per token x{result['request_time_ratio']:.3f}",
        )
    )
    print(table(rows, title=f"grammar cost (median of {result['rounds']} rounds, same prompt, seed 1)"))
    return 0
