"""AgentRuns' calls against botocore's Lambda and S3 models (Stubber validates every parameter against them).

Real Lambda durable executions need AWS; the integration tests run the same service against the SDK's
local runner, and these check the exact request shapes the service would send to AWS.
"""

from __future__ import annotations

import hashlib
import io
import json

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from snapllm.agent.runs import (
    AgentRuns,
    IdempotencyConflictError,
    RunNotFoundError,
    RunRecordError,
    RunRecords,
    run_id_for,
)

ARN = "arn:aws:lambda:us-east-1:123456789012:function:snapllm-Agent:live"
REQUEST = {"task": "t", "documents": ["s3://b/agent/documents/a.md"], "approval": {"required": True}}


PAYLOAD = json.dumps(REQUEST, sort_keys=True, separators=(",", ":")).encode()
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


def _client(service: str):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


@pytest.fixture
def stubbed():
    """The run service over stubbed Lambda and S3 clients: (runs, lambda stubber, s3 stubber)."""
    lambda_client, s3 = _client("lambda"), _client("s3")
    records = RunRecords(s3, bucket="models", prefix="agent/")
    with Stubber(lambda_client) as stubber, Stubber(s3) as s3_stubber:
        yield AgentRuns(lambda_client, function_arn=ARN, records=records), stubber, s3_stubber
        stubber.assert_no_pending_responses()
        s3_stubber.assert_no_pending_responses()


def _record_key(run_id: str) -> dict:
    return {"Bucket": "models", "Key": f"agent/runs/executions/{run_id}.json"}


def _no_record(s3_stubber, run_id: str) -> None:
    s3_stubber.add_client_error(
        "get_object", "NoSuchKey", http_status_code=404, expected_params=_record_key(run_id)
    )


def _record(s3_stubber, run_id: str, arn: str, digest: str = DIGEST) -> None:
    body = json.dumps({"execution_arn": arn, "request_sha256": digest}).encode()
    s3_stubber.add_response(
        "get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))}, _record_key(run_id)
    )


def test_run_ids_are_valid_execution_names_derived_from_the_key():
    run_id = run_id_for("order 1234 / review")
    assert run_id == run_id_for("order 1234 / review") != run_id_for("order 1235 / review")
    assert len(run_id) <= 64 and run_id.replace("-", "").isalnum()


def test_start_invokes_the_alias_asynchronously_and_keeps_the_execution_arn(stubbed):
    runs, stubber, s3_stubber = stubbed
    run_id = run_id_for("k1")
    arn = f"{ARN.rsplit(':', 1)[0]}:7/durable-execution/{run_id}/x"
    _no_record(s3_stubber, run_id)
    stubber.add_response(
        "invoke",
        {"StatusCode": 202, "DurableExecutionArn": arn},
        {"FunctionName": ARN, "InvocationType": "Event", "DurableExecutionName": run_id, "Payload": PAYLOAD},
    )
    s3_stubber.add_response(
        "put_object",
        {},
        {
            **_record_key(run_id),
            "Body": json.dumps({"execution_arn": arn, "request_sha256": DIGEST}).encode(),
            "ContentType": "application/json",
        },
    )
    assert runs.start("k1", REQUEST) == {"id": run_id, "execution_arn": arn, "status": "RUNNING"}


def test_a_retried_start_after_a_redeploy_returns_the_recorded_run_without_invoking(stubbed):
    runs, _stubber, s3_stubber = stubbed
    run_id = run_id_for("k1")
    arn = f"{ARN.rsplit(':', 1)[0]}:7/durable-execution/{run_id}/x"
    _record(s3_stubber, run_id, arn)
    assert runs.start("k1", REQUEST)["execution_arn"] == arn  # no invoke stubbed: none was made
    _record(s3_stubber, run_id, arn, digest="0" * 64)
    with pytest.raises(IdempotencyConflictError):
        runs.start("k1", REQUEST)


def test_a_reused_key_with_another_request_is_a_conflict(stubbed):
    runs, stubber, s3_stubber = stubbed
    _no_record(s3_stubber, run_id_for("k1"))
    stubber.add_client_error("invoke", "DurableExecutionAlreadyStartedException", http_status_code=409)
    with pytest.raises(IdempotencyConflictError):
        runs.start("k1", REQUEST)


def test_a_run_is_read_by_the_execution_arn_kept_with_it_never_by_name_on_the_alias(stubbed):
    runs, stubber, s3_stubber = stubbed
    run_id = run_id_for("k2")
    arn = f"{ARN.rsplit(':', 1)[0]}:3/durable-execution/{run_id}/x"
    _record(s3_stubber, run_id, arn)
    stubber.add_response(
        "get_durable_execution",
        {
            "DurableExecutionArn": arn,
            "DurableExecutionName": run_id,
            "FunctionArn": ARN.rsplit(":", 1)[0] + ":3",
            "Status": "RUNNING",
            "StartTimestamp": 0,
        },
        {"DurableExecutionArn": arn},
    )
    stubber.add_response("get_durable_execution_history", {"Events": []}, {"DurableExecutionArn": arn})
    assert runs.get(run_id)["status"] == "RUNNING"

    _no_record(s3_stubber, run_id)
    with pytest.raises(RunNotFoundError):
        runs.get(run_id)
    with pytest.raises(RunNotFoundError):
        runs.get("run-not-an-id")  # no call at all


def test_a_record_store_failure_is_a_retryable_error(stubbed):
    runs, _stubber, s3_stubber = stubbed
    s3_stubber.add_client_error("get_object", "SlowDown", http_status_code=503)
    with pytest.raises(RunRecordError) as caught:
        runs.get(run_id_for("k3"))
    assert caught.value.status_code == 503
