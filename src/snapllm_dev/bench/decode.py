"""``snapllm bench decode --draft prompt-lookup``: what prompt-lookup drafting does to decoding, as ratios.

    snapllm bench decode --draft prompt-lookup --rounds 2

Two prompt sets run with and without drafting, alternating request by request on two engines loaded from
the same model file in one process, at temperature 0 (where drafting must not change a token: the table
says whether the answers matched). *extraction* asks for text copied from a document in the prompt (what
the agent's ``read_excerpt`` and ``summarize_chunk`` do); *free writing* asks for new text. The ratio is the
median request time per generated token without drafting over with it (above 1: drafting is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from snapllm.engine.decode import Drafting
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.inference.settings import ServingSettings
from snapllm.protocol.requests import parse_request
from snapllm.protocol.serving import OpenAIServing
from snapllm.system import available_cpus
from snapllm_dev.local.report import table
from snapllm_dev.packaged_models import model_path

DOCUMENT = """\
Lambda SnapStart takes a snapshot of a function's initialized execution environment when a version is
published, and restores new environments from that snapshot instead of running the initialization again.
The snapshot holds the memory and disk state after the init phase, so a model that was loaded and warmed
up during init is already in memory when a restored environment answers its first request. Each restore
starts from the same snapshot: anything unique per environment, such as random seeds, connections and
temporary credentials, must be refreshed after the restore. Snapshots are encrypted and kept while the
version exists; a version not invoked for fourteen days has its snapshot removed and recreated on demand.
Pricing adds a charge per gigabyte cached and per gigabyte restored, on top of the usual duration charge.
"""
PROMPT_SETS: dict[str, list[str]] = {
    "extraction": [
        f"{DOCUMENT}\nCopy, word for word, the sentence of the text above that says what the snapshot holds.",
        f"{DOCUMENT}\nQuote the sentence above about what must be refreshed after a restore.",
        f"{DOCUMENT}\nRepeat the first two sentences of the text above exactly.",
        f"{DOCUMENT}\nExtract the sentence about pricing from the text above, unchanged.",
    ],
    "free writing": [
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        "Explain to a child why the sky is blue.",
        "Describe a walk through a forest in autumn.",
        "Write a letter to a friend about a trip to the mountains.",
    ],
}
DRAFTS = {"prompt-lookup": Drafting}


def measure(plain: Engine, drafting: Engine, *, rounds: int, tokens: int) -> dict[str, dict[str, Any]]:
    """Per prompt set: each side's median request time per token, the ratio plain/drafting, and whether
    every drafted answer was the plain one."""
    results: dict[str, dict[str, Any]] = {}
    limit = max(tokens, 16)
    servings = {
        side: OpenAIServing(engine, max_tokens=limit, max_prompt_chars=ServingSettings().max_prompt_chars)
        for side, engine in (("plain", plain), ("drafting", drafting))
    }
    for name, prompts in PROMPT_SETS.items():
        times: dict[str, list[float]] = {"plain": [], "drafting": []}
        lengths: list[int] = []
        identical = True
        before = (drafting._decoder.drafted, drafting._decoder.drafted_accepted)
        for round_number in range(rounds + 1):
            for prompt in prompts:
                body = {
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": tokens,
                    "temperature": 0,
                }
                texts = {}
                for side, serving in servings.items():
                    started = time.perf_counter()
                    generation = serving.generate(parse_request({**body, "seed": 1}))
                    elapsed = time.perf_counter() - started
                    texts[side] = generation.text
                    if round_number:  # round 0 warms up
                        times[side].append(elapsed * 1000.0 / max(1, generation.completion_tokens))
                        if side == "plain":
                            lengths.append(generation.completion_tokens)
                identical = identical and texts["plain"] == texts["drafting"]
        drafted = drafting._decoder.drafted - before[0]
        accepted = drafting._decoder.drafted_accepted - before[1]
        plain_ms, drafting_ms = statistics.median(times["plain"]), statistics.median(times["drafting"])
        results[name] = {
            "plain_ms_per_token": plain_ms,
            "drafting_ms_per_token": drafting_ms,
            "speed_ratio": plain_ms / drafting_ms,
            "tokens": statistics.median(lengths),
            "guesses_accepted": accepted / drafted if drafted else 0.0,
            "identical": identical,
        }
    return results


def run(args: argparse.Namespace) -> int:
    threads = args.threads or available_cpus()
    settings = EngineSettings(threads=threads)
    path = str(model_path(args.model))
    plain = Engine.load(path, settings, model_name=Path(path).stem, draft=None)
    drafting = Engine.load(path, settings, model_name=Path(path).stem, draft=DRAFTS[args.draft]())
    results = measure(plain, drafting, rounds=args.rounds, tokens=args.tokens)
    if args.json:
        print(json.dumps({"draft": args.draft, "threads": threads, "sets": results}, indent=2))
        return 0
    rows = [
        (
            name,
            f"speed x{side['speed_ratio']:.2f} with drafting ({side['plain_ms_per_token']:.1f} -> "
            f"{side['drafting_ms_per_token']:.1f} ms/token, {side['tokens']:.0f} tokens), "
            f"{side['guesses_accepted']:.0%} of guesses kept, "
            f"{'same answers' if side['identical'] else 'ANSWERS DIFFER'}",
        )
        for name, side in results.items()
    ]
    title = f"{args.draft} drafting (median of {args.rounds} rounds, {threads} threads, temperature 0)"
    print(table(rows, title=title))
    return 0
