"""``snapllm bench ...`` subcommands."""

from __future__ import annotations

import argparse

from snapllm.bench import aws, coldstart, decode, grammar, router


def add_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="benchmarks that report side-by-side ratios")
    kinds = bench.add_subparsers(dest="bench", required=True)
    coldstart.add_parser(kinds)
    router.add_parser(kinds)
    aws.add_parser(kinds)
    grammar.add_parser(kinds)
    decode.add_parser(kinds)
