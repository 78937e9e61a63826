"""The loader against a failing network: every fault of the fault proxy, over real HTTP to the local S3.

Transient faults must cost a resumed GET and nothing else: the same digest. Permanent ones must end in a
named error within the bound LoaderSettings derives. Either way the load leaves no mapping of the memfd,
no fd and no thread behind.

The matrix loads a 40 MiB object: a GGUF header, which the loader checks, then random bytes (three 16 MiB
parts, or one). The resumed whole-object GET loads the packaged model.
"""

from __future__ import annotations

import contextlib
import gc
import os
import struct
import threading
import time

import pytest
from botocore.exceptions import BotoCoreError

from snapllm.engine.gguf import MAGIC as GGUF_MAGIC
from snapllm.engine.loader import S3ModelLoader
from snapllm.engine.settings import LoaderSettings, MiB, ModelSource
from snapllm.errors import ModelDownloadError, ModelSizeMismatchError
from snapllm_dev.local.faults import FaultProxy, FaultProxyError, FaultSpecError, parse_fault

BUCKET = "snapllm-fault-tests"
KEY = "objects/random-40MiB.bin"
MODEL_KEY = "models/smollm2.gguf"
OBJECT_BYTES = 40 * MiB
NAME = "fault-test"  # the memfd is "snapllm:fault-test": other tests' mappings do not count
SOURCE = ModelSource(bucket=BUCKET, key=KEY, name=NAME)
MODEL_SOURCE = ModelSource(bucket=BUCKET, key=MODEL_KEY, name=NAME)
# Short timeouts so a stall costs a second; max_attempts 3 so that 3 x 1 MB never completes a part.
FAST = {"backoff_base_s": 0.01, "connect_timeout_s": 1.0, "read_timeout_s": 1.0, "max_attempts": 3}
# Part size in MiB, concurrency. A 64 MiB part holds the whole object, and a single part is fetched by one
# thread whatever the concurrency allows (16x4 allows more threads than there are parts too).
LAYOUTS = [(16, 1), (16, 4), (64, 1)]
LAYOUT_IDS = [f"{part}MiBx{concurrency}" for part, concurrency in LAYOUTS]

TRANSIENT = [
    "reset@10MB",
    "close@10MB",
    "stall@10MB",
    "slow@256MB/s",
    "status=500",
    "status=503:SlowDown:every=2",
]
# Long enough that the local S3 endpoint (moto copies the whole object for each ranged GET) starts every
# part on a loaded machine, so each attempt reaches the fault; a stall still costs only this per attempt.
PERMANENT_READ_TIMEOUT_S = 1.5
PERMANENT = [
    ("reset@1MB:always", ModelDownloadError),
    ("close@1MB:always", ModelSizeMismatchError),
    ("stall@1MB:always", ModelDownloadError),
    ("status=500:always", ModelDownloadError),
    ("status=503:SlowDown:always", ModelDownloadError),
]


@pytest.fixture(scope="module")
def published(local_s3, tmp_path_factory):
    path = tmp_path_factory.mktemp("loader-faults") / "random.bin"
    header = GGUF_MAGIC + struct.pack("<IQQ", 3, 0, 0)
    path.write_bytes(header + os.urandom(OBJECT_BYTES - len(header)))
    return local_s3.put_model(path, bucket=BUCKET, key=KEY)


@pytest.fixture(scope="module")
def published_model(local_s3, model_path):
    return local_s3.put_model(model_path, bucket=BUCKET, key=MODEL_KEY)


def memfd_mappings() -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line for line in maps if f"memfd:snapllm:{NAME}" in line]


def open_fds() -> list[str]:
    gc.collect()  # clients dropped earlier close their pooled sockets when collected, not in between
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the fd of the listing itself
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(fds)


def snapllm_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("snapllm-")]


class Leaks:
    """What a load must leave as it found it: fds, memfd mappings, snapllm threads."""

    def __init__(self) -> None:
        self.fds = open_fds()

    def check_after_load(self) -> None:
        assert memfd_mappings() == []
        assert not [name for name in snapllm_threads() if not name.startswith("snapllm-faults")]

    def check_after_all(self) -> None:
        self.check_after_load()
        assert snapllm_threads() == []  # the proxy's threads too
        assert open_fds() == self.fds


def load_through(local_s3, faults, *, part_mb, concurrency, source=SOURCE, **overrides):
    """Load through a fault proxy; returns (model or exception, seconds, proxy) after checking for leaks."""
    settings = LoaderSettings(part_size_mb=part_mb, concurrency=concurrency, **{**FAST, **overrides})
    leaks = Leaks()
    with FaultProxy(local_s3.endpoint_url, [parse_fault(spec) for spec in faults]) as proxy:
        client = local_s3.client(endpoint_url=proxy.url, config=S3ModelLoader.client_config(settings))
        started = time.monotonic()
        try:
            outcome = S3ModelLoader(client, settings).load(source)
        except Exception as exc:
            outcome = exc
        elapsed = time.monotonic() - started
        leaks.check_after_load()
        client.close()
    if not isinstance(outcome, Exception):
        outcome.close()
    leaks.check_after_all()
    return outcome, elapsed, proxy, settings


