"""``snapllm bench aws --stack NAME``: cold, warm and streaming latency of a deployed stack, from Lambda's
own REPORT records, with the invocations and dollars it spent.

    snapllm bench aws --stack snapllm-dev --cold 5 --warm 20 --stream 5 --json > aws.json
    snapllm cost --requests-per-day 20000 --from-bench aws.json

It publishes versions and spends money: docs/benchmarks.md says how it forces cold starts and bounds the cost.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from snapllm.aws_auth import SigV4, session_with_credentials
from snapllm.errors import ConfigurationError
from snapllm_dev.bench import stats
from snapllm_dev.bench.lambda_reports import Report, parse_log, summarize
from snapllm_dev.cost.prices import Architecture, Prices, load
from snapllm_dev.local.report import table

NONCE_VARIABLE = "SNAPLLM_BENCH_NONCE"
SNAPSTART_CACHE_MINIMUM_S = 3 * 3600
REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "List three uses of a serverless function."}],
    "max_tokens": 48,
    "temperature": 0.0,
}


class BenchAwsError(RuntimeError):
    """The benchmark cannot go on: no credentials, no such stack, or the spending was not approved."""


# --- the AWS calls, each one thin and named ----------------------------------------------------------


def stack_function(cloudformation: Any, stack: str, logical_id: str) -> str:
    resources = cloudformation.describe_stack_resources(StackName=stack)["StackResources"]
    for resource in resources:
        if (
            resource["LogicalResourceId"] == logical_id
            and resource["ResourceType"] == "AWS::Lambda::Function"
        ):
            return resource["PhysicalResourceId"]
    raise BenchAwsError(f"stack {stack} has no function {logical_id}")


def stack_output(cloudformation: Any, stack: str, key: str) -> str | None:
    (description,) = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    return next((o["OutputValue"] for o in description.get("Outputs", []) if o["OutputKey"] == key), None)


def function_configuration(lambda_: Any, function: str) -> dict[str, Any]:
    return lambda_.get_function_configuration(FunctionName=function)


def set_environment(lambda_: Any, function: str, variables: dict[str, str]) -> None:
    lambda_.update_function_configuration(FunctionName=function, Environment={"Variables": variables})
    lambda_.get_waiter("function_updated_v2").wait(FunctionName=function)


def publish_version(lambda_: Any, function: str) -> str:
    """Publishes $LATEST (with SnapStart this runs the init and takes the snapshot) and waits until ready."""
    version = lambda_.publish_version(FunctionName=function, Description="snapllm bench aws")["Version"]
    lambda_.get_waiter("published_version_active").wait(
        FunctionName=function, Qualifier=version, WaiterConfig={"Delay": 5, "MaxAttempts": 120}
    )
    return version


def invoke_with_report(
    lambda_: Any, function: str, qualifier: str, payload: dict[str, Any]
) -> tuple[float, dict[str, Any], Report]:
    """One synchronous invoke: the client's wall time, the response and the invoke's REPORT record."""
    started = time.perf_counter()
    answer = lambda_.invoke(
        FunctionName=function, Qualifier=qualifier, LogType="Tail", Payload=json.dumps(payload).encode()
    )
    elapsed = time.perf_counter() - started
    body = json.loads(answer["Payload"].read() or b"null")
    reports = parse_log(base64.b64decode(answer.get("LogResult", "")).decode("utf-8", "replace"))
    if not reports:
        raise BenchAwsError(f"the invoke of {function}:{qualifier} returned no REPORT in its log tail")
    return elapsed, body, reports[-1]


def delete_version(lambda_: Any, function: str, version: str) -> None:
    lambda_.delete_function(FunctionName=function, Qualifier=version)


def stream_first_byte_s(url: str, region: str, session: Any, payload: dict[str, Any]) -> float:
    """Seconds from sending a streaming chat request to the first event byte (SigV4 for the Function URL)."""
    with httpx.Client(auth=SigV4(region=region, service="lambda", session=session), timeout=120) as client:
        started = time.perf_counter()
        with client.stream(
            "POST", url.rstrip("/") + "/chat/completions", json=payload | {"stream": True}
        ) as r:
            r.raise_for_status()
            for chunk in r.iter_bytes():
                if chunk.strip():
                    return time.perf_counter() - started
    raise BenchAwsError("the stream ended without an event")


# --- spending -----------------------------------------------------------------------------------------


def ask_on_terminal(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in {"y", "yes"}


@dataclass
class Spending:
    """Counts the invocations and dollars spent; asks before the total passes the approved limit."""

    limit_usd: float
    ask: Callable[[str], bool]
    invocations: int = 0
    usd: float = 0.0
    items: dict[str, float] = field(default_factory=dict)

    def approve(self, planned_usd: float) -> None:
        if self.usd + planned_usd <= self.limit_usd:
            return
        total = self.usd + planned_usd
        question = f"this run may spend up to ${total:.2f}, over the ${self.limit_usd:.2f} limit. Go on?"
        if not self.ask(question):
            raise BenchAwsError(
                f"stopped before spending more than ${self.limit_usd:.2f} (--budget-usd, --yes)"
            )
        self.limit_usd = self.usd + planned_usd

    def add(self, item: str, usd: float, *, invocation: bool = False) -> None:
        self.usd += usd
        self.items[item] = self.items.get(item, 0.0) + usd
        self.invocations += int(invocation)


def worst_case_usd(
    prices: Prices, architecture: Architecture, memory_mb: int, timeout_s: int, invokes: int, versions: int
) -> float:
    gb = memory_mb / 1024
    lam = prices.lambda_
    per_invoke = timeout_s * gb * lam.duration(architecture).first_tier_usd_per_gb_s
    per_invoke += lam.requests.usd_per_million / 1e6 + gb * lam.snapstart.restore_usd_per_gb
    cache = versions * SNAPSTART_CACHE_MINIMUM_S * gb * lam.snapstart.cache_usd_per_gb_s
    return invokes * per_invoke + cache


# --- the run ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    try:
        result = measure(args, ask_on_terminal)
    except (BenchAwsError, ConfigurationError) as exc:
        print(f"snapllm bench aws: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


def measure(args: argparse.Namespace, ask: Callable[[str], bool]) -> dict[str, Any]:
    session = session_with_credentials(args.region)  # first: without credentials, stop before anything
    cloudformation, lambda_ = session.client("cloudformation"), session.client("lambda")
    function = stack_function(cloudformation, args.stack, args.function)
    config = function_configuration(lambda_, function)
    architecture: Architecture = (
        "x86_64" if config.get("Architectures", ["x86_64"])[0] == "x86_64" else "arm64"
    )
    memory_mb, timeout_s = int(config["MemorySize"]), int(config["Timeout"])
    snapstart = config.get("SnapStart", {}).get("ApplyOn") == "PublishedVersions"
    prices = load()
    gb = memory_mb / 1024
    spending = Spending(limit_usd=args.budget_usd, ask=ask)
    cold_versions = max(1, args.cold)
    spending.approve(
        worst_case_usd(
            prices, architecture, memory_mb, timeout_s, cold_versions + args.warm + args.stream, cold_versions
        )
    )
    original = dict(config.get("Environment", {}).get("Variables", {}))
    published: list[str] = []
    reports: list[Report] = []
    client_s: dict[str, list[float]] = {"cold": [], "warm": []}
    first_token_ms: dict[str, list[float]] = {"cold": [], "warm": []}
    speed: list[dict[str, Any]] = []
    stream_s: list[float] = []

    def invoke(version: str, kind: str) -> None:
        elapsed, body, report = invoke_with_report(lambda_, function, version, REQUEST)
        reports.append(report)
        client_s[kind].append(elapsed)
        spending.add(f"{kind} invokes", report.cost_usd(prices, architecture), invocation=True)
        timings = (body or {}).get("timings")
        if timings:
            first_token_ms[kind].append(float(timings["time_to_first_token_ms"]))
        if kind == "warm" and timings:
            speed.append({"timings": timings, "usage": body.get("usage", {})})

    try:
        for _ in range(cold_versions):
            variables = original | {NONCE_VARIABLE: secrets.token_hex(8)}
            if args.prefault:
                variables["SNAPLLM_PREFAULT"] = args.prefault
            set_environment(lambda_, function, variables)
            version = publish_version(lambda_, function)
            published.append(version)
            if snapstart:
                cache_usd = SNAPSTART_CACHE_MINIMUM_S * gb * prices.lambda_.snapstart.cache_usd_per_gb_s
                spending.add("SnapStart cache (3 h minimum per version)", cache_usd)
            invoke(version, "cold")
        for _ in range(args.warm):
            invoke(published[-1], "warm")
        url = stack_output(cloudformation, args.stack, "StreamingBaseUrl") if args.stream else None
        for _ in range(args.stream if url else 0):
            stream_s.append(stream_first_byte_s(url, session.region_name, session, REQUEST))
            spending.add(
                "stream invokes (estimated from the warm median)",
                _median_cost(reports, prices, architecture),
                invocation=True,
            )
    finally:
        set_environment(lambda_, function, original)
        for version in published:
            delete_version(lambda_, function, version)
    return {
        "stack": args.stack,
        "function": function,
        "architecture": architecture,
        "memory_mb": memory_mb,
        "snapstart": snapstart,
        "reports": summarize(reports),
        "client_ms": {kind: stats.summarize([s * 1000 for s in values]) for kind, values in client_s.items()},
        "stream_first_byte_ms": stats.summarize([s * 1000 for s in stream_s]),
        "speed": speed_of(speed, reports),
        "after_restore": after_restore(reports, first_token_ms, args.prefault),
        "spent": {
            "invocations": spending.invocations,
            "usd": round(spending.usd, 4),
            "by_item": {k: round(v, 4) for k, v in spending.items.items()},
        },
        "versions_published_and_deleted": published,
    }


def _median_cost(reports: list[Report], prices: Prices, architecture: Architecture) -> float:
    warm = [r.cost_usd(prices, architecture) for r in reports if r.phase == "warm"]
    return statistics.median(warm) if warm else 0.0


def speed_of(samples: list[dict[str, Any]], reports: list[Report]) -> dict[str, float] | None:
    """The speed `snapllm cost` reads: warm time to first token, decode rate, what a cold start adds."""
    if not samples:
        return None
    warm = [r.duration_ms for r in reports if r.phase == "warm"]
    cold = [r.cold_start_ms for r in reports if r.phase != "warm"]
    return {
        "tokens_per_s": statistics.median(s["timings"]["tokens_per_second"] for s in samples),
        "ttft_ms": statistics.median(s["timings"]["time_to_first_token_ms"] for s in samples),
        "prompt_tokens": int(statistics.median(s["usage"].get("prompt_tokens", 0) for s in samples)) or None,
        "cold_extra_ms": max(0.0, statistics.median(cold) - statistics.median(warm))
        if cold and warm
        else 0.0,
    }


def after_restore(
    reports: list[Report], first_token_ms: dict[str, list[float]], prefault: str | None
) -> dict[str, Any] | None:
    """The first request after a restore against a warm one, as ``snapllm bench coldstart`` reports it
    locally: medians of the restore, of the first token's gap, and of the invoke durations' ratio."""
    restores = [r for r in reports if r.phase == "restore"]
    warm = [r.duration_ms for r in reports if r.phase == "warm"]
    if not restores or not warm:
        return None
    cold_ttft, warm_ttft = first_token_ms["cold"], first_token_ms["warm"]
    restore_invoke_ms = statistics.median(r.duration_ms for r in restores)
    return {
        "prefault": prefault,
        "restore_ms": statistics.median(r.restore_duration_ms or 0.0 for r in restores),
        "first_token_gap_ms": statistics.median(cold_ttft) - statistics.median(warm_ttft)
        if cold_ttft and warm_ttft
        else None,
        "first_over_warm_invoke": restore_invoke_ms / statistics.median(warm),
    }


def render(result: dict[str, Any]) -> str:
    rows = []
    for phase, columns in result["reports"].items():
        for name, p in columns.items():
            rows.append(
                (f"{phase:7} {name}", f"{p['p50']:.1f} / {p['p90']:.1f} / {p['p99']:.1f}  (n={p['n']})")
            )
    for kind, p in result["client_ms"].items():
        if p["n"]:
            rows.append(
                (
                    f"client {kind} invoke ms",
                    f"{p['p50']:.1f} / {p['p90']:.1f} / {p['p99']:.1f}  (n={p['n']})",
                )
            )
    first = result["stream_first_byte_ms"]
    if first["n"]:
        rows.append(
            (
                "stream first byte ms",
                f"{first['p50']:.1f} / {first['p90']:.1f} / {first['p99']:.1f}  (n={first['n']})",
            )
        )
    figures = result.get("after_restore")
    if figures:
        mode = figures["prefault"] or "the function's setting"
        rows.append((f"after a restore (SNAPLLM_PREFAULT: {mode})", ""))
        rows.append(("  restore ms (median)", f"{figures['restore_ms']:.1f}"))
        if figures["first_token_gap_ms"] is not None:
            rows.append(("  first token - warm first token ms", f"{figures['first_token_gap_ms']:.1f}"))
        rows.append(("  first invoke / warm invoke", f"{figures['first_over_warm_invoke']:.3f}"))
    spent = result["spent"]
    rows.append(("spent", f"{spent['invocations']} invocations, ${spent['usd']:.4f}"))
    title = (
        f"{result['function']} ({result['architecture']}, {result['memory_mb']} MB, "
        f"SnapStart {'on' if result['snapstart'] else 'off'}): p50 / p90 / p99"
    )
    return table(rows, title=title)
