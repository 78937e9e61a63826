"""``snapllm bench router``: the router's own overhead per request, everything but inference.

    snapllm bench router --requests 300      # p50/p95/p99 in ms; exits 1 if p99 is over --budget-ms
    snapllm bench router --endpoint http://127.0.0.1:8000/v1 --max-tokens 32   # + an always-on target

Overhead is the real handler's time less the time inside ``InferenceClient.invoke``; docs/benchmarks.md
says what each request runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from snapllm.errors import SnapllmError
from snapllm.inference.client import InferenceClient
from snapllm.protocol.http.routes import CHAT_COMPLETIONS, COMPLETIONS
from snapllm.router.events import http_api_event
from snapllm_dev import sam
from snapllm_dev.bench.stats import Percentiles
from snapllm_dev.local.context import LocalContext
from snapllm_dev.local.report import table
from snapllm_dev.local.stack import LocalStack

ALWAYS_ON = "always-on"


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


def _requests(model: str, max_tokens: int = 1) -> list[tuple[str, bytes]]:
    chat = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": max_tokens,
        "seed": 1,
    }
    completion = {"model": model, "prompt": "Hello", "max_tokens": max_tokens, "seed": 1}
    return [
        (CHAT_COMPLETIONS, json.dumps(chat).encode()),
        (COMPLETIONS, json.dumps(completion).encode()),
    ]


def measure(
    router: Any, model: str, *, requests: int, warmup: int = 20, max_tokens: int = 1
) -> dict[str, Percentiles]:
    """Overhead, handler and invoke times in ms over ``requests`` requests alternating chat and text."""
    return measure_targets(router, [model], requests=requests, warmup=warmup, max_tokens=max_tokens)[model]


def measure_targets(
    router: Any, models: list[str], *, requests: int, warmup: int = 20, max_tokens: int = 1
) -> dict[str, dict[str, Percentiles]]:
    """:func:`measure` for each routed model, interleaved request by request so drift hits all alike."""
    timed = {model: _TimedClient(router.clients[model]) for model in models}
    for model, client in timed.items():
        router.clients[model] = client
    samples: dict[str, dict[str, list[float]]] = {
        model: {"overhead": [], "handler": [], "invoke": []} for model in models
    }
    bodies = {model: _requests(model, max_tokens) for model in models}
    # EMF metrics are printed (sys.stdout); the logger's handler holds the stream it was created with.
    log_handler = router.logger.registered_handler
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        original = log_handler.setStream(sink)
        for i in range(warmup + requests):
            for model in models:
                path, body = bodies[model][i % len(bodies[model])]
                event = http_api_event("POST", path, body=body, headers={"content-type": "application/json"})
                context = LocalContext.create("RouterFunction", timeout_s=29, memory_mb=256)
                started = time.perf_counter()
                result = router.handler(event, context)
                elapsed = time.perf_counter() - started
                if result["statusCode"] != 200:
                    raise RuntimeError(
                        f"request {i} to {model} answered {result['statusCode']}: {result['body']}"
                    )
                if i >= warmup:
                    invoke_s = timed[model].last_s
                    samples[model]["handler"].append(elapsed * 1000)
                    samples[model]["invoke"].append(invoke_s * 1000)
                    samples[model]["overhead"].append((elapsed - invoke_s) * 1000)
        log_handler.setStream(original)
    return {
        model: {f"{name}_ms": Percentiles.of(values) for name, values in columns.items()}
        for model, columns in samples.items()
    }


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("SNAPLLM_THREADS", "1")
    endpoints = {ALWAYS_ON: args.endpoint} if args.endpoint else {}
    try:
        template = sam.load(args.template)
        with LocalStack.start(template, model_path=args.model, streaming=False, endpoints=endpoints) as stack:
            models = [stack.model, *endpoints]
            by_target = measure_targets(
                stack.router, models, requests=args.requests, max_tokens=args.max_tokens
            )
    except (SnapllmError, OSError, ValueError) as exc:
        print(f"snapllm bench router: {exc}", file=sys.stderr)
        return 2
    results = by_target[stack.model]
    overhead = results["overhead_ms"]
    passed = overhead.p99 <= args.budget_ms
    if args.json:
        summary = {"requests": args.requests, "budget_ms": args.budget_ms, "passed": passed}
        summary["max_tokens"] = args.max_tokens
        report = {**summary, **{k: v.as_dict() for k, v in results.items()}}
        if endpoints:
            report["targets"] = {m: {k: v.as_dict() for k, v in r.items()} for m, r in by_target.items()}
            report["handler_p50_ratio_to_lambda"] = {
                m: r["handler_ms"].p50 / results["handler_ms"].p50 for m, r in by_target.items()
            }
        print(json.dumps(report, indent=2))
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
        for model, other in by_target.items():
            if model != stack.model:
                ratio = other["handler_ms"].p50 / results["handler_ms"].p50
                p = other["handler_ms"]
                rows.append(
                    (f"{model}: whole handler", f"{p.p50:.2f} / {p.p95:.2f} / {p.p99:.2f} / {p.max:.2f}")
                )
                o = other["overhead_ms"]
                rows.append(
                    (f"{model}: router overhead", f"{o.p50:.2f} / {o.p95:.2f} / {o.p99:.2f} / {o.max:.2f}")
                )
                rows.append((f"{model}: handler p50 / Lambda target's", f"{ratio:.2f}"))
        print(table(rows, title=f"router, {args.requests} requests"), file=sys.stderr)
    return 0 if passed else 1
