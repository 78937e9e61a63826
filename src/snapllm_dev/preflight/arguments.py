"""The arguments of ``snapllm preflight`` (run by :mod:`snapllm_dev.preflight.cli`), declared without
importing
the checker: a usage error costs no start-up."""

from __future__ import annotations

import argparse

from snapllm_dev.argtypes import integer, number, parameter, readable_file

DESCRIPTION = "Checks a ``sam build`` output for everything that would fail a deploy."


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Registers ``preflight`` on the ``snapllm`` command's subparsers."""
    add_arguments(
        subparsers.add_parser(
            "preflight", help="check built artifacts for deploy-time failures", description=DESCRIPTION
        )
    )


def add_deploy_target(parser: argparse.ArgumentParser) -> None:
    """What a deploy would be given: the template's parameter values and the region (``preflight`` and
    ``deploy-check`` check the same deploy)."""
    parser.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        type=parameter,
        metavar="NAME=VALUE",
        help="template parameter values, as for sam build and sam deploy (e.g. Architecture=x86_64)",
    )
    parser.add_argument(
        "--region", help="the region to deploy to (default: samconfig.toml's); refused if it lacks a feature"
    )


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "build_dir", nargs="?", default=".aws-sam/build", help="what sam build wrote (default .aws-sam/build)"
    )
    add_deploy_target(parser)
    parser.add_argument("--no-zip", action="store_true", help="skip measuring zip sizes (faster)")
    parser.add_argument("--config-file", default="samconfig.toml", help="where --region defaults from")
    parser.add_argument("--config-env", default="default", help="samconfig.toml environment (default)")
    parser.add_argument(
        "--model",
        type=readable_file,
        help="the GGUF file to deploy: reports its family, chat template, thinking and tool-call format, "
        "checks the memory it needs and that its init fits SnapStart's limit",
    )
    parser.add_argument(
        "--n-ctx",
        type=integer(16, 2**20),
        help="the context window the function will give the model (SNAPLLM_N_CTX; default: the engine's)",
    )
    parser.add_argument(
        "--prompt-prefixes",
        default="snapllm:agent",
        help="the declared prompt prefixes (PromptPrefixes): a JSON file, snapllm:NAME or '' for none "
        "(default: the template's, snapllm:agent); their saved states count toward the memory --model needs",
    )
    parser.add_argument("--model-bytes", type=integer(1, 2**50), help="the model's size, instead of --model")
    parser.add_argument(
        "--s3-mib-per-s",
        type=number(0, 1e6, above_minimum=True),
        default=50.0,
        help="S3 read rate to assume for the init (MiB/s, 50)",
    )
    parser.add_argument(
        "--bench",
        type=readable_file,
        help="`snapllm bench coldstart --json` output: the measured load and warm-up",
    )
    parser.set_defaults(implementation="snapllm_dev.preflight.cli")
    return parser
