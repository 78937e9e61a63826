"""Commands under injected S3 faults, run as subprocesses: `local invoke --s3-fault`, `bench --faults`."""

from __future__ import annotations

import json
import time

import pytest

from snapllm.inference.settings import LoaderEnvironment
from tests.support.cli import INVOKE_COMPLETION, snapllm

# Tighter than the defaults (181 s per part), so that the bound the failing invoke is held to means something.
LOADER_ENV = {
    "SNAPLLM_S3_MAX_ATTEMPTS": "3",
    "SNAPLLM_S3_CONNECT_TIMEOUT_S": "2",
    "SNAPLLM_S3_READ_TIMEOUT_S": "2",
}


def timed(*args: str) -> tuple[object, float]:
    started = time.monotonic()
    run = snapllm(*args)
    return run, time.monotonic() - started


@pytest.fixture(scope="module")
def reset_once():
    return timed(*INVOKE_COMPLETION, "--s3-fault", "reset@30MB")


def test_local_invoke_answers_after_a_reset_during_the_model_download(reset_once):
    run, _ = reset_once
    assert run.returncode == 0, run.stderr
    response = json.loads(run.stdout)
    assert response["object"] == "text_completion"
    assert response["choices"][0]["text"]
    assert "S3 faults injected: reset@30MB" in run.stderr
    assert "S3 -> memfd" in run.stderr  # the usual timing table


def test_local_invoke_fails_named_and_in_bounded_time_when_every_connection_resets(reset_once):
    env = [arg for name, value in LOADER_ENV.items() for arg in ("--env", f"{name}={value}")]
    run, elapsed = timed(*INVOKE_COMPLETION, "--s3-fault", "reset@1MB:always", *env)
    assert run.returncode == 1
    assert "ModelDownloadError" in run.stderr or "ModelSizeMismatchError" in run.stderr
    assert run.stdout == ""
    # The same command's start-up (local S3, upload, interpreter) took less than the successful run in
    # full; the failing download itself is held to the loader's bound.
    bound = LoaderEnvironment.from_env(LOADER_ENV).loader_settings().failure_bound_s
    _, succeeded_in = reset_once
    assert elapsed < succeeded_in + bound, f"{elapsed:.1f} s > {succeeded_in:.1f} s + {bound:.1f} s"


def test_local_invoke_refuses_a_bad_fault_spec():
    run = snapllm(*INVOKE_COMPLETION, "--s3-fault", "explode@1MB")
    assert run.returncode == 2
    assert "not a fault spec" in run.stderr and "Traceback" not in run.stderr


def test_bench_coldstart_faults_reports_each_fault_against_the_clean_load():
    run = snapllm("bench", "coldstart", "--faults", "--rounds", "1", "--json", timeout=300)
    assert run.returncode == 0, run.stderr
    cases = json.loads(run.stdout)["cases"]
    assert set(cases) == {
        "direct (no proxy)",
        "clean (through the proxy)",
        "reset@30MB",
        "close@30MB",
        "status=503:SlowDown:every=2",
        "stall@30MB",
    }
    assert cases["clean (through the proxy)"]["ratio_to_clean"] == 1
    for name in ("reset@30MB", "close@30MB", "status=503:SlowDown:every=2", "stall@30MB"):
        assert cases[name]["faults_fired"] >= 1 and cases[name]["retries"] >= 1
        assert cases[name]["ratio_to_clean"] > 0
