"""Preflight: checks what ``sam build`` produced for every failure a deploy would otherwise hit.

The rules cover the CPU architecture and glibc of every shared library, package sizes and layer layout,
SnapStart and durable-function configuration, and model weights left inside a package. The package itself
imports nothing, so that ``snapllm``'s parser (:mod:`snapllm_dev.preflight.arguments`) stays light.

Example:
    >>> from pathlib import Path
    >>> from snapllm_dev.preflight.checker import preflight
    >>> findings, _ = preflight(Path(".aws-sam/build"))  # doctest: +SKIP
    >>> any(f.severity == "error" for f in findings)  # doctest: +SKIP
    False
"""
