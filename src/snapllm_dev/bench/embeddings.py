"""``snapllm bench embeddings``: inputs per second for a batch of short texts, as a ratio to llama-server.

    snapllm bench embeddings --peer llama-server      # llama.cpp's own server beside (make llama-server)
    snapllm bench embeddings --inputs 32 --rounds 5 --model smollm2-135m --pooling mean

docs/benchmarks.md ("Embeddings") says what each side runs, and what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from snapllm.engine.embedding import EmbeddingEngine
from snapllm.engine.settings import EngineSettings
from snapllm.errors import SnapllmError
from snapllm.protocol.model_routes.embeddings import EmbeddingLimits, EmbeddingServing
from snapllm.system import available_cpus
from snapllm_dev.bench.grammar import MODELS, llama_server
from snapllm_dev.local.report import table

SUBJECTS = ("The harbour", "A small bakery", "The mountain trail", "Our quarterly report", "The old library")
PREDICATES = (
    "opens early on weekdays.",
    "was rebuilt after the storm.",
    "lists every change since March.",
    "is quiet in the late afternoon.",
    "needs a new roof before winter.",
    "won a prize for its bread.",
    "connects the two villages.",
)
#: llama-server's parallel slots: each embeds one input, all of them in one batch (its context shared).
PEER_SLOTS = 8


def texts(count: int) -> list[str]:
    """``count`` short, distinct texts (each a sentence of about ten tokens)."""
    return [
        f"{SUBJECTS[i % len(SUBJECTS)]} {PREDICATES[i % len(PREDICATES)]} (note {i})" for i in range(count)
    ]


#: One side: sends one embeddings body, returns when the vectors are back.
Side = Callable[[dict[str, Any]], None]


def engine_side(engine: EmbeddingEngine, inputs: int) -> Side:
    limits = EmbeddingLimits(
        max_inputs=max(inputs, 1), max_tokens=engine.n_ctx * inputs, max_input_chars=32_000
    )
    serving = EmbeddingServing(engine, limits=limits)

    def send(body: dict[str, Any]) -> None:
        answer = serving.answer(body)
        assert len(answer["data"]) == len(body["input"])

    return send


def peer_side(base_url: str) -> Side:
    def send(body: dict[str, Any]) -> None:
        response = httpx.post(f"{base_url}/v1/embeddings", json=body, timeout=600)
        response.raise_for_status()
        assert len(response.json()["data"]) == len(body["input"])

    return send


def measure(sides: dict[str, Side], *, inputs: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each side's median seconds per request and inputs per second; requests alternate between sides."""
    body = {"input": texts(inputs)}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for round_number in range(rounds + 1):  # round 0 warms up
        for name, send in sides.items():
            started = time.perf_counter()
            send(body)
            if round_number:
                seconds[name].append(time.perf_counter() - started)
    results = {}
    for name, samples in seconds.items():
        median = statistics.median(samples)
        results[name] = {"seconds_per_request": median, "inputs_per_second": inputs / median}
    return results


def run(args: argparse.Namespace) -> int:
    threads = args.threads or available_cpus()
    path = MODELS[args.model]() if args.model in MODELS else Path(args.model)
    settings = EngineSettings(threads=threads, n_ctx=args.n_ctx, embedding_pooling=args.pooling)
    try:
        engine = EmbeddingEngine.load(str(path), settings, model_name=path.stem)
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm bench embeddings: {exc}", file=sys.stderr)
        return 2
    sides: dict[str, Side] = {"snapllm": engine_side(engine, args.inputs)}
    with _peer(args.peer, path, threads=threads, n_ctx=args.n_ctx, pooling=engine.pooling) as peer_url:
        if peer_url is not None:
            sides["llama-server"] = peer_side(peer_url)
        measured = measure(sides, inputs=args.inputs, rounds=args.rounds)
    results: dict[str, Any] = {
        "model": str(path),
        "pooling": engine.pooling,
        "threads": threads,
        "inputs": args.inputs,
        "rounds": args.rounds,
        "sides": measured,
    }
    if "llama-server" in measured:
        results["ratio"] = (
            measured["snapllm"]["inputs_per_second"] / measured["llama-server"]["inputs_per_second"]
        )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(_table(results))
    return 0


def _table(results: dict[str, Any]) -> str:
    rows = [
        (
            name,
            f"{side['inputs_per_second']:.1f} inputs/s ({side['seconds_per_request'] * 1000:.0f} ms each)",
        )
        for name, side in results["sides"].items()
    ]
    if "ratio" in results:
        rows.append(("snapllm/llama-server", f"inputs/s x{results['ratio']:.2f}"))
    title = (
        f"{Path(results['model']).name}: /v1/embeddings of {results['inputs']} short texts, "
        f"{results['pooling']} pooling (median of {results['rounds']} rounds, {results['threads']} threads)"
    )
    return table(rows, title=title)


@contextmanager
def _peer(peer: str | None, model: Path, *, threads: int, n_ctx: int, pooling: str) -> Iterator[str | None]:
    if peer is None:
        yield None
        return
    options = (
        "--embedding", "--pooling", pooling, "-np", str(PEER_SLOTS), "--kv-unified",
        "-b", str(n_ctx), "-ub", str(n_ctx),
    )  # fmt: skip
    with llama_server(model, threads=threads, n_ctx=n_ctx, options=options, bench="embeddings") as url:
        yield url
