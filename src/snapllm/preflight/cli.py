"""``snapllm preflight [BUILD_DIR]``: checks a ``sam build`` output for everything that would fail a deploy.

Exit code 0 when no rule found an error, 1 otherwise (also when the build directory cannot be read).

Example:
    $ snapllm preflight .aws-sam/build
    $ python -m snapllm.preflight --parameter-overrides Architecture=x86_64

    >>> from snapllm.preflight.cli import main
    >>> main([".aws-sam/build", "--no-zip"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from snapllm.preflight.checker import preflight
from snapllm.preflight.errors import PreflightError
from snapllm.preflight.report import render


def add_parser(subparsers: Any) -> None:
    """Registers ``preflight`` on the ``snapllm`` command's subparsers (``func(args) -> int``)."""
    parser = subparsers.add_parser(
        "preflight",
        help="check built artifacts for deploy-time failures",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    _configure(parser)


def main(argv: list[str] | None = None) -> int:
    """Runs the preflight as a command of its own (``python -m snapllm.preflight``)."""
    parser = argparse.ArgumentParser(prog="snapllm preflight", description=__doc__.split("\n\n")[0])
    _configure(parser)
    args = parser.parse_args(argv)
    return args.func(args)


def run(args: argparse.Namespace) -> int:
    """The subcommand: prints the report and returns the exit code."""
    try:
        findings, targets = preflight(Path(args.build_dir), _overrides(args.parameter_overrides))
    except PreflightError as exc:
        # One line, even for a YAML parser's multi-line message.
        print(f"ERROR preflight: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(render(findings, targets, zipped=not args.no_zip))
    return 1 if any(f.severity == "error" for f in findings) else 0


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "build_dir", nargs="?", default=".aws-sam/build", help="what sam build wrote (default .aws-sam/build)"
    )
    parser.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="template parameter values the build used, e.g. Architecture=x86_64",
    )
    parser.add_argument("--no-zip", action="store_true", help="skip measuring zip sizes (faster)")
    parser.set_defaults(func=run)


def _overrides(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"snapllm preflight: --parameter-overrides wants KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs
