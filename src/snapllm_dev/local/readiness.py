"""Waiting for a server a local tool, a benchmark or a test starts: ``GET`` its health URL until it answers.

    if not wait_until_answering(process, f"{url}/health", timeout_s=60):
        ...  # process.poll() says whether it exited or was too slow

Apart from :mod:`snapllm_dev.local.processes`, which the CLI's parser imports: httpx is not light.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping

import httpx


def wait_until_answering(
    process: subprocess.Popen[bytes],
    url: str,
    *,
    timeout_s: float,
    interval_s: float = 0.2,
    headers: Mapping[str, str] | None = None,
) -> bool:
    """Poll ``GET url`` every ``interval_s`` while ``process`` starts: True once it answers 200, False when
    the process exits first or ``timeout_s`` passes (``process.poll()`` tells which). One client serves
    every probe: a new one loads the CA bundle, about 30 ms of CPU, which would compete with the start."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(headers=headers, timeout=2) as client:
        while process.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if client.get(url).status_code == 200:
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(interval_s)
    return False
