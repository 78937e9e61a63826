"""``snapllm bench speculative``: decoding speed with speculative decoding, against llama-server's, as ratios.

    snapllm bench speculative --model qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b --threads 2

Four cases (an edit of a function, an answer quoting a document, a 12-property JSON answer, a free chat
answer) run at temperature 0 on every side in turn, round by round: snapllm with speculation off, with
prompt lookup only, and automatic (the grammar's forced tokens, then prompt lookup); llama-server with its
defaults, with its n-gram speculation, and with a draft model where one is given. Each side's decode rate
is taken against llama-server's defaults in the same round. docs/benchmarks.md ("Speculative decoding")
has the table and says how to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from snapllm.engine.decode import Drafting
from snapllm.engine.model import Engine
from snapllm.engine.settings import EngineSettings
from snapllm.inference.settings import ServingSettings
from snapllm.protocol.requests import parse_request
from snapllm.protocol.serving import OpenAIServing
from snapllm.system import available_cpus
from snapllm_dev.bench.engine import built_llama_server, settle_s
from snapllm_dev.bench.grammar import llama_server
from snapllm_dev.bench.stats import CONFIDENCE, PairedRatio
from snapllm_dev.local.report import table
from snapllm_dev.packaged_models import model_path

_FUNCTION = """\
def summarize_orders(orders, customers, since=None, currency="EUR", rates=None):
    rates = rates or {}
    by_customer = {}
    skipped = []
    for order in orders:
        if since is not None and order["date"] < since:
            continue
        customer = customers.get(order["customer_id"])
        if customer is None:
            skipped.append(order["id"])
            continue
        amount = order["amount"]
        if order["currency"] != currency:
            rate = rates.get((order["currency"], currency))
            if rate is None:
                skipped.append(order["id"])
                continue
            amount = amount * rate
        entry = by_customer.setdefault(
            customer["id"],
            {"name": customer["name"], "orders": 0, "total": 0.0, "largest": 0.0},
        )
        entry["orders"] += 1
        entry["total"] += amount
        entry["largest"] = max(entry["largest"], amount)
    ranking = sorted(by_customer.values(), key=lambda entry: entry["total"], reverse=True)
    for position, entry in enumerate(ranking, start=1):
        entry["rank"] = position
        entry["average"] = entry["total"] / entry["orders"]
    totals = {
        "customers": len(ranking),
        "orders": sum(entry["orders"] for entry in ranking),
        "revenue": sum(entry["total"] for entry in ranking),
        "skipped": skipped,
    }
    return {"ranking": ranking, "totals": totals}
