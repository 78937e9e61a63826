"""Stopping the child processes the local tools start (S3 endpoint, function hosts, servers).

stop_process(process)                    # SIGTERM, then SIGKILL if it has not exited in 10 s
stop_process(process, terminate=False)   # it was asked to exit already: wait, then SIGKILL
wait_until_answering(process, url, timeout_s=60)  # True once GET url gives 200 while it runs
exit_on_sigterm()                        # SIGTERM unwinds `with` blocks instead of orphaning children
class LocalFunction(Closing): ...        # `with LocalFunction(...) as f:` calls f.close() on the way out
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Self

import httpx


class Closing:
    """``with`` support for the local stand-ins: leaving the block calls ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_process(
    process: subprocess.Popen[bytes], *, timeout_s: float = 10.0, terminate: bool = True
) -> None:
    """End ``process`` and reap it; a process that ignores SIGTERM for ``timeout_s`` is killed."""
    if process.poll() is not None:
        return
    if terminate:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit, so ``with`` blocks stop the child processes on the way out (Python's
    default for SIGTERM ends the process at once and leaves them running)."""
    signal.signal(signal.SIGTERM, _raise_exit)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
