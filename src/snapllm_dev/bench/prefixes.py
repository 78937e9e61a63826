"""``snapllm bench prefixes``: what saved prompt prefixes do to the time to first token, as ratios.

    snapllm bench prefixes --rounds 3
    snapllm bench prefixes --peer llama-server    # llama.cpp's own server beside (make llama-server)

It times a declared prefix after a restore, two alternating conversations and a chat's follow-up;
docs/benchmarks.md ("Prompt prefixes") says how each is set up, and what they measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.protocol.requests import parse_request
from snapllm.protocol.serving import OpenAIServing
from snapllm.system import available_cpus
from snapllm_dev.bench.grammar import llama_server
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
FIRST_ANSWER_TOKENS = 48  # the first turn's answer, sent back with the follow-up
FOLLOW_UP = "Thanks. Could you say that again in one short sentence, and add which section it comes from?"
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


def _prompt_tokens(serving: OpenAIServing, body: dict[str, Any]) -> int:
    return len(serving.prepare(parse_request({**body, "temperature": 0.0})).engine_request.tokens)


def _ttft(serving: OpenAIServing, body: dict[str, Any]) -> tuple[float, int, str]:
    generation = serving.generate(parse_request({**body, "temperature": 0.0}))
    return generation.timings.time_to_first_token_ms, generation.cached_tokens, generation.text


class Peer:
    """llama-server with one slot, sent the engine's own prompt tokens (so both evaluate the same prompt)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def ttft(self, serving: OpenAIServing, body: dict[str, Any], *, tokens: int = 1) -> tuple[float, int]:
        """Its prompt evaluation (ms) of ``body`` as ``serving`` renders it, and the tokens it reused; it
        generates ``tokens``, which its slot keeps after the prompt."""
        answer = self._post(
            "/completion",
            {
                "prompt": list(
                    serving.prepare(parse_request({**body, "temperature": 0.0})).engine_request.tokens
                ),
                "n_predict": tokens,
                "temperature": 0,
                "cache_prompt": True,
            },
        )
        timings = answer["timings"]
        return float(timings["prompt_ms"]), int(timings.get("cache_n", 0))

    def erase(self) -> None:
        """Empty the slot, as a new execution environment starts."""
        self._post("/slots/0?action=erase", {})

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(f"{self.base_url}{path}", json=body, timeout=600)
        response.raise_for_status()
        return response.json()


def _peer(path: str, threads: int, *, cache_ram_mib: int, stack: ExitStack) -> Peer:
    saved = stack.enter_context(tempfile.TemporaryDirectory(prefix="snapllm-bench-slots-"))
    options = ("-np", "1", "--cache-ram", str(cache_ram_mib), "--slot-save-path", saved)
    return Peer(
        stack.enter_context(
            llama_server(Path(path), threads=threads, n_ctx=4096, options=options, bench="prefixes")
        )
    )


def declared(path: str, threads: int, *, rounds: int, peer: Peer | None = None) -> dict[str, Any]:
    """The first request after a restore with and without the declared prefix, and a warm cache hit; with
    ``peer``, its first request (an empty slot) and its warm hit."""
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
    if peer is not None:
        times |= {"peer first": [], "peer warm": []}
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
        asked_again = {**asked, "messages": [*entry["messages"], {"role": "user", "content": second}]}
        restored, _, restored_text = _ttft(sides["declared"], asked)
        none, _, none_text = _ttft(sides["none"], asked)
        warm, _, _ = _ttft(sides["declared"], asked_again)
        identical = identical and restored_text == none_text
        if round_number:  # round 0 warms up
            times["restored"].append(restored)
            times["none"].append(none)
            times["warm"].append(warm)
        if peer is not None:
            peer.erase()
            peer_first, _ = peer.ttft(sides["none"], asked)
            peer_warm, _ = peer.ttft(sides["none"], asked_again)
            if round_number:
                times["peer first"].append(peer_first)
                times["peer warm"].append(peer_warm)
    medians = {side: statistics.median(values) for side, values in times.items()}
    results = {
        "prefix_tokens": prefix,
        "state_mib": state_bytes / 2**20,
        "ttft_ms": medians,
        "restored_over_warm": medians["restored"] / medians["warm"],
        "restored_over_none": medians["restored"] / medians["none"],
        "identical": identical,
    }
    if peer is not None:
        results["restored_over_peer_first"] = medians["restored"] / medians["peer first"]
        results["restored_over_peer_warm"] = medians["restored"] / medians["peer warm"]
    return results


def alternating(path: str, threads: int, *, rounds: int, peer: Peer | None = None) -> dict[str, Any]:
    """Two conversations taking turns, on an engine with the prefix cache and on one without; with ``peer``,
    the cached engine's prompts sent to it as well."""
    results: dict[str, list[float]] = {"llama-server": []} if peer is not None else {}
    cached: dict[str, list[int]] = {"llama-server": []} if peer is not None else {}
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
                body = {"messages": history, "max_tokens": 8}
                ttft, reused, text = _ttft(serving, body)
                peer_ttft, peer_reused = peer.ttft(serving, body) if peer and cache_mb is None else (0.0, 0)
                history.append({"role": "assistant", "content": text})
                if turn:  # each conversation's first turn evaluates its prefix on either engine
                    results[side].append(ttft)
                    cached[side].append(reused)
                    if peer is not None and cache_mb is None:
                        results["llama-server"].append(peer_ttft)
                        cached["llama-server"].append(peer_reused)
    medians = {side: statistics.median(values) for side, values in results.items()}
    summary = {
        "prefix_tokens": prefix_tokens,
        "ttft_ms": medians,
        "cache_over_live_only": medians["cache"] / medians["live only"],
        "least_cached_tokens": {side: min(values) for side, values in cached.items()},
    }
    if peer is not None:
        summary["cache_over_peer"] = medians["cache"] / medians["llama-server"]
    return summary


