"""``snapllm bench router``: the router's own overhead per request, everything but inference.

    snapllm bench router --requests 300      # p50/p95/p99 in ms; exits 1 if p99 is over --budget-ms

Each request is an API Gateway HTTP API event through the real router handler (Powertools resolver with
validation, Logger, Tracer, Metrics; EMF and logs written to /dev/null) and the local inference client,
which invokes an InferenceFunction environment restored from a local snapshot and generating one token.
Overhead = handler time - time inside ``InferenceClient.invoke``. The event is built before the clock
starts: building it is API Gateway's work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapllm import sam
from snapllm.inference_client import InferenceClient
from snapllm.local.context import LocalContext
from snapllm.local.report import table
from snapllm.local.stack import LocalStack
from snapllm.router.events import http_api_event

DEFAULT_BUDGET_MS = 10.0


def add_parser(kinds: argparse._SubParsersAction) -> None:
    parser = kinds.add_parser("router", help="router overhead per request (all but inference), p50/p99")
    parser.add_argument("-t", "--template", type=Path, default=Path("template.yaml"))
    parser.add_argument("--model", type=Path, help="GGUF file (default: the packaged SmolLM2)")
    parser.add_argument("--requests", type=int, default=200, help="measured requests (after 20 warm-ups)")
    parser.add_argument(
        "--budget-ms", type=float, default=DEFAULT_BUDGET_MS, help="p99 budget (exit 1 above)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.set_defaults(func=run)


class _TimedClient:
    """Wraps the router's inference client and records how long each invoke took."""

    def __init__(self, client: InferenceClient) -> None:
        self._client = client
        self.last_s = 0.0

    def invoke(self, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            return self._client.invoke(payload, deadline=deadline)
        finally:
            self.last_s = time.perf_counter() - started


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cls(cuts[49], cuts[94], cuts[98], max(values), statistics.fmean(values))

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


def _requests(model: str) -> list[tuple[str, bytes]]:
    chat = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 1, "seed": 1}
    completion = {"model": model, "prompt": "Hello", "max_tokens": 1, "seed": 1}
    return [
        ("/v1/chat/completions", json.dumps(chat).encode()),
        ("/v1/completions", json.dumps(completion).encode()),
    ]


def measure(router: Any, model: str, *, requests: int, warmup: int = 20) -> dict[str, Percentiles]:
    """Overhead, handler and invoke times in ms over ``requests`` requests alternating chat and text."""
    (name, client), *_ = router.clients.items()
    timed = _TimedClient(client)
    router.clients[name] = timed
    overhead, handler, invoke = [], [], []
    bodies = _requests(model)
    # EMF metrics are printed (sys.stdout); the logger's handler holds the stream it was created with.
    log_handler = router.logger.registered_handler
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        original = log_handler.setStream(sink)
        for i in range(warmup + requests):
            path, body = bodies[i % len(bodies)]
            event = http_api_event("POST", path, body=body, headers={"content-type": "application/json"})
            context = LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256)
            started = time.perf_counter()
            result = router.handler(event, context)
            elapsed = time.perf_counter() - started
            if result["statusCode"] != 200:
                raise RuntimeError(f"request {i} answered {result['statusCode']}: {result['body']}")
            if i >= warmup:
                handler.append(elapsed * 1000)
                invoke.append(timed.last_s * 1000)
                overhead.append((elapsed - timed.last_s) * 1000)
        log_handler.setStream(original)
    return {
        "overhead_ms": Percentiles.of(overhead),
        "handler_ms": Percentiles.of(handler),
        "invoke_ms": Percentiles.of(invoke),
    }


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("SNAPLLM_THREADS", "1")
    with LocalStack.start(sam.load(args.template), model_path=args.model, streaming=False) as stack:
        results = measure(stack.router, stack.model, requests=args.requests)
    overhead = results["overhead_ms"]
    passed = overhead.p99 <= args.budget_ms
    if args.json:
        summary = {"requests": args.requests, "budget_ms": args.budget_ms, "passed": passed}
        print(json.dumps({**summary, **{k: v.as_dict() for k, v in results.items()}}, indent=2))
    else:
        rows = [
            (label, f"{p.p50:.2f} / {p.p95:.2f} / {p.p99:.2f} / {p.max:.2f}")
            for label, p in (
                ("router overhead (p50/p95/p99/max ms)", overhead),
                ("whole handler", results["handler_ms"]),
                ("  of which inference invoke", results["invoke_ms"]),
            )
        ]
        rows.append(("p99 budget", f"{args.budget_ms:.1f} ms: {'met' if passed else 'EXCEEDED'}"))
        print(table(rows, title=f"router, {args.requests} requests"), file=sys.stderr)
    return 0 if passed else 1
