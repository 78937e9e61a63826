"""The ``snapllm`` command as a user runs it: a subprocess in the repository, generating on one thread."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.generation import TEST_THREADS
from tests.support.paths import REPO

ENV = {**os.environ, "SNAPLLM_THREADS": TEST_THREADS}


def snapllm(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``snapllm ARGS`` in the repository, with ``env`` over :data:`ENV`."""
    return subprocess.run(
        [sys.executable, "-m", "snapllm_dev.cli", *args],
        cwd=REPO,
        env={**ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
