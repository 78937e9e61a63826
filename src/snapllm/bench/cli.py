"""``snapllm bench ...`` subcommands."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="benchmarks that report side-by-side ratios")
    kinds = bench.add_subparsers(dest="bench", required=True)
    from snapllm.bench import coldstart

    coldstart.add_parser(kinds)
    from snapllm.bench import router

    router.add_parser(kinds)
