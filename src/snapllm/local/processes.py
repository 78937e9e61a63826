"""Stopping the child processes the local tools start (S3 endpoint, function hosts, servers).

stop_process(process)                    # SIGTERM, then SIGKILL if it has not exited in 10 s
stop_process(process, terminate=False)   # it was asked to exit already: wait, then SIGKILL
class LocalFunction(Closing): ...        # `with LocalFunction(...) as f:` calls f.close() on the way out
"""

from __future__ import annotations

import subprocess
from typing import Self


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
