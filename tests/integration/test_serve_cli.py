"""``snapllm local serve`` as a user runs it: a port, a banner, and a clean stop that takes its child
processes (local S3, the inference environment, StreamFunction) with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.paths import TEMPLATE
from tests.support.procfs import descendants
from tests.support.serve import SERVE_ENV, ServeProcess

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_serve_answers_and_sigterm_stops_every_child():
    server = ServeProcess.start(template=TEMPLATE, env={**SERVE_ENV, "PORT": "1"}, stdout=subprocess.DEVNULL)
    try:
        assert httpx.get(f"{server.base_url}/models", timeout=10).json()["data"][0]["object"] == "model"
        children = descendants(server.process.pid)
        assert len(children) >= 3, "local S3, the inference host and StreamFunction run as children"
    finally:
        server.stop()
    assert server.process.returncode is not None
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in children if alive(pid)]


def test_bench_router_reports_overhead_percentiles_as_json():
    # A smoke test of the command; the 10 ms budget is for `make bench-router`, not asserted here.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "snapllm_dev.cli",
            "bench",
            "router",
            "-t",
            str(TEMPLATE),
            "--requests",
            "30",
            "--budget-ms",
            "1000",
            "--json",
        ],
        env={**os.environ, **SERVE_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    overhead, invoke = report["overhead_ms"], report["invoke_ms"]
    assert 0 < overhead["p50"] <= overhead["p99"] <= overhead["max"]
    assert invoke["p50"] > overhead["p50"], "one generated token costs more than the routing around it"