"""
_DOCUMENT = """\
Lambda SnapStart takes a snapshot of a function's initialized execution environment when a version
is published, and restores new environments from that snapshot instead of running the initialization
again. The snapshot holds the memory and disk state after the init phase, so a model that was loaded
and warmed up during init is already in memory when a restored environment answers its first
request. Each restore starts from the same snapshot: anything unique per environment, such as random
seeds, connections and temporary credentials, must be refreshed after the restore. Snapshots are
encrypted and kept while the version exists; a version not invoked for fourteen days has its
snapshot removed and recreated on demand. Pricing adds a charge per gigabyte cached and per gigabyte
restored, on top of the usual duration charge. Runtime hooks run before the snapshot is taken and
after each restore; a hook that takes longer than ten seconds fails the restore. The function's
memory setting decides its share of CPU: at 1,769 MB a function has the equivalent of one vCPU, and
at 10,240 MB six. A restored environment reads the snapshot's pages on demand, so memory that the
first request touches is faulted in from the snapshot's cache; prefaulting it in an after-restore
hook moves that cost out of the request. Provisioned concurrency keeps environments initialized
ahead of requests and is billed for the time it is configured, whether or not requests arrive;
SnapStart instead bills only restores and the cache, so a function that is idle most of the day
costs nothing while idle. Ephemeral storage under /tmp is part of the snapshot up to its size, and
files written there at init are present after every restore.
""".replace("\n", " ")
_PROPERTIES = (
    ("name", {"type": "string"}),
    ("language", {"type": "string"}),
    ("version", {"type": "string"}),
    ("license", {"type": "string"}),
    ("stars", {"type": "integer"}),
    ("forks", {"type": "integer"}),
    ("archived", {"type": "boolean"}),
    ("topics", {"type": "array", "items": {"type": "string"}}),
    ("homepage", {"type": "string"}),
    ("maintainer", {"type": "string"}),
    ("created", {"type": "string"}),
    ("description", {"type": "string"}),
)
_REPOSITORY = (
    "The snapllm repository is written in Python, at version 0.9.2, under the Apache-2.0 license. It has "
    "1,284 stars and 97 forks and is not archived. Its topics are aws-lambda, llama-cpp, snapstart and "
    "openai-api. The homepage is https://snapllm.dev, the maintainer is Ada Lovelace, it was created on "
    "2025-03-14, and it serves small language models from AWS Lambda."
)
#: Each case's request body (without ``max_tokens``): what it asks, and why speculation may gain on it.
CASES: dict[str, dict[str, Any]] = {
    # An answer that copies most of its prompt.
    "edit": {
        "messages": [
            {
                "role": "user",
                "content": "Add type hints to this function and return the whole function, unchanged "
                f"otherwise, in a Python code block.\n\n```python\n{_FUNCTION}```",
            }
        ]
    },
    # An answer quoting a document of about a thousand tokens (the document three times over, reworded).
    "rag": {
        "messages": [
            {"role": "system", "content": "Answer from the document, quoting its sentences word for word."},
            {
                "role": "user",
                "content": f"Document:\n{_DOCUMENT}\n\n{_DOCUMENT}\n\n{_DOCUMENT}\n\nQuote every sentence "
                "of the document that is about restores, then say what they have in common.",
            },
        ]
    },
    # A structured answer whose keys and punctuation the grammar forces.
    "json": {
        "messages": [{"role": "user", "content": f"Describe this repository as JSON.\n\n{_REPOSITORY}"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "repository",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": dict(_PROPERTIES),
                    "required": [name for name, _ in _PROPERTIES],
                    "additionalProperties": False,
                },
            },
        },
    },
    # New text: little to look up, nothing forced.
    "chat": {
        "messages": [
            {
                "role": "user",
                "content": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
            }
        ]
    },
}
#: The side every ratio is taken against: llama-server as its users run it.
BASELINE = "llama-server"
#: snapllm's sides: the engine's drafting (None: speculation off), and whether requests ask for it.
SNAPLLM_SIDES: dict[str, Drafting | None] = {
    "snapllm off": None,
    "snapllm lookup": Drafting(forced=False),
    "snapllm auto": Drafting(),
}
#: llama-server's sides: options beyond the model, threads and context (the draft model's are added).
SERVER_SIDES: dict[str, list[str]] = {
    BASELINE: [],
    "llama-server ngram-simple": ["--spec-type", "ngram-simple"],
}
DRAFT_SIDE = "llama-server draft"


@dataclass(frozen=True)
class Sample:
    """One request: its text, decode rate (tokens after the first, per second after it) and drafts."""

    text: str
    decode_tps: float
    drafted: int
    accepted: int


#: A side answers a case's body with ``max_tokens`` set.
Side = Callable[[dict[str, Any]], Sample]


def snapllm_side(serving: OpenAIServing, *, speculative: bool) -> Side:
    def run(body: dict[str, Any]) -> Sample:
        generation = serving.generate(parse_request({**body, "speculative": speculative}))
        timings = generation.timings
        return Sample(generation.text, timings.tokens_per_second, timings.draft_n, timings.draft_n_accepted)

    return run


def server_side(base_url: str) -> Side:
    def run(body: dict[str, Any]) -> Sample:
        response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=600)
        response.raise_for_status()
        answer = response.json()
        timings = answer["timings"]
        generated, predicted_ms = int(timings["predicted_n"]), float(timings["predicted_ms"])
        # The engine's definition: the tokens after the first, per second after it.
        decode = (generated - 1) / (predicted_ms / 1000.0) if generated > 1 and predicted_ms else 0.0
        text = answer["choices"][0]["message"].get("content") or ""
        drafted, accepted = int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))
        return Sample(text, decode, drafted, accepted)

    return run


def measure(
    sides: dict[str, Side], cases: list[str], *, tokens: int, rounds: int, settle: float
) -> dict[str, dict[str, Any]]:
    """Per case and side: decode rates round by round (after a warm-up round), the paired ratio to
    :data:`BASELINE`, whether every text equalled its program's speculation-off text, and the share of
    drafted tokens kept."""
    results: dict[str, dict[str, Any]] = {}
    for case in cases:
        # No seed: a seeded request evaluates its prompt afresh; temperature 0 needs none.
        body = {**CASES[case], "max_tokens": tokens, "temperature": 0}
        rates: dict[str, list[float]] = {name: [] for name in sides}
        texts: dict[str, set[str]] = {name: set() for name in sides}
        drafts = {name: [0, 0] for name in sides}
        for round_number in range(rounds + 1):
            order = list(sides) if round_number % 2 else list(reversed(sides))
            for name in order:
                sample = sides[name](body)
                time.sleep(settle)
                texts[name].add(sample.text)
                if round_number:  # round 0 warms each side up (and fills its prompt cache)
                    rates[name].append(sample.decode_tps)
                    drafts[name][0] += sample.drafted
                    drafts[name][1] += sample.accepted
        by_side: dict[str, Any] = {}
        for name in sides:
            # The text is compared with speculation off on the same program.
            off = "snapllm off" if name.startswith("snapllm") else BASELINE
            off = off if off in sides else None
            paired = PairedRatio.of(rates[name], rates[BASELINE]) if BASELINE in rates else None
            drafted, accepted = drafts[name]
            by_side[name] = {
                "decode_tokens_per_s": statistics.median(rates[name]),
                "ratio_vs_llama_server_default": paired.median if paired else None,
                "ratio_interval": list(paired.interval) if paired else None,
                "identical_to_off": None
                if off is None
                else texts[name] == texts[off] and len(texts[name]) == 1,
                "draft_n": drafted,
                "draft_acceptance": accepted / drafted if drafted else None,
                "rounds": rates[name],
            }
        results[case] = by_side
    return results


@contextlib.contextmanager
def _sides(args: argparse.Namespace, threads: int, server: str | None) -> Iterator[dict[str, Side]]:
    path = model_path(args.model)
    settings = EngineSettings(threads=threads, n_ctx=args.n_ctx)
    limit = ServingSettings().max_prompt_chars
    sides: dict[str, Side] = {}
    with contextlib.ExitStack() as stack:
        engines: dict[str, Engine] = {}
        for name, drafting in SNAPLLM_SIDES.items():
            if name not in args.sides:
                continue
            # One engine per drafting method; speculation off is a request's choice on the automatic one.
            key = "snapllm auto" if drafting is None else name
            if key not in engines:
                engine = Engine.load(str(path), settings, model_name=path.stem, draft=SNAPLLM_SIDES[key])
                stack.callback(engine.close)
                engines[key] = engine
            serving = OpenAIServing(engines[key], max_tokens=args.tokens, max_prompt_chars=limit)
            sides[name] = snapllm_side(serving, speculative=drafting is not None)
        servers = dict(SERVER_SIDES)
        if args.draft_model:
            draft = model_path(args.draft_model)
            servers[DRAFT_SIDE] = [
                "--spec-type",
                "draft-simple",
                "-md",
                str(draft),
                "--spec-draft-n-max",
                "8",
                "-tbd",
                str(threads),
                "-td",
                str(threads),
            ]
        for name, options in servers.items():
            if server is None or name not in args.sides:
                continue
            url = stack.enter_context(
                llama_server(
                    path,
                    threads=threads,
                    n_ctx=args.n_ctx,
                    options=["-np", "1", *options],
                    bench="speculative",
                )
            )
            sides[name] = server_side(url)
        yield sides


def render(model: str, by_threads: dict[int, dict[str, dict[str, Any]]], *, note: str) -> str:
    rows = []
    for threads, cases in by_threads.items():
        for case, by_side in cases.items():
            for name, side in by_side.items():
                ratio = side["ratio_vs_llama_server_default"]
                parts = [f"{side['decode_tokens_per_s']:.1f} tokens/s"]
                if ratio is not None:
                    low, high = side["ratio_interval"]
                    parts.append(f"x{ratio:.2f} [{low:.2f}-{high:.2f}] of {BASELINE}")
                if side["draft_acceptance"] is not None:
                    parts.append(f"{side['draft_n']} drafted, {side['draft_acceptance']:.0%} kept")
                if side["identical_to_off"] is False:
                    parts.append("TEXT DIFFERS from speculation off")
                rows.append((f"{threads} threads, {case}, {name}", "  ".join(parts)))
    return table(rows, title=f"{model}: {note}")


def run(args: argparse.Namespace) -> int:
    thread_counts = args.threads or [available_cpus()]
    every_side = [*SNAPLLM_SIDES, *SERVER_SIDES, *([DRAFT_SIDE] if args.draft_model else [])]
    args.sides = args.side or every_side
    server = built_llama_server() if any(name.startswith("llama-server") for name in args.sides) else None
    if server is None and any(name.startswith("llama-server") for name in args.sides):
        print(
            "snapllm bench speculative: llama-server is not built (make llama-server): measuring snapllm",
            file=sys.stderr,
        )
    cases = args.case or list(CASES)
    by_threads: dict[int, dict[str, dict[str, Any]]] = {}
    for threads in thread_counts:
        with _sides(args, threads, server) as sides:
            by_threads[threads] = measure(
                sides, cases, tokens=args.tokens, rounds=args.rounds, settle=settle_s(threads)
            )
    results = {
        "model": args.model,
        "draft_model": args.draft_model,
        "tokens": args.tokens,
        "rounds": args.rounds,
        "confidence": CONFIDENCE,
        "baseline": BASELINE,
        "threads": {str(threads): cases for threads, cases in by_threads.items()},
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    note = (
        f"decode rate at temperature 0, {args.tokens} tokens at most (median of {args.rounds} rounds; "
        f"ratios: the median of each round's [its {CONFIDENCE:.0%} interval])"
    )
    print(render(Path(args.model).name, by_threads, note=note))
    return 0
