"""``wait_until_answering`` (:mod:`snapllm_dev.local.readiness`): the readiness probe of the servers the
local tools and the benchmarks start, against real processes (an HTTP server, one that exits, one that
never listens)."""

from __future__ import annotations

import subprocess
import sys
import time

from snapllm_dev.local.processes import stop_process
from snapllm_dev.local.readiness import wait_until_answering
from snapllm_dev.local.s3 import free_port


def _python(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_server_that_comes_up_answers(tmp_path):
    port = free_port()
    process = _python("-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path))
    try:
        assert wait_until_answering(process, f"http://127.0.0.1:{port}/", timeout_s=30, interval_s=0.02)
        assert process.poll() is None
    finally:
        stop_process(process)


def test_a_process_that_exits_is_not_waited_for():
    process = _python("-c", "raise SystemExit(3)")
    started = time.monotonic()
    assert not wait_until_answering(process, f"http://127.0.0.1:{free_port()}/", timeout_s=30)
    assert process.poll() == 3
    assert time.monotonic() - started < 10


def test_a_process_that_never_listens_is_given_up_on_at_the_limit():
    process = _python("-c", "import time; time.sleep(60)")
    try:
        started = time.monotonic()
        assert not wait_until_answering(process, f"http://127.0.0.1:{free_port()}/", timeout_s=0.5)
        assert 0.5 <= time.monotonic() - started < 5
        assert process.poll() is None
    finally:
        stop_process(process)
