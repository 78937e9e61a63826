"""The arguments of ``snapllm sam-local`` (run by :mod:`snapllm_dev.samlocal.cli`), declared without importing
the runner: a usage error costs no start-up."""

from __future__ import annotations

import argparse
from pathlib import Path

from snapllm_dev.argtypes import directory
from snapllm_dev.local.arguments import MODEL_HELP, served_model


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sam-local", help="run the built functions with the real `sam local invoke` (needs Docker)"
    )
    parser.add_argument("--build-dir", type=directory, default=Path(".aws-sam/build-x86_64"))
    parser.add_argument("--arch", choices=("x86_64", "arm64"), default="x86_64")
    parser.add_argument("--sam", type=Path, default=Path(".tools/bin/sam"), help="the SAM CLI to run")
    parser.add_argument("--logs", type=Path, default=Path(".aws-sam/sam-local-logs"))
    parser.add_argument(
        "--model-only",
        action="store_true",
        help="only the model function, once (an emulated architecture runs about 40 times slower)",
    )
    parser.add_argument("--model", type=served_model, help=MODEL_HELP)
    parser.set_defaults(implementation="snapllm_dev.samlocal.cli")
