"""S3 -> memfd over real HTTP against the local S3 endpoint, including every error path."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import struct

import pytest

from snapllm.engine.loader import S3ModelLoader
from snapllm.engine.settings import EngineSettings, LoaderSettings, MiB, ModelSource
from snapllm.errors import (
    ChecksumMismatchError,
    ModelAccessDeniedError,
    ModelChangedError,
    ModelDownloadError,
    ModelLoadError,
    ModelNotFoundError,
    ModelSizeMismatchError,
    NotAGGUFError,
)
from snapllm.inference.runtime import InferenceRuntime
from snapllm.inference.settings import InferenceSettings
from snapllm_dev.local.faults import Fault, FaultProxy, StreamFault

BUCKET = "snapllm-loader-tests"
KEY = "models/smollm2.gguf"


@pytest.fixture(scope="module")
def published(local_s3, model_path):
    """The packaged model uploaded with its SHA-256 as object metadata."""
    return local_s3.put_model(model_path, bucket=BUCKET, key=KEY)


def open_fds() -> set[tuple[str, str]]:
    """This process's open descriptors, each with what it names; after a collection, so a client dropped
    earlier has closed its pooled sockets (they close when collected, and may do so during a test)."""
    gc.collect()
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the fd of the listing itself
            fds.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
    return fds


def loader_for(endpoint_client, **settings) -> S3ModelLoader:
    return S3ModelLoader(endpoint_client, LoaderSettings(backoff_base_s=0.01, **settings))


@pytest.mark.parametrize(("part_mb", "concurrency"), [(1024, 1), (16, 4), (8, 8)])
def test_model_arrives_byte_for_byte_and_verified(local_s3, model_path, published, part_mb, concurrency):
    loader = loader_for(local_s3.client(), part_size_mb=part_mb, concurrency=concurrency)
    with loader.load(ModelSource(bucket=BUCKET, key=KEY)) as model:
        assert model.path == f"/proc/self/fd/{model.fd}"
        assert os.readlink(model.path).startswith("/memfd:snapllm:")  # in RAM, not on a disk
        with open(model.path, "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == published
        assert model.sha256 == published
        assert model.stats.verified
        assert model.stats.bytes == model_path.stat().st_size
        assert model.stats.parts == -(-model.stats.bytes // (part_mb * MiB))
        assert model.stats.mb_per_s > 0


def test_configured_digest_wins_over_metadata_and_mismatch_fails_cleanly(local_s3, published):
    loader = loader_for(local_s3.client())
    before = open_fds()
    with pytest.raises(ChecksumMismatchError, match="expected 0000"):
        loader.load(ModelSource(bucket=BUCKET, key=KEY, sha256="0" * 64))
    assert open_fds() - before == set()  # the memfd is closed on failure, and nothing else is left open


def test_wrong_published_digest_is_caught(local_s3, model_path):
    client = local_s3.client()
    client.upload_file(
        str(model_path), BUCKET, "models/tampered.gguf", ExtraArgs={"Metadata": {"sha256": "1" * 64}}
    )
    with pytest.raises(ChecksumMismatchError):
        loader_for(client).load(ModelSource(bucket=BUCKET, key="models/tampered.gguf"))


def test_without_any_digest_the_load_is_unverified(local_s3, model_path):
    client = local_s3.client()
    client.upload_file(str(model_path), BUCKET, "models/plain.gguf")
    with loader_for(client).load(ModelSource(bucket=BUCKET, key="models/plain.gguf")) as model:
        assert model.sha256 is None
        assert not model.stats.verified


@pytest.mark.parametrize(
    ("bucket", "key"), [(BUCKET, "models/missing.gguf"), ("snapllm-no-such-bucket", KEY)]
)
def test_missing_object_or_bucket(local_s3, bucket, key):
    with pytest.raises(ModelNotFoundError, match="not found"):
        loader_for(local_s3.client()).load(ModelSource(bucket=bucket, key=key))


def test_not_a_gguf_file_fails_fast(local_s3):
    client = local_s3.client()
    client.put_object(Bucket=BUCKET, Key="models/weights.bin", Body=b"PK\x03\x04" + os.urandom(3 * MiB))
    before = open_fds()
    with pytest.raises(NotAGGUFError, match="not a GGUF file"):
        loader_for(client, part_size_mb=1, concurrency=2).load(
            ModelSource(bucket=BUCKET, key="models/weights.bin")
        )
    assert open_fds() - before == set()


def test_an_object_too_small_to_be_a_model(local_s3):
    client = local_s3.client()
    client.put_object(Bucket=BUCKET, Key="models/empty.gguf", Body=b"GGUF")
    with pytest.raises(ModelSizeMismatchError, match="too small"):
        loader_for(client).load(ModelSource(bucket=BUCKET, key="models/empty.gguf"))


def test_a_verified_file_llama_cpp_cannot_load_is_a_named_error_naming_the_object(local_s3, tmp_path):
    # A GGUF header with no metadata and no tensors: the header check and the SHA-256 pass, llama.cpp
    # refuses it. The error must say which S3 object it was, not only /proc/self/fd/N.
    path = tmp_path / "hollow.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + bytes(1 * MiB))
    local_s3.put_model(path, bucket=BUCKET, key="models/hollow.gguf")
    settings = InferenceSettings(
        model=ModelSource(bucket=BUCKET, key="models/hollow.gguf"),
        loader=LoaderSettings(backoff_base_s=0.01),
        engine=EngineSettings(n_ctx=64),
    )
    loader = S3ModelLoader(local_s3.client(), settings.loader)
    with pytest.raises(ModelLoadError, match=f"s3://{BUCKET}/models/hollow.gguf") as caught:
        InferenceRuntime.initialize(settings, loader)
    assert type(caught.value) is ModelLoadError
    assert not [fd for fd in os.listdir("/proc/self/fd") if "memfd:snapllm:hollow" in fd_target(fd)]


def fd_target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:  # the listing's own fd
        return ""


def client_via(local_s3, proxy):
    # The loader's own client configuration: no SDK retries, so only the loader's own retries count.
    return local_s3.client(endpoint_url=proxy.url, config=S3ModelLoader.client_config(LoaderSettings()))


def test_access_denied(local_s3, published):
    rule = lambda r: Fault(status=403, code="AccessDenied")  # noqa: E731
    with (
        FaultProxy(local_s3.endpoint_url, rule=rule) as proxy,
        pytest.raises(ModelAccessDeniedError, match="s3:GetObject"),
    ):
        loader_for(client_via(local_s3, proxy)).load(ModelSource(bucket=BUCKET, key=KEY))


def test_transient_errors_retry_only_the_failed_part(local_s3, published):
    first_range = "bytes=0-8388607"

    def rule(request):
        if request.method == "GET" and request.headers.get("Range") == first_range and request.count == 1:
            return Fault(status=503, code="SlowDown")
        return None

    with FaultProxy(local_s3.endpoint_url, rule=rule) as proxy:
        loader = loader_for(client_via(local_s3, proxy), part_size_mb=8, concurrency=4)
        with loader.load(ModelSource(bucket=BUCKET, key=KEY)) as model:
            assert model.sha256 == published
            assert model.stats.retries == 1
        gets = [r for r in proxy.requests if r.method == "GET"]
        assert len(gets) == model.stats.parts + 1  # one extra GET: the failed part's retry


def test_a_truncated_body_resumes_where_it_broke_off(local_s3, published):
    def rule(request):
        if (
            request.method == "GET"
            and request.count == 1
            and request.headers.get("Range", "").startswith("bytes=0-")
        ):
            return Fault(stream=StreamFault.CLOSE, after=3 * MiB)
        return None

    with FaultProxy(local_s3.endpoint_url, rule=rule) as proxy:
        loader = loader_for(client_via(local_s3, proxy), part_size_mb=16, concurrency=2)
        with loader.load(ModelSource(bucket=BUCKET, key=KEY)) as model:
            assert model.sha256 == published
            assert model.stats.retries == 1
        resumed = [r.headers.get("Range") for r in proxy.requests if r.method == "GET" and r.count == 1]
        assert f"bytes={3 * MiB}-{16 * MiB - 1}" in resumed


def test_a_body_that_keeps_breaking_off_is_a_size_mismatch(local_s3, published):
    rule = lambda r: Fault(stream=StreamFault.CLOSE, after=1000) if r.method == "GET" else None  # noqa: E731
    with FaultProxy(local_s3.endpoint_url, rule=rule) as proxy:
        loader = loader_for(client_via(local_s3, proxy), max_attempts=2)
        with pytest.raises(ModelSizeMismatchError, match="truncated body"):
            loader.load(ModelSource(bucket=BUCKET, key=KEY))


def test_persistent_server_errors_give_up_with_a_download_error(local_s3, published):
    rule = lambda r: Fault(status=500) if r.method == "GET" else None  # noqa: E731
    with (
        FaultProxy(local_s3.endpoint_url, rule=rule) as proxy,
        pytest.raises(ModelDownloadError, match="after 3 attempts"),
    ):
        loader_for(client_via(local_s3, proxy), max_attempts=3).load(ModelSource(bucket=BUCKET, key=KEY))


def test_an_object_replaced_during_the_download(local_s3, published):
    # HEAD reports an ETag that no longer matches, so S3 (moto) refuses the conditional GETs with 412.
    rule = lambda r: Fault(etag='"0123456789abcdef0123456789abcdef"') if r.method == "HEAD" else None  # noqa: E731
    with (
        FaultProxy(local_s3.endpoint_url, rule=rule) as proxy,
        pytest.raises(ModelChangedError, match="changed during"),
    ):
        loader_for(client_via(local_s3, proxy)).load(ModelSource(bucket=BUCKET, key=KEY))


def test_the_head_is_retried_like_a_part(local_s3, published):
    throttle_first = lambda r: Fault(status=503) if r.method == "HEAD" and r.number == 1 else None  # noqa: E731
    with FaultProxy(local_s3.endpoint_url, rule=throttle_first) as proxy:
        with loader_for(client_via(local_s3, proxy)).load(ModelSource(bucket=BUCKET, key=KEY)) as model:
            assert model.sha256 == published
        assert proxy.fired == ["status=503:SlowDown"]
    always = lambda r: Fault(status=500) if r.method == "HEAD" else None  # noqa: E731
    with (
        FaultProxy(local_s3.endpoint_url, rule=always) as proxy,
        pytest.raises(ModelDownloadError, match=r"HEAD s3://\S+ failed after 2 attempts"),
    ):
        loader_for(client_via(local_s3, proxy), max_attempts=2).load(ModelSource(bucket=BUCKET, key=KEY))
