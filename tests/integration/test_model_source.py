"""The ModelObject custom resource against the local S3 endpoint and a local HTTPS server serving a GGUF,
with CloudFormation's response going to a local endpoint that records what was PUT.

Every path over the network gets its faults: the download (a connection that drops mid-stream, resets,
closes, stalls, 5xx, a server without Range support), the upload (S3 answering 5xx) and the response
(CloudFormation's URL failing). Whatever fails leaves the bucket as it was: no object, no pending upload.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import ssl
import struct
import time
from dataclasses import replace
from pathlib import Path

import pytest

from snapllm import retry
from snapllm.deploy.cfn_response import RESPONSE_RESERVE_S, send_response
from snapllm.deploy.custom_resource import ModelObjectResource
from snapllm.deploy.source import HTTPSource, SourceSettings
from snapllm.deploy.upload import MiB, ModelUpload, UploadSettings
from snapllm.engine.gguf import MAGIC as GGUF_MAGIC
from snapllm.errors import (
    CustomResourceResponseError,
    ModelCopyInputError,
    ModelSourceDownloadError,
    ModelUploadError,
)
from snapllm_dev.local.faults import Fault, FaultProxy, parse_fault
from snapllm_dev.local.s3 import free_port
from tests.support.model_source_servers import FileServer, ResponseRecorder, self_signed_certificate

BUCKET = "snapllm-model-source-tests"
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/snapllm/1"
FAST = SourceSettings(connect_timeout_s=2.0, read_timeout_s=1.0, max_attempts=3, backoff_s=0.01)
MODEL_BYTES = 40 * MiB
PART = 16 * MiB  # three parts per copy of the model


class FakeContext:
    """What the handler reads of a Lambda context: the time left."""

    def __init__(self, remaining_s: float = 900.0) -> None:
        self.deadline = time.monotonic() + remaining_s

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    """The model the tests copy: a GGUF header (what the resource checks of a model), then random bytes."""
    path = tmp_path_factory.mktemp("model") / "model.gguf"
    header = GGUF_MAGIC + struct.pack("<IQQ", 3, 0, 0)
    path.write_bytes(header + os.urandom(MODEL_BYTES - len(header)))
    return path


@pytest.fixture(scope="module")
def variant(model_path, tmp_path_factory) -> Path:
    """A second, different GGUF (the model with changed trailing bytes): a "new model"."""
    path = tmp_path_factory.mktemp("variant") / "variant.gguf"
    shutil.copyfile(model_path, path)
    with path.open("r+b") as handle:
        handle.seek(-16, 2)
        handle.write(b"snapllm-variant!")
    return path


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def client_tls(certificate) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


@pytest.fixture
def server(model_path, variant, certificate):
    with FileServer({"/model.gguf": model_path, "/variant.gguf": variant}, tls=certificate) as server:
        yield server


@pytest.fixture
def plain_server(model_path):
    with FileServer({"/model.gguf": model_path}) as server:
        yield server


@pytest.fixture
def cloudformation():
    with ResponseRecorder() as recorder:
        yield recorder


@pytest.fixture(scope="module")
def s3(local_s3):
    local_s3.ensure_bucket(BUCKET)
    client = local_s3.client()
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    return client


@pytest.fixture(autouse=True)
def empty_bucket(s3):
    """Each test starts on an empty bucket: moto lists versions and uploads by reading every one it holds,
    so copies of the model left by earlier tests would make each listing take seconds."""
    yield
    for upload in s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=BUCKET, Key=upload["Key"], UploadId=upload["UploadId"])
    listing = s3.list_object_versions(Bucket=BUCKET)
    for version in listing.get("Versions", []) + listing.get("DeleteMarkers", []):
        s3.delete_object(Bucket=BUCKET, Key=version["Key"], VersionId=version["VersionId"])


@pytest.fixture
def resource(s3, client_tls):
    return ModelObjectResource(s3, source_settings=FAST, ssl_context=client_tls, margin_s=3.0)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def event(kind: str, cloudformation: ResponseRecorder, *, physical: str | None = None, **properties) -> dict:
    body = {
        "RequestType": kind,
        "ResponseURL": cloudformation.url(kind.lower()),
        "StackId": STACK_ID,
        "RequestId": f"request-{kind}",
        "LogicalResourceId": "ModelObject",
        "ResourceType": "Custom::ModelObject",
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:f",
            **properties,
        },
    }
    if physical is not None:
        body["PhysicalResourceId"] = physical
    return body


def props(server: FileServer, path: str, digest: str, key: str) -> dict:
    # CloudFormation passes every property as a string.
    return {"Bucket": BUCKET, "Key": key, "Url": server.url(path), "Sha256": digest, "PartSizeMiB": "16"}


def versions(s3, key: str) -> list[dict]:
    listing = s3.list_object_versions(Bucket=BUCKET, Prefix=key)
    return [v for v in listing.get("Versions", []) if v["Key"] == key]


def pending_uploads(s3, key: str) -> list[dict]:
    listing = s3.list_multipart_uploads(Bucket=BUCKET, Prefix=key)
    return [u for u in listing.get("Uploads", []) if u["Key"] == key]


def stored(s3, key: str) -> tuple[str, dict]:
    answer = s3.get_object(Bucket=BUCKET, Key=key)
    return hashlib.sha256(answer["Body"].read()).hexdigest(), answer["Metadata"]


def assert_nothing_written(s3, key: str) -> None:
    assert versions(s3, key) == []
    assert pending_uploads(s3, key) == []


def only_response(cloudformation: ResponseRecorder) -> dict:
    assert len(cloudformation.responses) == 1
    return cloudformation.responses[0].body


# --- The resource's lifecycle --------------------------------------------------------------------------


def test_create_copies_the_model_and_answers_cloudformation(resource, server, cloudformation, s3, model_path):
    key = "models/create.gguf"
    digest = sha256(model_path)
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", digest, key)), FakeContext()
    )
    recorded = cloudformation.responses[0]
    answer = only_response(cloudformation)
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["PhysicalResourceId"] == f"s3://{BUCKET}/{key}"
    assert answer["Data"]["Sha256"] == digest and answer["Data"]["Copied"] == "true"
    assert answer["Data"]["Size"] == str(model_path.stat().st_size)
    assert answer["StackId"] == STACK_ID and answer["RequestId"] == "request-Create"
    assert answer["LogicalResourceId"] == "ModelObject"
    assert recorded.path.startswith("/cloudformation/create?") and recorded.headers.get("content-type") == ""
    assert stored(s3, key) == (digest, {"sha256": digest})
    assert len(versions(s3, key)) == 1 and pending_uploads(s3, key) == []
    assert [r.range for r in server.requests] == [None]  # one stream, no retries


def test_update_to_a_new_digest_copies_the_new_model(
    resource, server, cloudformation, s3, model_path, variant
):
    key = "models/update.gguf"
    old, new = sha256(model_path), sha256(variant)
    resource.handle(event("Create", cloudformation, **props(server, "/model.gguf", old, key)), FakeContext())
    update = event(
        "Update", cloudformation, physical=f"s3://{BUCKET}/{key}", **props(server, "/variant.gguf", new, key)
    )
    resource.handle(update, FakeContext())
    answer = cloudformation.responses[-1].body
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["Data"]["Sha256"] == new and answer["Data"]["Copied"] == "true"
    assert stored(s3, key) == (new, {"sha256": new})
    assert len(versions(s3, key)) == 2


def test_update_to_the_same_digest_uploads_nothing(resource, server, cloudformation, s3, model_path):
    key = "models/same.gguf"
    digest = sha256(model_path)
    properties = props(server, "/model.gguf", digest, key)
    resource.handle(event("Create", cloudformation, **properties), FakeContext())
    before = versions(s3, key)
    requests = len(server.requests)
    update = event(
        "Update", cloudformation, physical=f"s3://{BUCKET}/{key}", **{**properties, "PartSizeMiB": "32"}
    )
    resource.handle(update, FakeContext())
    answer = cloudformation.responses[-1].body
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["Data"] == {
        "Sha256": digest,
        "Size": str(model_path.stat().st_size),
        "VersionId": before[0]["VersionId"],
        "Copied": "false",
    }
    assert versions(s3, key) == before  # no new object version: no PUT happened
    assert len(server.requests) == requests  # and the source was not read


def test_delete_leaves_the_object(resource, server, cloudformation, s3, model_path):
    key = "models/delete.gguf"
    digest = sha256(model_path)
    properties = props(server, "/model.gguf", digest, key)
    resource.handle(event("Create", cloudformation, **properties), FakeContext())
    resource.handle(
        event("Delete", cloudformation, physical=f"s3://{BUCKET}/{key}", **properties), FakeContext()
    )
    answer = cloudformation.responses[-1].body
    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] == f"s3://{BUCKET}/{key}"
    assert stored(s3, key)[0] == digest and len(versions(s3, key)) == 1


def test_delete_succeeds_even_with_invalid_properties(resource, cloudformation):
    # A rollback deletes what a failed create left: it must not fail again on the same bad input.
    bad = {"Bucket": BUCKET, "Key": "k", "Url": "ftp://example", "Sha256": "nope"}
    resource.handle(event("Delete", cloudformation, physical="ModelObject-not-created", **bad), FakeContext())
    assert only_response(cloudformation)["Status"] == "SUCCESS"


# --- Failures: the stack operation fails with the reason, the bucket stays as it was ---------------------


def test_a_digest_mismatch_fails_and_writes_nothing(resource, server, cloudformation, s3, model_path):
    key = "models/mismatch.gguf"
    wrong = "0" * 64
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", wrong, key)), FakeContext()
    )
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("ModelDigestMismatchError: ")
    assert sha256(model_path) in answer["Reason"] and wrong in answer["Reason"]
    assert answer["PhysicalResourceId"] == f"s3://{BUCKET}/{key}"
    assert_nothing_written(s3, key)


def test_a_digest_mismatch_on_update_keeps_the_previous_model(
    resource, server, cloudformation, s3, model_path
):
    key = "models/keep.gguf"
    digest = sha256(model_path)
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", digest, key)), FakeContext()
    )
    update = props(server, "/variant.gguf", "f" * 64, key)
    resource.handle(event("Update", cloudformation, physical=f"s3://{BUCKET}/{key}", **update), FakeContext())
    assert cloudformation.responses[-1].body["Status"] == "FAILED"
    assert stored(s3, key)[0] == digest and len(versions(s3, key)) == 1
    assert pending_uploads(s3, key) == []


def test_a_url_that_answers_404_fails_clearly(resource, server, cloudformation, s3, model_path):
    key = "models/missing.gguf"
    properties = props(server, "/no-such-model.gguf", sha256(model_path), key)
    resource.handle(
        event("Create", cloudformation, **{**properties, "Url": properties["Url"] + "?token=s3cr3t"}),
        FakeContext(),
    )
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("ModelSourceHTTPError: ") and "404" in answer["Reason"]
    assert "/no-such-model.gguf" in answer["Reason"] and "s3cr3t" not in answer["Reason"]
    assert_nothing_written(s3, key)


def test_a_connection_dropped_mid_stream_resumes_with_a_range_request(
    resource, server, cloudformation, s3, model_path
):
    key = "models/dropped.gguf"
    digest = sha256(model_path)
    server.behaviour.drops = [10 * MiB + 123]
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", digest, key)), FakeContext()
    )
    answer = only_response(cloudformation)
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert [r.range for r in server.requests] == [None, f"bytes={10 * MiB + 123}-"]
    assert stored(s3, key)[0] == digest and pending_uploads(s3, key) == []


def test_a_drop_from_a_server_without_range_support_fails_cleanly(
    resource, server, cloudformation, s3, model_path
):
    key = "models/no-ranges.gguf"
    server.behaviour.drops = [20 * MiB]
    server.behaviour.ignore_range = True
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", sha256(model_path), key)),
        FakeContext(),
    )
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("ModelSourceResumeError: ") and "Range" in answer["Reason"]
    assert_nothing_written(s3, key)


def test_a_connection_that_keeps_dropping_without_progress_gives_up(
    resource, server, cloudformation, s3, model_path
):
    key = "models/always-dropping.gguf"
    server.behaviour.drops = [5 * MiB, 0, 0, 0, 0]  # then every retry ends before its first byte
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", sha256(model_path), key)),
        FakeContext(),
    )
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED" and answer["Reason"].startswith("ModelSourceDownloadError: ")
    assert "3 attempts" in answer["Reason"]
    assert_nothing_written(s3, key)


def test_a_file_that_is_not_gguf_fails_at_its_first_bytes(resource, server, cloudformation, s3, tmp_path):
    page = tmp_path / "page.html"
    page.write_bytes(b"<!doctype html><html>" + b" " * (6 * MiB))
    server.files["/page.html"] = page
    key = "models/not-gguf.gguf"
    properties = {**props(server, "/page.html", sha256(page), key)}
    resource.handle(event("Create", cloudformation, **properties), FakeContext())
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED" and answer["Reason"].startswith("NotAGGUFError: ")
    assert_nothing_written(s3, key)


def test_a_copy_that_would_outlast_the_function_fails_in_time_and_says_what_to_do(
    s3, server, cloudformation, client_tls, model_path
):
    key = "models/slow.gguf"
    # 2.5 s for the whole model: at this rate its first part is read by the deadline, and the rest is not.
    server.behaviour.rate = 16 * MiB
    # The copy stops 3 s before the function's deadline (1.5 s from now), leaving time for the answer.
    resource = ModelObjectResource(s3, source_settings=FAST, ssl_context=client_tls, margin_s=3.0)
    started = time.monotonic()
    context = FakeContext(4.5)
    resource.handle(
        event("Create", cloudformation, **props(server, "/model.gguf", sha256(model_path), key)), context
    )
    assert time.monotonic() - started < 4.0 and context.get_remaining_time_in_millis() > 0
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED" and answer["Reason"].startswith("ModelCopyTimeoutError: ")
    assert "MiB/s" in answer["Reason"] and "snapllm model push" in answer["Reason"]
    assert_nothing_written(s3, key)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"Url": "http://127.0.0.1/model.gguf"}, "Url (parameter ModelSource): must be an https:// URL"),
        ({"Url": "file:///etc/passwd"}, "Url (parameter ModelSource): must be an https:// URL"),
        ({"Url": "https:///no-host"}, "Url (parameter ModelSource)"),
        ({"Sha256": "abc123"}, "Sha256 (parameter ModelSha256): must be the file's SHA-256: 64 hex digits"),
        ({"Sha256": "g" * 64}, "Sha256 (parameter ModelSha256)"),
        ({"PartSizeMiB": "1"}, "PartSizeMiB"),
        (
            {"Url": "https://alice:s3cret-pass@127.0.0.1/model.gguf?X-Amz-Signature=s3cret-sig"},
            "Url (parameter ModelSource): must not carry a user name or password: CloudFormation shows the "
            "URL in plain text. Use a URL that needs none (a pre-signed URL expires), or upload the file "
            "with `snapllm model push`, got 'https://127.0.0.1/model.gguf'",
        ),
        ({"Url": "https://alice@127.0.0.1/model.gguf"}, "must not carry a user name or password"),
    ],
)
def test_invalid_properties_fail_with_the_parameter_named(
    resource, server, cloudformation, s3, change, named
):
    key = "models/invalid.gguf"
    properties = {**props(server, "/model.gguf", "a" * 64, key), **change}
    resource.handle(event("Create", cloudformation, **properties), FakeContext())
    answer = only_response(cloudformation)
    assert answer["Status"] == "FAILED" and answer["Reason"].startswith("ModelCopyInputError: ")
    assert named in answer["Reason"]
    assert "s3cret" not in json.dumps(answer)  # neither the password nor a signature is echoed
    assert server.requests == []
    assert_nothing_written(s3, key)


def test_a_source_url_with_credentials_is_refused_before_any_request(server):
    url = server.url("/model.gguf").replace("https://", "https://alice:s3cret@")
    with pytest.raises(ModelCopyInputError, match="must not carry a user name or password") as refused:
        HTTPSource(url)
    assert "s3cret" not in str(refused.value) and server.url("/model.gguf") in str(refused.value)
    assert server.requests == []


def test_a_missing_property_is_named(resource, cloudformation):
    resource.handle(
        event("Create", cloudformation, Bucket=BUCKET, Key="k", Url="https://example.com/m.gguf"),
        FakeContext(),
    )
    reason = only_response(cloudformation)["Reason"]
    assert "Sha256 (parameter ModelSha256): Field required" in reason


def test_an_event_without_a_response_url_is_refused(resource):
    with pytest.raises(ModelCopyInputError, match="ResponseURL"):
        resource.handle({"RequestType": "Create"}, FakeContext())


# --- Faults on the download path, through the fault proxy (real TCP resets, closes, stalls, 5xx) ---------

TRANSIENT_DOWNLOAD_FAULTS = [
    "reset@10MB",
    "close@10MB",
    "stall@10MB",
    "status=503",
    "status=500",
    "slow@200MB/s",
]


@pytest.mark.parametrize("spec", TRANSIENT_DOWNLOAD_FAULTS)
def test_the_download_survives_transient_faults(plain_server, s3, model_path, spec):
    key = f"models/fault-{spec.replace('@', '-').replace('=', '-').replace('/', '-')}.gguf"
    digest = sha256(model_path)
    with FaultProxy(plain_server.base_url, [parse_fault(spec)]) as proxy:
        source = HTTPSource(proxy.url + "/model.gguf", settings=FAST)
        upload = ModelUpload(
            s3, bucket=BUCKET, key=key, sha256=digest, settings=UploadSettings(part_size=PART)
        )
        with source:
            result = upload.write(source.readinto, size=source.open().size)
        assert proxy.fired  # the fault happened
    assert result.sha256 == digest and result.size == model_path.stat().st_size
    assert source.retries == (0 if spec.startswith("slow") else 1)
    # A reset may discard what was in flight: the retry resumes, or starts over if no byte had arrived.
    assert source.resumes == (1 if spec.split("@")[0] in ("close", "stall") else source.resumes)
    assert stored(s3, key)[0] == digest and pending_uploads(s3, key) == []


# A fault that persists fails the copy whatever the read timeout: a stall costs three of these, and a read
# that times out early on a busy machine is one more failed attempt, as the fault's own would be.
PERSISTENT = replace(FAST, read_timeout_s=0.5)


@pytest.mark.parametrize("spec", ["status=503:always", "stall@0MB:always", "reset@0MB:always"])
def test_a_download_fault_that_persists_fails_and_writes_nothing(plain_server, s3, model_path, spec):
    key = "models/persistent-fault.gguf"
    with FaultProxy(plain_server.base_url, [parse_fault(spec)]) as proxy:
        source = HTTPSource(proxy.url + "/model.gguf", settings=PERSISTENT)
        upload = ModelUpload(s3, bucket=BUCKET, key=key, sha256=sha256(model_path))
        started = time.monotonic()
        with pytest.raises(ModelSourceDownloadError, match="3 attempts in a row failed"), source:
            upload.write(source.readinto, size=None)
        assert time.monotonic() - started < 10
    assert_nothing_written(s3, key)


# --- Faults on the upload path: S3 answering 5xx ---------------------------------------------------------


def _part_uploads(status: int, *, always: bool):
    fired: list[int] = []

    def rule(request):
        if request.method == "PUT" and "partNumber=" in request.path and (always or not fired):
            fired.append(1)
            return Fault(status=status)
        return None

    return rule


def test_a_throttled_part_upload_is_retried(local_s3, plain_server, model_path):
    key = "models/throttled-part.gguf"
    digest = sha256(model_path)
    with FaultProxy(local_s3.endpoint_url, rule=_part_uploads(503, always=False)) as proxy:
        s3 = local_s3.client(endpoint_url=proxy.url)
        with HTTPSource(plain_server.url("/model.gguf"), settings=FAST) as source:
            result = ModelUpload(
                s3, bucket=BUCKET, key=key, sha256=digest, settings=UploadSettings(part_size=PART)
            ).write(source.readinto, size=source.open().size)
        assert proxy.fired == ["status=503:SlowDown"]
    assert result.sha256 == digest and stored(local_s3.client(), key)[0] == digest


def test_a_part_upload_that_keeps_failing_aborts_the_upload(local_s3, plain_server, model_path):
    key = "models/failing-part.gguf"
    with FaultProxy(local_s3.endpoint_url, rule=_part_uploads(500, always=True)) as proxy:
        s3 = local_s3.client(endpoint_url=proxy.url)
        with HTTPSource(plain_server.url("/model.gguf"), settings=FAST) as source:
            upload = ModelUpload(
                s3, bucket=BUCKET, key=key, sha256=sha256(model_path), settings=UploadSettings(part_size=PART)
            )
            with pytest.raises(ModelUploadError, match="InternalError"):
                upload.write(source.readinto, size=source.open().size)
        assert any(r.method == "DELETE" and "uploadId=" in r.path for r in proxy.requests)  # the abort
    assert_nothing_written(local_s3.client(), key)


# --- Faults on the response path: CloudFormation's URL ------------------------------------------------


def test_the_response_is_retried_after_a_5xx_and_a_dropped_connection(cloudformation):
    cloudformation.answers = [503, "drop"]
    send_response(cloudformation.url("retry"), {"Status": "SUCCESS"}, backoff_s=0.01)
    assert [r.body for r in cloudformation.responses] == [{"Status": "SUCCESS"}]


def test_a_refused_response_is_an_error_not_a_retry(cloudformation):
    cloudformation.answers = [403]
    with pytest.raises(CustomResourceResponseError, match="403"):
        send_response(cloudformation.url("expired"), {"Status": "SUCCESS"}, backoff_s=0.01)
    assert cloudformation.attempts == 1


def test_an_unreachable_response_url_fails_after_its_attempts():
    url = f"http://127.0.0.1:{free_port()}/nobody-listens"
    with pytest.raises(CustomResourceResponseError, match="after 3 attempts"):
        send_response(url, {"Status": "SUCCESS"}, attempts=3, backoff_s=0.01)


# --- The response within the function's deadline, whatever the URL does --------------------------------


@pytest.mark.parametrize("answer", ["stall", "trickle"])
def test_a_stalled_response_url_is_given_up_before_the_functions_deadline(s3, cloudformation, answer):
    # The default sender (5 attempts of up to 10 s, with backoff) and a function with 4.5 s left: every
    # attempt ends, and the handler returns, before the deadline, with the reserve kept.
    cloudformation.answers = [answer] * 10
    resource = ModelObjectResource(s3, margin_s=3.0)
    context = FakeContext(remaining_s=4.5)
    request = event("Delete", cloudformation, physical=f"s3://{BUCKET}/models/kept.gguf")

    # One attempt of the 2.5 s there are (4.5 s less the reserve), cut there: the URL never answered in full.
    expected = (
        r"cannot deliver the response to CloudFormation before the function's deadline after 1 attempts: "
        r"no complete answer within [12]\.\d s"
    )
    with pytest.raises(CustomResourceResponseError, match=expected):
        resource.handle(request, context)

    left = context.deadline - time.monotonic()
    assert left > RESPONSE_RESERVE_S - 0.5, f"the handler returned {left:.2f} s before its deadline"
    assert cloudformation.arrivals and cloudformation.responses == []
    # Seen from the URL's side: each attempt was closed by the function, before its deadline.
    waited = time.monotonic() + 2
    while len(cloudformation.given_up) < len(cloudformation.arrivals) and time.monotonic() < waited:
        time.sleep(0.05)
    assert len(cloudformation.given_up) == len(cloudformation.arrivals)
    assert max(cloudformation.given_up) < context.deadline - RESPONSE_RESERVE_S + 0.5


def test_the_retry_schedule_is_cut_to_the_deadline(cloudformation, monkeypatch):
    # The jitter pinned (each pause half of its ceiling), so the schedule below is the one that runs.
    monkeypatch.setattr(
        retry, "backoff_s", lambda attempt, *, base_s, cap_s=30.0: min(cap_s, base_s * 2**attempt) / 2
    )
    cloudformation.answers = ["stall"] * 10
    started = time.monotonic()
    with pytest.raises(CustomResourceResponseError, match="before the function's deadline after 2 attempts"):
        send_response(
            cloudformation.url("stalled"),
            {"Status": "SUCCESS"},
            deadline=started + 2.5,
            timeout_s=1.0,
            backoff_s=0.5,
        )
    elapsed = time.monotonic() - started
    # 1 s, 0.5 s of backoff, 1 s: the third attempt (after 1 s of backoff) would not fit before the deadline
    # (the last one ends at it, give or take the time to close a socket). The second starts if the first
    # ends up to 0.5 s late.
    assert 2.0 < elapsed < 2.8 and len(cloudformation.arrivals) == 2


def test_a_slow_response_url_that_answers_in_time_gets_the_response(s3, cloudformation):
    cloudformation.answers = ["slow:1.5"]
    resource = ModelObjectResource(s3, margin_s=6.0)
    resource.handle(
        event("Delete", cloudformation, physical=f"s3://{BUCKET}/models/kept.gguf"), FakeContext(8.0)
    )
    assert only_response(cloudformation)["Status"] == "SUCCESS" and len(cloudformation.arrivals) == 1
