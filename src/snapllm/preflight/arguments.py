"""The arguments of ``snapllm preflight`` (run by :mod:`snapllm.preflight.cli`), declared without importing
the checker: a usage error costs no start-up."""

from __future__ import annotations

import argparse

from snapllm.argtypes import parameter

DESCRIPTION = "Checks a ``sam build`` output for everything that would fail a deploy."


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Registers ``preflight`` on the ``snapllm`` command's subparsers."""
    add_arguments(
        subparsers.add_parser(
            "preflight", help="check built artifacts for deploy-time failures", description=DESCRIPTION
        )
    )


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "build_dir", nargs="?", default=".aws-sam/build", help="what sam build wrote (default .aws-sam/build)"
    )
    parser.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        type=parameter,
        metavar="KEY=VALUE",
        help="template parameter values the build used, e.g. Architecture=x86_64",
    )
    parser.add_argument("--no-zip", action="store_true", help="skip measuring zip sizes (faster)")
    parser.set_defaults(implementation="snapllm.preflight.cli")
    return parser
