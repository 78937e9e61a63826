"""AgentRuns' calls against botocore's Lambda model (Stubber validates every parameter against it).

Real Lambda durable executions need AWS; the integration tests run the same service against the SDK's
local runner, and these check the exact request shapes the service would send to AWS.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from snapllm.agent.runs import AgentRuns, IdempotencyConflictError, RunNotFoundError, run_id_for

ARN = "arn:aws:lambda:us-east-1:123456789012:function:snapllm-Agent:live"
REQUEST = {"task": "t", "documents": ["s3://b/agent/documents/a.md"], "approval": {"required": True}}


@pytest.fixture
def stubbed():
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield AgentRuns(client, function_arn=ARN), stubber
        stubber.assert_no_pending_responses()


def test_run_ids_are_valid_execution_names_derived_from_the_key():
    run_id = run_id_for("order 1234 / review")
    assert run_id == run_id_for("order 1234 / review") != run_id_for("order 1235 / review")
    assert len(run_id) <= 64 and run_id.replace("-", "").isalnum()


def test_start_invokes_the_alias_asynchronously_with_the_execution_name(stubbed):
    runs, stubber = stubbed
    run_id = run_id_for("k1")
    stubber.add_response(
        "invoke",
        {"StatusCode": 202, "DurableExecutionArn": f"{ARN}/durable-execution/{run_id}/x"},
        {
            "FunctionName": ARN,
            "InvocationType": "Event",
            "DurableExecutionName": run_id,
            "Payload": json.dumps(REQUEST, sort_keys=True, separators=(",", ":")).encode(),
        },
    )
    assert runs.start("k1", REQUEST)["id"] == run_id


def test_a_reused_key_with_another_request_is_a_conflict(stubbed):
    runs, stubber = stubbed
    stubber.add_client_error("invoke", "DurableExecutionAlreadyStartedException", http_status_code=409)
    with pytest.raises(IdempotencyConflictError):
        runs.start("k1", REQUEST)


def test_unknown_runs_are_looked_up_by_name_on_the_alias(stubbed):
    runs, stubber = stubbed
    run_id = run_id_for("k2")
    stubber.add_response(
        "list_durable_executions_by_function",
        {"DurableExecutions": []},
        {
            "FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:snapllm-Agent",
            "Qualifier": "live",
            "DurableExecutionName": run_id,
        },
    )
    with pytest.raises(RunNotFoundError):
        runs.get(run_id)
