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
import json
import sys
from pathlib import Path
from typing import Any

from snapllm.preflight.checker import preflight
from snapllm.preflight.errors import PreflightError
from snapllm.preflight.regions import region_of
from snapllm.preflight.report import render
from snapllm.preflight.rules import ModelInit


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
    region = args.region or region_of(Path(args.config_file), args.config_env)
    try:
        findings, targets = preflight(
            Path(args.build_dir),
            _overrides(args.parameter_overrides),
            region=region,
            model_init=_model_init(args),
        )
    except PreflightError as exc:
        # One line, even for a YAML parser's multi-line message.
        print(f"ERROR preflight: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(
        f"region: {region} (checked against snapllm.preflight.regions)" if region else "region: not checked"
    )
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
    parser.add_argument(
        "--region", help="the region to deploy to (default: samconfig.toml's); refused if it lacks a feature"
    )
    parser.add_argument("--config-file", default="samconfig.toml", help="where --region defaults from")
    parser.add_argument("--config-env", default="default", help="samconfig.toml environment (default)")
    parser.add_argument(
        "--model", type=Path, help="the GGUF file to deploy: checks that its init fits SnapStart's limit"
    )
    parser.add_argument("--model-bytes", type=int, help="the model's size, instead of --model")
    parser.add_argument(
        "--s3-mib-per-s", type=float, default=50.0, help="S3 read rate to assume for the init (MiB/s, 50)"
    )
    parser.add_argument(
        "--bench", type=Path, help="`snapllm bench coldstart --json` output: the measured load and warm-up"
    )
    parser.set_defaults(func=run)


def _model_init(args: argparse.Namespace) -> ModelInit | None:
    size = args.model_bytes if args.model_bytes is not None else None
    if size is None and args.model is not None:
        try:
            size = args.model.stat().st_size
        except OSError as exc:
            raise SystemExit(f"snapllm preflight: --model: {exc}") from None
    if size is None:
        return None
    if args.s3_mib_per_s <= 0:
        raise SystemExit("snapllm preflight: --s3-mib-per-s must be above 0")
    try:
        bench = json.loads(args.bench.read_text()) if args.bench is not None else None
        return ModelInit.measured(size, s3_mib_per_s=args.s3_mib_per_s, bench=bench)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(
            f"snapllm preflight: --bench wants `snapllm bench coldstart --json` output: {exc!r}"
        ) from None


def _overrides(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"snapllm preflight: --parameter-overrides wants KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs
