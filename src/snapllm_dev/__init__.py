"""snapllm's developer tooling: the ``snapllm`` command, the local stack, benchmarks and deploy checks.

Installed with the project, never shipped: the Lambda layer holds :mod:`snapllm` (the runtime) only, and
an import-linter contract keeps the runtime from importing anything here.
"""
