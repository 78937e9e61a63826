"""Stopping the child processes the local tools start (S3 endpoint, function hosts, servers).

stop_process(process)                    # SIGTERM, then SIGKILL if it has not exited in 10 s
stop_process(process, terminate=False)   # it was asked to exit already: wait, then SIGKILL
"""

from __future__ import annotations

import subprocess


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
