"""The arguments of ``snapllm cost`` (run by :mod:`snapllm_dev.cost.cli`), each held to a range that keeps the
arithmetic finite: a volume of 1e300 requests a day or a NaN speed is a usage error, not an overflow."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from snapllm_dev.argtypes import integer, number, readable_file

#: The most requests a day the model prices (over a million a second: far past any one account's limits).
MAX_REQUESTS_PER_DAY = 1e11
#: The most tokens one request may hold (prompt or completion).
MAX_TOKENS = 10_000_000
#: The longest time a latency may be given as, in milliseconds (an hour).
MAX_LATENCY_MS = 3_600_000.0
HOURS = 24


def hourly_profile(text: str) -> tuple[float, ...]:
    """24 comma-separated hourly request counts, each finite and not negative, some above zero."""
    try:
        hourly = tuple(float(value) for value in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes {HOURS} comma-separated numbers, got {text!r}") from None
    if len(hourly) != HOURS:
        raise argparse.ArgumentTypeError(f"takes {HOURS} hourly counts, got {len(hourly)}")
    if not all(math.isfinite(h) and h >= 0 for h in hourly) or sum(hourly) <= 0:
        raise argparse.ArgumentTypeError("takes finite counts, none negative and not all zero")
    if sum(hourly) > MAX_REQUESTS_PER_DAY:
        raise argparse.ArgumentTypeError(f"adds up to more than {MAX_REQUESTS_PER_DAY:g} requests a day")
    return hourly


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "cost", help="monthly cost on Lambda vs always-on options, break-even, and a plot"
    )
    volume = parser.add_mutually_exclusive_group(required=True)
    volume.add_argument(
        "--requests-per-day",
        type=number(0, MAX_REQUESTS_PER_DAY, above_minimum=True),
        help="a flat daily volume",
    )
    volume.add_argument(
        "--profile", type=hourly_profile, help="24 comma-separated hourly request counts (a daily profile)"
    )
    tokens = integer(1, MAX_TOKENS)
    latency = number(0, MAX_LATENCY_MS)
    parser.add_argument("--prompt-tokens", type=tokens, default=200)
    parser.add_argument("--completion-tokens", type=tokens, default=100)
    parser.add_argument(
        "--peak-concurrency",
        type=number(0, 1e7, above_minimum=True),
        help="generations at once at the peak (default: busiest hour's mean)",
    )
    parser.add_argument(
        "--memory-mb", type=integer(128, 10240), default=10240, help="Lambda memory setting (128-10240)"
    )
    parser.add_argument("--architecture", choices=("arm64", "x86_64"), default="arm64")
    parser.add_argument(
        "--from-bench",
        type=readable_file,
        help="speed from `snapllm bench coldstart --json` or `bench aws --json`",
    )
    parser.add_argument(
        "--tokens-per-s",
        type=number(0, 1e7, above_minimum=True),
        help="decode rate (overrides --from-bench)",
    )
    parser.add_argument("--ttft-ms", type=latency, help="time to first token (overrides --from-bench)")
    parser.add_argument("--ttft-prompt-tokens", type=tokens, help="prompt length --ttft-ms was measured at")
    parser.add_argument("--cold-extra-ms", type=latency, help="billed time a cold start adds (restore etc.)")
    parser.add_argument(
        "--snapstart-versions", type=integer(0, 10_000), default=1, help="live published versions"
    )
    parser.add_argument(
        "--environment-minutes",
        type=number(0, 7 * 24 * 60, above_minimum=True),
        default=15.0,
        help="life of one environment",
    )
    parser.add_argument(
        "--vcpus-per-stream",
        type=integer(1, 1024),
        help="vCPUs per generation on CPU options (default: Lambda's at --memory-mb)",
    )
    parser.add_argument("--option", action="append", help="always-on option by name (default: all)")
    parser.add_argument("--prices", type=readable_file, help="price file (default: the packaged prices.toml)")
    parser.add_argument("--plot", type=Path, default=Path("snapllm-cost.png"), help="PNG to write")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON on stdout")
    parser.set_defaults(implementation="snapllm_dev.cost.cli", parser=parser)
