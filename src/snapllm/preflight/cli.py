"""``snapllm preflight [BUILD_DIR]``: checks a ``sam build`` output for everything that would fail a deploy.

Exit code 0 when no rule found an error, 1 otherwise, 2 when the build directory cannot be read.

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

from snapllm.preflight.arguments import DESCRIPTION, add_arguments
from snapllm.preflight.checker import preflight
from snapllm.preflight.errors import PreflightError
from snapllm.preflight.report import render


def main(argv: list[str] | None = None) -> int:
    """Runs the preflight as a command of its own (``python -m snapllm.preflight``)."""
    parser = add_arguments(argparse.ArgumentParser(prog="snapllm preflight", description=DESCRIPTION))
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The subcommand: prints the report; exit 1 when a rule found an error, 2 when the build or its
    template cannot be read."""
    try:
        findings, targets = preflight(Path(args.build_dir), dict(args.parameter_overrides))
    except PreflightError as exc:
        # One line, even for a YAML parser's multi-line message.
        print(f"ERROR preflight: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(render(findings, targets, zipped=not args.no_zip))
    return 1 if any(f.severity == "error" for f in findings) else 0
