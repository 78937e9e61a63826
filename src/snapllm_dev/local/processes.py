"""Stopping the child processes the local tools start (S3 endpoint, function hosts, servers).

stop_process(process)                    # SIGTERM, then SIGKILL if it has not exited in 10 s
stop_process(process, terminate=False)   # it was asked to exit already: wait, then SIGKILL
exit_on_sigterm()                        # SIGTERM unwinds `with` blocks instead of orphaning children
class LocalFunction(Closing): ...        # `with LocalFunction(...) as f:` calls f.close() on the way out
"""

from __future__ import annotations

import signal
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


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit, so ``with`` blocks stop the child processes on the way out (Python's
    default for SIGTERM ends the process at once and leaves them running)."""
    signal.signal(signal.SIGTERM, _raise_exit)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
