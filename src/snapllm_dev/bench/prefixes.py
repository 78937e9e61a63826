"""``snapllm bench prefixes``: what saved prompt prefixes do to the time to first token, as ratios.

    snapllm bench prefixes --rounds 3

*Declared prefix*: a system prompt and 32 tools (about 1,700 tokens on SmolLM2), declared on one engine and
not on another. Each round puts both engines where a snapshot leaves them (the template's start in the KV
cache, no recent state) and asks each the same new question: the first request after a restore, with and
without the declared prefix; then a second question on the declared engine, a warm cache hit. *Alternating
conversations*: two conversations with different system prompts of about 1,000 tokens take turns on one
engine with the prefix cache and on one without it (``SNAPLLM_PREFIX_CACHE_MB=0``: the live sequence only);
the turns after each conversation's first are timed. Times are the engine's time to first token (prompt
evaluation, and a state's restore) in one process; a real restore adds paging the snapshot in.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.protocol.requests import parse_request
from snapllm.protocol.serving import OpenAIServing
from snapllm.system import available_cpus
from snapllm_dev.local.report import table
from snapllm_dev.packaged_models import model_path

#: The declared prefix's tools: 32 lookups of one shape, each with its own name and description.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"lookup_{topic}",
            "description": f"The current {topic} of a place.",
            "parameters": {
                "type": "object",
                "properties": {"place": {"type": "string"}},
                "required": ["place"],
            },
        },
    }
    for topic in (
        "weather", "tide", "pollen", "traffic", "air_quality", "uv_index", "sunrise", "sunset", "moon_phase",
        "snow_depth", "wave_height", "wind", "humidity", "pressure", "rainfall", "river_level", "fire_risk",
        "flight_delays", "train_delays", "ferry_times", "events", "holidays", "exchange_rate", "fuel_price",
        "parking", "museum_hours", "park_hours", "beach_status", "ski_lifts", "hiking_trails", "road_works",
        "power_outages",
    )
]  # fmt: skip
SYSTEM = "You are a travel assistant. Call a tool when the question needs current data; answer briefly."
QUESTIONS = [
    "Is it going to rain in Lisbon tomorrow?",
    "When is high tide in Brest on Saturday?",
    "Are the ski lifts open in Zermatt today?",
    "What is the pollen count in Vienna this week?",
    "Will there be train delays to Lyon tonight?",
    "How windy is it in Wellington right now?",
]


def _system(topic: str, sentences: int) -> str:
    """A long system prompt about ``topic`` (about 20 tokens a sentence)."""
    body = " ".join(
        f"Guideline {i}: when a question about {topic} comes up, cite the relevant section number {i}."
        for i in range(sentences)
    )
    return f"You answer questions about {topic} for a support desk. {body}"


def _ttft(serving: OpenAIServing, body: dict[str, Any]) -> tuple[float, int, str]:
    generation = serving.generate(parse_request({**body, "temperature": 0.0}))
    return generation.timings.time_to_first_token_ms, generation.cached_tokens, generation.text


def declared(path: str, threads: int, *, rounds: int) -> dict[str, Any]:
    """The first request after a restore with and without the declared prefix, and a warm cache hit."""
    entry = {"messages": [{"role": "system", "content": SYSTEM}], "tools": TOOLS}
    settings = EngineSettings(threads=threads, n_ctx=4096)
    sides = {
        side: OpenAIServing(
            Engine.load(path, settings, model_name=Path(path).stem), max_tokens=1, max_prompt_chars=32_000
        )
        for side in ("declared", "none")
    }
    [(prefix, state_bytes)] = sides["declared"].keep_prefixes([entry])
    times: dict[str, list[float]] = {"restored": [], "warm": [], "none": []}
    identical = True
    for round_number in range(rounds + 1):
        first, second = (QUESTIONS[(2 * round_number + i) % len(QUESTIONS)] for i in range(2))
        asked = {
            **entry,
            "max_tokens": 1,
            "messages": [*entry["messages"], {"role": "user", "content": first}],
        }
        for serving in sides.values():
            serving.warm_up([])  # as the snapshot holds it: the template's start in the cache, nothing recent
        restored, _, restored_text = _ttft(sides["declared"], asked)
        none, _, none_text = _ttft(sides["none"], asked)
        warm, _, _ = _ttft(
            sides["declared"],
            {**asked, "messages": [*entry["messages"], {"role": "user", "content": second}]},
        )
        identical = identical and restored_text == none_text
        if round_number:  # round 0 warms up
            times["restored"].append(restored)
            times["none"].append(none)
            times["warm"].append(warm)
    medians = {side: statistics.median(values) for side, values in times.items()}
    return {
        "prefix_tokens": prefix,
        "state_mib": state_bytes / 2**20,
        "ttft_ms": medians,
        "restored_over_warm": medians["restored"] / medians["warm"],
        "restored_over_none": medians["restored"] / medians["none"],
        "identical": identical,
    }


def alternating(path: str, threads: int, *, rounds: int) -> dict[str, Any]:
    """Two conversations taking turns, on an engine with the prefix cache and on one without."""
    results: dict[str, list[float]] = {}
    cached: dict[str, list[int]] = {}
    prefix_tokens = 0
    for side, cache_mb in (("cache", None), ("live only", 0)):
        settings = EngineSettings(threads=threads, n_ctx=4096, prefix_cache_mb=cache_mb)
        engine = Engine.load(path, settings, model_name=Path(path).stem)
        serving = OpenAIServing(engine, max_tokens=8, max_prompt_chars=32_000)
        histories = [[{"role": "system", "content": _system(topic, 48)}] for topic in ("tides", "volcanoes")]
        prefix_tokens = len(serving.prefix_tokens({"messages": histories[0]}))
        results[side], cached[side] = [], []
        for turn in range(rounds + 1):
            for history in histories:
                history.append({"role": "user", "content": f"{QUESTIONS[turn % len(QUESTIONS)]} " * 8})
                ttft, reused, text = _ttft(serving, {"messages": history, "max_tokens": 8})
                history.append({"role": "assistant", "content": text})
                if turn:  # each conversation's first turn evaluates its prefix on either engine
                    results[side].append(ttft)
                    cached[side].append(reused)
    medians = {side: statistics.median(values) for side, values in results.items()}
    return {
        "prefix_tokens": prefix_tokens,
        "ttft_ms": medians,
        "cache_over_live_only": medians["cache"] / medians["live only"],
        "least_cached_tokens": {side: min(values) for side, values in cached.items()},
    }


def run(args: argparse.Namespace) -> int:
    threads = args.threads or available_cpus()
    path = str(model_path(args.model))
    results = {
        "threads": threads,
        "declared": declared(path, threads, rounds=args.rounds),
        "alternating": alternating(path, threads, rounds=args.rounds),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    first, turns = results["declared"], results["alternating"]
    ms = first["ttft_ms"]
    rows = [
        (
            f"declared prefix ({first['prefix_tokens']} tokens, {first['state_mib']:.0f} MiB)",
            f"first request after a restore x{first['restored_over_warm']:.2f} of a warm cache hit "
            f"({ms['restored']:.0f} / {ms['warm']:.0f} ms), x{first['restored_over_none']:.2f} of no "
            f"declared prefix ({ms['none']:.0f} ms); "
            f"{'same answers' if first['identical'] else 'ANSWERS DIFFER'}",
        ),
        (
            f"two alternating conversations ({turns['prefix_tokens']}-token prefixes)",
            f"later turns x{turns['cache_over_live_only']:.2f} with the prefix cache "
            f"({turns['ttft_ms']['cache']:.0f} / {turns['ttft_ms']['live only']:.0f} ms); fewest cached "
            f"tokens {turns['least_cached_tokens']['cache']} / {turns['least_cached_tokens']['live only']}",
        ),
    ]
    title = f"prompt prefixes, time to first token (median of {args.rounds} rounds, {threads} threads)"
    print(table(rows, title=title))
    return 0
