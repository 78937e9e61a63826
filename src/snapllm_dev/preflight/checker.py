"""Ties the pieces together: load the built template, scan each package once, run the rules.

Example:
    >>> from pathlib import Path
    >>> from snapllm_dev.preflight.checker import preflight
    >>> findings, targets = preflight(Path(".aws-sam/build"))  # doctest: +SKIP
    >>> [str(f) for f in findings if f.severity == "error"]  # doctest: +SKIP
    []
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from snapllm_dev.preflight.errors import BuildDirError
from snapllm_dev.preflight.package import Package, scan_package
from snapllm_dev.preflight.rules import RULES, Finding, ModelInit, Rule, Target, run_rules
from snapllm_dev.preflight.template import load_build

if TYPE_CHECKING:
    from snapllm_dev.preflight.model import ModelProfile


def preflight(
    build_dir: Path,
    overrides: Mapping[str, str] | None = None,
    rules: tuple[Rule, ...] = RULES,
    *,
    region: str | None = None,
    model_init: ModelInit | None = None,
    model: ModelProfile | None = None,
) -> tuple[list[Finding], list[Target]]:
    """Checks every function in ``build_dir`` against ``rules``, for a deploy to ``region`` (when known) of
    a model whose init ``model_init`` describes (when known).

    Raises:
        BuildDirError: The template, or a package it points to, is missing from ``build_dir``.
        TemplateError: The template cannot be read.
    """
    build = load_build(build_dir, overrides)
    scanned: dict[Path, Package] = {}

    def package(path: Path, name: str) -> Package:
        if path not in scanned:
            if not path.is_dir():
                raise BuildDirError(f"{name}: {path} not found in the build directory")
            scanned[path] = scan_package(path, name)
        return scanned[path]

    targets = []
    for fn in build.functions:
        code = package(fn.path, fn.name) if fn.path else None
        layers = [package(layer.path, layer.name) for layer in fn.layers if layer.path]
        targets.append(Target(fn, code, layers, region=region, model_init=model_init, model=model))
    return run_rules(targets, rules), targets
