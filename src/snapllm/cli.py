"""The ``snapllm`` command.

snapllm local invoke InferenceFunction -e events/inference/chat.json
snapllm bench coldstart --json
snapllm settings --write docs/configuration.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from snapllm.bench.cli import add_parser as add_bench
from snapllm.cost.cli import add_parser as add_cost
from snapllm.deploy.cli import add_parser as add_model
from snapllm.deploycheck.cli import add_parser as add_deploy_check
from snapllm.local.cli import add_parser as add_local
from snapllm.preflight.cli import add_parser as add_preflight
from snapllm.replay.cli import add_parser as add_replay
from snapllm.samlocal.cli import add_parser as add_sam_local
from snapllm.settings_doc import add_parser as add_settings

SubcommandRegistrar = Callable[[argparse._SubParsersAction], None]
REGISTRARS: list[SubcommandRegistrar] = [
    add_local,
    add_bench,
    add_preflight,
    add_settings,
    add_sam_local,
    add_replay,
    add_model,
    add_deploy_check,
    add_cost,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snapllm", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRARS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
