"""``snapllm cost``: a workload's monthly cost on Lambda and on always-on options, and where to switch.

    snapllm cost --requests-per-day 20000 --prompt-tokens 300 --completion-tokens 150 \\
        --from-bench coldstart.json --plot cost.png
    snapllm cost --profile 0,0,0,0,0,0,200,900,...(24 hourly counts) --tokens-per-s 40 --ttft-ms 300 --json
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from snapllm.text_table import columns
from snapllm_dev.cost import measured, plot
from snapllm_dev.cost.model import HOURS_PER_DAY, Estimate, Speed, Workload, estimate
from snapllm_dev.cost.prices import Prices, load


def _bench_speed(path: Path) -> Speed:
    """The speed a ``snapllm bench ... --json`` file measured, or a ValueError naming ``--from-bench``."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"--from-bench: cannot read {path}: {exc.strerror}") from None
    except (ValueError, RecursionError):
        raise ValueError(f"--from-bench: {path} is not JSON") from None
    if not isinstance(result, dict):
        raise ValueError(f"--from-bench: {path} must hold a JSON object (`snapllm bench ... --json`)")
    try:
        speed = measured.speed_from_bench(result)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(
            f"--from-bench: {path} holds no usable speed ({' '.join(str(exc).split())})"
        ) from None
    if not all(math.isfinite(value) for value in (speed.tokens_per_s, speed.ttft_s, speed.cold_extra_s)):
        raise ValueError(f"--from-bench: {path} holds a speed that is not a finite number")
    return speed


def _speed(args: argparse.Namespace) -> Speed:
    base = Speed(tokens_per_s=0.0, ttft_s=0.0)
    if args.from_bench:
        base = _bench_speed(args.from_bench)
    speed = Speed(
        tokens_per_s=args.tokens_per_s if args.tokens_per_s is not None else base.tokens_per_s,
        ttft_s=args.ttft_ms / 1000 if args.ttft_ms is not None else base.ttft_s,
        ttft_prompt_tokens=args.ttft_prompt_tokens
        or (None if args.ttft_ms is not None else base.ttft_prompt_tokens),
        cold_extra_s=args.cold_extra_ms / 1000 if args.cold_extra_ms is not None else base.cold_extra_s,
    )
    if speed.tokens_per_s <= 0 or speed.ttft_s < 0 or speed.cold_extra_s < 0:
        raise ValueError("give the speed: --from-bench FILE, or --tokens-per-s (> 0) and --ttft-ms (>= 0)")
    return speed


def _workload(args: argparse.Namespace) -> Workload:
    # Both were checked as the arguments were parsed (snapllm_dev.cost.arguments).
    hourly = (
        args.profile if args.profile is not None else (args.requests_per_day / HOURS_PER_DAY,) * HOURS_PER_DAY
    )
    return Workload(
        hourly_requests=hourly,
        prompt_tokens=args.prompt_tokens,
        completion_tokens=args.completion_tokens,
        memory_mb=args.memory_mb,
        architecture=args.architecture,
        peak_concurrency=args.peak_concurrency,
        snapstart_versions=args.snapstart_versions,
        environment_minutes=args.environment_minutes,
        vcpus_per_stream=args.vcpus_per_stream,
    )


def run(args: argparse.Namespace) -> int:
    try:
        if not args.no_plot and not args.plot.resolve().parent.is_dir():
            raise ValueError(f"--plot: no folder {str(args.plot.parent)!r} to write {args.plot.name} into")
        try:
            prices = load(args.prices)
        except (OSError, ValueError) as exc:  # the file, its TOML or its fields
            raise ValueError(f"--prices: {args.prices}: {exc}") from None
        options = tuple(prices.option(name) for name in args.option) if args.option else None
        result = estimate(prices, _workload(args), _speed(args), options)
    except (ValueError, KeyError, OSError) as exc:
        args.parser.error(" ".join(str(exc).strip("'\"").split()))
    plotted = None if args.no_plot else plot.write(prices, result, args.plot)
    if args.json:
        print(json.dumps(as_json(prices, result, plotted), indent=2))
    else:
        print(render(result))
        if plotted:
            print(f"\nplot: {plotted}")
    return 0


def as_json(prices: Prices, result: Estimate, plotted: Path | None = None) -> dict[str, Any]:
    lam = result.lambda_cost
    workload = result.workload
    return {
        "verdict": result.verdict(),
        "requests_per_day": workload.requests_per_day,
        "request_s": result.request_s,
        "workload": {k: v for k, v in asdict(workload).items() if k != "hourly_requests"}
        | {"hourly_requests": list(workload.hourly_requests)},
        "speed": asdict(result.speed),
        "lambda": asdict(lam) | {"total": lam.total},
        "always_on": [
            {
                "option": c.cost.option.name,
                "term": c.cost.term,
                "units": c.cost.units,
                "monthly_usd": c.cost.total,
                "utilization": c.cost.utilization,
                "break_even": asdict(c.break_even) if c.break_even else None,
                "price_date": c.cost.option.date,
                "price_source": c.cost.option.source,
            }
            for c in result.options
        ],
        "lambda_price_date": prices.lambda_.arm64.date,
        "plot": str(plotted) if plotted else None,
    }


def render(result: Estimate) -> str:
    lam = result.lambda_cost
    workload = result.workload
    header = (
        f"{workload.requests_per_day:,.0f} requests/day, {workload.prompt_tokens} + "
        f"{workload.completion_tokens} tokens, {result.request_s:.3f} s billed each, "
        f"Lambda {workload.architecture} {workload.memory_mb:,} MB"
    )
    rows = [("option", "units", "$/month", "busy", "break-even req/day", "busy there")]
    rows.append(("Lambda (SnapStart)", "-", f"{lam.total:,.2f}", "-", "-", "-"))
    for c in sorted(result.options, key=lambda c: c.cost.total):
        point = c.break_even
        rows.append(
            (
                c.cost.label,
                str(c.cost.units),
                f"{c.cost.total:,.2f}",
                f"{c.cost.utilization:.1%}",
                f"{point.requests_per_day:,.0f}" if point else "never",
                f"{point.utilization:.1%}" if point else "-",
            )
        )
    lines = columns(rows, right=range(1, len(rows[0])))
    breakdown = (
        f"Lambda: duration ${lam.duration:,.2f} ({lam.gb_s:,.0f} GB-s), requests ${lam.requests:,.2f}, "
        f"SnapStart cache ${lam.snapstart_cache:,.2f}, restores ${lam.snapstart_restore:,.2f} "
        f"({lam.restores:,.0f}/month)"
    )
    return "\n".join([header, "", lines, "", breakdown, "", result.verdict()])
