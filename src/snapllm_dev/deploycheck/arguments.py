"""The arguments of ``snapllm deploy-check`` (run by :mod:`snapllm_dev.deploycheck.cli`), declared without
importing SAM's translator: a usage error costs no start-up."""

from __future__ import annotations

import argparse
from pathlib import Path

from snapllm_dev.argtypes import readable_file
from snapllm_dev.preflight.arguments import add_deploy_target


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "deploy-check", help="check the transformed template: SnapStart after the model, roles, variables"
    )
    parser.add_argument("-t", "--template", type=readable_file, default=Path("template.yaml"))
    add_deploy_target(parser)
    parser.set_defaults(implementation="snapllm_dev.deploycheck.cli")
