"""``snapllm preflight [BUILD_DIR]``: checks a ``sam build`` output for everything that would fail a deploy.

    snapllm preflight .aws-sam/build
    python -m snapllm_dev.preflight --parameter-overrides Architecture=x86_64

Exits 0 when no rule found an error, 1 otherwise, 2 when the build directory cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from snapllm.engine.settings import EngineSettings
from snapllm.errors import ConfigurationError
from snapllm.protocol.prefixes import declared_file, read_prefixes
from snapllm_dev.preflight.arguments import DESCRIPTION, add_arguments
from snapllm_dev.preflight.checker import preflight
from snapllm_dev.preflight.errors import PreflightError
from snapllm_dev.preflight.model import ModelProfile
from snapllm_dev.preflight.regions import region_of
from snapllm_dev.preflight.report import render
from snapllm_dev.preflight.rules import ModelInit


def main(argv: list[str] | None = None) -> int:
    """Runs the preflight as a command of its own (``python -m snapllm_dev.preflight``)."""
    parser = add_arguments(argparse.ArgumentParser(prog="snapllm preflight", description=DESCRIPTION))
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The subcommand: prints the report; exit 1 when a rule found an error, 2 when the build or its
    template cannot be read."""
    region = args.region or region_of(Path(args.config_file), args.config_env)
    try:
        findings, targets = preflight(
            Path(args.build_dir),
            dict(args.parameter_overrides),
            region=region,
            model_init=_model_init(args),
            model=_model(args),
        )
    except PreflightError as exc:
        # One line, even for a YAML parser's multi-line message.
        print(f"ERROR preflight: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(
        f"region: {region} (checked against snapllm_dev.preflight.regions)"
        if region
        else "region: not checked"
    )
    print(render(findings, targets, zipped=not args.no_zip))
    return 1 if any(f.severity == "error" for f in findings) else 0


def _model(args: argparse.Namespace) -> ModelProfile | None:
    if args.model is None:
        return None
    n_ctx = args.n_ctx or EngineSettings.model_fields["n_ctx"].default
    try:
        return ModelProfile.read(args.model, n_ctx=n_ctx, prefixes=_prefixes(args))
    except (OSError, ValueError) as exc:  # llama.cpp refuses a file that is not a GGUF model with ValueError
        raise PreflightError(f"--model: {args.model} cannot be read as a GGUF model: {exc}") from None


def _prefixes(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The declared prompt prefixes of ``--prompt-prefixes`` (what PromptPrefixes names: a file,
    ``snapllm:NAME``, or empty for none), read here."""
    where: str = args.prompt_prefixes
    if not where:
        return []
    try:
        # A path here may be relative: it names a file on this machine, not a key in the model bucket.
        path = declared_file(where) or Path(where)
        return read_prefixes(path.read_bytes(), source=where)
    except (OSError, ConfigurationError) as exc:
        raise PreflightError(f"--prompt-prefixes: {exc}") from None


def _model_init(args: argparse.Namespace) -> ModelInit | None:
    size = args.model_bytes if args.model_bytes is not None else None
    if size is None and args.model is not None:
        try:
            size = args.model.stat().st_size
        except OSError as exc:
            raise PreflightError(f"--model: {exc}") from None
    if size is None:
        return None
    try:
        bench = json.loads(args.bench.read_text()) if args.bench is not None else None
        return ModelInit.measured(size, s3_mib_per_s=args.s3_mib_per_s, bench=bench)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PreflightError(f"--bench wants `snapllm bench coldstart --json` output: {exc!r}") from None