def follow_up(path: str, threads: int, *, rounds: int, peer: Peer | None = None) -> dict[str, Any]:
    """A short follow-up in a conversation whose first turn (a long system prompt, a question and the
    answer) the engine just served; with ``peer``, the same two turns sent to it, so that its slot holds
    the first prompt and its own answer, as llama-server's reuse keeps them."""
    engine = Engine.load(path, EngineSettings(threads=threads, n_ctx=4096), model_name=Path(path).stem)
    serving = OpenAIServing(engine, max_tokens=FIRST_ANSWER_TOKENS, max_prompt_chars=32_000)
    sides = ("snapllm", "llama-server") if peer is not None else ("snapllm",)
    times: dict[str, list[float]] = {side: [] for side in sides}
    evaluated: dict[str, list[int]] = {side: [] for side in sides}
    prompt_tokens = new_tokens = 0
    for round_number in range(rounds + 1):
        # A topic of its own each round, so that nothing from an earlier round is reused.
        history = [
            {"role": "system", "content": _system(f"harbour {round_number}", 15)},
            {"role": "user", "content": QUESTIONS[round_number % len(QUESTIONS)]},
        ]
        first = {"messages": history, "max_tokens": FIRST_ANSWER_TOKENS}
        _, _, answer = _ttft(serving, first)
        if peer is not None:
            peer.erase()
            peer.ttft(serving, first, tokens=FIRST_ANSWER_TOKENS)
        asked = {
            "messages": [
                *history,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": FOLLOW_UP},
            ],
            "max_tokens": 1,
        }
        prompt_tokens = _prompt_tokens(serving, asked)
        new_tokens = prompt_tokens - _prompt_tokens(serving, first)
        ttft, reused, _ = _ttft(serving, asked)
        peer_ttft, peer_reused = peer.ttft(serving, asked) if peer is not None else (0.0, 0)
        if round_number:  # round 0 warms up
            times["snapllm"].append(ttft)
            evaluated["snapllm"].append(prompt_tokens - reused)
            if peer is not None:
                times["llama-server"].append(peer_ttft)
                evaluated["llama-server"].append(prompt_tokens - peer_reused)
    medians = {side: statistics.median(values) for side, values in times.items()}
    summary = {
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "ttft_ms": medians,
        "evaluated_tokens": {side: statistics.median(values) for side, values in evaluated.items()},
    }
    if peer is not None:
        summary["snapllm_over_peer"] = medians["snapllm"] / medians["llama-server"]
    return summary


def run(args: argparse.Namespace) -> int:
    threads = args.threads or available_cpus()
    path = str(model_path(args.model))
    # llama-server's first requests with no RAM prompt cache (each one an empty slot); its turns with it.
    with ExitStack() as stack:
        peer = _peer(path, threads, cache_ram_mib=0, stack=stack) if args.peer else None
        first = declared(path, threads, rounds=args.rounds, peer=peer)
        later = follow_up(path, threads, rounds=args.rounds, peer=peer)
    with ExitStack() as stack:
        peer = _peer(path, threads, cache_ram_mib=8192, stack=stack) if args.peer else None
        turns = alternating(path, threads, rounds=args.rounds, peer=peer)
    results = {"threads": threads, "declared": first, "alternating": turns, "follow_up": later}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
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
        (
            f"a follow-up ({later['new_tokens']} tokens: the answer sent back and a question)",
            f"{later['ttft_ms']['snapllm']:.0f} ms; "
            f"{later['evaluated_tokens']['snapllm']:.0f} of {later['prompt_tokens']} tokens evaluated",
        ),
    ]
    if args.peer:
        rows += [
            (
                "declared prefix, llama-server (one slot)",
                f"first request after a restore x{first['restored_over_peer_first']:.2f} of llama-server's "
                f"first request ({ms['peer first']:.0f} ms), x{first['restored_over_peer_warm']:.2f} of its "
                f"warm hit ({ms['peer warm']:.0f} ms)",
            ),
            (
                "the follow-up, llama-server (its slot holding the first turn and its own answer)",
                f"x{later['snapllm_over_peer']:.2f} of llama-server's "
                f"({later['ttft_ms']['llama-server']:.0f} ms; "
                f"{later['evaluated_tokens']['llama-server']:.0f} tokens evaluated)",
            ),
            (
                "two alternating conversations, llama-server (one slot, RAM prompt cache)",
                f"later turns x{turns['cache_over_peer']:.2f} of llama-server's "
                f"({turns['ttft_ms']['llama-server']:.0f} ms); fewest cached tokens "
                f"{turns['least_cached_tokens']['llama-server']}",
            ),
        ]
    title = f"prompt prefixes, time to first token (median of {args.rounds} rounds, {threads} threads)"
    print(table(rows, title=title))
    return 0
