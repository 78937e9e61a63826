"""The ``snapllm`` command.

snapllm local invoke InferenceFunction -e events/inference/chat.json
snapllm bench coldstart --json
snapllm eval tools --model qwen2.5-coder-0.5b
snapllm settings --write docs/configuration.md

Each subcommand's arguments are declared in a light module (``snapllm.<package>.arguments``) that names
the module running it (``implementation``); that module is imported only once the arguments parsed, so
``--help`` and a usage error cost no more than the parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from snapllm_dev.bench.arguments import add_parser as add_bench
from snapllm_dev.cost.arguments import add_parser as add_cost
from snapllm_dev.deploycheck.arguments import add_parser as add_deploy_check
from snapllm_dev.eval.arguments import add_parser as add_eval
from snapllm_dev.keys.arguments import add_parser as add_keys
from snapllm_dev.local.arguments import add_parser as add_local
from snapllm_dev.local.processes import exit_on_sigterm
from snapllm_dev.model_push.arguments import add_parser as add_model
from snapllm_dev.preflight.arguments import add_parser as add_preflight
from snapllm_dev.replay.arguments import add_parser as add_replay
from snapllm_dev.samlocal.arguments import add_parser as add_sam_local
from snapllm_dev.settings_arguments import add_parser as add_settings
from snapllm_dev.testmodels.arguments import add_parser as add_test_models

SubcommandRegistrar = Callable[[argparse._SubParsersAction], None]
REGISTRARS: list[SubcommandRegistrar] = [
    add_local,
    add_bench,
    add_eval,
    add_preflight,
    add_settings,
    add_sam_local,
    add_replay,
    add_model,
    add_keys,
    add_deploy_check,
    add_cost,
    add_test_models,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snapllm", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRARS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM raises SystemExit, so that every command's `with` blocks stop the child processes it started
    # (local S3, functions, servers), also while they start and after uvicorn's graceful shutdown.
    exit_on_sigterm()
    # The one place a module is imported late: the subcommand's implementation, once it is to run.
    command = importlib.import_module(args.implementation)
    return int(command.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
