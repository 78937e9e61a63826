"""The arguments of ``snapllm deploy-check`` (run by :mod:`snapllm.deploycheck.cli`), declared without
importing SAM's translator: a usage error costs no start-up."""

from __future__ import annotations

import argparse
from pathlib import Path

from snapllm.argtypes import parameter, readable_file


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "deploy-check", help="check the transformed template: SnapStart after the model, roles, variables"
    )
    parser.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    parser.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        type=parameter,
        metavar="NAME=VALUE",
        help="as for sam deploy",
    )
    parser.add_argument(
        "--region", help="the region to deploy to (default: samconfig.toml's); refused if it lacks a feature"
    )
    parser.set_defaults(implementation="snapllm.deploycheck.cli")
