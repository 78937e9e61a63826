"""The arguments of ``snapllm settings`` (run by :mod:`snapllm_dev.settings_doc`), declared without importing
every function's settings classes: a usage error costs no start-up."""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = "The configuration page's tables, generated from the functions' settings classes."


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Registers ``settings`` on the ``snapllm`` command's subparsers."""
    help_text = "print the functions' environment variables as Markdown tables"
    add_arguments(subparsers.add_parser("settings", help=help_text, description=DESCRIPTION))


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    help_text = "replace the tables between the markers of this file instead of printing them"
    parser.add_argument("--write", metavar="PAGE", type=Path, help=help_text)
    parser.set_defaults(implementation="snapllm_dev.settings_doc")
    return parser
