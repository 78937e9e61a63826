"""Preflight: checks what ``sam build`` produced for every failure a deploy would otherwise hit.

    findings, _ = preflight(Path(".aws-sam/build"))    # snapllm_dev.preflight.checker
    any(f.severity == "error" for f in findings)

The package itself imports nothing, so that ``snapllm``'s parser stays light. docs/architecture.md lists
the rules.
"""