@pytest.mark.parametrize(("part_mb", "concurrency"), LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("spec", TRANSIENT)
def test_a_transient_fault_costs_a_retry_and_keeps_the_digest(
    local_s3, published, spec, part_mb, concurrency
):
    model, _, proxy, _ = load_through(local_s3, [spec], part_mb=part_mb, concurrency=concurrency)
    assert not isinstance(model, Exception), f"{spec}: {model!r}"
    assert proxy.fired, f"{spec} never fired"
    assert model.sha256 == published
    assert model.stats.verified
    if spec.startswith("slow"):
        assert model.stats.retries == 0  # slow is not broken
    else:
        assert model.stats.retries >= 1


@pytest.mark.parametrize(("part_mb", "concurrency"), LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize(("spec", "error"), PERMANENT, ids=[spec for spec, _ in PERMANENT])
def test_a_permanent_fault_is_a_named_error_within_the_bound(
    local_s3, published, spec, error, part_mb, concurrency
):
    outcome, elapsed, proxy, settings = load_through(
        local_s3, [spec], part_mb=part_mb, concurrency=concurrency, read_timeout_s=PERMANENT_READ_TIMEOUT_S
    )
    assert type(outcome) is error, repr(outcome)
    assert "after 3 attempts" in str(outcome) and SOURCE.uri in str(outcome)
    assert len(proxy.fired) >= settings.max_attempts
    # Every part fails from its first byte on, so no healthy transfer precedes the failure: the bound
    # applies as it is.
    assert elapsed < settings.failure_bound_s, f"{elapsed:.2f} s > {settings.failure_bound_s:.2f} s"


def test_a_reset_on_every_connection_never_hangs(local_s3, published):
    # One whole-object GET whose every attempt gets past the first 8 MiB hashing step before its reset:
    # the part fails while the hashing thread is busy. A failure signalled then must not be missed (it
    # was, and the load waited forever: on the first of ten tries, here).
    spec, part_mb, concurrency = "reset@10MB:always", 1024, 1
    limit = LoaderSettings(**FAST).failure_bound_s + 30
    for attempt in range(10):
        result: list[object] = []

        def load(result: list[object] = result) -> None:
            try:
                result.append(load_through(local_s3, [spec], part_mb=part_mb, concurrency=concurrency)[0])
            except BaseException as exc:  # a leak found by load_through, reported below
                result.append(exc)

        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        worker.join(timeout=limit)
        assert not worker.is_alive(), f"try {attempt + 1} hung for {limit:.0f} s"
        assert isinstance(result[0], ModelDownloadError | ModelSizeMismatchError), repr(result[0])


def test_a_reset_at_30mb_of_a_whole_object_get_resumes(local_s3, published_model):
    # The local profile: one GET for the whole model. The reset once failed the load with
    # "BufferError: cannot close exported pointers exist" although the resumed GET succeeded.
    model, _, proxy, _ = load_through(
        local_s3, ["reset@30MB"], part_mb=1024, concurrency=1, source=MODEL_SOURCE
    )
    assert not isinstance(model, Exception), repr(model)
    assert proxy.fired == ["reset@30MB"]
    assert model.sha256 == published_model and model.stats.retries == 1
    first, resumed = (r.headers.get("Range") for r in proxy.requests if r.method == "GET")
    # An RST drops what was still in the socket buffers: the resumed GET starts where the bytes stopped.
    start, end = (int(value) for value in resumed.removeprefix("bytes=").split("-"))
    assert first is None and 0 < start <= 30 * MiB and end == model.size - 1


def test_a_stalled_connection_is_retried_after_the_read_timeout(local_s3, published):
    model, elapsed, _, settings = load_through(local_s3, ["stall@20MB"], part_mb=1024, concurrency=1)
    assert not isinstance(model, Exception), repr(model)
    assert model.sha256 == published and model.stats.retries == 1
    assert elapsed >= settings.read_timeout_s


def test_stopping_the_proxy_ends_a_stall_that_has_no_end(local_s3, published):
    proxy = FaultProxy(local_s3.endpoint_url, [parse_fault("stall@1MB:always")]).start()
    client = local_s3.client(endpoint_url=proxy.url)
    body = client.get_object(Bucket=BUCKET, Key=KEY)["Body"]
    assert len(body.read(1 * MiB)) == 1 * MiB
    proxy.stop()  # returns although the stalled connection is open on the client's side
    assert snapllm_threads() == []
    started = time.monotonic()
    with contextlib.suppress(BotoCoreError):
        assert len(body.read()) < 2 * MiB  # the client sees the connection end, not a 60 s read timeout
    assert time.monotonic() - started < 5
    client.close()


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("reset@30MB", "reset@30MB"),
        ("RESET@30mb:always", "reset@30MB:always"),
        ("close@512KB:once", "close@512KB"),
        ("stall@10MB:for=2.5s", "stall@10MB:for=2.5s"),
        ("slow@1MB/s", "slow@1MB/s"),
        ("status=503", "status=503:SlowDown"),
        ("status=500:every=3", "status=500:InternalError:every=3"),
        ("status=403:AccessDenied:always", "status=403:AccessDenied:always"),
    ],
)
def test_fault_specs_parse_to_what_they_say(text, canonical):
    assert str(parse_fault(text)) == canonical
    assert parse_fault(canonical) == parse_fault(text)


@pytest.mark.parametrize(
    "text",
    [
        "reset",
        "reset@lots",
        "explode@1MB",
        "slow@0B/s",
        "status=200",
        "reset@1MB:every=2",
        "close@1MB:for=1s",
    ],
)
def test_bad_fault_specs_are_named(text):
    with pytest.raises(FaultSpecError):
        parse_fault(text)


def test_the_proxy_fronts_loopback_endpoints_only():
    with pytest.raises(FaultProxyError, match="loopback"):
        FaultProxy("http://192.0.2.1:9000")
